package agentrun

import (
	"testing"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// FuzzParseConfig feeds arbitrary YAML to the local config decoder: nothing panics, and a config it
// accepts is one Run can use (it validates, names a usable agent id, and holds only local defaults the
// type registry accepts).
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		"agent_id: a1\nnats:\n  url: nats://127.0.0.1:4222\n  user: u\n  password: p\ndata_dir: /tmp/cs\n",
		"agent_id: a1\ndefaults:\n  intervals:\n    metrics: 30s\n  collectors:\n    - type: tcp\n      name: ssh\n      address: 127.0.0.1:22\n",
		"agent_id: a1\ndefaults:\n  labels: {static: {env: [1, 2]}}\n",
		"agent_id: a1\ndefaults:\n  bogus: {}\n",
		"agent_id: a1\ndefaults: [labels]\n",
		"agent_id: a1\ndefaults:\n  labels: &a {static: {k: v}}\n  tracing: *a\n",
		"agent_id: a1\ndefaults:\n  labels: {1: 2}\n",
		"agent_id: a.b\nboot_jitter: -1s\nlog_format: xml\n",
		"agent_id: a1\nnats: {creds_file: f, token: t}\n",
		"agent_id: a1\nunknown_key: 1\n",
		"agent_id: [a1]\n", "a: &a [*a, *a]\n", "---\n---\n", "", "\t", "{", "agent_id: a1\ndisk_paths: /\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted a config that does not validate: %v", err)
		}
		if !protocol.ValidAgentID(cfg.AgentID) || cfg.NATS.URL == "" || cfg.DataDir == "" {
			t.Fatalf("accepted %+v", cfg)
		}
		for typ, d := range cfg.Defaults {
			if err := agentconfig.Validate(typ, d); err != nil {
				t.Fatalf("accepted an invalid %s default: %v", typ, err)
			}
		}
	})
}
