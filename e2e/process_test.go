package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long a process gets after SIGTERM before it is killed.
const stopGrace = 10 * time.Second

// process is one child process (a service replica or an agent). Its stdout and stderr go to one log
// file, kept across restarts, so a failing test can show what it said.
type process struct {
	name    string
	bin     string
	args    []string
	env     []string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	expected bool // the test stopped or killed it on purpose
	starts   int
}

// newProcess prepares a process; start runs it. Every run is stopped (SIGTERM, then SIGKILL) at
// cleanup.
func newProcess(t testing.TB, logDir, name, bin string, args, env []string) *process {
	t.Helper()
	p := &process{name: name, bin: bin, args: args, env: env, logPath: filepath.Join(logDir, name+".log")}
	t.Cleanup(func() { p.stop(t) })
	return p
}

// start runs the process (again, after stop or kill).
func (p *process) start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		t.Fatalf("e2e: %s is already running", p.name)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("e2e: log file of %s: %v", p.name, err)
	}
	p.starts++
	fmt.Fprintf(logFile, "=== e2e: start #%d of %s at %s\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := startCmd(cmd); err != nil {
		logFile.Close()
		t.Fatalf("e2e: start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.waitErr, p.expected = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
}

// stop sends SIGTERM and waits for the exit, killing the process after stopGrace. It reports whether
// the process exited on its own after SIGTERM.
func (p *process) stop(t testing.TB) bool {
	t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.expected = true
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return true
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return true
	case <-time.After(stopGrace):
		t.Logf("e2e: %s did not stop within %s of SIGTERM; killing it", p.name, stopGrace)
		_ = cmd.Process.Kill()
		<-done
		return false
	}
}

// kill sends SIGKILL (a crash) and waits until the process is gone.
func (p *process) kill(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.expected = true
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// died returns a description when the process exited although the test did not stop it.
func (p *process) died() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.expected || !isClosed(p.done) {
		return "", false
	}
	return fmt.Sprintf("%s exited unexpectedly (%v)", p.name, p.waitErr), true
}

// running reports whether the process is running.
func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isClosed(p.done)
}

// logText is everything the process wrote so far (all runs).
func (p *process) logText() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	return string(b)
}

// logTail is the last n lines of the log.
func (p *process) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.logText(), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d earlier lines in %s)", len(lines)-n, p.logPath)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// logLines returns the JSON log lines of the process whose "msg" is msg, decoded loosely. Lines that
// are not JSON (the start markers, panics) are skipped.
func (p *process) logLines(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader([]byte(p.logText())))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' || !bytes.Contains(line, []byte(msg)) {
			continue
		}
		m, ok := decodeLogLine(line)
		if ok && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func isClosed(ch chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// baseEnv is the little of the test's own environment a child needs; everything else is set
// explicitly so the machine's DATABASE_URL, NATS_URL... never leak into a run.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "GORACE"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
