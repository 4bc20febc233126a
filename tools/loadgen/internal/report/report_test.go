package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/tools/loadgen/internal/latency"
	"github.com/configsync/configsync/tools/loadgen/internal/procstat"
	"github.com/configsync/configsync/tools/loadgen/internal/scenario"
)

func TestPushTargetScalesWithFleet(t *testing.T) {
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1000, 5 * time.Second}, {10000, 5 * time.Second}, {10001, 30 * time.Second}, {50000, 30 * time.Second}} {
		if got, _ := PushTarget(c.n); got != c.want {
			t.Errorf("PushTarget(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

func TestChecks(t *testing.T) {
	r := &scenario.Result{Agents: 10000,
		Herd: &scenario.HerdResult{Agents: 10000, Window: 5 * time.Second, OK: 10000,
			Latency: latency.Summary{Count: 10000, P50: time.Millisecond, P95: 50 * time.Millisecond, P99: 101 * time.Millisecond}},
		Push: &scenario.PushResult{Credentials: 3, Complete: true, Worst: 4 * time.Second,
			Runs: []scenario.PushRun{{Injects: 1, Decrypts: 3}, {Injects: 1, Decrypts: 3}}},
		Heartbeat: &scenario.HeartbeatResult{Duration: 10 * time.Second, OfferedRate: 15000, LandedRate: 14000, Processed: 100, ProcessedRate: 9000},
		Memory: []procstat.Memory{{PID: 7, Name: "devstack", HWM: 100 << 20, RSS: 90 << 20},
			{PID: 8, Name: "devstack", Role: "nats-server", HWM: 300 << 20, RSS: 200 << 20}},
	}
	got := Checks(r)
	want := []string{"pass", "pass", "MISS", "MISS", "pass", ""}
	if len(got) != len(want) {
		t.Fatalf("%d checks: %+v", len(got), got)
	}
	for i, c := range got {
		if c.Verdict != want[i] {
			t.Errorf("check %d (%s %s) verdict %q, want %q (measured %s)", i, c.Scenario, c.Metric, c.Verdict, want[i], c.Measured)
		}
	}
	// The stricter heartbeat count wins: 9,000/s written although 14,000/s landed.
	if !strings.Contains(got[3].Measured, "9,000/s written") {
		t.Errorf("heartbeat measured %q", got[3].Measured)
	}
	if !strings.Contains(got[5].Measured, "devstack 100 MiB") || !strings.Contains(got[5].Measured, "devstack (nats-server) 300 MiB (pid 8") {
		t.Errorf("memory measured %q", got[5].Measured)
	}

	// An incomplete push misses; a fleet offering less than the target gets no verdict.
	r.Push.Complete = false
	r.Heartbeat = &scenario.HeartbeatResult{OfferedRate: 2000, LandedRate: 2000}
	got = Checks(r)
	// Too few agents for the rate: coalescing by design, no verdict either way.
	if c := heartbeatCheck(1000, &scenario.HeartbeatResult{OfferedRate: 15000, LandedRate: 14900, Processed: 1, ProcessedRate: 5000}); c.Verdict != "" || !strings.Contains(c.Measured, "use ≥ 3,750 agents") {
		t.Errorf("coalesced heartbeat check = %+v", c)
	}
	if got[0].Verdict != "MISS" || got[0].Measured != "incomplete" {
		t.Errorf("incomplete push: %+v", got[0])
	}
	if got[3].Verdict != "" || !strings.Contains(got[3].Measured, "raise -heartbeat-rate") {
		t.Errorf("under-offered heartbeat: %+v", got[3])
	}
	// Decrypts: more injects than one per push miss the target.
	r.Push.Runs[1].Injects, r.Push.Runs[1].Decrypts = 5, 15
	if c := Checks(r)[4]; c.Verdict != "MISS" {
		t.Errorf("decrypts check = %+v", c)
	}
}

func TestRenderings(t *testing.T) {
	r := &scenario.Result{Date: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Agents: 1000, Conns: 8,
		Herd:   &scenario.HerdResult{Agents: 1000, OK: 1000, Latency: latency.Summary{Count: 1000, P99: time.Millisecond}, CPU: scenario.CPU{"services": time.Second}},
		Push:   &scenario.PushResult{Credentials: 3, Complete: true, Runs: []scenario.PushRun{{Version: 4, Applied: 1000, Injects: 1, Decrypts: 3}}},
		Memory: []procstat.Memory{{PID: 7, Name: "devstack", HWM: 1 << 30}}}
	var text bytes.Buffer
	Text(&text, r, "test machine")
	for _, want := range []string{"| scenario | metric | measured | target | verdict |", "1,000 agents", "test machine", "services 1.00 s (1.0 ms per fetch)", "devstack 1024 MiB"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := JSON(&js, r, "test machine"); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Machine string
		Checks  []Check
		Result  scenario.Result
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Machine != "test machine" || len(doc.Checks) != 5 || doc.Result.Agents != 1000 || doc.Result.Push.Runs[0].Decrypts != 3 {
		t.Fatalf("json = %+v", doc)
	}
}
