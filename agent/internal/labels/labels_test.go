package labels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/libs/agentconfig"
	"go.uber.org/goleak"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func mustPolicy(t *testing.T, c policy.Config) *policy.Policy {
	t.Helper()
	p, err := policy.New(c, policy.Secrets{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestUpdateReplacesStaticAndRestartsGenerators(t *testing.T) {
	dir := t.TempDir()
	role := filepath.Join(dir, "role")
	if err := os.WriteFile(role, []byte("db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONFIGSYNC_TEST_ZONE", "eu-1")
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Fatal("no echo in PATH")
	}
	m := NewManager(quiet(), mustPolicy(t, policy.Config{ReadPaths: []string{dir}, Env: []string{"CONFIGSYNC_TEST_ZONE"},
		Commands: []string{echo}, Limits: policy.Limits{MinInterval: time.Millisecond}}))
	defer m.Close()
	cfg, err := Parse(json.RawMessage(`{"static":{"env":"prod","team":"core"},"dynamic":[
		{"name":"role","source":"file","path":"` + role + `","interval":"2ms"},
		{"name":"zone","source":"env","env":"CONFIGSYNC_TEST_ZONE"},
		{"name":"kernel","source":"command","command":["echo","  6.1  "]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Update(cfg); err != nil {
		t.Fatal(err)
	}
	got := m.Labels()
	want := map[string]string{"env": "prod", "team": "core", "role": "db", "zone": "eu-1", "kernel": "6.1"}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("labels %v, want %v", got, want)
		}
	}
	// The file generator keeps running: a changed file shows up.
	os.WriteFile(role, []byte("web"), 0o600)
	waitFor(t, func() bool { return m.Labels()["role"] == "web" })

	// Update replaces everything: old static keys and generators are gone.
	cfg2, _ := Parse(json.RawMessage(`{"static":{"env":"staging"}}`))
	if err := m.Update(cfg2); err != nil {
		t.Fatal(err)
	}
	n := m.Updates()
	os.WriteFile(role, []byte("cache"), 0o600)
	got = m.Labels()
	if len(got) != 1 || got["env"] != "staging" {
		t.Fatalf("labels after update %v", got)
	}
	// Update waited for the old generators to exit, so nothing can have written since.
	if m.Updates() != n || m.Labels()["role"] != "" {
		t.Fatal("stopped generator still writing")
	}
	if err := m.Update(mustParse(t, `null`)); err != nil {
		t.Fatal(err)
	}
	if len(m.Labels()) != 0 {
		t.Fatal("null config left labels")
	}
}

func mustParse(t *testing.T, s string) (c agentconfig.LabelsConfig) {
	t.Helper()
	c, err := Parse(json.RawMessage(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{
		`{"dynamic":[{"name":"x","source":"file"}]}`,
		`{"dynamic":[{"name":"x","source":"command","command":[]}]}`,
		`{"dynamic":[{"name":"x","source":"env"}]}`,
		`{"dynamic":[{"name":"x","source":"magic"}]}`,
		`{"dynamic":[{"name":"x","source":"env","env":"A"},{"name":"x","source":"env","env":"B"}]}`,
		`{"static":{"a":1}}`,
	} {
		if _, err := Parse(json.RawMessage(s)); err == nil {
			t.Errorf("accepted %s", s)
		}
	}
}

func refusal(t *testing.T, err error, rule, want string) {
	t.Helper()
	var pe *policy.Error
	if !errors.As(err, &pe) || pe.Rule != rule || !strings.Contains(err.Error(), want) {
		t.Fatalf("want a %s refusal containing %q, got %v", rule, want, err)
	}
}

// TestPolicyGatesEverySource: each source is refused by default, allowed when the policy allows it,
// and refused again when the path escapes through .. or a symlink. A refused config changes nothing.
func TestPolicyGatesEverySource(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	allowed := filepath.Join(dir, "allowed")
	if err := os.MkdirAll(allowed, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(allowed, "role"), []byte("db"), 0o600)
	os.WriteFile(filepath.Join(dir, "secret"), []byte("s3cr3t"), 0o600)
	os.Symlink("../secret", filepath.Join(allowed, "link"))
	t.Setenv("CONFIGSYNC_TEST_ZONE", "eu-1")
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Fatal("no echo in PATH")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("no sh in PATH")
	}
	file := func(p string) string { return fmt.Sprintf(`{"dynamic":[{"name":"x","source":"file","path":%q}]}`, p) }
	const cmd = `{"dynamic":[{"name":"x","source":"command","command":["echo","hi"]}]}`
	const shell = `{"dynamic":[{"name":"x","source":"command","command":["sh","-c","echo hi"]}]}`
	const env = `{"dynamic":[{"name":"x","source":"env","env":"CONFIGSYNC_TEST_ZONE"}]}`

	def, err := policy.New(policy.DefaultConfig(), policy.Secrets{})
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(quiet(), def)
	defer m.Close()
	if err := m.Update(mustParse(t, `{"static":{"keep":"me"}}`)); err != nil {
		t.Fatal(err)
	}
	refusal(t, m.Update(mustParse(t, file(filepath.Join(allowed, "role")))), policy.RuleReadPaths, "outside policy.read_paths")
	refusal(t, m.Update(mustParse(t, cmd)), policy.RuleCommands, "command labels are off")
	refusal(t, m.Update(mustParse(t, env)), policy.RuleEnv, "CONFIGSYNC_TEST_ZONE is not listed")
	refusal(t, m.Update(mustParse(t, `{"dynamic":[{"name":"x","source":"file","path":"/etc/shadow"}]}`)), policy.RuleReadPaths, "denied (built-in deny list)")
	err = m.Update(mustParse(t, cmd))
	if !strings.HasPrefix(err.Error(), "labels: dynamic[0].command: policy: commands: ") {
		t.Fatalf("error does not name the config path and rule: %q", err)
	}
	if got := m.Labels(); len(got) != 1 || got["keep"] != "me" {
		t.Fatalf("a refused config changed the labels: %v", got)
	}

	open := NewManager(quiet(), mustPolicy(t, policy.Config{ReadPaths: []string{allowed}, Commands: []string{echo},
		Env: []string{"CONFIGSYNC_TEST_ZONE"}}))
	defer open.Close()
	for _, c := range []string{file(filepath.Join(allowed, "role")), cmd, env} {
		if err := open.Update(mustParse(t, c)); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if open.Labels()["x"] == "" {
			t.Fatalf("%s: no value read", c)
		}
	}
	refusal(t, open.Update(mustParse(t, file(allowed+"/../secret"))), policy.RuleReadPaths, "outside policy.read_paths")
	refusal(t, open.Update(mustParse(t, file(filepath.Join(allowed, "link")))), policy.RuleReadPaths, "resolved to "+filepath.Join(dir, "secret"))
	refusal(t, open.Update(mustParse(t, shell)), policy.RuleCommands, "is not listed in policy.commands")
	refusal(t, open.Update(mustParse(t, `{"dynamic":[{"name":"x","source":"env","env":"HOME"}]}`)), policy.RuleEnv, "HOME")
	refusal(t, open.Update(mustParse(t, `{"dynamic":[{"name":"x","source":"env","env":"CONFIGSYNC_TEST_ZONE","interval":"1s"}]}`)), policy.RuleLimits, "below the minimum 5s")

	// A file allowed when applied that becomes a symlink out of the root is refused when read again.
	os.Remove(filepath.Join(allowed, "role"))
	os.WriteFile(filepath.Join(allowed, "role"), []byte("db"), 0o600)
	swap := mustParse(t, file(filepath.Join(allowed, "role")))
	if err := open.Update(swap); err != nil || open.Labels()["x"] != "db" {
		t.Fatalf("%v %v", err, open.Labels())
	}
	os.Remove(filepath.Join(allowed, "role"))
	os.Symlink("../secret", filepath.Join(allowed, "role"))
	v, err := open.read(context.Background(), swap.Dynamic[0])
	refusal(t, err, policy.RuleReadPaths, "outside policy.read_paths")
	if v != "" {
		t.Fatalf("read %q through a swapped-in symlink", v)
	}

	withShell := NewManager(quiet(), mustPolicy(t, policy.Config{Commands: []string{sh}}))
	defer withShell.Close()
	if err := withShell.Update(mustParse(t, shell)); err != nil || withShell.Labels()["x"] != "hi" {
		t.Fatalf("listed shell: %v %v", err, withShell.Labels())
	}
}

// TestCommandRunsArgvDirectly: a listed executable gets its argv as is — no shell expands, splits or
// chains anything — and only PATH plus the variables policy.env lists as its environment.
func TestCommandRunsArgvDirectly(t *testing.T) {
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Fatal("no echo in PATH")
	}
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatal("no env in PATH")
	}
	t.Setenv("CONFIGSYNC_TEST_SECRET", "hidden")
	t.Setenv("CONFIGSYNC_TEST_ZONE", "eu-1")
	m := NewManager(quiet(), mustPolicy(t, policy.Config{Commands: []string{echo, env}, Env: []string{"CONFIGSYNC_TEST_ZONE"}}))
	defer m.Close()
	if err := m.Update(mustParse(t, `{"dynamic":[{"name":"a","source":"command","command":["echo","$HOME;","id","|","$(whoami)"]},
		{"name":"b","source":"command","command":["env"]}]}`)); err != nil {
		t.Fatal(err)
	}
	got := m.Labels()
	if got["a"] != "$HOME; id | $(whoami)" {
		t.Fatalf("argv was not passed verbatim: %q", got["a"])
	}
	if strings.Contains(got["b"], "CONFIGSYNC_TEST_SECRET") || !strings.Contains(got["b"], "CONFIGSYNC_TEST_ZONE=eu-1") {
		t.Fatalf("command environment: %q", got["b"])
	}
}

// TestFIFODoesNotBlock: a FIFO as a file source is refused at once (opened non-blocking, not a regular
// file) instead of blocking Update until a writer appears.
func TestFIFODoesNotBlock(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	m := NewManager(quiet(), mustPolicy(t, policy.Config{ReadPaths: []string{dir}}))
	defer m.Close()
	cfg := mustParse(t, fmt.Sprintf(`{"static":{"s":"1"},"dynamic":[{"name":"x","source":"file","path":%q}]}`, fifo))
	done := make(chan error, 1)
	go func() { done <- m.Update(cfg) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Update blocked on a FIFO")
	}
	if got := m.Labels(); got["s"] != "1" || got["x"] != "" {
		t.Fatalf("labels %v", got)
	}
}
