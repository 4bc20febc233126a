package signing_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
)

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func sign(t *testing.T, priv ed25519.PrivateKey, id string, st any) *protocol.Signed {
	t.Helper()
	b, err := signing.Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	return &protocol.Signed{Statement: b, KeyID: id, Signature: ed25519.Sign(priv, b)}
}

func configStatement(t *testing.T, typ string, v int64, data string, secret []string, scope string) signing.ConfigStatement {
	t.Helper()
	h, err := signing.DataHash(json.RawMessage(data), secret)
	if err != nil {
		t.Fatal(err)
	}
	return signing.ConfigStatement{Kind: signing.KindConfig, ConfigType: typ, Version: v, SHA256: h, Scope: scope}
}

func TestVerifyConfig(t *testing.T) {
	pub, priv := newKey(t)
	_, other := newKey(t)
	ks := signing.KeySet{"k1": pub}
	data := `{"metrics":"30s","inventory":"1h","heartbeat":"15s","processes":"1m"}`
	envSigned := sign(t, priv, "k1", configStatement(t, "intervals", 7, data, nil, signing.EnvironmentScope("env-a")))
	agentSigned := sign(t, priv, "k1", configStatement(t, "intervals", 7, data, nil, signing.AgentScope("agent-1")))
	deletion := sign(t, priv, "k1", configStatement(t, "intervals", 8, "null", nil, signing.AgentScope("agent-1")))
	want := signing.Config{AgentID: "agent-1", EnvironmentID: "env-a", ConfigType: "intervals", Version: 7, Data: json.RawMessage(data)}

	ok := func(name string, s *protocol.Signed, c signing.Config) {
		t.Helper()
		if err := ks.VerifyConfig(s, c); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := func(name string, s *protocol.Signed, c signing.Config) {
		t.Helper()
		if err := ks.VerifyConfig(s, c); !errors.Is(err, signing.ErrSignatureInvalid) {
			t.Errorf("%s: got %v, want signature_invalid", name, err)
		}
	}
	ok("environment scope", envSigned, want)
	ok("agent scope", agentSigned, want)
	// Member order and whitespace do not matter: the hash is over the canonical form.
	reordered := want
	reordered.Data = json.RawMessage(`{ "processes":"1m","heartbeat":"15s","inventory":"1h","metrics":"30s"}`)
	ok("reordered data", envSigned, reordered)
	ok("deletion", deletion, signing.Config{AgentID: "agent-1", ConfigType: "intervals", Version: 8})

	other1 := want
	other1.AgentID = "agent-2"
	bad("another agent's statement", agentSigned, other1)
	otherEnv := want
	otherEnv.EnvironmentID = "env-b"
	bad("another environment", envSigned, otherEnv)
	noEnv := want
	noEnv.EnvironmentID = ""
	bad("environment scope without an identity", envSigned, noEnv)
	changed := want
	changed.Data = json.RawMessage(`{"metrics":"1s","inventory":"1h","heartbeat":"15s","processes":"1m"}`)
	bad("changed value", envSigned, changed)
	older := want
	older.Version = 8
	bad("other version", envSigned, older)
	bad("deletion signed as content", envSigned, signing.Config{AgentID: "agent-1", EnvironmentID: "env-a", ConfigType: "intervals", Version: 7})
	bad("content against a deletion", deletion, signing.Config{AgentID: "agent-1", ConfigType: "intervals", Version: 8, Data: json.RawMessage(data)})
	bad("unsigned", nil, want)
	bad("untrusted key", sign(t, other, "k1", configStatement(t, "intervals", 7, data, nil, signing.AgentScope("agent-1"))), want)
	unknown := *agentSigned
	unknown.KeyID = "k2"
	bad("unknown key id", &unknown, want)
	tampered := *agentSigned
	tampered.Statement = append([]byte(nil), agentSigned.Statement...)
	tampered.Statement[len(tampered.Statement)-3] ^= 1
	bad("tampered statement", &tampered, want)
	bad("identity kind as config", sign(t, priv, "k1", signing.IdentityStatement{Kind: signing.KindIdentity, AgentID: "agent-1", EnvironmentID: "env-a"}), want)
}

func TestRedactedHash(t *testing.T) {
	// The agent hashes what it caches: injected values redacted. The resolver hashes the same form.
	injected := `[{"type":"postgres","name":"db","host":"db","port":5432,"password":"s3cret"}]`
	redacted := `[{"type":"postgres","name":"db","host":"db","port":5432,"password":"[REDACTED]"}]`
	a, err := signing.DataHash(json.RawMessage(injected), []string{"/0/password"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := signing.DataHash(json.RawMessage(redacted), nil)
	if err != nil {
		t.Fatal(err)
	}
	if *a != *b {
		t.Fatalf("hash of injected-then-redacted %s != hash of redacted %s", *a, *b)
	}
}

func TestIdentityAndTrustedKeys(t *testing.T) {
	pub, priv := newKey(t)
	pub2, priv2 := newKey(t)
	ks := signing.KeySet{"k1": pub}
	env, err := ks.Identity(sign(t, priv, "k1", signing.IdentityStatement{Kind: signing.KindIdentity, AgentID: "a", EnvironmentID: "e"}), "a")
	if err != nil || env != "e" {
		t.Fatalf("identity = %q, %v", env, err)
	}
	if _, err := ks.Identity(sign(t, priv, "k1", signing.IdentityStatement{Kind: signing.KindIdentity, AgentID: "b", EnvironmentID: "e"}), "a"); !errors.Is(err, signing.ErrSignatureInvalid) {
		t.Fatalf("identity of another agent: %v", err)
	}
	list := signing.TrustedKeysStatement{Kind: signing.KindTrustedKeys, Version: 2, Keys: []signing.PublicKey{{ID: "k1", PublicKey: pub}, {ID: "k2", PublicKey: pub2}}}
	next, v, err := ks.TrustedKeys(sign(t, priv, "k1", list))
	if err != nil || v != 2 || len(next) != 2 {
		t.Fatalf("trusted keys = %v, %d, %v", next, v, err)
	}
	if _, _, err := ks.TrustedKeys(sign(t, priv2, "k2", list)); !errors.Is(err, signing.ErrSignatureInvalid) {
		t.Fatalf("a list signed by a key not yet trusted was accepted: %v", err)
	}
	parsed, err := signing.ParseKeys(next.String())
	if err != nil || parsed.String() != next.String() {
		t.Fatalf("ParseKeys(String()) = %v, %v", parsed, err)
	}
	if _, err := signing.ParseKeys("k1=" + base64.StdEncoding.EncodeToString([]byte("short"))); err == nil {
		t.Fatal("a short key was accepted")
	}
}
