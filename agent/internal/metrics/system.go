package metrics

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// SystemCollectors returns the always-on collectors reading procRoot (normally /proc) and the file
// systems mounted at diskPaths.
func SystemCollectors(procRoot string, diskPaths []string) []Collector {
	return []Collector{
		&cpuCollector{path: filepath.Join(procRoot, "stat")},
		&memCollector{path: filepath.Join(procRoot, "meminfo")},
		&loadCollector{path: filepath.Join(procRoot, "loadavg")},
		&diskCollector{paths: diskPaths},
	}
}

// cpuCollector reports CPU busy percentage since its previous run (the first run reports since boot).
type cpuCollector struct {
	path string
	mu   sync.Mutex
	prev [2]uint64 // busy, total
}

func (c *cpuCollector) Name() string { return "system/cpu" }

func (c *cpuCollector) Collect(context.Context) ([]Sample, error) {
	f, err := os.Open(c.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return nil, fmt.Errorf("cpu: empty %s", c.path)
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 5 || fields[0] != "cpu" {
		return nil, fmt.Errorf("cpu: unexpected %s", c.path)
	}
	var total, idle uint64
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	busy := total - idle
	c.mu.Lock()
	db, dt := busy-c.prev[0], total-c.prev[1]
	c.prev = [2]uint64{busy, total}
	c.mu.Unlock()
	pct := 0.0
	if dt > 0 {
		pct = 100 * float64(db) / float64(dt)
	}
	return []Sample{{Name: "cpu.busy_percent", Value: pct}}, nil
}

type memCollector struct{ path string }

func (c *memCollector) Name() string { return "system/memory" }

func (c *memCollector) Collect(context.Context) ([]Sample, error) {
	b, err := os.ReadFile(c.path)
	if err != nil {
		return nil, err
	}
	vals := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			v *= 1024
		}
		vals[k] = v
	}
	total, ok := vals["MemTotal"]
	if !ok || total == 0 {
		return nil, fmt.Errorf("memory: no MemTotal in %s", c.path)
	}
	avail := vals["MemAvailable"]
	return []Sample{
		{Name: "memory.total_bytes", Value: total},
		{Name: "memory.available_bytes", Value: avail},
		{Name: "memory.used_percent", Value: 100 * (total - avail) / total},
		{Name: "memory.swap_free_bytes", Value: vals["SwapFree"]},
	}, nil
}

type loadCollector struct{ path string }

func (c *loadCollector) Name() string { return "system/load" }

func (c *loadCollector) Collect(context.Context) ([]Sample, error) {
	b, err := os.ReadFile(c.path)
	if err != nil {
		return nil, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return nil, fmt.Errorf("load: unexpected %s", c.path)
	}
	out := make([]Sample, 0, 3)
	for i, name := range []string{"load.1m", "load.5m", "load.15m"} {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		out = append(out, Sample{Name: name, Value: v})
	}
	return out, nil
}

type diskCollector struct{ paths []string }

func (c *diskCollector) Name() string { return "system/disk" }

func (c *diskCollector) Collect(context.Context) ([]Sample, error) {
	var out []Sample
	for _, p := range c.paths {
		total, free, avail, err := statfs(p)
		if err != nil {
			return out, fmt.Errorf("disk %s: %w", p, err)
		}
		l := map[string]string{"path": p}
		used := 0.0
		if total > 0 {
			used = 100 * float64(total-free) / float64(total)
		}
		out = append(out,
			Sample{Name: "disk.total_bytes", Value: float64(total), Labels: l},
			Sample{Name: "disk.available_bytes", Value: float64(avail), Labels: l},
			Sample{Name: "disk.used_percent", Value: used, Labels: l},
		)
	}
	return out, nil
}
