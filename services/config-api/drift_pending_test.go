package configapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
)

// TestDriftPendingAndFailed: right after a write, a host that acked the new version but whose last
// heartbeat still reports the old one is pending, not drifted; a host that acked it failed, or that
// anti-entropy is still repairing, is drifted with the reason.
func TestDriftPendingAndFailed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newTenant("acme")
	var v1, v2 configRow
	path := envConfigPath(a.env, "watch_files")
	h.must(200, "PUT", path, a.token, `{"config_data": {"paths": ["/etc"]}}`).data(t, &v1)
	h.must(200, "PUT", path, a.token, `{"config_data": {"paths": ["/etc", "/opt"]}}`).data(t, &v2)
	oldHash := agentconfig.ConfigHash([]agentconfig.CacheEntry{{ConfigType: "watch_files", ConfigData: v1.ConfigData, Version: v1.Version}})
	newHash := agentconfig.ConfigHash([]agentconfig.CacheEntry{{ConfigType: "watch_files", ConfigData: v2.ConfigData, Version: v2.Version}})

	var failed, repairing idObj
	hostsPath := "/api/v1/environments/" + a.env.String() + "/hosts"
	h.must(201, "POST", hostsPath, a.token, `{"hostname": "failed-1"}`).data(t, &failed)
	h.must(201, "POST", hostsPath, a.token, `{"hostname": "repairing-1"}`).data(t, &repairing)
	report := func(id uuid.UUID, hash string, version int64) {
		vs, _ := json.Marshal(map[string]int64{"watch_files": version})
		h.exec(`UPDATE hosts SET last_heartbeat_at = now(), config_hash = $2, config_versions = $3 WHERE id = $1`, id, hash, vs)
	}
	ack := func(id uuid.UUID, version int64, status, errText string) {
		h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
			VALUES ($1, 'watch_files', $2, $3, NULLIF($4, ''), now())`, id, version, status, errText)
	}
	for _, id := range []uuid.UUID{a.host, failed.ID, repairing.ID} {
		report(id, oldHash, v1.Version)
	}
	ack(a.host, v2.Version, "applied", "")
	ack(failed.ID, v2.Version, "failed", "policy refuses /opt")
	h.exec(`INSERT INTO config_repairs (host_id, config_type, version, attempts, first_at, last_at, next_at)
		VALUES ($1, 'watch_files', $2, 3, now(), now(), now())`, repairing.ID, v2.Version)

	type hostView struct {
		Hostname     string   `json:"hostname"`
		Reasons      []string `json:"reasons"`
		PendingTypes []string `json:"pending_types"`
	}
	var d struct {
		Hosts   []hostView `json:"hosts"`
		Pending []hostView `json:"pending"`
	}
	h.must(200, "GET", "/api/v1/environments/"+a.env.String()+"/drift", a.token, nil).data(t, &d)
	if len(d.Pending) != 1 || d.Pending[0].Hostname != "acme-web-1" || len(d.Pending[0].PendingTypes) != 1 || d.Pending[0].PendingTypes[0] != "watch_files" {
		t.Fatalf("pending = %+v, want the host that acked the new version", d.Pending)
	}
	reasons := map[string]string{}
	for _, hd := range d.Hosts {
		reasons[hd.Hostname] = strings.Join(hd.Reasons, "; ")
	}
	if _, ok := reasons["acme-web-1"]; ok || len(d.Hosts) != 2 {
		t.Fatalf("drifted = %v, want failed-1 and repairing-1 only", reasons)
	}
	if r := reasons["failed-1"]; !strings.Contains(r, "failed to apply: policy refuses /opt") {
		t.Fatalf("failed-1 reasons: %q", r)
	}
	if r := reasons["repairing-1"]; !strings.Contains(r, "behind") || !strings.Contains(r, "3 repair attempts") {
		t.Fatalf("repairing-1 reasons: %q", r)
	}

	// Once the heartbeat reports the version, the host is neither pending nor drifted; a hash that
	// still differs after the report is drift.
	report(a.host, newHash, v2.Version)
	report(repairing.ID, strings.Repeat("0", 64), v2.Version)
	h.exec(`DELETE FROM config_repairs`)
	h.must(200, "GET", "/api/v1/environments/"+a.env.String()+"/drift", a.token, nil).data(t, &d)
	reasons = map[string]string{}
	for _, hd := range d.Hosts {
		reasons[hd.Hostname] = strings.Join(hd.Reasons, "; ")
	}
	if len(d.Pending) != 0 {
		t.Fatalf("pending after the report: %+v", d.Pending)
	}
	if _, ok := reasons["acme-web-1"]; ok {
		t.Fatalf("the converged host is drifted: %v", reasons)
	}
	if r := reasons["repairing-1"]; !strings.Contains(r, "config_hash") {
		t.Fatalf("repairing-1 reasons after its report: %q", r)
	}
}
