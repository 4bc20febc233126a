// Package report renders a loadgen run: a Markdown table of each target (measured vs. target, pass or
// miss) followed by the details, or the whole result as JSON for machines.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/configsync/configsync/tools/loadgen/internal/latency"
	"github.com/configsync/configsync/tools/loadgen/internal/procstat"
	"github.com/configsync/configsync/tools/loadgen/internal/scenario"
)

// Check is one row of the targets table.
type Check struct {
	Scenario string `json:"scenario"`
	Metric   string `json:"metric"`
	Measured string `json:"measured"`
	Target   string `json:"target"`
	// Verdict is "pass", "MISS" or "" (reported only, or not measured).
	Verdict string `json:"verdict"`
}

// Targets of issue 8.
const (
	HerdP99Target       = 100 * time.Millisecond
	HeartbeatRateTarget = 10000.0
)

// PushTarget is the push completion target at n agents: 5 s up to 10,000 agents, 30 s up to 50,000.
func PushTarget(n int) (time.Duration, string) {
	if n <= 10000 {
		return 5 * time.Second, "≤ 5 s (the 10k target)"
	}
	return 30 * time.Second, "≤ 30 s (the 50k target)"
}

func verdict(ok bool) string {
	if ok {
		return "pass"
	}
	return "MISS"
}

// ConvergenceSlack is the "few seconds" of the convergence guarantee beyond one heartbeat interval.
const ConvergenceSlack = 5 * time.Second

// Checks evaluates a result against the targets.
func Checks(r *scenario.Result) []Check {
	var out []Check
	if p := r.Push; p != nil && p.DropPushes > 0 {
		// With pushes lost on purpose the push is measured to full convergence: lost pushes are
		// repaired at the agents' next heartbeat (anti-entropy), so the target is one interval plus
		// the few seconds of the guarantee (README: ack-ingest's repair grace, the repair itself).
		target := p.HeartbeatInterval + ConvergenceSlack
		c := Check{Scenario: "push", Metric: fmt.Sprintf("env-wide push with %.0f%% of pushes lost at the agents: PUT returned → every agent converged, repairs included (worst of %d)",
			p.DropPushes*100, len(p.Runs)), Target: "≤ " + dur(target) + " (one heartbeat interval + " + dur(ConvergenceSlack) + ")"}
		if p.Complete && len(p.Runs) > 0 {
			c.Measured = dur(p.Worst)
			c.Verdict = verdict(p.Worst <= target)
		} else {
			c.Measured, c.Verdict = "incomplete", "MISS"
		}
		out = append(out, c)
	} else if p := r.Push; p != nil {
		target, label := PushTarget(r.Agents)
		c := Check{Scenario: "push", Metric: fmt.Sprintf("env-wide push to %d online agents: PUT returned → every ack persisted (worst of %d)", r.Agents, len(p.Runs)),
			Target: label}
		if p.Complete && len(p.Runs) > 0 {
			c.Measured = dur(p.Worst)
			c.Verdict = verdict(p.Worst <= target)
		} else {
			c.Measured = "incomplete"
			c.Verdict = "MISS"
		}
		out = append(out, c)
	}
	if h := r.Herd; h != nil {
		out = append(out,
			Check{Scenario: "herd", Metric: fmt.Sprintf("%d agents fetching within a %s jitter window: failures", h.Agents, h.Window),
				Measured: fmt.Sprintf("%d", h.Failed), Target: "0", Verdict: verdict(h.Failed == 0)},
			Check{Scenario: "herd", Metric: "fetch latency p99 (p50 / p95)",
				Measured: fmt.Sprintf("%s (%s / %s)", dur(h.Latency.P99), dur(h.Latency.P50), dur(h.Latency.P95)),
				Target:   "p99 ≤ " + dur(HerdP99Target), Verdict: verdict(h.Latency.Count > 0 && h.Latency.P99 <= HerdP99Target)})
		if h.RetryFor > 0 {
			measured := "every agent configured " + dur(h.Retry.AllConfigured) + " after boot"
			if h.Retry.AllConfigured == 0 {
				measured = fmt.Sprintf("%d agents left without config after %s", int64(h.Agents)-h.OK-h.Retry.RetriedOK, dur(h.RetryFor))
			}
			out = append(out, Check{Scenario: "herd", Metric: "agents retrying as the agent does: time until every agent has its config",
				Measured: measured, Target: "0 agents left without config", Verdict: verdict(h.Retry.AllConfigured > 0)})
		}
	}
	if h := r.Heartbeat; h != nil {
		out = append(out, heartbeatCheck(r.Agents, h))
	}
	out = append(out, rolloutChecks(r)...)
	if p := r.Push; p != nil && len(p.Runs) > 0 {
		c := Check{Scenario: "push", Metric: "decrypts per fleet push (credential inject requests × distinct credentials)",
			Target: fmt.Sprintf("= %d distinct credentials", p.Credentials)}
		worst := int64(-1)
		for _, run := range p.Runs {
			worst = max(worst, run.Decrypts)
		}
		if worst < 0 {
			c.Measured = "not observable (credential $SRV.STATS unavailable)"
		} else {
			injects := int64(0)
			for _, run := range p.Runs {
				injects = max(injects, run.Injects)
			}
			c.Measured = fmt.Sprintf("%d (%d inject request(s) × %d)", worst, injects, p.Credentials)
			c.Verdict = verdict(worst == int64(p.Credentials))
			if p.DropPushes > 0 {
				// Repairs inject the collectors of the agents they repair, a batch at a time.
				c.Metric += ", repairs of the lost pushes included"
				c.Target, c.Verdict = "reported (repairs inject per repair batch)", "—"
			}
		}
		out = append(out, c)
	}
	if p := r.Push; p != nil && len(p.Runs) > 0 && r.Signing != "" {
		out = append(out, signingCheck(r, p))
	}
	mem := Check{Scenario: "all", Metric: fmt.Sprintf("services' peak RSS at %d agents (VmHWM)", r.Agents), Target: "reported"}
	if len(r.Memory) == 0 {
		mem.Measured = "not measured (no service pid: use -service-pids)"
	} else {
		var parts []string
		for _, m := range r.Memory {
			name := m.Name
			if m.Role != "" {
				name += " (" + m.Role + ")"
			}
			parts = append(parts, fmt.Sprintf("%s %s (pid %d, now %s)", name, mib(m.HWM), m.PID, mib(m.RSS)))
		}
		mem.Measured = strings.Join(parts, "; ")
	}
	out = append(out, mem)
	return out
}

// signingCheck is the signing cost of a fleet push: with signing on, one signature per distinct
// config (the environment's collectors), however many agents share it; with signing off, none.
func signingCheck(r *scenario.Result, p *scenario.PushResult) Check {
	want := int64(1)
	if r.Signing != "on" {
		want = 0
	}
	c := Check{Scenario: "push", Metric: fmt.Sprintf("signatures per fleet push, %d agents sharing one environment config (signing %s)", r.Agents, r.Signing),
		Target: fmt.Sprintf("= %d (one per distinct config, not per agent)", want)}
	worst := int64(-1)
	for _, run := range p.Runs {
		if run.Signatures < 0 {
			c.Measured = "not observable (no resolver metrics)"
			return c
		}
		worst = max(worst, run.Signatures)
	}
	c.Measured = fmt.Sprintf("%d", worst)
	c.Verdict = verdict(worst == want)
	if r.Signing != "on" {
		c.Target = "= 0 (signing off)"
	}
	return c
}

// Document is the JSON output.
type Document struct {
	Machine string           `json:"machine"`
	Checks  []Check          `json:"checks"`
	Result  *scenario.Result `json:"result"`
}

// MinCapacityInterval is the shortest per-agent heartbeat interval at which the heartbeat scenario
// measures ingest capacity. ack-ingest writes each host's latest heartbeat of a batch, so when each
// agent beats faster than its batch cycle (a few tens of ms), one row stands for several heartbeats
// even while ack-ingest keeps up (and a keep-last stream, as earlier releases had, replaces them before
// they are read): then neither count says what the backend could take from distinct agents. With
// longer intervals a batch rarely holds two heartbeats of one agent unless ack-ingest fell behind, and
// the written count is its capacity.
const MinCapacityInterval = 250 * time.Millisecond

func heartbeatCheck(agents int, h *scenario.HeartbeatResult) Check {
	c := Check{Scenario: "heartbeat", Metric: fmt.Sprintf("heartbeat ingest sustained for %s (offered %s/s)", h.Duration, num(h.OfferedRate)),
		Target: "≥ 10,000/s persisted"}
	rate, how := h.LandedRate, "landed in hosts"
	if h.Processed > 0 {
		// The stricter count: heartbeats ack-ingest actually took and wrote.
		rate, how = min(h.ProcessedRate, h.LandedRate), "written by ack-ingest"
	}
	c.Measured = num(rate) + "/s " + how
	c.Verdict = verdict(rate >= HeartbeatRateTarget)
	switch {
	case h.OfferedRate > 0 && time.Duration(float64(agents)/h.OfferedRate*float64(time.Second)) < MinCapacityInterval:
		c.Verdict = ""
		c.Measured = fmt.Sprintf("%s/s landed, %s/s written (no verdict: %.0f heartbeats/s per agent are coalesced by design; use ≥ %s agents)",
			num(h.LandedRate), num(h.ProcessedRate), h.OfferedRate/float64(agents), num(h.OfferedRate*MinCapacityInterval.Seconds()))
	case rate < HeartbeatRateTarget && h.OfferedRate < HeartbeatRateTarget:
		// Cannot tell: the fleet offered less than the target.
		c.Verdict, c.Measured = "", c.Measured+" (offered less than the target: raise -heartbeat-rate)"
	}
	return c
}

// JSON writes the result and its checks as one JSON document.
func JSON(w io.Writer, r *scenario.Result, machine string) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Document{Machine: machine, Checks: Checks(r), Result: r})
}

// DefaultMachine describes this machine: OS, architecture, CPUs and memory.
func DefaultMachine() string {
	d := fmt.Sprintf("%s/%s, %d cores", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	if m, err := procstat.MemTotal(); err == nil {
		d += fmt.Sprintf(", %.0f GiB", float64(m)/(1<<30))
	}
	return d
}

// Text writes the human report: the targets table, then the details of each scenario.
func Text(w io.Writer, r *scenario.Result, machine string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	if r.ConnectStorm != nil {
		p("ConfigSync fleet benchmark: %s agents, each on its own TLS connection as its own NATS user", num(float64(r.Agents)))
	} else {
		p("ConfigSync fleet benchmark: %s agents over %d NATS connections (%s command subscriptions)", num(float64(r.Agents)), r.Conns, r.Subscriptions)
	}
	p("%s; machine: %s (load average %.1f at start, %.1f at end); persisted state read from %s",
		r.Date.Format("2006-01-02 15:04 UTC"), machine, r.LoadAverage[0], r.LoadAverage[1], r.Observer)
	p("")
	p("| scenario | metric | measured | target | verdict |")
	p("|---|---|---|---|---|")
	for _, c := range Checks(r) {
		v := c.Verdict
		if v == "" {
			v = "—"
		}
		p("| %s | %s | %s | %s | %s |", c.Scenario, c.Metric, c.Measured, c.Target, v)
	}
	p("")
	reg := r.Registration
	analyzed := ""
	if r.Analyzed {
		analyzed = "; then ANALYZE hosts"
	}
	signed := ""
	if r.RegistrationSignatures >= 0 {
		signed = fmt.Sprintf("; the resolver signed %d statements meanwhile (signing %s: the hosts' identities)", r.RegistrationSignatures, orUnknown(r.Signing))
	}
	p("Setup: %d hosts registered through POST /environments/{id}/hosts/batch in %s (%s/s, %d batches, %d in flight, %d retries)%s%s.",
		reg.Hosts, dur(reg.Elapsed), num(reg.PerSecond), reg.Batches, reg.Concurrency, reg.Retries, signed, analyzed)
	if s := connectStorm(r); s != "" {
		p("")
		p("%s", s)
	}
	if h := r.Herd; h != nil {
		p("")
		p("Herd: %d ok / %d failed in %s (%s fetches/s); latency %s; online %s after boot.", h.OK, h.Failed, dur(h.Elapsed), num(h.PerSecond), summary(h.Latency), dur(h.OnlineAfter))
		if len(h.Errors) > 0 {
			p("  fetch errors: %s", kv(h.Errors))
		}
		if h.Retry.Retries > 0 {
			p("  retries (as the agent does): %d, of which %d waited the backend's retry_after_ms; %d agents configured by a retry, %d left without config; every agent configured %s after boot",
				h.Retry.Retries, h.Retry.ServerDelays, h.Retry.RetriedOK, h.Retry.GaveUp, dur(h.Retry.AllConfigured))
			p("  CPU: %s", cpuLine(h.CPU, h.OK+h.Retry.RetriedOK, "configured agent (retries included)"))
		} else {
			p("  CPU: %s", cpuLine(h.CPU, h.OK, "fetch"))
		}
		if h.Injects >= 0 {
			p("  credential inject requests caused by the herd: %d (each decrypts its distinct credentials once; delivery injects one batch of fetches per request, %d credentials in play)", h.Injects, h.Credentials)
		}
		if h.LateInjects > 0 {
			p("  of which %d after the herd ended (fetches served late, mostly to agents that had timed out); the backend was quiet %s after boot", h.LateInjects, dur(h.QuietAfter))
		}
		if h.Signatures >= 0 {
			p("  signatures made by the resolver during the herd: %d (signing %s: one per distinct config not signed yet; identities are signed at registration, or at a host's first fetch ever when that failed; later fetches read stored statements)", h.Signatures, orUnknown(r.Signing))
		}
	}
	if pr := r.Push; pr != nil {
		p("")
		p("Push (%s, %d credentials; %s):", pr.ConfigType, pr.Credentials, pr.Method)
		p("| run | version | PUT | → all acks persisted | acks/s | applied | failed | PUT sent → agent received | PUT returned → ack persisted | injects | decrypts | signatures |")
		p("|---|---|---|---|---|---|---|---|---|---|---|---|")
		for i, run := range pr.Runs {
			p("| %d | %d | %s | %s | %s | %d | %d | %s | %s | %s | %s | %s |", i+1, run.Version, dur(run.PutLatency), dur(run.AllPersisted),
				num(run.AcksPerSecond), run.Applied, run.Failed, summary(run.Received), summary(run.Persisted), opt(run.Injects), opt(run.Decrypts), opt(run.Signatures))
		}
		for i, run := range pr.Runs {
			p("  run %d CPU: %s", i+1, cpuLine(run.CPU, int64(run.Applied+run.Failed), "agent"))
		}
	}
	rolloutText(p, "rollout", r.Rollout)
	rolloutText(p, "rollout-fail", r.RolloutFail)
	if h := r.Heartbeat; h != nil {
		p("")
		p("Heartbeat: %s heartbeats sent in %s (%s/s offered, target rate %s/s); %s landed within %s (%s/s), last one %s after sending stopped.",
			num(float64(h.Sent)), dur(h.Duration), num(h.OfferedRate), num(h.TargetRate), num(float64(h.Landed)), dur(h.Elapsed), num(h.LandedRate), dur(h.Lag))
		if h.Stored > 0 {
			p("  JetStream: %s stored, %s processed by ack-ingest (%s/s).", num(float64(h.Stored)), num(float64(h.Processed)), num(h.ProcessedRate))
		}
		p("  CPU: %s", cpuLine(h.CPU, h.Sent, "heartbeat sent"))
	}
	f := r.Fleet
	p("")
	p("Fleet: %d commands (%d applied, %d stale, %d rejected, %d malformed, %d for other agents), %d acks sent (%d errors), %d heartbeats sent (%d errors), %d slow-consumer events, %d dropped.",
		f.Commands, f.Applied, f.Stale, f.Rejected, f.Malformed, f.Foreign, f.AcksSent, f.AckErrors, f.HeartbeatsSent, f.HeartbeatErrors, f.SlowConsumer, f.DroppedMessages)
	if f.Refused > 0 {
		p("Configs refused by the agents' simulated policy (rollout-fail): %d, each acknowledged failed.", f.Refused)
	}
	if f.PushesDropped > 0 {
		p("Pushes lost on purpose at the agents (-drop-pushes): %d; every one of them was repaired for the push to complete.", f.PushesDropped)
	}
	if r.LoadgenMemory != nil {
		p("loadgen itself: peak RSS %s.", mib(r.LoadgenMemory.HWM))
	}
	for _, n := range r.Notes {
		p("Note: %s", n)
	}
}

// cpuLine renders the CPU of a phase per group, and per operation when ops > 0.
func cpuLine(cpu scenario.CPU, ops int64, op string) string {
	if len(cpu) == 0 {
		return "n/a"
	}
	names := make([]string, 0, len(cpu))
	for n := range cpu {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %s", n, dur(cpu[n]))
		if ops > 0 {
			parts[i] += fmt.Sprintf(" (%s per %s)", dur(cpu[n]/time.Duration(ops)), op)
		}
	}
	return strings.Join(parts, ", ")
}

func summary(s latency.Summary) string {
	if s.Count == 0 {
		return "n/a"
	}
	return fmt.Sprintf("p50 %s / p95 %s / p99 %s / max %s", dur(s.P50), dur(s.P95), dur(s.P99), dur(s.Max))
}

func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

func num(f float64) string {
	n := int64(f + 0.5)
	s := fmt.Sprintf("%d", n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func opt(n int64) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%d", n)
}

func kv(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
