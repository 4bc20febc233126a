package procstat

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStatus(t *testing.T) {
	status := "Name:\tdevstack\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t 2000000 kB\nVmHWM:\t  412340 kB\nVmRSS:\t  398000 kB\nThreads:\t12\n"
	m, err := parseStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "devstack" || m.HWM != 412340*1024 || m.RSS != 398000*1024 {
		t.Fatalf("parsed %+v", m)
	}
	if _, err := parseStatus(strings.NewReader("Name:\tkthreadd\nState:\tS\n")); err == nil {
		t.Fatal("a status without memory lines was accepted")
	}
	if _, err := parseStatus(strings.NewReader("VmHWM:\t12 MB\nVmRSS:\t1 kB\n")); err == nil {
		t.Fatal("an unknown unit was accepted")
	}
}

func TestReadSelf(t *testing.T) {
	m, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.PID != os.Getpid() || m.RSS == 0 || m.HWM < m.RSS {
		t.Fatalf("own memory = %+v", m)
	}
}

func TestLoadAverage(t *testing.T) {
	if v, err := parseLoadAvg("6.57 6.75 8.31 3/812 18645\n"); err != nil || v != 6.57 {
		t.Fatalf("parseLoadAvg = %v, %v", v, err)
	}
	if _, err := parseLoadAvg(""); err == nil {
		t.Fatal("empty loadavg accepted")
	}
	if _, err := LoadAverage(); err != nil {
		t.Fatal(err)
	}
	if m, err := MemTotal(); err != nil || m == 0 {
		t.Fatalf("MemTotal = %d, %v", m, err)
	}
}

func TestParseStatCPU(t *testing.T) {
	// utime 250 ticks, stime 50 ticks; the command name holds spaces and a parenthesis.
	stat := "4242 (postgres: x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10 18446744073709551615"
	d, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if d != 3*time.Second {
		t.Fatalf("cpu = %v, want 3s", d)
	}
	if _, err := parseStatCPU("4242 (x) S 1"); err == nil {
		t.Fatal("short stat accepted")
	}
}

func TestCPUOfSelfAndCmdlineMatch(t *testing.T) {
	// Burn a little CPU so the counter moves past zero ticks.
	deadline := time.Now().Add(30 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	if d, err := CPU(os.Getpid()); err != nil || d <= 0 {
		t.Fatalf("own cpu = %v, %v", d, err)
	}
	self := false
	for _, pid := range PIDsWithCmdline(os.Args[0]) {
		self = self || pid == os.Getpid()
	}
	if !self {
		t.Fatal("PIDsWithCmdline did not find this test process by its own command line")
	}
	if got := TotalCPU([]int{os.Getpid(), -1}); got <= 0 {
		t.Fatalf("TotalCPU = %v", got)
	}
}
