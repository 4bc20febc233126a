package e2e

import (
	"go.uber.org/goleak"

	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// modulePrefix is the import path prefix of every ConfigSync module.
const modulePrefix = "github.com/configsync/configsync/"

// serviceNames are the five backend services, in start order.
var serviceNames = []string{"config-api", "resolver", "credential", "delivery", "ack-ingest"}

// binPackages maps each binary the tests run to its main package.
var binPackages = map[string]string{
	"config-api": modulePrefix + "services/config-api/cmd/config-api",
	"resolver":   modulePrefix + "services/resolver/cmd/resolver",
	"credential": modulePrefix + "services/credential/cmd/credential",
	"delivery":   modulePrefix + "services/delivery/cmd/delivery",
	"ack-ingest": modulePrefix + "services/ack-ingest/cmd/ack-ingest",
	"agent":      modulePrefix + "agent/cmd/agent",
}

// binRoot is a directory created by TestMain for this test process; binaries are built into it once.
var binRoot string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "configsync-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir for binaries:", err)
		os.Exit(1)
	}
	binRoot = dir
	code := m.Run()
	// goleak.VerifyTestMain would exit before the cleanup below; check for leaked goroutines here.
	if code == 0 {
		// The spawner goroutine lives as long as the process on purpose (see startCmd).
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/configsync/configsync/e2e.startCmd.func1.1")); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: leaked goroutines:", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
	buildTook time.Duration
)

// binaries builds every binary once per test process (E2E_RACE=1 builds them with -race) and returns
// the directory holding them. A failed build fails the test with the compiler's output.
func binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		start := time.Now()
		buildErr = build(binRoot)
		buildTook = time.Since(start)
	})
	if buildErr != nil {
		t.Fatalf("e2e: building the binaries failed:\n%v", buildErr)
	}
	t.Logf("binaries built in %s (once per test process)", buildTook.Round(time.Millisecond))
	return binRoot
}

func build(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is not on PATH: %w", err)
	}
	root, err := workspaceRoot(goBin)
	if err != nil {
		return err
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if os.Getenv("E2E_RACE") == "1" {
		args = append(args, "-race")
	}
	for _, name := range append(append([]string{}, serviceNames...), "agent") {
		args = append(args, binPackages[name])
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), root, err, out.String())
	}
	for name := range binPackages {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("binary %s missing after go build: %w", name, err)
		}
	}
	return nil
}

// workspaceRoot is the directory of the go.work this module is built in.
func workspaceRoot(goBin string) (string, error) {
	out, err := exec.Command(goBin, "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %w", err)
	}
	work := strings.TrimSpace(string(out))
	if work == "" || work == "off" {
		return "", fmt.Errorf("the e2e tests build every service from the workspace, but no go.work is in use (GOWORK=%q)", work)
	}
	return filepath.Dir(work), nil
}
