// Command benchtable prints the one table of `make bench-full`: every fleet-scale target with the
// value measured, its verdict and the load average of the run it comes from. It reads the loadgen JSON
// documents and the agentconfig benchmark output that bench-full leaves in one directory:
//
//	real-15k.json   loadgen -agents 15000 -real-conns (push and herd on real connections)
//	50k.json        loadgen -agents 50000 (herd in 5 s, CPU per fetch)
//	100k.json       loadgen -agents 100000 -jitter 10s (push, boot herd, heartbeats, RSS)
//	merge.txt       go test -bench MergeCanonicalHash in libs/agentconfig
//
// A missing file leaves its rows "not run".
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/configsync/configsync/tools/loadgen/internal/report"
	"github.com/configsync/configsync/tools/loadgen/internal/scenario"
)

func main() {
	dir := flag.String("dir", ".bench", "directory holding bench-full's outputs")
	flag.Parse()
	ns, mergeLoad := mergeNs(filepath.Join(*dir, "merge.txt"))
	rows := Rows(load(*dir, "real-15k.json"), load(*dir, "50k.json"), load(*dir, "100k.json"), ns, mergeLoad)
	Print(os.Stdout, rows)
	for _, r := range rows {
		if r.Verdict == "MISS" {
			os.Exit(2)
		}
	}
}

// Row is one target of the table.
type Row struct {
	Figure, Run, Measured, Target, Verdict, Load string
}

func load(dir, name string) *scenario.Result {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil
	}
	var doc report.Document
	if err := json.Unmarshal(b, &doc); err != nil || doc.Result == nil {
		fmt.Fprintf(os.Stderr, "benchtable: %s: not a loadgen JSON document: %v\n", name, err)
		return nil
	}
	return doc.Result
}

// mergeNs is the median ns/op of BenchmarkMergeCanonicalHash in a go test output (-1: none), and the
// 1-minute load averages of the "load: <loadavg>" lines around it.
func mergeNs(path string) (float64, string) {
	f, err := os.Open(path)
	if err != nil {
		return -1, "—"
	}
	defer f.Close()
	var vals []float64
	var loads []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "load:" {
			loads = append(loads, fields[1])
			continue
		}
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "BenchmarkMergeCanonicalHash") {
			continue
		}
		for i := 1; i+1 < len(fields); i++ {
			if fields[i+1] == "ns/op" {
				if v, err := strconv.ParseFloat(fields[i], 64); err == nil {
					vals = append(vals, v)
				}
			}
		}
	}
	load := "—"
	if len(loads) > 0 {
		load = strings.Join(loads, " → ")
	}
	if len(vals) == 0 {
		return -1, load
	}
	slices.Sort(vals)
	return vals[len(vals)/2], load
}

func verdict(ok bool) string {
	if ok {
		return "pass"
	}
	return "MISS"
}

func loadOf(r *scenario.Result) string {
	return fmt.Sprintf("%.1f → %.1f", r.LoadAverage[0], r.LoadAverage[1])
}

// dur shows a duration to 0.1 ms (µs below a millisecond).
func dur(d time.Duration) string {
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// Rows evaluates every target against the runs (nil: not run).
func Rows(real15k, r50k, r100k *scenario.Result, mergeNsOp float64, mergeLoad string) []Row {
	var out []Row
	notRun := func(figure, run, target string) Row {
		return Row{Figure: figure, Run: run, Measured: "not run", Target: target, Verdict: "—", Load: "—"}
	}
	push := func(figure, run, target string, r *scenario.Result, limit time.Duration) Row {
		if r == nil || r.Push == nil {
			return notRun(figure, run, target)
		}
		row := Row{Figure: figure, Run: run, Target: target, Load: loadOf(r)}
		if !r.Push.Complete || len(r.Push.Runs) == 0 {
			row.Measured, row.Verdict = "incomplete", "MISS"
			return row
		}
		row.Measured = fmt.Sprintf("%s (worst of %d)", dur(r.Push.Worst), len(r.Push.Runs))
		row.Verdict = verdict(r.Push.Worst <= limit)
		return row
	}
	herd := func(figure, run, target string, r *scenario.Result, p99 time.Duration) Row {
		if r == nil || r.Herd == nil {
			return notRun(figure, run, target)
		}
		h := r.Herd
		return Row{Figure: figure, Run: run, Target: target, Load: loadOf(r),
			Measured: fmt.Sprintf("%d failed of %d; p99 %s (p50 %s)", h.Failed, h.Agents, dur(h.Latency.P99), dur(h.Latency.P50)),
			Verdict:  verdict(h.Failed == 0 && h.Latency.Count > 0 && h.Latency.P99 <= p99)}
	}

	out = append(out, push("push: PUT returned → every ack persisted, 100,000 agents (multiplexed)", "100k", "≤ 10 s", r100k, 10*time.Second))
	out = append(out, push("push, 15,000 agents each on its own TLS connection", "real-15k", "≤ 2 s", real15k, 2*time.Second))
	out = append(out, herd("herd, 15,000 agents each on its own TLS connection (5 s window)", "real-15k", "0 failures, p99 ≤ 250 ms", real15k, 250*time.Millisecond))
	if real15k != nil && real15k.ConnectStorm != nil {
		s := real15k.ConnectStorm
		out = append(out, Row{Figure: "connect storm (TLS + JWT), before the herd; nats-server cost per 10,000 connections", Run: "real-15k",
			Measured: fmt.Sprintf("%d/%d in %s (%.0f/s, p99 %s); RSS +%.0f MiB, CPU %s in the storm, idle %s/s", s.Conns-s.Failed, s.Conns, dur(s.Elapsed),
				s.PerSecond, dur(s.Latency.P99), float64(s.RSSPer10k)/(1<<20), dur(s.CPUPer10k), dur(s.IdleCPUPer10k)),
			Target: "reported", Verdict: "—", Load: loadOf(real15k)})
	} else {
		out = append(out, notRun("connect storm (TLS + JWT); nats-server cost per 10,000 connections", "real-15k", "reported"))
	}
	if r100k == nil || r100k.Herd == nil {
		out = append(out, notRun("boot herd, 100,000 agents in a 10 s window: every agent configured", "100k", "within 20 s, 0 left without config"))
	} else {
		h := r100k.Herd
		c := Configured(h)
		measured := fmt.Sprintf("%d of %d configured", c.Agents, h.Agents)
		if c.Left == 0 {
			measured += " in " + dur(c.After)
		} else {
			measured += fmt.Sprintf("; %d without config after %s", c.Left, dur(c.After))
		}
		measured += fmt.Sprintf(" (%d first attempts failed, %d retries); first-attempt p99 %s", h.Failed, h.Retry.Retries, dur(h.Latency.P99))
		out = append(out, Row{Figure: "boot herd, 100,000 agents in a 10 s window: every agent configured", Run: "100k",
			Measured: measured, Target: "within 20 s, 0 left without config",
			Verdict: verdict(c.Left == 0 && c.After <= 20*time.Second), Load: loadOf(r100k)})
	}
	out = append(out, herd("herd, 50,000 agents in 5 s", "50k", "0 failures, p99 ≤ 250 ms", r50k, 250*time.Millisecond))
	if r100k == nil || r100k.Heartbeat == nil {
		out = append(out, notRun("heartbeats persisted at 100,000 agents", "100k", "≥ 30,000/s"))
	} else {
		hb := r100k.Heartbeat
		rate := hb.LandedRate
		if hb.Processed > 0 {
			rate = min(hb.ProcessedRate, hb.LandedRate)
		}
		out = append(out, Row{Figure: "heartbeats persisted at 100,000 agents", Run: "100k",
			Measured: fmt.Sprintf("%.0f/s (offered %.0f/s; landed %.0f/s, written by ack-ingest %.0f/s)", rate, hb.OfferedRate, hb.LandedRate, hb.ProcessedRate),
			Target:   "≥ 30,000/s", Verdict: verdict(rate >= 30000), Load: loadOf(r100k)})
	}
	if r50k == nil || r50k.Herd == nil || Configured(r50k.Herd).Agents == 0 {
		out = append(out, notRun("services + PostgreSQL CPU per herd fetch", "50k", "≤ 50 µs"))
	} else {
		// The herd's CPU covers every attempt (refused first attempts and their retries too), so it is
		// divided by the agents that got their config, as loadgen's own report does. "Services" is the
		// whole stack but its database, nats-server included (as the target was first measured, with the
		// server embedded in the services' process); a nats-server of its own is shown apart.
		h := r50k.Herd
		n := time.Duration(Configured(h).Agents)
		per := (h.CPU.Stack() + h.CPU[scenario.CPUPostgres]) / n
		split := fmt.Sprintf("services %s + PostgreSQL %s", dur(h.CPU.Stack()/n), dur(h.CPU[scenario.CPUPostgres]/n))
		if _, apart := h.CPU[scenario.CPUNATSServer]; apart {
			split = fmt.Sprintf("services %s + nats-server %s + PostgreSQL %s", dur(h.CPU[scenario.CPUServices]/n),
				dur(h.CPU[scenario.CPUNATSServer]/n), dur(h.CPU[scenario.CPUPostgres]/n))
		}
		out = append(out, Row{Figure: "services (nats-server included) + PostgreSQL CPU per herd fetch (per configured agent: first heartbeat and retries included)", Run: "50k",
			Measured: fmt.Sprintf("%s (%s)", dur(per), split),
			Target:   "≤ 50 µs", Verdict: verdict(per <= 50*time.Microsecond), Load: loadOf(r50k)})
	}
	if r100k == nil || len(r100k.Memory) == 0 {
		out = append(out, notRun("services' peak RSS at 100,000 agents", "100k", "≤ 400 MiB"))
	} else {
		// The target is the services' alone, nats-server reported beside it. A run of a devstack that
		// embedded nats-server in the services' process has no nats-server entry: its figure includes
		// the server, and says so.
		var hwm, natsHWM uint64
		separate := false
		for _, m := range r100k.Memory {
			if m.Role == scenario.RoleNATSServer {
				natsHWM += m.HWM
				separate = true
			} else {
				hwm += m.HWM
			}
		}
		figure, measured := "services' peak RSS at 100,000 agents (nats-server included: it ran in the services' process)", fmt.Sprintf("%.0f MiB", float64(hwm)/(1<<20))
		if separate {
			figure = "services' peak RSS at 100,000 agents (nats-server reported apart)"
			measured += fmt.Sprintf(" (nats-server %.0f MiB)", float64(natsHWM)/(1<<20))
		}
		out = append(out, Row{Figure: figure, Run: "100k",
			Measured: measured, Target: "≤ 400 MiB", Verdict: verdict(hwm <= 400<<20), Load: loadOf(r100k)})
	}
	if mergeNsOp < 0 {
		out = append(out, notRun("merge + canonicalise + hash, 4 KB (BenchmarkMergeCanonicalHash, median)", "merge", "≤ 20 µs"))
	} else {
		out = append(out, Row{Figure: "merge + canonicalise + hash, 4 KB (BenchmarkMergeCanonicalHash, median)", Run: "merge",
			Measured: fmt.Sprintf("%.1f µs", mergeNsOp/1000), Target: "≤ 20 µs", Verdict: verdict(mergeNsOp <= 20000), Load: mergeLoad})
	}
	return out
}

// Herd is how many agents of a herd ended with their config, how many were left without, and when the
// last one had it.
type Herd struct {
	Agents, Left int64
	After        time.Duration
}

// Configured counts the agents a herd configured, by their first fetch or by a retry (agents retry the
// way the agent does; a first-attempt failure is not an agent left without config). A run without
// retries (-retry-for 0, or a report from before they existed) counts first attempts only.
func Configured(h *scenario.HerdResult) Herd {
	c := Herd{Agents: h.OK + h.Retry.RetriedOK, After: h.Retry.AllConfigured}
	c.Left = int64(h.Agents) - c.Agents
	if c.After == 0 {
		// Some agent never got its config (or no retry stats): the herd's whole duration.
		c.After = h.Elapsed
	}
	return c
}

// Print writes rows as one Markdown table.
func Print(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| figure | run | measured | target | verdict | load (1-min, start → end) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.Figure, r.Run, r.Measured, r.Target, r.Verdict, r.Load)
	}
}
