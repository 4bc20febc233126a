// Package localstack runs a private ConfigSync stack for a benchmark: tools/devstack built once into a
// temporary directory and started as a child process on free ports, with a temporary data directory,
// no demo agent and warn-level logs, on a throwaway PostgreSQL database created (and dropped) here
// when a server on 127.0.0.1:5432 is reachable. It reads back what devstack writes to
// <data>/devstack.env, so loadgen needs nothing running beforehand.
package localstack

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DevstackPackage is the import path built when no binary is given.
const DevstackPackage = "github.com/configsync/configsync/tools/devstack"

// Options configure Start.
type Options struct {
	// Binary is a prebuilt devstack; empty builds DevstackPackage with the go command.
	Binary string
	// AdminDatabaseURL is a PostgreSQL maintenance database used to create and drop a throwaway
	// database. Ignored when DATABASE_URL is set in the environment (that database is used as is).
	// Unreachable: devstack picks its own database (then loadgen observes through the API).
	AdminDatabaseURL string
	// LogLevel of the services (devstack -log-level).
	LogLevel string
	// KeepData leaves the data directory (and the database) behind for inspection.
	KeepData bool
	// NoSigning runs the resolver without a signing key (configs go out unsigned), to measure what
	// signing costs; by default devstack signs.
	NoSigning bool
	// Pprof, when set, is the address devstack serves net/http/pprof on (devstack -pprof), to profile
	// the services during a run.
	Pprof string
	// NATSGCPercent, when not 0, is the nats-server process's GC target percent (devstack -nats-gogc;
	// negative: the runtime's); 0 keeps devstack's default.
	NATSGCPercent int
	// Progress receives one line per step.
	Progress io.Writer
}

// Stack is a running private stack.
type Stack struct {
	Dir         string
	APIURL      string
	Token       string
	NATSURL     string
	NATSCA      string // the CA file devstack's TLS-only NATS is verified with
	CredsFile   string
	DatabaseURL string // empty when devstack chose the database itself
	MetricsURL  string // devstack's Prometheus endpoint (every service's metrics, the resolver's included)
	PID         int
	// NATSPID is devstack's nats-server process (0: devstack runs the server in its own process).
	NATSPID int

	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	logPath  string
	tmpDir   string
	dropDB   func(context.Context) error
	keepData bool
}

// Start builds (if needed) and starts devstack and waits until its API is up and devstack.env exists.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	tmp, err := os.MkdirTemp("", "configsync-loadgen-")
	if err != nil {
		return nil, err
	}
	s := &Stack{tmpDir: tmp, Dir: filepath.Join(tmp, "data"), logPath: filepath.Join(tmp, "devstack.log"), keepData: opts.KeepData}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}

	bin := opts.Binary
	if bin == "" {
		bin = filepath.Join(tmp, "devstack")
		fmt.Fprintf(progress, "building %s ...\n", DevstackPackage)
		if err := build(ctx, bin); err != nil {
			return nil, err
		}
	}

	env := os.Environ()
	if os.Getenv("DATABASE_URL") != "" {
		s.DatabaseURL = os.Getenv("DATABASE_URL")
	} else if opts.AdminDatabaseURL != "" {
		url, drop, err := createDatabase(ctx, opts.AdminDatabaseURL)
		if err != nil {
			fmt.Fprintf(progress, "no throwaway database (%v); devstack picks its own, loadgen observes through the API\n", err)
		} else {
			s.DatabaseURL, s.dropDB = url, drop
			env = append(env, "DATABASE_URL="+url)
		}
	}

	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	natsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// Its own metrics port, so it never collides with a `make run` on devstack's default.
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logLevel := opts.LogLevel
	if logLevel == "" {
		logLevel = "warn"
	}
	// devstack lets an operator's LOG_LEVEL win over -log-level; set both to the same.
	env = append(env, "LOG_LEVEL="+logLevel)
	if opts.NoSigning {
		// devstack lets an operator's setting win, an empty one too: the resolver then signs nothing.
		env = append(env, "RESOLVER_SIGNING_KEY_FILE=")
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	args := []string{"-data", s.Dir, "-http", httpAddr, "-nats", natsAddr, "-metrics", metricsAddr, "-no-agent", "-log-level", logLevel}
	if opts.Pprof != "" {
		args = append(args, "-pprof", opts.Pprof)
	}
	if opts.NATSGCPercent != 0 {
		args = append(args, "-nats-gogc", strconv.Itoa(max(opts.NATSGCPercent, 0)))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C at the terminal reaches loadgen, which then stops devstack in order.
	// Should loadgen die without stopping it, the kernel sends devstack SIGTERM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start devstack: %w", err)
	}
	s.cmd, s.PID, s.exited = cmd, cmd.Process.Pid, make(chan struct{})
	s.MetricsURL = "http://" + metricsAddr + "/metrics"
	go func() { s.waitErr = cmd.Wait(); close(s.exited) }()
	fmt.Fprintf(progress, "devstack pid %d: api http://%s, nats nats://%s, metrics http://%s/metrics, data %s, log %s\n", s.PID, httpAddr, natsAddr, metricsAddr, s.Dir, s.logPath)

	if err := s.waitForEnv(ctx, 3*time.Minute); err != nil {
		return nil, err
	}
	s.NATSPID = readPIDFile(filepath.Join(s.Dir, NATSPIDFile))
	// The fleet simulator needs the unrestricted bench user: the services' own user may not act as agents.
	s.CredsFile = filepath.Join(s.Dir, "bench.creds")
	if _, err := os.Stat(s.CredsFile); err != nil {
		return nil, fmt.Errorf("devstack wrote no bench.creds: %w", err)
	}
	return s, nil
}

// PIDs are the processes of the stack whose memory and CPU loadgen reports as the services': devstack
// (the five services) and its nats-server process.
func (s *Stack) PIDs() []int {
	if s.NATSPID > 0 {
		return []int{s.PID, s.NATSPID}
	}
	return []int{s.PID}
}

// NATSPIDFile is where devstack writes the pid of its nats-server process, under its data directory.
const NATSPIDFile = "nats-server.pid"

// readPIDFile is the pid in path, 0 when there is none.
func readPIDFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

func build(ctx context.Context, out string) error {
	gowork, err := exec.CommandContext(ctx, "go", "env", "GOWORK").Output()
	if err != nil {
		return fmt.Errorf("go env GOWORK: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, DevstackPackage)
	if w := strings.TrimSpace(string(gowork)); w != "" && w != "off" {
		cmd.Dir = filepath.Dir(w)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", DevstackPackage, err, stderr.String())
	}
	return nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitForEnv waits for devstack.env (written once the services are up and seeded).
func (s *Stack) waitForEnv(ctx context.Context, limit time.Duration) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	path := filepath.Join(s.Dir, "devstack.env")
	for {
		if vals, err := ReadEnvFile(path); err == nil && vals["CONFIGSYNC_TOKEN"] != "" && vals["CONFIGSYNC_API_URL"] != "" {
			s.APIURL, s.Token, s.NATSURL, s.NATSCA = vals["CONFIGSYNC_API_URL"], vals["CONFIGSYNC_TOKEN"], vals["CONFIGSYNC_NATS_URL"], vals["CONFIGSYNC_NATS_CA"]
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.exited:
			return fmt.Errorf("devstack exited before it was ready (%v); its log:\n%s", s.waitErr, s.LogTail(40))
		case <-deadline.C:
			return fmt.Errorf("devstack not ready after %s; its log:\n%s", limit, s.LogTail(40))
		case <-tick.C:
		}
	}
}

// ReadEnvFile parses a devstack.env file ("export KEY=value" lines).
func ReadEnvFile(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if ok {
			vals[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return vals, sc.Err()
}

// LogTail returns the last n lines of devstack's output.
func (s *Stack) LogTail(n int) string {
	raw, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogPath is where devstack's output goes.
func (s *Stack) LogPath() string { return s.logPath }

// Alive reports whether devstack is still running.
func (s *Stack) Alive() bool {
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Stop interrupts devstack (SIGINT, then SIGKILL after 30 s), drops the throwaway database and
// removes the temporary directory (unless KeepData).
func (s *Stack) Stop() error {
	var errs []error
	if s.cmd != nil && s.Alive() {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
			errs = append(errs, errors.New("devstack did not stop within 30s; killed"))
		}
	}
	if s.dropDB != nil && !s.keepData {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := s.dropDB(ctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if s.tmpDir != "" && !s.keepData {
		if err := os.RemoveAll(s.tmpDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
