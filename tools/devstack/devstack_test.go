package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/configsync/configsync/agent/agentrun"
	"github.com/configsync/configsync/services/resolver"
)

// TestDemoPolicy: the demo agent's policy allows the README's watch_files curls (their paths are
// checked as the agent checks a delivered config) and nothing the demo does not need.
func TestDemoPolicy(t *testing.T) {
	cfg := agentrun.DefaultConfig()
	cfg.AgentID, cfg.DataDir = "demo", filepath.Join(t.TempDir(), "agent")
	cfg.Policy = demoPolicy()
	// The demo agent trusts the resolver's key, as startAgent sets it up from devstack's key file.
	trust, err := resolver.EnsureSigningKeyFile(filepath.Join(t.TempDir(), "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Trust.PublicKeys, err = agentrun.TrustKeys(trust); err != nil {
		t.Fatal(err)
	}
	cfg.Defaults = agentrun.Defaults{
		"watch_files": []byte(`{"paths": ["/etc", "/opt", "/var/log"], "exclude_patterns": ["*.log"]}`),
		"intervals":   []byte(`{"heartbeat": "1s"}`),
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the README's watch_files paths are refused by the demo policy: %v", err)
	}
	for name, def := range map[string]string{
		"labels":      `{"dynamic": [{"name": "x", "source": "command", "command": ["/bin/sh", "-c", "id"]}]}`,
		"watch_files": `{"paths": ["/root"]}`,
	} {
		cfg.Defaults = agentrun.Defaults{name: []byte(def)}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "policy") {
			t.Errorf("demo policy allowed %s %s: %v", name, def, err)
		}
	}
}

func TestDemoFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devstack.env")
	want := demo{APIURL: "http://127.0.0.1:8080", Token: "cs_secret", NATSURL: "nats://127.0.0.1:4322",
		ClientID: "c", EnvironmentID: "e", HostID: "h", AgentID: "a", MetricsURL: "http://127.0.0.1:9090/metrics"}
	if err := writeDemo(path, want); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("devstack.env mode %v, want 0600 (it holds the admin token)", info.Mode().Perm())
	}
	got, err := readDemo(path)
	if err != nil {
		t.Fatal(err)
	}
	// The URLs are recomputed from flags on every start; the rest must survive.
	want.APIURL, want.NATSURL, want.MetricsURL = "", "", ""
	if got != want {
		t.Fatalf("read %+v, want %+v", got, want)
	}
	raw, _ := os.ReadFile(path)
	for _, key := range demoKeys {
		if !strings.Contains(string(raw), "export "+key+"=") {
			t.Errorf("devstack.env lacks %s:\n%s", key, raw)
		}
	}
	if err := os.WriteFile(path, []byte("export CONFIGSYNC_TOKEN=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readDemo(path); err == nil {
		t.Fatal("an incomplete devstack.env was accepted")
	}
}

func TestRedactURL(t *testing.T) {
	cases := map[string]string{
		"postgres://u:pw@db:5432/x":             "postgres://u:***@db:5432/x",
		"postgres://postgres@127.0.0.1:5432/cs": "postgres://postgres@127.0.0.1:5432/cs",
		"postgres:///cs?host=/run":              "postgres:///cs?host=/run",
	}
	for in, want := range cases {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// DATABASE_URL wins over everything else, without touching any server.
func TestProvisionPostgresPrefersDatabaseURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://example.invalid/db")
	pg, err := provisionPostgres(context.Background(), t.TempDir(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if pg.URL != "postgres://example.invalid/db" || pg.Source != "DATABASE_URL" {
		t.Fatalf("got %+v", pg)
	}
}

// Without DATABASE_URL the server on 127.0.0.1:5432 (running on every machine of this kind) is used
// and the devstack database is created on it.
func TestProvisionPostgresUsesLocalServer(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	os.Unsetenv("DATABASE_URL")
	pg, err := provisionPostgres(context.Background(), t.TempDir(), zap.NewNop())
	if err != nil {
		t.Fatalf("no PostgreSQL on 127.0.0.1:5432 (start it: pg_ctlcluster ... main start): %v", err)
	}
	defer pg.Stop()
	if !strings.Contains(pg.URL, "/"+devDatabaseName+"?") {
		t.Fatalf("url %q does not name the %s database", pg.URL, devDatabaseName)
	}
}

func TestMissingPostgresBinariesSayWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findPostgresBinary("no-such-initdb")
	if err == nil || !strings.Contains(err.Error(), "apt install postgresql") || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("error %v does not explain how to provide PostgreSQL", err)
	}
}
