package logcollect

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
)

func TestApplyRendersAndWarnsOnChange(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	r := NewRenderer(slog.New(slog.NewTextHandler(&logs, nil)), dir, "configsync.agent.a1.applogs", "127.0.0.1", "24280")
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
