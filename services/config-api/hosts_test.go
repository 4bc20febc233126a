package configapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/protocol"
)

type hostJSON struct {
	ID              uuid.UUID         `json:"id"`
	AgentID         string            `json:"agent_id"`
	Hostname        string            `json:"hostname"`
	EnvironmentID   uuid.UUID         `json:"environment_id"`
	ClientID        uuid.UUID         `json:"client_id"`
	RevokedAt       *time.Time        `json:"revoked_at"`
	LastHeartbeatAt *time.Time        `json:"last_heartbeat_at"`
	Online          bool              `json:"online"`
	ConfigHash      *string           `json:"config_hash"`
	ConfigVersion   *int64            `json:"config_version"`
	ConfigVersions  map[string]int64  `json:"config_versions"`
	Labels          map[string]string `json:"labels"`
	ApplyStatus     map[string]struct {
		Version   int64     `json:"version"`
		Status    string    `json:"status"`
		Error     string    `json:"error"`
		AppliedAt time.Time `json:"applied_at"`
	} `json:"apply_status"`
}

func TestHostRegistrationListAndRevoke(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	hostsPath := "/api/v1/environments/" + a.env.String() + "/hosts"

	// Generated agent id (a UUID), given agent id, and the invalid/duplicate cases.
	if _, err := uuid.Parse(a.agentID); err != nil {
		t.Fatalf("generated agent_id %q is not a UUID", a.agentID)
	}
	// A client token cannot choose an agent id (a global NATS identity); an admin may (importing hosts).
	if r := h.must(400, "POST", hostsPath, a.token, `{"hostname": "db-1", "agent_id": "agent_db-1"}`); !strings.Contains(r.message(t), "chosen by the server") {
		t.Fatalf("client-chosen agent_id: %s", r.body)
	}
	var reg idObj
	r := h.must(201, "POST", hostsPath, h.admin, `{"hostname": "db-1", "agent_id": "agent_db-1"}`)
	r.data(t, &reg)
	if reg.AgentID != "agent_db-1" || reg.EnvironmentID != a.env || reg.ClientID != a.client || reg.ID == uuid.Nil {
		t.Fatalf("registered %s", r.body)
	}
	h.must(400, "POST", hostsPath, h.admin, `{"hostname": "db-2", "agent_id": "bad.agent"}`)
	h.must(400, "POST", hostsPath, h.admin, `{"hostname": "db-2", "agent_id": "`+strings.Repeat("a", 129)+`"}`)
	h.must(400, "POST", hostsPath, a.token, `{"hostname": ""}`)
	h.must(400, "POST", hostsPath, a.token, `{"hostname": "db\u0000-2"}`) // not 500: PostgreSQL text cannot hold NUL
	h.must(409, "POST", hostsPath, a.token, `{"hostname": "db-1"}`)
	h.must(409, "POST", hostsPath, h.admin, `{"hostname": "db-9", "agent_id": "agent_db-1"}`)
	// Every registration is audited, refused ones are not: the tenant's first host (newTenant) and db-1.
	var detail map[string]any
	if err := h.pool.QueryRow(context.Background(), `SELECT detail FROM audit_events WHERE action = 'host_registered' AND object = $1`,
		"host:"+reg.ID.String()).Scan(&detail); err != nil {
		t.Fatalf("audit of db-1's registration: %v", err)
	}
	if detail["agent_id"] != "agent_db-1" || detail["environment_id"] != a.env.String() {
		t.Fatalf("audit detail %v", detail)
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'host_registered'`); n != 2 {
		t.Fatalf("%d host_registered audit rows, want 2", n)
	}

	// The agent reports: a recent heartbeat for db-1, an old one for web-1, and one apply result.
	h.exec(`UPDATE hosts SET last_heartbeat_at = now(), agent_version = '1.0.0', config_hash = 'abc',
		config_version = 5, config_versions = '{"collectors": 5, "intervals": 2}' WHERE id = $1`, reg.ID)
	h.exec(`UPDATE hosts SET last_heartbeat_at = now() - interval '10 minutes' WHERE id = $1`, a.host)
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
		VALUES ($1, 'collectors', 5, 'failed', 'dial tcp: connection refused', now()),
		       ($1, 'intervals', 2, 'applied', NULL, now())`, reg.ID)

	var page struct {
		Data      []hostJSON `json:"data"`
		NextAfter *uuid.UUID `json:"next_after"`
	}
	r = h.must(200, "GET", hostsPath, a.token, nil)
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.NextAfter != nil {
		t.Fatalf("list: %s", r.body)
	}
	byName := map[string]hostJSON{}
	for _, hj := range page.Data {
		byName[hj.Hostname] = hj
	}
	db := byName["db-1"]
	if !db.Online || db.ConfigHash == nil || *db.ConfigHash != "abc" || *db.ConfigVersion != 5 || db.ConfigVersions["collectors"] != 5 {
		t.Fatalf("db-1: %+v", db)
	}
	if st := db.ApplyStatus["collectors"]; st.Status != "failed" || st.Error != "dial tcp: connection refused" || st.Version != 5 {
		t.Fatalf("apply status: %+v", db.ApplyStatus)
	}
	if st := db.ApplyStatus["intervals"]; st.Status != "applied" || st.Error != "" || st.AppliedAt.IsZero() {
		t.Fatalf("apply status: %+v", db.ApplyStatus)
	}
	if web := byName["acme-web-1"]; web.Online || web.LastHeartbeatAt == nil {
		t.Fatalf("web-1 with an old heartbeat: %+v", web)
	}
	// Paging.
	r = h.must(200, "GET", hostsPath+"?limit=1", a.token, nil)
	if err := json.Unmarshal(r.body, &page); err != nil || len(page.Data) != 1 || page.NextAfter == nil {
		t.Fatalf("page 1: %s", r.body)
	}
	r = h.must(200, "GET", hostsPath+"?limit=1&after="+page.NextAfter.String(), a.token, nil)
	first := page.Data[0].ID
	page.Data, page.NextAfter = nil, nil
	if err := json.Unmarshal(r.body, &page); err != nil || len(page.Data) != 1 || page.NextAfter != nil || page.Data[0].ID == first {
		t.Fatalf("page 2: %s", r.body)
	}

	// One host with its apply status.
	var one hostJSON
	h.must(200, "GET", "/api/v1/hosts/"+reg.ID.String(), a.token, nil).data(t, &one)
	if one.ID != reg.ID || len(one.ApplyStatus) != 2 || one.AgentID != "agent_db-1" {
		t.Fatalf("host: %+v", one)
	}

	// Revoke: revoked_at set, kept on a second revoke; config writes to it are refused.
	var rev hostJSON
	h.must(200, "DELETE", "/api/v1/hosts/"+reg.ID.String(), a.token, nil).data(t, &rev)
	if rev.RevokedAt == nil || rev.Online {
		t.Fatalf("revoked: %+v", rev)
	}
	var again hostJSON
	h.must(200, "DELETE", "/api/v1/hosts/"+reg.ID.String(), a.token, nil).data(t, &again)
	if !again.RevokedAt.Equal(*rev.RevokedAt) {
		t.Fatal("second revoke moved revoked_at")
	}
	h.must(409, "PUT", hostConfigPath(reg.ID, "intervals"), a.token, `{"config_data": {"metrics": "1m"}}`)
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'host_revoked'`); n != 2 {
		t.Fatalf("%d host_revoked audit rows", n)
	}
}

// TestHostInventoryLabels: operators set inventory labels at registration (single and batch), by PATCH
// and in bulk; bad keys, values and selectors are 400 naming them; an over-limit or partly foreign bulk
// change writes nothing; listing and drift select hosts by ?selector=.
func TestHostInventoryLabels(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	b := h.newTenant("globex")
	envPath := "/api/v1/environments/" + a.env.String()

	// Registration: one host, then a batch; the answer and the listing carry the labels.
	var canary hostJSON
	h.must(201, "POST", envPath+"/hosts", a.token,
		map[string]any{"hostname": "canary-1", "labels": map[string]string{"role": "web", "ring": "canary", "example.com/team": "edge"}}).data(t, &canary)
	if canary.Labels["ring"] != "canary" || len(canary.Labels) != 3 {
		t.Fatalf("registered labels = %v", canary.Labels)
	}
	entries := make([]map[string]any, 30)
	for i := range entries {
		region := []string{"eu", "us", "ap"}[i%3]
		entries[i] = map[string]any{"hostname": fmt.Sprintf("web-%02d", i), "labels": map[string]string{"role": "web", "region": region}}
		if i%10 == 0 {
			entries[i]["labels"] = map[string]string{"role": "db", "region": region}
		}
	}
	var batch []hostJSON
	h.must(201, "POST", envPath+"/hosts/batch", a.token, map[string]any{"hosts": entries}).data(t, &batch)
	if batch[0].Labels["role"] != "db" || batch[1].Labels["region"] != "us" {
		t.Fatalf("batch labels = %v, %v", batch[0].Labels, batch[1].Labels)
	}

	list := func(query string) (names []string, next string) {
		t.Helper()
		var page struct {
			Data      []hostJSON `json:"data"`
			NextAfter *uuid.UUID `json:"next_after"`
		}
		if err := json.Unmarshal(h.must(200, "GET", envPath+"/hosts?"+query, a.token, nil).body, &page); err != nil {
			t.Fatal(err)
		}
		for _, hj := range page.Data {
			names = append(names, hj.Hostname)
		}
		if page.NextAfter != nil {
			next = page.NextAfter.String()
		}
		slices.Sort(names)
		return names, next
	}
	sel := func(s string) string {
		return "selector=" + strings.NewReplacer(" ", "%20", "(", "%28", ")", "%29", "!", "%21", "=", "%3D").Replace(s)
	}

	if got, _ := list(sel("role=db")); !slices.Equal(got, []string{"web-00", "web-10", "web-20"}) {
		t.Fatalf("role=db lists %v", got)
	}
	if got, _ := list(sel("role=web,region in (eu),ring notin (canary)")); len(got) != 9 {
		t.Fatalf("web hosts in eu: %v, want 9", got)
	}
	if got, _ := list(sel("ring")); !slices.Equal(got, []string{"canary-1"}) {
		t.Fatalf("ring lists %v", got)
	}
	// !role: the tenant's first host, registered without labels.
	if got, _ := list(sel("!role")); !slices.Equal(got, []string{"acme-web-1"}) {
		t.Fatalf("!role lists %v", got)
	}
	// Pages over a selection: the cursor is the host id, no host is lost or repeated.
	var paged []string
	for next := ""; ; {
		q := sel("region=us") + "&limit=3"
		if next != "" {
			q += "&after=" + next
		}
		var got []string
		got, next = list(q)
		paged = append(paged, got...)
		if next == "" {
			break
		}
	}
	slices.Sort(paged)
	if len(paged) != 10 || len(slices.Compact(slices.Clone(paged))) != 10 {
		t.Fatalf("paged region=us: %v, want 10 distinct hosts", paged)
	}

	for _, bad := range []string{"a in (x", "role==web,,x", "-bad"} {
		r := h.do("GET", envPath+"/hosts?"+sel(bad), a.token, nil)
		if r.status != 400 || !strings.Contains(r.message(t), "selector") {
			t.Fatalf("selector %q: %d %s", bad, r.status, r.body)
		}
	}

	// PATCH: a merge patch (null removes); the result is the host.
	var patched hostJSON
	h.must(200, "PATCH", "/api/v1/hosts/"+canary.ID.String(), a.token,
		`{"labels": {"ring": null, "tier": "gold"}}`).data(t, &patched)
	if want := map[string]string{"role": "web", "example.com/team": "edge", "tier": "gold"}; !maps.Equal(patched.Labels, want) {
		t.Fatalf("patched labels = %v, want %v", patched.Labels, want)
	}
	var got hostJSON
	h.must(200, "GET", "/api/v1/hosts/"+canary.ID.String(), a.token, nil).data(t, &got)
	if !maps.Equal(got.Labels, patched.Labels) {
		t.Fatalf("read back %v, patched %v", got.Labels, patched.Labels)
	}
	refusals := []struct {
		method, path, body string
		status             int
		message            string
	}{
		{"PATCH", "/api/v1/hosts/" + canary.ID.String(), `{"labels": {"bad key": "x"}}`, 400, `labels: key "bad key" must be`},
		{"PATCH", "/api/v1/hosts/" + canary.ID.String(), `{"labels": {"k": "-x"}}`, 400, `labels: "k": value "-x" must be`},
		{"PATCH", "/api/v1/hosts/" + canary.ID.String(), `{"labels": {}}`, 400, "at least one label"},
		{"PATCH", "/api/v1/hosts/" + canary.ID.String(), `{"lables": {"k": "v"}}`, 400, "lables"},
		{"PATCH", "/api/v1/hosts/" + b.host.String(), `{"labels": {"k": "v"}}`, 404, "not found"},
		{"POST", envPath + "/hosts", `{"hostname": "x", "labels": {"k": "a b"}}`, 400, `labels "k": value "a b" must be`},
		{"POST", envPath + "/hosts/batch", `{"hosts": [{"hostname": "y"}, {"hostname": "x", "labels": {"": "v"}}]}`, 400, `hosts[1].labels: key "" must be`},
		{"POST", envPath + "/hosts/labels", fmt.Sprintf(`{"host_ids": [%q, %q], "labels": {"k": "v"}}`, canary.ID, b.host), 404, "host_ids[1]"},
		{"POST", envPath + "/hosts/labels", `{"host_ids": [], "labels": {"k": "v"}}`, 400, "host_ids"},
	}
	for _, rf := range refusals {
		r := h.do(rf.method, rf.path, a.token, rf.body)
		if r.status != rf.status || !strings.Contains(r.message(t), rf.message) {
			t.Fatalf("%s %s %s: %d %s, want %d naming %q", rf.method, rf.path, rf.body, r.status, r.body, rf.status, rf.message)
		}
	}
	if n := h.count(`SELECT count(*) FROM hosts WHERE inventory_labels ? 'k'`); n != 0 {
		t.Fatalf("%d hosts were labeled by refused requests", n)
	}
	// A patch that would take a host over the limit writes nothing, on any host of the batch.
	many := map[string]string{}
	for i := range 64 {
		many[fmt.Sprintf("k%02d", i)] = "v"
	}
	r := h.do("POST", envPath+"/hosts/labels", a.token, map[string]any{"host_ids": []uuid.UUID{batch[1].ID, canary.ID}, "labels": many})
	if r.status != 400 || !strings.Contains(r.message(t), "at most 64") {
		t.Fatalf("over-limit bulk patch: %d %s", r.status, r.body)
	}
	if n := h.count(`SELECT count(*) FROM hosts WHERE inventory_labels ? 'k00'`); n != 0 {
		t.Fatalf("the refused over-limit patch labeled %d hosts", n)
	}

	// Bulk: every host of the list, one audit event.
	var bulk struct {
		Updated int `json:"updated"`
	}
	h.must(200, "POST", envPath+"/hosts/labels", a.token,
		map[string]any{"host_ids": []uuid.UUID{batch[1].ID, batch[2].ID}, "labels": map[string]any{"ring": "canary", "region": nil}}).data(t, &bulk)
	if bulk.Updated != 2 {
		t.Fatalf("bulk updated %d hosts, want 2", bulk.Updated)
	}
	if got, _ := list(sel("ring=canary,!region")); !slices.Equal(got, []string{"web-01", "web-02"}) {
		t.Fatalf("after the bulk change ring=canary,!region lists %v", got)
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'host_labels_set'`); n != 2 {
		t.Fatalf("%d host_labels_set audit events, want 2 (one PATCH, one bulk)", n)
	}

	// Drift checks only the selected hosts.
	var d struct {
		CheckedHosts int `json:"checked_hosts"`
	}
	h.must(200, "GET", envPath+"/drift?"+sel("role=db"), a.token, nil).data(t, &d)
	if d.CheckedHosts != 3 {
		t.Fatalf("drift checked %d hosts for role=db, want 3", d.CheckedHosts)
	}
	h.must(200, "GET", envPath+"/drift", a.token, nil).data(t, &d)
	if d.CheckedHosts != 32 {
		t.Fatalf("drift checked %d hosts, want 32", d.CheckedHosts)
	}
	if r := h.do("GET", envPath+"/drift?"+sel("a in ("), a.token, nil); r.status != 400 {
		t.Fatalf("drift with a bad selector: %d %s", r.status, r.body)
	}
}

// TestDrift: hosts whose reported hash or versions differ from what they should hold, with reasons.
// The expected hash models the agent's cache: collectors with credentials redacted.
func TestDrift(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	var cred struct {
		ID string `json:"id"`
	}
	h.must(201, "POST", credentialsPath(a.client), a.token,
		`{"name": "mysql-main", "secret": {"username": "monitor", "password": "drift-secret-1"}}`).data(t, &cred)
	collectors := `[{"type": "mysql", "name": "primary", "host": "db1", "port": 3306, "credential_id": "` + cred.ID + `"}]`
	var wf, col configRow
	h.must(200, "PUT", envConfigPath(a.env, "watch_files"), a.token, `{"config_data": {"paths": ["/etc"]}}`).data(t, &wf)
	h.must(200, "PUT", envConfigPath(a.env, "collectors"), a.token, `{"config_data": `+collectors+`}`).data(t, &col)

	redacted, pointers, err := agentconfig.RedactForCache(col.ConfigData, map[string][]string{cred.ID: {"password", "username"}})
	if err != nil {
		t.Fatal(err)
	}
	expected := agentconfig.ConfigHash([]agentconfig.CacheEntry{
		{ConfigType: "collectors", ConfigData: redacted, Version: col.Version, Redacted: true, SecretFields: pointers},
		{ConfigType: "watch_files", ConfigData: wf.ConfigData, Version: wf.Version},
	})
	versions, _ := json.Marshal(map[string]int64{"collectors": col.Version, "watch_files": wf.Version})

	// web-1 is in sync; db-1 has the right versions but a wrong hash; old-1 lags on one type and
	// still holds a deleted type; new-1 never reported; refused-1 reports the right hash and versions
	// but acknowledged the current watch_files as failed (its local policy refused it).
	var db, old, fresh, refused idObj
	hostsPath := "/api/v1/environments/" + a.env.String() + "/hosts"
	h.must(201, "POST", hostsPath, a.token, `{"hostname": "db-1"}`).data(t, &db)
	h.must(201, "POST", hostsPath, a.token, `{"hostname": "old-1"}`).data(t, &old)
	h.must(201, "POST", hostsPath, a.token, `{"hostname": "new-1"}`).data(t, &fresh)
	h.must(201, "POST", hostsPath, a.token, `{"hostname": "refused-1"}`).data(t, &refused)
	const refusal = "watch_files: paths[0]: policy: read_paths: / is outside policy.read_paths"
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
		VALUES ($1, 'watch_files', $2, 'failed', $3, now()), ($1, 'collectors', $4, 'applied', NULL, now())`,
		refused.ID, wf.Version, refusal, col.Version)
	report := func(id uuid.UUID, hash string, versions []byte) {
		h.exec(`UPDATE hosts SET last_heartbeat_at = now(), config_hash = $2, config_versions = $3 WHERE id = $1`, id, hash, versions)
	}
	report(a.host, expected, versions)
	report(db.ID, strings.Repeat("0", 64), versions)
	stale, _ := json.Marshal(map[string]int64{"collectors": col.Version, "watch_files": wf.Version - 1, "tracing": 1})
	report(old.ID, expected, stale)
	report(refused.ID, expected, versions)

	var d struct {
		EnvironmentID uuid.UUID `json:"environment_id"`
		CheckedHosts  int       `json:"checked_hosts"`
		Hosts         []struct {
			HostID       uuid.UUID `json:"host_id"`
			Hostname     string    `json:"hostname"`
			Online       bool      `json:"online"`
			ExpectedHash string    `json:"expected_hash"`
			Reasons      []string  `json:"reasons"`
		} `json:"hosts"`
	}
	h.must(200, "GET", "/api/v1/environments/"+a.env.String()+"/drift", a.token, nil).data(t, &d)
	if d.CheckedHosts != 5 || len(d.Hosts) != 4 {
		t.Fatalf("drift: %+v", d)
	}
	reasons := map[string]string{}
	for _, hd := range d.Hosts {
		if hd.ExpectedHash != expected {
			t.Fatalf("%s: expected hash %s, want %s", hd.Hostname, hd.ExpectedHash, expected)
		}
		reasons[hd.Hostname] = strings.Join(hd.Reasons, "; ")
	}
	if _, ok := reasons["acme-web-1"]; ok {
		t.Fatalf("the in-sync host is reported: %v", reasons)
	}
	if r := reasons["db-1"]; !strings.Contains(r, "config_hash") || strings.Contains(r, "version") {
		t.Fatalf("db-1 reasons: %q", r)
	}
	if r := reasons["old-1"]; !strings.Contains(r, "watch_files") || !strings.Contains(r, "behind") || !strings.Contains(r, "tracing") || strings.Contains(r, "config_hash") {
		t.Fatalf("old-1 reasons: %q", r)
	}
	if r := reasons["new-1"]; !strings.Contains(r, "not reported") {
		t.Fatalf("new-1 reasons: %q", r)
	}
	if r, want := reasons["refused-1"], fmt.Sprintf("watch_files: version %d failed to apply: %s", wf.Version, refusal); r != want {
		t.Fatalf("refused-1 reasons: %q, want %q", r, want)
	}
	// Revoked hosts are not checked.
	h.must(200, "DELETE", "/api/v1/hosts/"+fresh.ID.String(), a.token, nil)
	h.must(200, "GET", "/api/v1/environments/"+a.env.String()+"/drift", a.token, nil).data(t, &d)
	if d.CheckedHosts != 4 || len(d.Hosts) != 3 {
		t.Fatalf("after revoke: %+v", d)
	}
	h.noLogContains("drift-secret-1")
}

// TestDriftPendingAndFailed: right after a write, a host that acked the new version but whose last
// heartbeat still reports the old one is pending, not drifted; a host that acked it failed, or that
// anti-entropy is still repairing, is drifted with the reason.
func TestDriftPendingAndFailed(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
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

// TestResolverDown: reads that need the resolver answer 503 when it is not there; writes never need it
// (delivery is asynchronous, through the outbox), so they still succeed.
func TestResolverDown(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme", withoutResolver())
	h.must(200, "PUT", hostConfigPath(a.host, "intervals"), a.token, `{"config_data": {"metrics": "1m"}}`)
	r := h.must(503, "GET", hostConfigPath(a.host, "intervals"), a.token, nil)
	if r.errCode(t) != "unavailable" || strings.Contains(string(r.body), "nats") {
		t.Fatalf("resolver down: %s", r.body)
	}
	h.must(503, "GET", "/api/v1/environments/"+a.env.String()+"/drift", a.token, nil)
}

// Registration issues the agent its own NATS user, which can use only its own subjects; revoking the
// host revokes that user on the server.
func TestHostNATSCredentialsIssuedAndRevoked(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme", withNATSIdentity(newAuthority(t)))
	var reg registeredJSON
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", h.admin, `{"hostname": "db-1", "agent_id": "agent-db-1"}`).data(t, &reg)
	if !isCredsFile(reg.NATSCredentials) {
		t.Fatalf("registration returned no creds file: %q", reg.NATSCredentials)
	}
	// Shown once: reading the host back never returns them.
	if r := h.must(200, "GET", "/api/v1/hosts/"+reg.ID.String(), a.token, ""); bytes.Contains(r.body, []byte("NKEY SEED")) {
		t.Fatalf("GET host returned the credentials: %s", r.body)
	}
	credsFile := writeCreds(t, t.TempDir(), "agent", natsauth.Creds{File: []byte(reg.NATSCredentials)})
	agent, closed := connectAgent(t, h.natsURL, reg.AgentID, credsFile)
	h.receivesOwnCommand(agent, reg.AgentID)

	h.must(200, "DELETE", "/api/v1/hosts/"+reg.ID.String(), a.token, "")
	h.revokedAgentShutOut(closed, credsFile)
}

// TestRegistrationHasIdentitiesSigned: registering hosts, one or a batch, asks the resolver to resolve
// exactly the new hosts once (resolve_sets, which signs and stores the identity statements it does not
// find), so that a new fleet's first herd signs none. The resolver reads the hosts itself: the request
// names agent ids only.
func TestRegistrationHasIdentitiesSigned(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "idsign")

	// A plain subscription sees every resolve_sets request beside the resolver's queue group.
	seen := make(chan protocol.ResolveSetsRequest, 64)
	sub, err := h.nc.Subscribe(protocol.ResolveSetsSubject, func(m *nats.Msg) {
		var req protocol.ResolveSetsRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("resolve_sets request %q: %v", m.Data, err)
			return
		}
		seen <- req
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	next := func(what string) protocol.ResolveSetsRequest {
		t.Helper()
		select {
		case req := <-seen:
			return req
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no resolve_sets request for the new hosts", what)
			return protocol.ResolveSetsRequest{}
		}
	}

	var one registeredJSON
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", h.admin,
		map[string]any{"hostname": "id-single", "agent_id": "agent-id-single"}).data(t, &one)
	if req := next("single registration"); !slices.Equal(req.AgentIDs, []string{"agent-id-single"}) || req.Contract != protocol.ResolveSetsContract {
		t.Fatalf("single registration asked for %v (contract %d), want [agent-id-single]", req.AgentIDs, req.Contract)
	}

	entries := make([]batchEntry, 3)
	want := make([]string, len(entries))
	for i := range entries {
		want[i] = fmt.Sprintf("agent-id-batch-%d", i)
		entries[i] = batchEntry{Hostname: fmt.Sprintf("id-batch-%d", i), AgentID: want[i]}
	}
	var got []registeredJSON
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts/batch", h.admin, batchBody(entries)).data(t, &got)
	if req := next("batch registration"); !slices.Equal(req.AgentIDs, want) {
		t.Fatalf("batch registration asked for %v, want %v", req.AgentIDs, want)
	}
	select {
	case req := <-seen:
		t.Fatalf("unexpected resolve_sets request %v", req.AgentIDs)
	case <-time.After(200 * time.Millisecond):
	}
}
