package natsbundle_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configsync/configsync/deploy/internal/natsbundle"
)

func TestWriteCreatesThenReuses(t *testing.T) {
	out := t.TempDir()
	first, err := natsbundle.Write(natsbundle.Options{Out: out, ResolverDir: "/data/jwt", Agents: []string{"agent-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !first.AuthorityCreated || first.AuthConfKept {
		t.Fatalf("first run: %+v, want a new authority and a rendered auth.conf", first)
	}
	want := []string{natsbundle.AuthorityFile, natsbundle.AuthConf, natsbundle.SystemCreds, natsbundle.AgentCreds("agent-1")}
	for _, s := range natsbundle.Services {
		want = append(want, natsbundle.ServiceCreds(s))
	}
	for _, rel := range want {
		info, err := os.Stat(filepath.Join(out, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", rel, info.Mode().Perm())
		}
	}
	conf, err := os.ReadFile(filepath.Join(out, natsbundle.AuthConf))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"operator:", "system_account:", "resolver:", "type: full", "resolver_preload:", `"/data/jwt"`} {
		if !bytes.Contains(conf, []byte(key)) {
			t.Errorf("auth.conf lacks %s", key)
		}
	}
	seeds, _ := os.ReadFile(filepath.Join(out, natsbundle.AuthorityFile))

	// A second run keeps the authority and the rendered auth.conf (its account JWT may be older than
	// revocations the servers hold; re-rendering it would be harmless only without them).
	second, err := natsbundle.Write(natsbundle.Options{Out: out, ResolverDir: "/elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	if second.AuthorityCreated || !second.AuthConfKept {
		t.Fatalf("second run: %+v, want the authority and auth.conf kept", second)
	}
	again, _ := os.ReadFile(filepath.Join(out, natsbundle.AuthConf))
	seedsAgain, _ := os.ReadFile(filepath.Join(out, natsbundle.AuthorityFile))
	if !bytes.Equal(conf, again) || !bytes.Equal(seeds, seedsAgain) {
		t.Error("a second run changed authority.json or auth.conf")
	}
	for _, f := range second.Files {
		if strings.HasSuffix(f, natsbundle.AuthorityFile) || strings.HasSuffix(f, "auth.conf") {
			t.Errorf("second run reports writing %s", f)
		}
	}
}

func TestWriteRejectsBadInput(t *testing.T) {
	if _, err := natsbundle.Write(natsbundle.Options{Out: t.TempDir()}); err == nil {
		t.Error("no resolver dir accepted")
	}
	if _, err := natsbundle.Write(natsbundle.Options{Out: t.TempDir(), ResolverDir: "/data/jwt", Agents: []string{"not/valid"}}); err == nil {
		t.Error("an invalid agent id accepted")
	}
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, natsbundle.AuthorityFile), []byte(`{"operator":"nope"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsbundle.Write(natsbundle.Options{Out: out, ResolverDir: "/data/jwt"}); err == nil {
		t.Error("a corrupt authority.json accepted")
	}
}
