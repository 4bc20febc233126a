package agentrun

import (
	"strings"
	"testing"

	"github.com/configsync/configsync/agent/internal/transport"
)

func TestNATSTLSConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
agent_id: a1
nats:
  url: nats://nats.example:4222
  creds_file: /etc/configsync/agent.creds
  tls:
    ca_file: /etc/configsync/nats-ca.pem
    cert_file: /etc/configsync/agent.pem
    key_file: /etc/configsync/agent-key.pem
    server_name: nats.internal
data_dir: /var/lib/cs
trust: {insecure_skip_verify: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := transport.TLS{CAFile: "/etc/configsync/nats-ca.pem", CertFile: "/etc/configsync/agent.pem",
		KeyFile: "/etc/configsync/agent-key.pem", ServerName: "nats.internal"}
	if got := cfg.NATS.transportTLS(); got != want {
		t.Fatalf("tls %+v, want %+v", got, want)
	}
	if plain, err := ParseConfig([]byte("agent_id: a1\nnats:\n  url: nats://n:4222\ndata_dir: /d\ntrust: {insecure_skip_verify: true}\n")); err != nil || plain.NATS.transportTLS().Enabled() {
		t.Fatalf("no nats.tls: %+v, %v", plain.NATS.TLS, err)
	}
	for yaml, msg := range map[string]string{
		"agent_id: a1\nnats:\n  url: nats://n:4222\n  tls:\n    cert_file: /c.pem\ndata_dir: /d\n": "cert_file and key_file",
		"agent_id: a1\nnats:\n  url: nats://n:4222\n  tls:\n    ca: /ca.pem\ndata_dir: /d\n":       "ca",
		"agent_id: a1\nnats:\n  url: nats://n:4222\n  tls:\n    key_file: /k.pem\ndata_dir: /d\n":  "cert_file and key_file",
	} {
		if _, err := ParseConfig([]byte(yaml)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error about %s", yaml, err, msg)
		}
	}
}
