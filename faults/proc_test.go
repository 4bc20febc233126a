package faults_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/testinfra"
)

// modulePrefix is the import path prefix of every ConfigSync module.
const modulePrefix = "github.com/configsync/configsync/"

// binPackages are the binaries the process-based scenarios run (built without -race: they are the
// system under test, not the test).
var binPackages = map[string]string{
	"config-api": modulePrefix + "services/config-api/cmd/config-api",
	"delivery":   modulePrefix + "services/delivery/cmd/delivery",
	"agent":      modulePrefix + "agent/cmd/agent",
}

var (
	binDir    string // set by TestMain
	buildOnce sync.Once
	buildDone = make(chan struct{})
	buildErr  error
	buildTook time.Duration
)

// buildBinaries runs `go build` for binPackages into binDir; TestMain starts it in the background so
// it overlaps with the in-process scenarios.
func buildBinaries() {
	buildOnce.Do(func() {
		defer close(buildDone)
		start := time.Now()
		buildErr = build(binDir)
		buildTook = time.Since(start)
	})
}

func build(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is not on PATH: %w", err)
	}
	out, err := exec.Command(goBin, "env", "GOWORK").Output()
	if err != nil {
		return fmt.Errorf("go env GOWORK: %w", err)
	}
	work := strings.TrimSpace(string(out))
	if work == "" || work == "off" {
		return fmt.Errorf("the fault suite builds the services from the workspace, but no go.work is in use (GOWORK=%q)", work)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, pkg := range binPackages {
		args = append(args, pkg)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = filepath.Dir(work)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, buf.String())
	}
	return nil
}

// binary waits for the build and returns the path of the named binary.
func binary(t testing.TB, name string) string {
	t.Helper()
	go buildBinaries()
	<-buildDone
	if buildErr != nil {
		t.Fatalf("building the binaries failed: %v", buildErr)
	}
	t.Logf("binaries built in %s (once per test process, in the background)", buildTook.Round(time.Millisecond))
	return filepath.Join(binDir, name)
}

// process is one child process run several times (start, kill -9, start again). Its combined output
// of every run is kept in memory.
type process struct {
	name string
	bin  string
	args []string
	env  []string
	out  *lockedBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	runs int
}

func newProcess(t testing.TB, name, bin string, args, env []string) *process {
	t.Helper()
	p := &process{name: name, bin: bin, args: args, env: append(baseEnv(), env...), out: &lockedBuffer{}}
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("output of %s (all runs):\n%s", p.name, tail(p.out.Bytes(), 80))
		}
	})
	return p
}

// start runs the process (again).
func (p *process) start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil && !closed(p.done) {
		t.Fatalf("%s is already running", p.name)
	}
	p.runs++
	fmt.Fprintf(p.out, "=== faults: run %d of %s\n", p.runs, p.name)
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done
}

// kill sends SIGKILL, as a crash would, and waits until the process is gone.
func (p *process) kill(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || closed(done) {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// exited reports whether the current run ended.
func (p *process) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done != nil && closed(p.done)
}

// runOutput is the output of the current run only.
func (p *process) runOutput() []byte {
	all := p.out.Bytes()
	marker := []byte(fmt.Sprintf("=== faults: run %d of %s\n", p.runs, p.name))
	if i := bytes.LastIndex(all, marker); i >= 0 {
		return all[i+len(marker):]
	}
	return all
}

// logged counts the JSON log lines of the current run whose msg is msg.
func (p *process) logged(msg string) int { return len(jsonLines(p.runOutput(), msg)) }

// waitLogged waits until the current run logged msg.
func (p *process) waitLogged(t testing.TB, timeout time.Duration, msg string) {
	t.Helper()
	testinfra.EventuallyNoError(t, timeout, func() error {
		if p.exited() {
			t.Fatalf("%s exited:\n%s", p.name, tail(p.runOutput(), 40))
		}
		if p.logged(msg) > 0 {
			return nil
		}
		return errors.New("not yet")
	}, fmt.Sprintf("%s to log %q", p.name, msg))
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func tail(b []byte, lines int) string {
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// baseEnv is the little of the test's environment a child needs; everything else is explicit, so the
// machine's DATABASE_URL, NATS_URL... never leak into a run.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
