// Package inventory describes the host (inventory task) and its processes (processes task) from /proc.
package inventory

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Host is the inventory report.
type Host struct {
	Time          time.Time         `json:"time"`
	Hostname      string            `json:"hostname"`
	OS            string            `json:"os"`
	Arch          string            `json:"arch"`
	Kernel        string            `json:"kernel,omitempty"`
	CPUs          int               `json:"cpus"`
	UptimeSeconds float64           `json:"uptime_seconds,omitempty"`
	AgentVersion  string            `json:"agent_version"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// Collect builds the host inventory from procRoot.
func Collect(procRoot, agentVersion string, labels map[string]string) Host {
	h := Host{Time: time.Now().UTC(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
		AgentVersion: agentVersion, Labels: labels}
	h.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel/osrelease")); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(filepath.Join(procRoot, "uptime")); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			h.UptimeSeconds, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	return h
}

// Process is one entry of the processes report.
type Process struct {
	PID      int    `json:"pid"`
	Name     string `json:"name"`
	State    string `json:"state"`
	RSSBytes int64  `json:"rss_bytes"`
}

// Processes is the processes report: the count and the largest processes by resident memory.
type Processes struct {
	Time  time.Time `json:"time"`
	Count int       `json:"count"`
	Top   []Process `json:"top"`
}

// CollectProcesses lists processes under procRoot and keeps the top n by RSS.
func CollectProcesses(procRoot string, n int) (Processes, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return Processes{}, err
	}
	page := int64(os.Getpagesize())
	var all []Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ... ; comm may contain spaces and parentheses, so cut at the last ')'.
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(s[close+1:])
		if len(f) < 22 {
			continue
		}
		rss, _ := strconv.ParseInt(f[21], 10, 64)
		all = append(all, Process{PID: pid, Name: s[open+1 : close], State: f[0], RSSBytes: rss * page})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].RSSBytes > all[j].RSSBytes })
	out := Processes{Time: time.Now().UTC(), Count: len(all)}
	out.Top = all[:min(n, len(all))]
	return out, nil
}
