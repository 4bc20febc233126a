package labels

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/agentconfig"
	"go.uber.org/goleak"
)

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
	m := NewManager(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer m.Close()
	cfg, err := Parse(json.RawMessage(`{"static":{"env":"prod","team":"core"},"dynamic":[
		{"name":"role","source":"file","path":"` + role + `","interval":"2ms"},
		{"name":"zone","source":"env","env":"CONFIGSYNC_TEST_ZONE"},
		{"name":"kernel","source":"command","command":["echo","  6.1  "]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m.Update(cfg)
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
	m.Update(cfg2)
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
	m.Update(mustParse(t, `null`))
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
