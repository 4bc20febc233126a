package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/tools/loadgen/internal/fleet"
	"github.com/configsync/configsync/tools/loadgen/internal/latency"
	"github.com/configsync/configsync/tools/loadgen/internal/procstat"
	"github.com/configsync/configsync/tools/loadgen/internal/scenario"
)

func byFigure(rows []Row, prefix string) Row {
	for _, r := range rows {
		if strings.HasPrefix(r.Figure, prefix) {
			return r
		}
	}
	return Row{}
}

func TestRowsVerdicts(t *testing.T) {
	real := &scenario.Result{LoadAverage: [2]float64{1.5, 2.5},
		Push:         &scenario.PushResult{Complete: true, Runs: make([]scenario.PushRun, 3), Worst: 1500 * time.Millisecond},
		Herd:         &scenario.HerdResult{Agents: 15000, OK: 15000, Latency: latency.Summary{Count: 15000, P99: 300 * time.Millisecond}},
		ConnectStorm: &scenario.ConnectStormResult{ConnectStorm: fleet.ConnectStorm{Conns: 15000, PerSecond: 900}}}
	r50k := &scenario.Result{Herd: &scenario.HerdResult{Agents: 50000, OK: 49990, Failed: 10,
		Latency: latency.Summary{Count: 49990, P99: 100 * time.Millisecond},
		CPU:     scenario.CPU{"services": 50000 * 30 * time.Microsecond, "postgres": 50000 * 10 * time.Microsecond}}}
	rows := Rows(real, r50k, nil, 19500, "1.0 → 1.2")

	for prefix, want := range map[string]string{
		"push, 15,000": "pass", // 1.5 s ≤ 2 s
		"herd, 15,000": "MISS", // p99 300 ms > 250 ms
		"herd, 50,000": "MISS", // 10 failures
		"services (nats-server included) + PostgreSQL CPU": "pass", // 40 µs per fetch (the 10 failed fetches not counted)
		"merge + canonicalise + hash":                      "pass",
		"push: PUT returned":                               "—", // the 100k run is missing
		"heartbeats persisted":                             "—",
		"connect storm":                                    "—",
		"services' peak RSS at 100,000":                    "—",
	} {
		if got := byFigure(rows, prefix); got.Verdict != want {
			t.Errorf("%s: verdict %q (%+v), want %q", prefix, got.Verdict, got, want)
		}
	}
	if got := byFigure(rows, "push: PUT returned"); got.Measured != "not run" {
		t.Errorf("missing run measured %q", got.Measured)
	}
	if got := byFigure(rows, "push, 15,000"); got.Load != "1.5 → 2.5" {
		t.Errorf("load %q", got.Load)
	}
	var out bytes.Buffer
	Print(&out, rows)
	if n := strings.Count(out.String(), "\n"); n != len(rows)+2 {
		t.Errorf("table has %d lines for %d rows:\n%s", n, len(rows), out.String())
	}
}

func TestMergeNsTakesTheMedianAndTheLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "merge.txt")
	data := "load: 1.50 1.2 1.0 3/200 99\ngoos: linux\n" +
		"BenchmarkMergeCanonicalHash-2   50000   24000 ns/op   1200 B/op   20 allocs/op\n" +
		"BenchmarkMergeCanonicalHash-2   50000   21000 ns/op   1200 B/op   20 allocs/op\n" +
		"BenchmarkMergeCanonicalHash-2   50000   30000 ns/op   1200 B/op   20 allocs/op\n" +
		"BenchmarkMergeOnly-2   50000   9000 ns/op\nload: 2.00 1.3 1.0 3/200 99\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	ns, load := mergeNs(path)
	if ns != 24000 || load != "1.50 → 2.00" {
		t.Errorf("mergeNs = %v, %q", ns, load)
	}
	if ns, _ := mergeNs(filepath.Join(t.TempDir(), "none")); ns != -1 {
		t.Errorf("missing file: %v", ns)
	}
}

// The boot herd's target is about agents left without config: agents whose first fetch was refused
// retry as the agent does, and the run reports how many a retry configured and when the last one was.
func TestBootHerdCountsAgentsConfiguredByRetries(t *testing.T) {
	boot := func(r fleet.RetryStats, failed int64, elapsed time.Duration) *scenario.Result {
		return &scenario.Result{LoadAverage: [2]float64{4.2, 6.5}, Herd: &scenario.HerdResult{
			Agents: 100000, OK: 100000 - failed, Failed: failed, Elapsed: elapsed, RetryFor: 2 * time.Minute, Retry: r,
			Latency: latency.Summary{Count: int(100000 - failed), P99: 1868 * time.Millisecond}}}
	}
	const figure = "boot herd"
	for _, tc := range []struct {
		name         string
		run          *scenario.Result
		verdict      string
		measuredHead string
	}{
		// The lead's fa1e552 run: 61,073 first attempts refused, every one configured by a retry, the
		// last agent 30.6 s after boot — a miss for its time, not for agents left without config.
		{"all configured late", boot(fleet.RetryStats{Retries: 121727, RetriedOK: 61073, ServerDelays: 121727, AllConfigured: 30603 * time.Millisecond}, 61073, 30603*time.Millisecond),
			"MISS", "100000 of 100000 configured in 30.603s (61073 first attempts failed, 121727 retries)"},
		{"all configured in time", boot(fleet.RetryStats{Retries: 900, RetriedOK: 800, AllConfigured: 14 * time.Second}, 800, 14*time.Second),
			"pass", "100000 of 100000 configured in 14s (800 first attempts failed, 900 retries)"},
		{"no failure at all", boot(fleet.RetryStats{AllConfigured: 10200 * time.Millisecond}, 0, 10200*time.Millisecond),
			"pass", "100000 of 100000 configured in 10.2s (0 first attempts failed, 0 retries)"},
		{"some left without config", boot(fleet.RetryStats{Retries: 5000, RetriedOK: 2990, GaveUp: 10}, 3000, 2*time.Minute),
			"MISS", "99990 of 100000 configured; 10 without config after 2m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := byFigure(Rows(nil, nil, tc.run, -1, ""), figure)
			if row.Verdict != tc.verdict || !strings.HasPrefix(row.Measured, tc.measuredHead) {
				t.Errorf("row %+v, want verdict %s and measured starting %q", row, tc.verdict, tc.measuredHead)
			}
			if !strings.Contains(row.Measured, "first-attempt p99 1.868s") {
				t.Errorf("first-attempt p99 missing: %q", row.Measured)
			}
		})
	}
}

// The herd's CPU covers every attempt, so it is divided by the agents configured, not by the first
// attempts that succeeded (the lead's 50k run: 15.79 s over 27,333 first successes would read 578 µs;
// over the 50,000 agents configured it is 316 µs).
func TestCPUPerFetchDividesByAgentsConfigured(t *testing.T) {
	r50k := &scenario.Result{Herd: &scenario.HerdResult{Agents: 50000, OK: 27333, Failed: 22667,
		Retry: fleet.RetryStats{Retries: 27116, RetriedOK: 22667, AllConfigured: 12753 * time.Millisecond},
		CPU:   scenario.CPU{"services": 10090 * time.Millisecond, "postgres": 5700 * time.Millisecond}}}
	row := byFigure(Rows(nil, r50k, nil, -1, ""), cpuFigure)
	if want := "316µs (services 202µs + PostgreSQL 114µs)"; row.Measured != want || row.Verdict != "MISS" {
		t.Errorf("row %+v, want measured %q, MISS", row, want)
	}
	r50k.Herd.CPU = scenario.CPU{"services": 50000 * 30 * time.Microsecond, "postgres": 50000 * 15 * time.Microsecond}
	if row := byFigure(Rows(nil, r50k, nil, -1, ""), cpuFigure); row.Verdict != "pass" {
		t.Errorf("45 µs per configured agent: %+v", row)
	}
}

const cpuFigure = "services (nats-server included) + PostgreSQL CPU"

// A nats-server of its own (devstack's) is shown apart in the CPU per fetch, and counts toward the
// target as it did when the server ran inside the services' process.
func TestCPUPerFetchCountsANATSServerOfItsOwn(t *testing.T) {
	r50k := &scenario.Result{Herd: &scenario.HerdResult{Agents: 50000, OK: 50000, Latency: latency.Summary{Count: 50000},
		CPU: scenario.CPU{scenario.CPUServices: 50000 * 20 * time.Microsecond, scenario.CPUNATSServer: 50000 * 25 * time.Microsecond,
			scenario.CPUPostgres: 50000 * 15 * time.Microsecond, "loadgen": 50000 * 40 * time.Microsecond}}}
	row := byFigure(Rows(nil, r50k, nil, -1, ""), cpuFigure)
	if want := "60µs (services 20µs + nats-server 25µs + PostgreSQL 15µs)"; row.Measured != want || row.Verdict != "MISS" {
		t.Errorf("row %+v, want measured %q, MISS", row, want)
	}
	r50k.Herd.CPU[scenario.CPUNATSServer] = 50000 * 10 * time.Microsecond
	if row := byFigure(Rows(nil, r50k, nil, -1, ""), cpuFigure); row.Verdict != "pass" {
		t.Errorf("45 µs per configured agent: %+v", row)
	}
}

// The 100,000-agent RSS target is the services' alone: a nats-server running in a process of its own is
// reported beside it and left out of the verdict; a run whose server was embedded in the services'
// process (no nats-server entry) is judged on the whole process, and the figure says so.
func TestServicesRSSLeavesOutTheNATSServerProcess(t *testing.T) {
	const mib = 1 << 20
	row := func(mem ...procstat.Memory) Row {
		return byFigure(Rows(nil, nil, &scenario.Result{Memory: mem}, -1, ""), "services' peak RSS at 100,000")
	}
	services := procstat.Memory{PID: 10, Name: "devstack", Role: scenario.RoleServices, HWM: 150 * mib}
	nats := procstat.Memory{PID: 11, Name: "devstack", Role: scenario.RoleNATSServer, HWM: 900 * mib}
	for _, tc := range []struct {
		name              string
		row               Row
		verdict, measured string
		figureHas         string
	}{
		{"split", row(services, nats), "pass", "150 MiB (nats-server 900 MiB)", "reported apart"},
		{"split, services over", row(procstat.Memory{PID: 10, Role: scenario.RoleServices, HWM: 401 * mib}, nats), "MISS", "401 MiB (nats-server 900 MiB)", "reported apart"},
		{"embedded (no roles)", row(procstat.Memory{PID: 10, HWM: 350 * mib}), "pass", "350 MiB", "nats-server included"},
		{"embedded, over", row(procstat.Memory{PID: 10, HWM: 450 * mib}), "MISS", "450 MiB", "nats-server included"},
	} {
		if tc.row.Verdict != tc.verdict || tc.row.Measured != tc.measured || !strings.Contains(tc.row.Figure, tc.figureHas) {
			t.Errorf("%s: row %+v, want verdict %s, measured %q, figure with %q", tc.name, tc.row, tc.verdict, tc.measured, tc.figureHas)
		}
	}
}
