package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/seed"
)

func sortHeartbeats(rows []ingest.HostHeartbeat) {
	slices.SortFunc(rows, func(a, b ingest.HostHeartbeat) int { return bytes.Compare(a.HostID[:], b.HostID[:]) })
}

func sortApply(rows []ingest.ApplyStatus) {
	slices.SortFunc(rows, func(a, b ingest.ApplyStatus) int { return bytes.Compare(a.HostID[:], b.HostID[:]) })
}

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// newStore registers n hosts (agent-0 …) in a fresh database and returns its pool, the hosts' ids by
// agent and the Store over it.
func newStore(t *testing.T, n int) (*pgxpool.Pool, map[string]uuid.UUID, *Store) {
	t.Helper()
	pool := testinfra.Postgres(t)
	return pool, seed.Hosts(t, pool, n), NewStore(pool)
}

func TestLookupHostIDs(t *testing.T) {
	pool := testinfra.Postgres(t)
	hosts := seed.Hosts(t, pool, 3)
	got, err := NewStore(pool).LookupHostIDs(context.Background(), []string{"agent-0", "agent-2", "ghost"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["agent-0"].ID != hosts["agent-0"] || got["agent-2"].ID != hosts["agent-2"] || got["agent-0"].EnvironmentID == uuid.Nil {
		t.Fatalf("lookup = %v", got)
	}
}

func TestUpsertApplyStatusesNeverRegresses(t *testing.T) {
	pool, hosts, s := newStore(t, 2)
	ctx := context.Background()
	row := func(agent, typ string, version int64, status, errText string) ingest.ApplyStatus {
		return ingest.ApplyStatus{HostID: hosts[agent], Ack: ingest.Ack{AgentID: agent, ConfigType: typ, Version: version,
			Status: status, Error: errText, AppliedAt: t0.Add(time.Duration(version) * time.Second)}}
	}
	upsert := func(rows ...ingest.ApplyStatus) {
		t.Helper()
		if err := s.UpsertApplyStatuses(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	upsert(
		row("agent-0", "collectors", 5, "failed", "dial tcp: connection refused"),
		row("agent-0", "labels", 2, "applied", ""),
		row("agent-1", "labels", 3, "applied", ""),
	)
	// Older versions do not overwrite; the same version does; newer does.
	upsert(
		row("agent-0", "collectors", 4, "applied", ""),
		row("agent-0", "labels", 2, "failed", "boom"),
		row("agent-1", "labels", 9, "applied", ""),
	)
	type status struct {
		version int64
		status  string
		errText *string
	}
	get := func(agent, typ string) status {
		var st status
		if err := pool.QueryRow(ctx, `SELECT version, status, error FROM host_config_apply_status WHERE host_id = $1 AND config_type = $2`,
			hosts[agent], typ).Scan(&st.version, &st.status, &st.errText); err != nil {
			t.Fatalf("%s/%s: %v", agent, typ, err)
		}
		return st
	}
	if st := get("agent-0", "collectors"); st.version != 5 || st.status != "failed" || st.errText == nil || *st.errText != "dial tcp: connection refused" {
		t.Errorf("agent-0/collectors regressed: %+v", st)
	}
	if st := get("agent-0", "labels"); st.version != 2 || st.status != "failed" || st.errText == nil || *st.errText != "boom" {
		t.Errorf("agent-0/labels same version not replaced: %+v", st)
	}
	if st := get("agent-1", "labels"); st.version != 9 || st.status != "applied" || st.errText != nil {
		t.Errorf("agent-1/labels newer not written: %+v", st)
	}
}

func TestUpdateHeartbeatsNeverMovesBackwards(t *testing.T) {
	pool, hosts, s := newStore(t, 1)
	ctx := context.Background()
	beat := func(at time.Time, hash string, version int64) ingest.HostHeartbeat {
		return ingest.HostHeartbeat{HostID: hosts["agent-0"], Heartbeat: ingest.Heartbeat{AgentID: "agent-0", ReceivedAt: at,
			AgentVersion: "1.2.3", ConfigHash: hash, ConfigVersion: version, ConfigVersions: map[string]int64{"labels": version}}}
	}
	if _, err := s.UpdateHeartbeats(ctx, []ingest.HostHeartbeat{beat(t0.Add(time.Minute), "new", 7)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateHeartbeats(ctx, []ingest.HostHeartbeat{beat(t0, "old", 3)}); err != nil {
		t.Fatal(err)
	}
	var (
		hash, agentVersion string
		version            int64
		versions           map[string]int64
		last               time.Time
	)
	if err := pool.QueryRow(ctx, `SELECT config_hash, agent_version, config_version, config_versions, last_heartbeat_at FROM hosts WHERE id = $1`,
		hosts["agent-0"]).Scan(&hash, &agentVersion, &version, &versions, &last); err != nil {
		t.Fatal(err)
	}
	if hash != "new" || version != 7 || versions["labels"] != 7 || agentVersion != "1.2.3" || !last.Equal(t0.Add(time.Minute)) {
		t.Fatalf("host = %q %d %v %q %v", hash, version, versions, agentVersion, last)
	}
}

func TestRefusedRowsAreMarkedRejected(t *testing.T) {
	pool := testinfra.Postgres(t)
	// A status the table's CHECK refuses: the rows are at fault, not the database.
	hosts := seed.Hosts(t, pool, 1)
	err := NewStore(pool).UpsertApplyStatuses(context.Background(), []ingest.ApplyStatus{{HostID: hosts["agent-0"],
		Ack: ingest.Ack{AgentID: "agent-0", ConfigType: "labels", Version: 1, Status: "bogus", AppliedAt: t0}}})
	if !errors.Is(err, ingest.ErrRejected) {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
	// An unreachable database is not the rows' fault.
	pool.Close()
	_, err = NewStore(pool).UpdateHeartbeats(context.Background(), []ingest.HostHeartbeat{{HostID: uuid.New()}})
	if err == nil || errors.Is(err, ingest.ErrRejected) {
		t.Fatalf("closed pool err = %v, want a transient error", err)
	}
}

// TestHeartbeatBatchesShareOneConnection writes batches in a row over a single connection: each batch
// writes and reports only its own hosts, also after a batch the database refused; and the asynchronous
// commit of a heartbeat batch stays in its transaction: the connection, which writes acks next, is
// synchronous again, also after a batch the database refused.
func TestHeartbeatBatchesShareOneConnection(t *testing.T) {
	pool := testinfra.PostgresWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	hosts := seed.Hosts(t, pool, 6)
	// Inside a heartbeat transaction the commit is asynchronous.
	tx, err := pool.BeginTx(ctx, heartbeatTx)
	if err != nil {
		t.Fatal(err)
	}
	var inMode string
	if err := tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&inMode); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if inMode != "off" {
		t.Fatalf("a heartbeat transaction runs with synchronous_commit %q, want off", inMode)
	}
	s := NewStore(pool)
	beat := func(agent string, at time.Time) ingest.HostHeartbeat {
		return ingest.HostHeartbeat{HostID: hosts[agent], Heartbeat: ingest.Heartbeat{AgentID: agent, ReceivedAt: at,
			AgentVersion: "1.0.0", ConfigHash: "h-" + agent, ConfigVersion: 1, ConfigVersions: map[string]int64{"labels": 1}}}
	}
	batch := func(at time.Time, agents ...string) []ingest.HostHeartbeat {
		var rows []ingest.HostHeartbeat
		for _, a := range agents {
			rows = append(rows, beat(a, at))
		}
		sortHeartbeats(rows)
		return rows
	}
	check := func(w ingest.HeartbeatWrite, agents ...string) {
		t.Helper()
		if w.Written != len(agents) || len(w.Layers) != len(agents) {
			t.Fatalf("written %d, layers of %d hosts; want %d (%v)", w.Written, len(w.Layers), len(agents), agents)
		}
		for _, a := range agents {
			if w.Layers[hosts[a]] == nil {
				t.Errorf("no layers for %s", a)
			}
		}
	}
	synchronous := func(after string) {
		t.Helper()
		var mode string
		if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if mode != "on" {
			t.Fatalf("after %s the connection commits with synchronous_commit %q, want on", after, mode)
		}
	}
	w, err := s.UpdateHeartbeats(ctx, batch(t0, "agent-0", "agent-1", "agent-2"))
	if err != nil {
		t.Fatal(err)
	}
	check(w, "agent-0", "agent-1", "agent-2")
	synchronous("a heartbeat batch")
	// A batch refused by the database writes nothing and leaves nothing behind for the next one.
	bad := batch(t0, "agent-3")
	bad[0].HostID = uuid.New()
	bad[0].ConfigHash = "\x00" // PostgreSQL text cannot hold NUL: the write fails
	if _, err := s.UpdateHeartbeats(ctx, bad); !errors.Is(err, ingest.ErrRejected) {
		t.Fatalf("a NUL byte in config_hash: err = %v, want ErrRejected", err)
	}
	synchronous("a refused heartbeat batch")
	w, err = s.UpdateHeartbeats(ctx, batch(t0.Add(time.Minute), "agent-4", "agent-5"))
	if err != nil {
		t.Fatal(err)
	}
	check(w, "agent-4", "agent-5")
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM hosts WHERE last_heartbeat_at IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("%d hosts have a heartbeat, want 5", n)
	}
}

// TestSmallHeartbeatBatchReadsHostsByKey: a batch of a few heartbeats (what a herd makes) reads hosts
// through its primary key, never by a scan of every host; such a scan per batch was most of
// PostgreSQL's CPU in a herd. The scans of hosts are counted by PostgreSQL's own statistics, on the
// single connection the batches use (flushed at each commit).
func TestSmallHeartbeatBatchReadsHostsByKey(t *testing.T) {
	pool := testinfra.PostgresWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	hosts := seed.Hosts(t, pool, 2000)
	if _, err := pool.Exec(ctx, `ANALYZE hosts`); err != nil {
		t.Fatal(err)
	}
	scans := func() (seq, idx int64) {
		t.Helper()
		// The statistics a session reads are a snapshot: take a fresh one.
		if _, err := pool.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT seq_scan, COALESCE(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'hosts'`).Scan(&seq, &idx); err != nil {
			t.Fatal(err)
		}
		return seq, idx
	}
	if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	seq0, idx0 := scans()
	s := NewStore(pool)
	for i := range 5 {
		var batch []ingest.HostHeartbeat
		for k := range 4 {
			agent := fmt.Sprintf("agent-%d", i*4+k)
			batch = append(batch, ingest.HostHeartbeat{HostID: hosts[agent], Heartbeat: ingest.Heartbeat{AgentID: agent,
				ReceivedAt: t0, AgentVersion: "1.0.0", ConfigHash: "h", ConfigVersion: 1, ConfigVersions: map[string]int64{"labels": 1}}})
		}
		sortHeartbeats(batch)
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		w, err := s.UpdateHeartbeats(ctx, batch)
		if err != nil || w.Written != 4 {
			t.Fatalf("batch %d: written %d, %v", i, w.Written, err)
		}
	}
	if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	seq1, idx1 := scans()
	if seq1 != seq0 {
		t.Errorf("5 batches of 4 heartbeats scanned hosts %d times", seq1-seq0)
	}
	if idx1 == idx0 {
		t.Errorf("hosts was not read through an index (idx_scan %d -> %d)", idx0, idx1)
	}
}
