package report

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/configsync/configsync/tools/loadgen/internal/latency"
	"github.com/configsync/configsync/tools/loadgen/internal/scenario"
)

// Comparison is the JSON output of -compare-signing: the same scenarios with signing on and off.
type Comparison struct {
	Machine string   `json:"machine"`
	On      Document `json:"signing_on"`
	Off     Document `json:"signing_off"`
}

// CompareJSON writes both runs and their checks as one JSON document.
func CompareJSON(w io.Writer, on, off *scenario.Result, machine string) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Comparison{Machine: machine,
		On:  Document{Machine: machine, Checks: Checks(on), Result: on},
		Off: Document{Machine: machine, Checks: Checks(off), Result: off}})
}

// CompareText writes the signing-on vs signing-off table: what signing costs the push and the herd.
func CompareText(w io.Writer, on, off *scenario.Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("Signing on vs off, %s agents, back to back on one machine (load average %.1f → %.1f with signing on, %.1f → %.1f off):",
		num(float64(on.Agents)), on.LoadAverage[0], on.LoadAverage[1], off.LoadAverage[0], off.LoadAverage[1])
	p("")
	p("| metric | signing on | signing off |")
	p("|---|---|---|")
	row := func(metric, a, b string) { p("| %s | %s | %s |", metric, a, b) }
	if on.Push != nil && off.Push != nil {
		row("push: PUT returned → every ack persisted (worst run)", dur(on.Push.Worst), dur(off.Push.Worst))
		row("push: PUT returned → every ack persisted (each run)", pushTimes(on.Push), pushTimes(off.Push))
		row("push: signatures per push (each run)", pushSignatures(on.Push), pushSignatures(off.Push))
		row("push: services' CPU per push (first run)", pushCPU(on.Push), pushCPU(off.Push))
	}
	if on.Herd != nil && off.Herd != nil {
		row("herd: fetches ok / failed", fmt.Sprintf("%d / %d", on.Herd.OK, on.Herd.Failed), fmt.Sprintf("%d / %d", off.Herd.OK, off.Herd.Failed))
		row("herd: fetch latency", summaryShort(on.Herd.Latency), summaryShort(off.Herd.Latency))
		row("herd: signatures (identities of first fetches + distinct configs)", opt(on.Herd.Signatures), opt(off.Herd.Signatures))
		row("herd: services' CPU", cpuOf(on.Herd.CPU, scenario.CPUServices), cpuOf(off.Herd.CPU, scenario.CPUServices))
	}
}

func pushTimes(p *scenario.PushResult) string {
	s := ""
	for i, r := range p.Runs {
		if i > 0 {
			s += ", "
		}
		s += dur(r.AllPersisted)
	}
	return s
}

func pushSignatures(p *scenario.PushResult) string {
	s := ""
	for i, r := range p.Runs {
		if i > 0 {
			s += ", "
		}
		s += opt(r.Signatures)
	}
	return s
}

func pushCPU(p *scenario.PushResult) string {
	if len(p.Runs) == 0 {
		return "n/a"
	}
	return cpuOf(p.Runs[0].CPU, scenario.CPUServices)
}

func cpuOf(cpu scenario.CPU, group string) string {
	d, ok := cpu[group]
	if !ok {
		return "n/a"
	}
	return dur(d)
}

func summaryShort(s latency.Summary) string {
	if s.Count == 0 {
		return "n/a"
	}
	return fmt.Sprintf("p50 %s / p99 %s", dur(s.P50), dur(s.P99))
}
