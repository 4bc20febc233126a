package agentrun

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// TestMain doubles as the agent binary: with AGENTRUN_CHILD_CONFIG set, the test executable runs the
// agent like cmd/agent does (so signal handling is tested on a real process).
func TestMain(m *testing.M) {
	if path := os.Getenv("AGENTRUN_CHILD_CONFIG"); path != "" {
		cfg, err := LoadConfig(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		if err := Run(ctx, cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func TestSIGTERMStopsCleanly(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "agent.yaml")
	yaml := fmt.Sprintf("agent_id: %s\nnats:\n  url: %s\n  user: %s\n  password: %s\ndata_dir: %s\nboot_jitter: 0s\nfetch_timeout: 100ms\nlog_format: text\ntrust: {insecure_skip_verify: true}\n",
		agentID, ns.ClientURL(), agentUser, password, filepath.Join(dir, "data"))
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "AGENTRUN_CHILD_CONFIG="+cfgPath)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), `msg="agent running"`) {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent exited with %v:\n%s", err, strings.Join(lines, "\n"))
	}
	if !strings.Contains(strings.Join(lines, "\n"), `msg="agent stopped"`) {
		t.Fatalf("no clean stop:\n%s", strings.Join(lines, "\n"))
	}
}
