package applystatus

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
)

// TestTally covers the counting rules on hand-built hosts: who is a target (agentconfig.Expected),
// which answer counts (the version or a later one), pending versus offline (protocol.Online with the
// host's own interval), top errors by count then text, and the slowest apply from the layer that
// carries the version.
func TestTally(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	written := now.Add(-time.Minute)
	at := func(d time.Duration) *time.Time { v := now.Add(-d); return &v }
	env := Layer{LayerState: agentconfig.LayerState{Version: 10, Present: true}, WrittenAt: written}
	host := func(name string, hb *time.Time, ack *Ack) Host {
		return Host{ID: uuid.NewSHA1(uuid.Nil, []byte(name)), LastHeartbeatAt: hb, Environment: env, Ack: ack}
	}
	applied := func(v int64, took time.Duration) *Ack {
		return &Ack{Version: v, Status: Applied, AppliedAt: written.Add(took)}
	}
	failed := func(text string) *Ack { return &Ack{Version: 10, Status: Failed, Error: text} }

	slow := host("slow", at(0), applied(10, 9*time.Second))
	olderOverride := host("older-override", at(0), applied(11, time.Second)) // a later version counts
	olderOverride.Override = Layer{LayerState: agentconfig.LayerState{Version: 4, Present: true}, WrittenAt: written.Add(-time.Hour)}
	newerOverride := host("newer-override", at(0), nil)
	newerOverride.Override = Layer{LayerState: agentconfig.LayerState{Version: 12, Present: true}, WrittenAt: now}
	longInterval := host("long-interval", at(10*time.Minute), nil)
	longInterval.HeartbeatInterval = 5 * time.Minute
	hosts := []Host{
		slow, olderOverride, newerOverride, longInterval,
		host("stale-ack", at(0), applied(9, 0)),              // pending: acked only an older version
		host("never-seen", nil, nil),                         // offline
		host("gone", at(time.Hour), nil),                     // offline
		host("failed-then-gone", at(time.Hour), failed("b")), // failed, though offline now
		host("failed-a1", at(0), failed("a")),
		host("failed-b", at(0), failed("b")),
		host("failed-c", at(0), failed("c")),
	}
	st := Tally(hosts, 10, now, 90*time.Second, 2)
	got := fmt.Sprintf("targets=%d applied=%d failed=%d pending=%d offline=%d others=%d errors=%v slowest=%s",
		st.Targets, st.Applied, st.Failed, st.Pending, st.Offline, st.Others, st.TopErrors, st.SlowestApply)
	want := "targets=10 applied=2 failed=4 pending=2 offline=2 others=1 errors=[{b 2} {a 1}] slowest=9s"
	if got != want {
		t.Fatalf("tally:\n got %s\nwant %s", got, want)
	}
	if st.SlowestHost.UUID != slow.ID || st.Done() {
		t.Fatalf("slowest host %v, done %v", st.SlowestHost, st.Done())
	}
	// The newer override's own version has that one host as its target, timed from its own write.
	st = Tally(hosts, 12, now, 90*time.Second, 2)
	if st.Targets != 1 || st.Pending != 1 || st.Others != len(hosts)-1 {
		t.Fatalf("tally of version 12: %+v", st)
	}
	if st := Tally(nil, 10, now, time.Minute, 5); st.Targets != 0 || !st.Done() || st.TopErrors != nil {
		t.Fatalf("empty tally: %+v", st)
	}
}
