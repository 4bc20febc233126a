package configapi_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
)

type applyStatus = protocol.ApplyStatus

// TestApplyStatus: the status of an environment's current version counts its targets by their acks,
// pending while online (by the host's own heartbeat interval too) and offline apart; hosts a newer
// override moves to another version are not targets; the host-level answer has one target; another
// client's environment or host is 404.
func TestApplyStatus(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	b := h.newTenant("bravo")
	env := "/api/v1/environments/" + a.env.String()
	path := env + "/agent-configs/watch_files/status"

	h.must(404, "GET", path, a.token, nil) // no config of the type yet
	if code := h.must(400, "GET", env+"/agent-configs/firewall/status", a.token, nil).errCode(t); code != "unknown_config_type" {
		t.Fatalf("unknown type answered %q", code)
	}
	var cfg configRow
	h.must(200, "PUT", env+"/agent-configs/watch_files", a.token, `{"config_data": {"paths": ["/etc"]}}`).data(t, &cfg)

	register := func(name string) uuid.UUID {
		var o idObj
		h.must(201, "POST", env+"/hosts", a.token, map[string]any{"hostname": name}).data(t, &o)
		return o.ID
	}
	applied, failed1, failed2, failedOffline, slowIntervals, overridden, revoked := register("applied"), register("failed-1"),
		register("failed-2"), register("failed-offline"), register("slow-heartbeats"), register("overridden"), register("revoked")
	// a.host, registered by newTenant, is never seen: offline.
	h.exec(`UPDATE hosts SET last_heartbeat_at = now() WHERE id IN ($1, $2, $3, $4, $5)`, applied, failed1, failed2, overridden, revoked)
	h.exec(`UPDATE hosts SET last_heartbeat_at = now() - interval '1 hour' WHERE id = $1`, failedOffline)
	// A host heartbeating every 30 minutes, last heard 40 minutes ago, is online by its own interval.
	h.exec(`UPDATE hosts SET last_heartbeat_at = now() - interval '40 minutes', heartbeat_interval_ms = 1800000 WHERE id = $1`, slowIntervals)
	ack := func(id uuid.UUID, version int64, status, errText string, after time.Duration) {
		h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
			SELECT $1, 'watch_files', $2, $3, NULLIF($4, ''), updated_at + $5 * interval '1 millisecond'
			FROM environment_configs WHERE environment_id = $6 AND config_type = 'watch_files'`,
			id, version, status, errText, after.Milliseconds(), a.env)
	}
	ack(applied, cfg.Version, "applied", "", 2500*time.Millisecond)
	ack(failed1, cfg.Version, "failed", "policy refuses /etc", 0)
	ack(failed2, cfg.Version, "failed", "policy refuses /etc", 0)
	ack(failedOffline, cfg.Version, "failed", "disk full", 0)
	ack(slowIntervals, cfg.Version-1, "applied", "", 0) // an older version: still pending
	h.must(200, "PUT", hostConfigPath(overridden, "watch_files"), a.token, `{"config_data": {"paths": ["/opt"]}}`)
	h.must(200, "DELETE", "/api/v1/hosts/"+revoked.String(), a.token, nil)

	var st applyStatus
	h.must(200, "GET", path, a.token, nil).data(t, &st)
	if st.Version != cfg.Version || st.Deleted || st.Targets != 6 || st.Applied != 1 || st.Failed != 3 || st.Pending != 1 ||
		st.Offline != 1 || st.OtherHosts != 1 || st.Done {
		t.Fatalf("status = %+v, want version %d: 6 targets, 1 applied, 3 failed, 1 pending, 1 offline, 1 other", st, cfg.Version)
	}
	if len(st.TopErrors) != 2 || st.TopErrors[0].Error != "policy refuses /etc" || st.TopErrors[0].Hosts != 2 ||
		st.TopErrors[1].Error != "disk full" || st.TopErrors[1].Hosts != 1 {
		t.Fatalf("top errors = %+v", st.TopErrors)
	}
	if st.SlowestApplyMS == nil || *st.SlowestApplyMS != 2500 || st.SlowestHostID == nil || *st.SlowestHostID != applied.String() {
		t.Fatalf("slowest = %v ms on %v, want 2500 ms on %s", st.SlowestApplyMS, st.SlowestHostID, applied)
	}

	// The pending host answers: every online target has.
	h.exec(`DELETE FROM host_config_apply_status WHERE host_id = $1`, slowIntervals)
	ack(slowIntervals, cfg.Version, "applied", "", 100*time.Millisecond)
	h.must(200, "GET", path, a.token, nil).data(t, &st)
	if st.Pending != 0 || st.Applied != 2 || st.Offline != 1 || !st.Done {
		t.Fatalf("after the last online answer: %+v", st)
	}

	// Host level: the overridden host runs its override's version, the only target.
	hostPath := "/api/v1/hosts/" + overridden.String() + "/agent-configs/watch_files/status"
	var hs applyStatus
	h.must(200, "GET", hostPath, a.token, nil).data(t, &hs)
	if hs.Version <= cfg.Version || hs.Targets != 1 || hs.Pending != 1 || hs.Applied != 0 {
		t.Fatalf("host status = %+v, want the override's version pending on one target", hs)
	}
	var fs applyStatus
	h.must(200, "GET", "/api/v1/hosts/"+failed1.String()+"/agent-configs/watch_files/status", a.token, nil).data(t, &fs)
	if fs.Version != cfg.Version || fs.Targets != 1 || fs.Failed != 1 || len(fs.TopErrors) != 1 || !fs.Done {
		t.Fatalf("failed host status = %+v", fs)
	}

	// A deletion is a version too: its targets should drop the type. It is newer than the override, so
	// the overridden host is one of them.
	var del configRow
	h.must(200, "DELETE", env+"/agent-configs/watch_files", a.token, nil).data(t, &del)
	h.must(200, "GET", path, a.token, nil).data(t, &st)
	if st.Version != del.Version || !st.Deleted || st.Targets != 7 || st.OtherHosts != 0 || st.Applied != 0 {
		t.Fatalf("status of the deletion = %+v", st)
	}

	// Another client's objects do not exist for this caller.
	h.must(404, "GET", path, b.token, nil)
	h.must(404, "GET", hostPath, b.token, nil)
	h.must(200, "GET", path, h.admin, nil)
}
