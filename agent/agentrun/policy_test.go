package agentrun

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/libs/protocol"
)

// TestPolicyRefusalsAreVisibleAndKeepThePreviousConfig: with the default policy, each capability a
// remote config could open is refused on push: the ack is failed and names the config path and the
// rule, the config is not cached, the heartbeat keeps reporting the version held, and the running
// config of that type stays.
func TestPolicyRefusalsAreVisibleAndKeepThePreviousConfig(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{
		Configs:  map[string]json.RawMessage{"labels": json.RawMessage(`{"static":{"env":"prod"}}`), "intervals": json.RawMessage(`{"heartbeat":"5s"}`)},
		Versions: map[string]int64{"labels": 3, "intervals": 3},
	})
	dir := t.TempDir()
	cfg := testConfig(t, ns.ClientURL(), agentID, dir)
	cfg.Policy = DefaultConfig().Policy // the production defaults, limits included
	r := start(t, cfg)
	be.waitFor("startup acks", func() bool {
		a, ok := be.ackFor("labels", 3)
		return ok && a.Status == protocol.AckApplied
	})

	version := int64(10)
	refused := func(typ, payload, want string) {
		t.Helper()
		version++
		v := version
		before, _ := r.a.cache.Get(typ)
		be.push(typ, v, payload)
		be.waitFor(typ+" failed ack", func() bool { _, ok := be.ackFor(typ, v); return ok })
		be.mu.Lock()
		a, _ := be.ackFor(typ, v)
		be.mu.Unlock()
		if a.Status != protocol.AckFailed || !strings.Contains(a.Error, want) {
			t.Fatalf("%s %s: ack %+v, want failed with %q", typ, payload, a, want)
		}
		if after, _ := r.a.cache.Get(typ); after.Version != before.Version || string(after.Data) != string(before.Data) {
			t.Fatalf("%s: refused config cached: %+v", typ, after)
		}
	}
	refused("labels", `{"dynamic":[{"name":"x","source":"command","command":["sh","-c","echo pwned"]}]}`,
		"labels: dynamic[0].command: policy: commands: sh")
	refused("labels", `{"dynamic":[{"name":"x","source":"file","path":"/etc/shadow"}]}`,
		"labels: dynamic[0].path: policy: read_paths: /etc/shadow is denied (built-in deny list)")
	refused("labels", `{"dynamic":[{"name":"x","source":"env","env":"HOME"}]}`,
		"labels: dynamic[0].env: policy: env: environment variable HOME is not listed in policy.env")
	refused("labels", fmt.Sprintf(`{"dynamic":[{"name":"x","source":"file","path":%q}]}`, filepath.Join(dir, configcache.FileName)),
		"denied (the agent's own files)")
	refused("watch_files", `{"paths":["/"]}`, "watch_files: paths[0]: policy: read_paths: / is outside policy.read_paths")
	refused("watch_files", `{"paths":["/etc"],"max_file_size":8388608}`, "watch_files: max_file_size: policy: limits:")
	refused("change_detection", `{"enabled":true,"paths":["/root"]}`, "change_detection: paths[0]: policy: read_paths: /root is denied")
	refused("log_collection", `{"files":[{"name":"all","path":"/etc/*"}]}`, "log_collection: files[0].path: policy: read_paths: /etc/* could match /etc/shadow")
	refused("collectors", `[{"type":"http","name":"imds","url":"http://169.254.169.254/latest/meta-data/"}]`,
		"collectors[0] (http/imds): url: policy: network: 169.254.169.254 is denied")
	refused("intervals", `{"heartbeat":"2s"}`, "intervals: heartbeat: policy: limits: interval 2s is below the minimum 5s")
	refused("healthcheck", `{"interval_seconds":1}`, "healthcheck: interval_seconds: policy: limits:")

	// The previous configs keep running, and the heartbeat reports the versions held.
	if got := r.a.labels.Labels(); got["env"] != "prod" || len(got) != 1 {
		t.Fatalf("labels after refusals: %v", got)
	}
	n := len(be.heartbeats)
	be.waitFor("a later heartbeat", func() bool { return len(be.heartbeats) > n })
	be.mu.Lock()
	hb := be.heartbeats[len(be.heartbeats)-1]
	be.mu.Unlock()
	if hb.ConfigVersions["labels"] != 3 || hb.ConfigVersions["intervals"] != 3 {
		t.Fatalf("heartbeat versions %v", hb.ConfigVersions)
	}
	// An allowed config is still applied normally.
	be.push("labels", 50, `{"static":{"env":"staging"}}`)
	be.waitFor("labels 50 applied", func() bool { a, ok := be.ackFor("labels", 50); return ok && a.Status == protocol.AckApplied })
	if !r.logs.contains("config update refused by the local policy") {
		t.Fatal("refusals not logged")
	}
}

// TestFetchedConfigRefusedAtStartup: a fetched config the policy refuses is not cached; the agent runs
// the config it had cached before and acknowledges the fetched version failed.
func TestFetchedConfigRefusedAtStartup(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	dir := t.TempDir()
	c, err := configcache.Open(dir, discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put("labels", json.RawMessage(`{"static":{"env":"cached"}}`), 2, nil); err != nil {
		t.Fatal(err)
	}
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{
		Configs:  map[string]json.RawMessage{"labels": json.RawMessage(`{"dynamic":[{"name":"x","source":"env","env":"PATH"}]}`)},
		Versions: map[string]int64{"labels": 9},
	})
	r := start(t, testConfig(t, ns.ClientURL(), agentID, dir))
	be.waitFor("failed ack of the fetched version", func() bool {
		a, ok := be.ackFor("labels", 9)
		return ok && a.Status == protocol.AckFailed && strings.Contains(a.Error, "labels: dynamic[0].env: policy: env: ")
	})
	if got := r.a.labels.Labels(); got["env"] != "cached" {
		t.Fatalf("labels %v, want the cached config", got)
	}
	if e, _ := r.a.cache.Get("labels"); e.Version != 2 {
		t.Fatalf("cache holds version %d", e.Version)
	}
}

// TestPolicyAllowsWhatItLists: the same kinds of configs are applied when the local policy opens
// them, and a FIFO as a label file source does not block the next config type.
func TestPolicyAllowsWhatItLists(t *testing.T) {
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Fatal("no echo in PATH")
	}
	ns := startNATS(t, agentID, 0)
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{Configs: map[string]json.RawMessage{}, Versions: map[string]int64{}})
	root, _ := filepath.EvalSymlinks(t.TempDir())
	os.WriteFile(filepath.Join(root, "role"), []byte("db\n"), 0o600)
	fifo := filepath.Join(root, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	t.Setenv("CONFIGSYNC_TEST_ZONE", "eu-1")
	cfg := testConfig(t, ns.ClientURL(), agentID, t.TempDir())
	cfg.Policy.ReadPaths = []string{root}
	cfg.Policy.Commands = []string{echo}
	cfg.Policy.Env = []string{"CONFIGSYNC_TEST_ZONE"}
	r := start(t, cfg)
	applied := func(typ string, v int64, payload string) {
		t.Helper()
		be.push(typ, v, payload)
		be.waitFor(fmt.Sprintf("%s %d applied", typ, v), func() bool {
			a, ok := be.ackFor(typ, v)
			if ok && a.Status != protocol.AckApplied {
				t.Fatalf("%s: %+v", typ, a)
			}
			return ok
		})
	}
	applied("labels", 1, fmt.Sprintf(`{"dynamic":[{"name":"role","source":"file","path":%q},{"name":"k","source":"command","command":["echo","6.1"]},
		{"name":"zone","source":"env","env":"CONFIGSYNC_TEST_ZONE"}]}`, filepath.Join(root, "role")))
	if got := r.a.labels.Labels(); got["role"] != "db" || got["k"] != "6.1" || got["zone"] != "eu-1" {
		t.Fatalf("labels %v", got)
	}
	// A FIFO: applied (the value is simply not read), and the next type is handled right after.
	applied("labels", 2, fmt.Sprintf(`{"static":{"s":"1"},"dynamic":[{"name":"pipe","source":"file","path":%q}]}`, fifo))
	applied("watch_files", 3, fmt.Sprintf(`{"paths":[%q]}`, root))
	applied("intervals", 4, `{"heartbeat":"1h"}`)
	if got := r.a.labels.Labels(); got["s"] != "1" || got["pipe"] != "" {
		t.Fatalf("labels %v", got)
	}
	be.waitFor("watch_files report despite the FIFO", func() bool {
		for _, raw := range be.obs[KindFiles] {
			if strings.Contains(string(raw), filepath.Join(root, "role")) && !strings.Contains(string(raw), "db\\n") {
				return true
			}
		}
		return false
	})
}

func TestPolicyConfigYAML(t *testing.T) {
	dir := t.TempDir()
	cfg, err := ParseConfig([]byte(`
agent_id: a1
data_dir: ` + dir + `
trust: {insecure_skip_verify: true}
policy:
  commands: [/bin/sh]
  read_paths: [/srv/app]
  env: [ZONE]
  upload_file_contents: true
  network:
    allow: [10.0.0.0/8, db.internal]
    ports: [5432]
  limits:
    min_interval: 1s
defaults:
  labels:
    dynamic:
      - {name: zone, source: env, env: ZONE}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy
	if len(p.Commands) != 1 || p.ReadPaths[0] != "/srv/app" || len(p.ReadPaths) != 1 || !p.UploadFileContents ||
		p.Network.Ports[0] != 5432 || p.Limits.MinInterval != time.Second || p.Limits.MaxFiles != 0 {
		t.Fatalf("policy %+v", p)
	}
	d := DefaultConfig().Policy
	if len(d.Commands) != 0 || strings.Join(d.ReadPaths, ",") != "/etc,/var/log,/opt" || d.UploadFileContents || len(d.Env) != 0 {
		t.Fatalf("default policy %+v", d)
	}
	for name, c := range map[string]struct{ yaml, want string }{
		"unknown key":              {"agent_id: a1\npolicy:\n  comands: []\n", "line 3"},
		"relative command":         {"agent_id: a1\npolicy:\n  commands: [sh]\n", "policy.commands"},
		"bad cidr":                 {"agent_id: a1\npolicy:\n  network:\n    deny: [10.0.0.0/33]\n", "policy.network.deny"},
		"default against policy":   {"agent_id: a1\ndefaults:\n  labels:\n    dynamic: [{name: x, source: env, env: HOME}]\n", "defaults.labels: labels: dynamic[0].env: policy: env:"},
		"interval below the floor": {"agent_id: a1\ndefaults:\n  intervals: {heartbeat: 1s}\n", "defaults.intervals: intervals: heartbeat: policy: limits:"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
	// The config file itself, the creds file and the data directory are denied whatever read_paths says.
	p2 := filepath.Join(dir, "agent.yaml")
	os.WriteFile(p2, []byte("agent_id: a1\ndata_dir: "+dir+"/data\nnats: {creds_file: "+dir+"/agent.creds}\npolicy: {read_paths: ["+dir+"]}\ntrust: {insecure_skip_verify: true}\n"), 0o600)
	loaded, err := LoadConfig(p2)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := loaded.buildPolicy()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{p2, filepath.Join(dir, "agent.creds"), filepath.Join(dir, "data", "config.cache.json")} {
		if err := pol.CheckRead(f); err == nil || !strings.Contains(err.Error(), "the agent's own files") {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if err := pol.CheckRead(filepath.Join(dir, "other")); err != nil {
		t.Fatal(err)
	}
}

// TestRootWarning: running with euid 0 is said loudly at start, unless allow_root acknowledges it.
func TestRootWarning(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{Configs: map[string]json.RawMessage{}, Versions: map[string]int64{}})
	r := start(t, testConfig(t, ns.ClientURL(), agentID, t.TempDir()))
	root := os.Geteuid() == 0
	if got := r.logs.contains("AGENT RUNNING AS ROOT"); got != root {
		t.Fatalf("root=%v, warning logged=%v", root, got)
	}
	r.stop(t)
	cfg := testConfig(t, ns.ClientURL(), agentID, t.TempDir())
	cfg.AllowRoot = true
	r = start(t, cfg)
	if r.logs.contains("AGENT RUNNING AS ROOT") || r.logs.contains("agent running as root (allow_root is set)") != root {
		t.Fatalf("allow_root: %s", r.logs.String())
	}
}
