package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/natsauth/tlsgen"
)

// NATSPIDFile is the file under the data directory that holds the pid of devstack's nats-server process,
// for tools that account its memory and CPU (tools/loadgen).
const NATSPIDFile = "nats-server.pid"

// natsReadyPrefix starts what the nats-server process prints on stdout once it accepts connections:
// "nats ready gogc=<its GC target percent>".
const natsReadyPrefix = "nats ready gogc="

// natsProcess is the embedded nats-server running in a child process of devstack (devstack -nats-only).
//
// It runs apart from the services because it is apart in a deployment, and because one Go heap for
// both couples their garbage collection: every connection costs the server about 25 KB of long-lived,
// pointer-rich state (client, TLS and permission structures: about 370 MB at 15,000 agent connections),
// and in one process each GC cycle that the services' allocations start must mark all of it. At 15,000
// TLS connections a cycle in the boot herd then took 1-1.6 s of mostly mark assists, charged to the
// goroutines reading the connections, and the fetches queued behind it (p99 0.9-1.2 s, once 4,435
// refused with the delivery queue full). Apart, the services' cycles mark the services' own heap.
type natsProcess struct {
	// gcPercent is the GC target percent the child reports it runs with.
	gcPercent int
	cmd       *exec.Cmd
	stdin     io.WriteCloser // closed to stop the server; EOF also stops it when devstack dies
	done      chan error
	pid       int
}

// startNATSProcess starts this binary with -nats-only for the server on addr and waits until it accepts
// connections. gcPercent is the child's GC target percent (0: the runtime's, from GOGC or 100). The
// server's own log (off by default) and its runtime's output go to devstack's stderr.
func startNATSProcess(addr, dataDir string, gcPercent int, log *zap.Logger) (*natsProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("nats-server process: %w", err)
	}
	cmd := exec.Command(exe, "-nats-only", "-data", dataDir, "-nats", addr, "-nats-gogc", strconv.Itoa(gcPercent))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nats-server process: %w", err)
	}
	p := &natsProcess{cmd: cmd, stdin: stdin, done: make(chan error, 1), pid: cmd.Process.Pid}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		pct, err := 0, errors.New("no ready line")
		if sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), natsReadyPrefix); ok {
				pct, err = strconv.Atoi(v)
			}
		}
		if err == nil {
			p.gcPercent = pct
			ready <- nil
		} else {
			ready <- fmt.Errorf("nats-server process did not report ready (%q)", sc.Text())
		}
		_, _ = io.Copy(io.Discard, stdout) // keep the pipe drained until the child exits
		p.done <- cmd.Wait()
	}()
	select {
	case err = <-ready:
	case <-time.After(30 * time.Second):
		err = errors.New("nats-server process not ready after 30s")
	}
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dataDir, NATSPIDFile), []byte(strconv.Itoa(p.pid)+"\n"), 0o644); err != nil {
		p.stop(5 * time.Second)
		return nil, err
	}
	log.Info("nats-server process started", zap.Int("pid", p.pid), zap.Int("gogc", p.gcPercent))
	return p, nil
}

// stop asks the server to shut down (closing its stdin) and kills it if it has not exited after wait.
// It returns how the process ended (nil: it exited by itself with status 0).
func (p *natsProcess) stop(wait time.Duration) error {
	_ = p.stdin.Close()
	select {
	case err := <-p.done:
		return err
	case <-time.After(wait):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("nats-server process did not stop; killed")
	}
}

// natsFiles loads the NATS authority and the server's TLS files of dataDir for a server on addr, making
// them on the first start (NATS serves TLS only): devstack does before it starts its server process,
// which then reads the same files.
func natsFiles(dataDir, addr string, log *zap.Logger) (*natsauth.Authority, tlsgen.Files, error) {
	auth, err := loadOrCreateAuthority(filepath.Join(dataDir, "nats-authority.json"), log)
	if err != nil {
		return nil, tlsgen.Files{}, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, tlsgen.Files{}, fmt.Errorf("nats address %q: %w", addr, err)
	}
	tlsFiles, err := tlsgen.Ensure(filepath.Join(dataDir, "tls"), host, "localhost", "127.0.0.1")
	if err != nil {
		return nil, tlsgen.Files{}, err
	}
	return auth, tlsFiles, nil
}

// runNATSOnly is devstack -nats-only: the embedded nats-server of the data directory devstack prepared
// (its NATS authority and TLS files), until stdin closes (devstack stopped or died) or SIGTERM.
func runNATSOnly(o options) error {
	dataDir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return err
	}
	auth, tlsFiles, err := natsFiles(dataDir, o.natsAddr, zap.NewNop())
	if err != nil {
		return err
	}
	if o.natsGCPct > 0 {
		debug.SetGCPercent(o.natsGCPct)
	}
	ns, err := startNATS(o.natsAddr, dataDir, auth, tlsFiles)
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	// SetGCPercent returns the setting it replaces: what this process runs with.
	pct := debug.SetGCPercent(100)
	debug.SetGCPercent(pct)
	fmt.Println(natsReadyPrefix + strconv.Itoa(pct))
	stdinClosed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
	// Ctrl-C reaches the whole process group: devstack stops the services first and then closes stdin,
	// so the services never lose their server while they shut down.
	signal.Ignore(os.Interrupt)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	defer signal.Stop(sig)
	select {
	case <-stdinClosed:
	case <-sig:
	}
	return nil
}
