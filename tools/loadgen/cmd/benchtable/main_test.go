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
		"push, 15,000":                  "pass", // 1.5 s ≤ 2 s
		"herd, 15,000":                  "MISS", // p99 300 ms > 250 ms
		"herd, 50,000":                  "MISS", // 10 failures
		"services + PostgreSQL CPU":     "pass", // 40 µs per fetch (the 10 failed fetches not counted)
		"merge + canonicalise + hash":   "pass",
		"push: PUT returned":            "—", // the 100k run is missing
		"heartbeats persisted":          "—",
		"connect storm":                 "—",
		"services' peak RSS at 100,000": "—",
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
