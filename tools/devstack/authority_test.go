package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/natsauth"
)

// TestAuthorityFileFromOlderDevstackIsUpgraded: a .data from before operator signing keys keeps its
// domain (same account and agent signer, so issued credentials stay valid) and gains the key, with one
// log line.
func TestAuthorityFileFromOlderDevstackIsUpgraded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nats-authority.json")
	orig, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	full := orig.Seeds()
	old, _ := json.Marshal(map[string]string{"operator": full.Operator, "system": full.System, "account": full.Account, "agent_signer": full.AgentSigner})
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	a, err := loadOrCreateAuthority(path, zap.New(core))
	if err != nil {
		t.Fatalf("older authority file: %v", err)
	}
	if a.AccountPublicKey() != orig.AccountPublicKey() || a.AgentSignerSeed() != orig.AgentSignerSeed() || a.OperatorPublicKey() != orig.OperatorPublicKey() {
		t.Fatal("the upgrade replaced the domain")
	}
	if logs.Len() != 1 {
		t.Fatalf("%d log lines, want 1", logs.Len())
	}
	var stored natsauth.Seeds
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &stored); err != nil || stored.OperatorSigner == "" || stored != a.Seeds() {
		t.Fatalf("the file was not upgraded (%v)", err)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", info.Mode().Perm())
	}
	// The next start loads it as is.
	again, err := loadOrCreateAuthority(path, zap.New(core))
	if err != nil || again.Seeds() != a.Seeds() || logs.Len() != 1 {
		t.Fatalf("second load: %v (log lines %d)", err, logs.Len())
	}
}

func TestAuthorityFileCreatedFresh(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nats-authority.json")
	a, err := loadOrCreateAuthority(path, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	b, err := loadOrCreateAuthority(path, zap.NewNop())
	if err != nil || a.Seeds() != b.Seeds() || a.Seeds().OperatorSigner == "" {
		t.Fatalf("fresh authority not kept: %v", err)
	}
}
