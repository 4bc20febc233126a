package deploy

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configsync/configsync/agent/agentrun"
)

// unitFile reads a systemd unit into section -> key -> values (a key may repeat).
func unitFile(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSystemdAgentUnit: the agent runs as an unprivileged user with no capabilities, no new
// privileges, a read-only system and its data directory as the only writable path, from the example
// config, which loads with agentrun.LoadConfig and whose data_dir is that directory.
func TestSystemdAgentUnit(t *testing.T) {
	u := unitFile(t, filepath.Join("systemd", "configsync-agent.service"))
	svc := u["Service"]
	one := func(k string) string {
		if len(svc[k]) != 1 {
			t.Fatalf("[Service] %s: %v, want exactly one value", k, svc[k])
		}
		return svc[k][0]
	}
	if user := one("User"); user == "" || user == "root" || user == "0" {
		t.Errorf("User=%q: the agent must not run as root", user)
	}
	for k, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "CapabilityBoundingSet": "", "AmbientCapabilities": "", "RestrictSUIDSGID": "yes",
		"StateDirectory": "configsync-agent", "StateDirectoryMode": "0700",
	} {
		if got := one(k); got != want {
			t.Errorf("[Service] %s=%q, want %q", k, got, want)
		}
	}
	exec := strings.Fields(one("ExecStart"))
	if len(exec) != 3 || exec[1] != "-config" {
		t.Fatalf("ExecStart=%v, want <agent> -config <file>", exec)
	}
	cfg, err := agentrun.LoadConfig(filepath.Join("systemd", filepath.Base(exec[2])))
	if err != nil {
		t.Fatal(err)
	}
	if rw := one("ReadWritePaths"); rw != cfg.DataDir || cfg.DataDir != "/var/lib/"+one("StateDirectory") {
		t.Errorf("ReadWritePaths=%s, StateDirectory=%s, data_dir %s: the data directory must be the one writable path",
			rw, one("StateDirectory"), cfg.DataDir)
	}
	if len(cfg.Policy.Commands) != 0 || cfg.Policy.UploadFileContents || len(cfg.Policy.Env) != 0 {
		t.Errorf("the example config opens more than the defaults: %+v", cfg.Policy)
	}
	if got := u["Install"]["WantedBy"]; len(got) != 1 || got[0] != "multi-user.target" {
		t.Errorf("[Install] WantedBy=%v", got)
	}
}
