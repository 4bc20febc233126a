package logcollect

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configsync/configsync/agent/internal/policy"
)

func TestApplyRendersAndWarnsOnChange(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	pol, err := policy.New(policy.Config{ReadPaths: []string{"/var/log", "/srv"}}, policy.Secrets{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRenderer(slog.New(slog.NewTextHandler(&logs, nil)), pol, dir, "configsync.agent.a1.applogs", "127.0.0.1", "24280")
	cfg, err := Parse(json.RawMessage(`{"files":[{"name":"nginx","path":"/var/log/nginx/*.log","parser":"nginx"}],"journald":{"units":["sshd.service"]},"flush_interval":"10s"}`))
	if err != nil {
		t.Fatal(err)
	}
	changed, err := r.Apply(cfg)
	if err != nil || !changed {
		t.Fatalf("first apply %v %v", changed, err)
	}
	b, _ := os.ReadFile(r.Path())
	for _, want := range []string{"Flush        10", "Path              /var/log/nginx/*.log", "Tag               configsync.agent.a1.applogs.nginx",
		"Parser            nginx", "Systemd_Filter    _SYSTEMD_UNIT=sshd.service", "Name        http", "Port        24280", "Header_Tag  X-Fluent-Tag"} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("rendered file lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(logs.String(), "restart") {
		t.Fatal("first render asked for a restart")
	}
	if changed, _ := r.Apply(cfg); changed {
		t.Fatal("same config rewrote the file")
	}
	cfg2, _ := Parse(json.RawMessage(`{"files":[{"name":"app","path":"/srv/app.log"}]}`))
	if changed, _ := r.Apply(cfg2); !changed {
		t.Fatal("new config not rendered")
	}
	if !strings.Contains(logs.String(), "restart Fluent Bit") {
		t.Fatalf("no restart-required warning: %s", logs.String())
	}
	b, _ = os.ReadFile(r.Path())
	if strings.Contains(string(b), "nginx") || !strings.Contains(string(b), "/srv/app.log") {
		t.Fatalf("file not replaced:\n%s", b)
	}
	if _, err := Parse(json.RawMessage(`{"files":[{"name":"x","path":"/a\nb"}]}`)); err == nil {
		t.Fatal("multi-line path accepted")
	}
}

// TestPolicyRefusesPaths: a tailed path outside the read roots, reaching out through .. or a symlink,
// or able to match a denied file is refused, and the rendered file stays as it was.
func TestPolicyRefusesPaths(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	logs := filepath.Join(dir, "logs")
	os.MkdirAll(logs, 0o700)
	os.Symlink("/etc", filepath.Join(logs, "etc"))
	pol, err := policy.New(policy.Config{ReadPaths: []string{logs, "/var/log"}}, policy.Secrets{DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRenderer(slog.New(slog.NewTextHandler(io.Discard, nil)), pol, dir, "t", "127.0.0.1", "4222")
	ok, _ := Parse(json.RawMessage(`{"files":[{"name":"app","path":"` + logs + `/*.log"}]}`))
	if _, err := r.Apply(ok); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(r.Path())
	def, _ := policy.New(policy.DefaultConfig(), policy.Secrets{})
	if err := Check(def, ok); !policy.IsRefusal(err) {
		t.Fatalf("default policy allowed %s: %v", logs, err)
	}
	for _, bad := range []string{"/etc/*", "/var/log/../../etc/shadow", logs + "/etc/*", "/srv/app.log", "/var/log/../root/*.log",
		"/var/log/a.log,/etc/shadow", "/var/log/a.log, /root/.bash_history", "/var/log/{a.log,../../etc/shadow}", "relative/*.log"} {
		c, _ := Parse(json.RawMessage(`{"files":[{"name":"ok","path":"/var/log/ok.log"},{"name":"x","path":"` + bad + `"}]}`))
		_, err := r.Apply(c)
		var pe *policy.Error
		if !errors.As(err, &pe) || pe.Rule != policy.RuleReadPaths || !strings.HasPrefix(err.Error(), "log_collection: files[1].path: policy: read_paths: ") {
			t.Fatalf("%s: %v", bad, err)
		}
	}
	for _, bad := range []string{`{"files":[{"name":"x","path":"/var/log/${HOME}/a.log"}]}`,
		`{"files":[{"name":"x","path":"/var/log/a.log","tag":"${NATS_PASSWORD}"}]}`,
		`{"journald":{"units":["${SECRET}"]}}`} {
		c, err := Parse(json.RawMessage(bad))
		if err != nil {
			t.Fatal(err)
		}
		var pe *policy.Error
		if _, err := r.Apply(c); !errors.As(err, &pe) || pe.Rule != policy.RuleEnv {
			t.Fatalf("%s: %v", bad, err)
		}
	}
	multi, _ := Parse(json.RawMessage(`{"files":[{"name":"two","path":"/var/log/a.log, ` + logs + `/b.log"}]}`))
	if err := Check(pol, multi); err != nil {
		t.Fatalf("two allowed paths: %v", err)
	}
	if after, _ := os.ReadFile(r.Path()); !bytes.Equal(before, after) {
		t.Fatal("a refused config was rendered")
	}
}
