package trust_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/configsync/configsync/agent/internal/trust"
	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
)

type key struct {
	id   string
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
}

func newKey(t *testing.T, id string) key {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key{id, pub, priv}
}

func (k key) sign(t *testing.T, st any) *protocol.Signed {
	b, err := signing.Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	return &protocol.Signed{Statement: b, KeyID: k.id, Signature: ed25519.Sign(k.priv, b)}
}

func (k key) config(t *testing.T, version int64, data string) *protocol.Signed {
	h, err := signing.DataHash(json.RawMessage(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	return k.sign(t, signing.ConfigStatement{Kind: signing.KindConfig, ConfigType: "labels", Version: version, SHA256: h, Scope: signing.AgentScope("agent")})
}

func list(version int64, keys ...key) signing.TrustedKeysStatement {
	st := signing.TrustedKeysStatement{Kind: signing.KindTrustedKeys, Version: version}
	for _, k := range keys {
		st.Keys = append(st.Keys, signing.PublicKey{ID: k.id, PublicKey: k.pub})
	}
	return st
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestRotation: a trusted-key list signed by a trusted key is accepted and persisted (0600); statements
// by the old key stay valid while it is listed, the new key's are accepted; a list signed by a key not
// yet trusted, and an older list replayed, change nothing; removing the old key (compromise) makes its
// statements invalid, and all of it survives a restart.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	data := `{"static":{"a":"b"}}`
	v := trust.Open("agent", signing.KeySet{"k1": k1.pub}, false, dir, discard)
	if err := v.SetIdentity(k1.sign(t, signing.IdentityStatement{Kind: signing.KindIdentity, AgentID: "agent", EnvironmentID: "env"})); err != nil {
		t.Fatal(err)
	}
	if err := v.Config("labels", 2, json.RawMessage(data), nil, k2.config(t, 2, data)); !errors.Is(err, signing.ErrSignatureInvalid) {
		t.Fatalf("new key trusted before rotation: %v", err)
	}
	if err := v.Rotate(k2.sign(t, list(2, k1, k2))); !errors.Is(err, signing.ErrSignatureInvalid) {
		t.Fatalf("a list signed by an untrusted key: %v", err)
	}
	if err := v.Rotate(k1.sign(t, list(2, k1, k2))); err != nil {
		t.Fatal(err)
	}
	if err := v.Config("labels", 1, json.RawMessage(data), nil, k1.config(t, 1, data)); err != nil {
		t.Fatalf("old key after rotation: %v", err)
	}
	if err := v.Config("labels", 2, json.RawMessage(data), nil, k2.config(t, 2, data)); err != nil {
		t.Fatalf("new key after rotation: %v", err)
	}
	info, err := os.Stat(filepath.Join(dir, trust.FileName))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("trust state: %v %v", info, err)
	}

	// k1 is compromised: a list without it, signed by k2.
	if err := v.Rotate(k2.sign(t, list(3, k2))); err != nil {
		t.Fatal(err)
	}
	if err := v.Config("labels", 1, json.RawMessage(data), nil, k1.config(t, 1, data)); !errors.Is(err, signing.ErrSignatureInvalid) {
		t.Fatalf("removed key still trusted: %v", err)
	}
	// The compromised key replays the older list that trusted it: ignored.
	if err := v.Rotate(k1.sign(t, list(2, k1, k2))); err == nil {
		if err := v.Config("labels", 1, json.RawMessage(data), nil, k1.config(t, 1, data)); err == nil {
			t.Fatal("a replayed older list brought the removed key back")
		}
	}

	// Restart: the lists are verified again from the configured key and the identity is kept.
	v2 := trust.Open("agent", signing.KeySet{"k1": k1.pub}, false, dir, discard)
	if err := v2.Config("labels", 2, json.RawMessage(data), nil, k2.config(t, 2, data)); err != nil {
		t.Fatalf("after restart the rotated key is not trusted: %v", err)
	}
	if err := v2.Config("labels", 1, json.RawMessage(data), nil, k1.config(t, 1, data)); !errors.Is(err, signing.ErrSignatureInvalid) {
		t.Fatalf("after restart the removed key is trusted: %v", err)
	}
	if v2.EnvironmentID() != "" {
		// The identity was signed by k1, no longer trusted: it must come again from a fetch.
		t.Fatalf("identity signed by a removed key kept: %q", v2.EnvironmentID())
	}
}

// TestTamperedStateIgnored: a trust.json whose list was edited is ignored at load.
func TestTamperedStateIgnored(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	v := trust.Open("agent", signing.KeySet{"k1": k1.pub}, false, dir, discard)
	if err := v.Rotate(k1.sign(t, list(2, k1))); err != nil {
		t.Fatal(err)
	}
	// Replace the accepted list with one naming k2, keeping k1's signature.
	forged := k1.sign(t, list(2, k1))
	b, _ := signing.Encode(list(2, k2))
	forged.Statement = b
	state, _ := json.Marshal(map[string]any{"rotations": []*protocol.Signed{forged}})
	if err := os.WriteFile(filepath.Join(dir, trust.FileName), state, 0o600); err != nil {
		t.Fatal(err)
	}
	v2 := trust.Open("agent", signing.KeySet{"k1": k1.pub}, false, dir, discard)
	if len(v2.KeyIDs()) != 1 || v2.KeyIDs()[0] != "k1" {
		t.Fatalf("keys after a tampered state: %v", v2.KeyIDs())
	}
}
