package agentrun

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
agent_id: 550e8400-e29b-41d4-a716-446655440000
nats:
  url: nats://nats.example:4222
  creds_file: /etc/configsync/agent.creds
data_dir: /var/lib/cs
trust:
  public_keys:
    - id: local-1
      public_key: 11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=
defaults:
  intervals:
    metrics: 30s
  collectors:
    - type: tcp
      name: ssh
      address: 127.0.0.1:22
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BootJitter != 5*time.Second || cfg.FetchTimeout != 10*time.Second || cfg.LogLevel != "info" {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
	if string(cfg.Defaults["intervals"]) != `{"metrics":"30s"}` {
		t.Fatalf("intervals default %s", cfg.Defaults["intervals"])
	}
	if !strings.Contains(string(cfg.Defaults["collectors"]), `"address":"127.0.0.1:22"`) {
		t.Fatalf("collectors default %s", cfg.Defaults["collectors"])
	}
	if len(cfg.Trust.PublicKeys) != 1 || cfg.Trust.InsecureSkipVerify {
		t.Fatalf("trust %+v", cfg.Trust)
	}
	cfg, err = ParseConfig([]byte("agent_id: a1\nboot_jitter: 0s\ntrust: {insecure_skip_verify: true}\n"))
	if err != nil || cfg.BootJitter != 0 {
		t.Fatalf("boot_jitter 0: %v %v", cfg.BootJitter, err)
	}
}

func TestParseConfigErrorsNameTheLine(t *testing.T) {
	cases := map[string]struct{ yaml, want string }{
		"syntax":         {"agent_id: a1\nnats:\n\turl: x\n", "line 3"},
		"unknown key":    {"agent_id: a1\ndata_dri: /x\n", "line 2"},
		"bad duration":   {"agent_id: a1\nboot_jitter: soon\n", "line 2"},
		"unknown type":   {"agent_id: a1\ndefaults:\n  intervalz: {}\n", "line 3"},
		"invalid config": {"agent_id: a1\ndefaults:\n  intervals:\n    metrics: fast\n", "line 4"},
		"bad agent id":   {"agent_id: a.b\n", "agent_id"},
		"two auths":      {"agent_id: a1\nnats:\n  token: t\n  user: u\n", "only one"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestLoadConfigNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(p, []byte("agent_id: [\n"), 0o600)
	_, err := LoadConfig(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line") {
		t.Fatalf("err = %v", err)
	}
}
