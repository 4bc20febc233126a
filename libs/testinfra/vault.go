package testinfra

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Environment variables that point Vault at a prebuilt tools/vaultdev binary or at its sources.
const (
	// EnvVaultdevBin names a vaultdev binary to run instead of building one.
	EnvVaultdevBin = "CONFIGSYNC_VAULTDEV_BIN"
	// EnvVaultdevDir names the tools/vaultdev source directory (found from this file's location or the
	// workspace otherwise).
	EnvVaultdevDir = "CONFIGSYNC_VAULTDEV_DIR"
)

// vaultReadyTimeout bounds how long a started vaultdev may take to print its ready line.
const vaultReadyTimeout = 2 * time.Minute

// vaultStopTimeout bounds a graceful stop before the process is killed.
const vaultStopTimeout = 10 * time.Second

// VaultInfo is a running dev Vault (tools/vaultdev): Transit mounted at transit/ with the key
// "configsync", and AppRole enabled with the role "configsync" whose tokens may use that key only.
// Token is the root token (it can rotate keys, seal Vault, ...). Stop or Kill ends it mid-test.
type VaultInfo struct {
	Addr     string
	Token    string
	RoleID   string
	SecretID string

	proc *vaultProcess
}

// Vault builds tools/vaultdev (once per test process, `GOWORK=off go build` into a temporary directory;
// the first build of its large module graph takes minutes, later ones hit the build cache), starts it
// with -approle plus args (more vaultdev flags, e.g. "-token-ttl", "2s") and returns its address and
// credentials. It is stopped at cleanup. The test fails, never skips, when Vault cannot be built or
// started.
func Vault(t testing.TB, args ...string) VaultInfo {
	t.Helper()
	bin, err := vaultdevBinary()
	if err != nil {
		t.Fatalf("testinfra: vault: %v", err)
	}
	info, err := startVault(bin, append([]string{"-approle"}, args...))
	if err != nil {
		t.Fatalf("testinfra: vault: %v", err)
	}
	t.Cleanup(info.Stop)
	return info
}

// Stop ends the Vault process gracefully (SIGTERM, then SIGKILL after a bound) and waits for it.
// Calling it again, or after Kill, does nothing.
func (v VaultInfo) Stop() {
	if v.proc != nil {
		v.proc.stop(false)
	}
}

// Kill ends the Vault process at once (SIGKILL), as a crash would, and waits for it.
func (v VaultInfo) Kill() {
	if v.proc != nil {
		v.proc.stop(true)
	}
}

// vaultProcess is one running vaultdev.
type vaultProcess struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
	stderr *lockedBuffer
	once   sync.Once
}

func (p *vaultProcess) stop(kill bool) {
	p.once.Do(func() {
		if kill {
			_ = p.cmd.Process.Kill()
		} else {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-p.exited:
		case <-time.After(vaultStopTimeout):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
}

// startVault runs bin with args and waits for its ready line.
func startVault(bin string, args []string) (VaultInfo, error) {
	cmd := exec.Command(bin, args...)
	setParentDeathSignal(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return VaultInfo{}, err
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return VaultInfo{}, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &vaultProcess{cmd: cmd, exited: make(chan struct{}), stderr: stderr}

	type ready struct {
		line []byte
		err  error
	}
	lines := make(chan ready, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, err := br.ReadBytes('\n')
		lines <- ready{line, err}
		// Drain until the child exits so it never blocks on a full pipe; Wait closes the pipe, so it
		// comes after the last read.
		_, _ = io.Copy(io.Discard, br)
		_ = cmd.Wait()
		close(p.exited)
	}()

	var r ready
	select {
	case r = <-lines:
	case <-time.After(vaultReadyTimeout):
		p.stop(true)
		return VaultInfo{}, fmt.Errorf("vaultdev printed no ready line within %s; stderr:\n%s", vaultReadyTimeout, stderr.tail())
	}
	if r.err != nil {
		p.stop(true)
		return VaultInfo{}, fmt.Errorf("vaultdev exited before it was ready (%v); stderr:\n%s", r.err, stderr.tail())
	}
	var out struct {
		Addr     string `json:"addr"`
		Token    string `json:"token"`
		RoleID   string `json:"role_id"`
		SecretID string `json:"secret_id"`
	}
	if err := json.Unmarshal(r.line, &out); err != nil || out.Addr == "" || out.Token == "" {
		p.stop(true)
		return VaultInfo{}, fmt.Errorf("vaultdev ready line is not {\"addr\",\"token\",...} (%v); stderr:\n%s", err, stderr.tail())
	}
	return VaultInfo{Addr: out.Addr, Token: out.Token, RoleID: out.RoleID, SecretID: out.SecretID, proc: p}, nil
}

var vaultdevBuild struct {
	once sync.Once
	path string
	err  error
}

// vaultdevBinary returns the vaultdev binary, building it on first use.
func vaultdevBinary() (string, error) {
	if bin := os.Getenv(EnvVaultdevBin); bin != "" {
		return bin, nil
	}
	vaultdevBuild.once.Do(func() {
		vaultdevBuild.path, vaultdevBuild.err = buildVaultdev()
	})
	return vaultdevBuild.path, vaultdevBuild.err
}

// buildVaultdev builds tools/vaultdev outside the workspace (it is its own module, not in go.work) into
// a per-process temporary directory. Directories left by earlier test processes that have exited are
// removed first, since no hook runs when a test binary ends.
func buildVaultdev() (string, error) {
	src, err := vaultdevDir()
	if err != nil {
		return "", err
	}
	removeStaleVaultdevDirs()
	dir, err := os.MkdirTemp("", vaultdevDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("temporary directory: %w", err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build tools/vaultdev: %w", err)
	}
	bin := filepath.Join(dir, "vaultdev")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("GOWORK=off go build in %s: %w\n%s", src, err, out)
	}
	return bin, nil
}

const vaultdevDirPrefix = "configsync-vaultdev-"

// removeStaleVaultdevDirs deletes build directories of test processes that no longer run.
func removeStaleVaultdevDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), vaultdevDirPrefix+"*"))
	for _, d := range dirs {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), vaultdevDirPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if proc, err := os.FindProcess(pid); err == nil {
			if err := proc.Signal(syscall.Signal(0)); err != nil && errors.Is(err, os.ErrProcessDone) {
				_ = os.RemoveAll(d)
			}
		}
	}
}

// vaultdevDir finds the tools/vaultdev sources: EnvVaultdevDir, else relative to this file, else next
// to the go.work of the current directory.
func vaultdevDir() (string, error) {
	var candidates []string
	if d := os.Getenv(EnvVaultdevDir); d != "" {
		candidates = append(candidates, d)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		candidates = append(candidates, filepath.Join(filepath.Dir(file), "..", "..", "tools", "vaultdev"))
	}
	if out, err := exec.Command("go", "env", "GOWORK").Output(); err == nil {
		if w := strings.TrimSpace(string(out)); w != "" && w != "off" {
			candidates = append(candidates, filepath.Join(filepath.Dir(w), "tools", "vaultdev"))
		}
	}
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(c, "go.mod")); err == nil {
			return filepath.Clean(c), nil
		}
	}
	return "", fmt.Errorf("cannot find tools/vaultdev (looked in %q); set %s to its directory or %s to a built binary",
		candidates, EnvVaultdevDir, EnvVaultdevBin)
}

// setParentDeathSignal asks Linux to kill the child if the test process dies without cleanup (a test
// timeout panics past every t.Cleanup). The field only exists on Linux, hence reflection: this file
// builds everywhere.
func setParentDeathSignal(cmd *exec.Cmd) {
	attr := &syscall.SysProcAttr{}
	if f := reflect.ValueOf(attr).Elem().FieldByName("Pdeathsig"); f.IsValid() && f.CanSet() {
		f.Set(reflect.ValueOf(syscall.SIGKILL).Convert(f.Type()))
		cmd.SysProcAttr = attr
	}
}

// lockedBuffer collects a child's stderr for error messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Keep memory bounded: Vault can log for the whole test.
	if b.buf.Len() > 1<<20 {
		rest := b.buf.Bytes()[b.buf.Len()-(256<<10):]
		b.buf = *bytes.NewBuffer(append([]byte(nil), rest...))
	}
	return b.buf.Write(p)
}

// tail returns the last few KiB written.
func (b *lockedBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if len(s) > 8<<10 {
		s = "..." + s[len(s)-(8<<10):]
	}
	return s
}
