package inventory

import (
	"os"
	"testing"
)

func TestCollect(t *testing.T) {
	h := Collect("/proc", "1.2.3", map[string]string{"env": "x"})
	if h.Hostname == "" || h.CPUs == 0 || h.AgentVersion != "1.2.3" || h.Kernel == "" {
		t.Fatalf("host %+v", h)
	}
	p, err := CollectProcesses("/proc", 5)
	if err != nil {
		t.Fatal(err)
	}
	if p.Count == 0 || len(p.Top) == 0 || len(p.Top) > 5 {
		t.Fatalf("processes %+v", p)
	}
	found := false
	all, _ := CollectProcesses("/proc", 1<<20)
	for _, pr := range all.Top {
		if pr.PID == os.Getpid() && pr.RSSBytes > 0 {
			found = true
		}
	}
	if !found {
		t.Fatal("own process not listed")
	}
}
