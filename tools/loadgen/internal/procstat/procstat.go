// Package procstat reads what Linux's /proc says about processes: resident memory (current and peak),
// CPU time used, and the machine's load average.
package procstat

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Memory is a process's resident set: RSS now (VmRSS) and its high-water mark (VmHWM), in bytes.
type Memory struct {
	PID  int    `json:"pid"`
	Name string `json:"name"`
	// Role is what the process is to the caller that read it (for example "services" or "nats-server";
	// Read leaves it empty).
	Role string `json:"role,omitempty"`
	RSS  uint64 `json:"rss_bytes"`
	HWM  uint64 `json:"hwm_bytes"`
}

// Read returns the memory of process pid (Linux only).
func Read(pid int) (Memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("procstat: %w", err)
	}
	defer f.Close()
	m, err := parseStatus(f)
	if err != nil {
		return Memory{}, fmt.Errorf("procstat: pid %d: %w", pid, err)
	}
	m.PID = pid
	return m, nil
}

// parseStatus reads Name, VmRSS and VmHWM from the text of /proc/<pid>/status.
func parseStatus(r io.Reader) (Memory, error) {
	var m Memory
	var seenRSS, seenHWM bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Name":
			m.Name = val
		case "VmRSS", "VmHWM":
			num, unit, _ := strings.Cut(val, " ")
			n, err := strconv.ParseUint(num, 10, 64)
			if err != nil || strings.TrimSpace(unit) != "kB" {
				return m, fmt.Errorf("unexpected %s value %q", key, val)
			}
			if key == "VmRSS" {
				m.RSS, seenRSS = n*1024, true
			} else {
				m.HWM, seenHWM = n*1024, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if !seenRSS || !seenHWM {
		return m, fmt.Errorf("no VmRSS/VmHWM (a kernel thread or an exited process)")
	}
	return m, nil
}

// LoadAverage returns the 1-minute load average from /proc/loadavg (a benchmark on a shared machine
// should say how busy the machine was).
func LoadAverage() (float64, error) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	return parseLoadAvg(string(raw))
}

func parseLoadAvg(s string) (float64, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return 0, fmt.Errorf("procstat: empty loadavg")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 0, fmt.Errorf("procstat: loadavg %q: %w", fields[0], err)
	}
	return v, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux architecture Go
// supports (the kernel fixes it for the ABI, whatever CONFIG_HZ is).
const clockTicks = 100

// CPU returns the CPU time (user + system) process pid has used so far.
func CPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	return parseStatCPU(string(raw))
}

// parseStatCPU reads utime and stime (fields 14 and 15) from the text of /proc/<pid>/stat. The command
// name (field 2) is parenthesised and may hold spaces, so fields are counted after its last ')'.
func parseStatCPU(s string) (time.Duration, error) {
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("procstat: malformed stat")
	}
	fields := strings.Fields(s[end+1:])
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("procstat: short stat")
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("procstat: malformed stat times")
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// PIDsWithCmdline returns the processes whose command line contains substr, such as the PostgreSQL
// backends serving one database (their process title names it).
func PIDsWithCmdline(substr string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if strings.Contains(strings.ReplaceAll(string(raw), "\x00", " "), substr) {
			out = append(out, pid)
		}
	}
	return out
}

// TotalCPU sums the CPU time of pids, skipping processes that have gone.
func TotalCPU(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		if d, err := CPU(pid); err == nil {
			sum += d
		}
	}
	return sum
}

// MemTotal returns the machine's memory (MemTotal of /proc/meminfo) in bytes.
func MemTotal() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			num, _, _ := strings.Cut(strings.TrimSpace(v), " ")
			kb, err := strconv.ParseUint(num, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("procstat: MemTotal %q: %w", v, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("procstat: no MemTotal in /proc/meminfo")
}
