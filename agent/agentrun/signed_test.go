package agentrun

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/agent/internal/configsync"
	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
)

const (
	envA = "env-a"
	envB = "env-b"
)

// authority signs statements the way the resolver does.
type authority struct {
	t    *testing.T
	id   string
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
}

func newAuthority(t *testing.T, id string) *authority {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &authority{t: t, id: id, pub: pub, priv: priv}
}

func (a *authority) sign(st any) *protocol.Signed {
	a.t.Helper()
	b, err := signing.Encode(st)
	if err != nil {
		a.t.Fatal(err)
	}
	return &protocol.Signed{Statement: b, KeyID: a.id, Signature: ed25519.Sign(a.priv, b)}
}

func (a *authority) config(typ string, version int64, data string, scope string, secretFields ...string) *protocol.Signed {
	a.t.Helper()
	h, err := signing.DataHash(json.RawMessage(data), secretFields)
	if err != nil {
		a.t.Fatal(err)
	}
	return a.sign(signing.ConfigStatement{Kind: signing.KindConfig, ConfigType: typ, Version: version, SHA256: h, Scope: scope})
}

func (a *authority) identity(agent, env string) *protocol.Signed {
	return a.sign(signing.IdentityStatement{Kind: signing.KindIdentity, AgentID: agent, EnvironmentID: env})
}

func (a *authority) trusted() TrustedKey {
	return TrustedKey{ID: a.id, PublicKey: base64.StdEncoding.EncodeToString(a.pub)}
}

// pushSigned publishes a config_update carrying statement, as any user with publish rights on the
// agent's command subject could (the test's backend user is not delivery).
func (b *backend) pushSigned(configType string, version int64, payload string, statement *protocol.Signed) {
	b.t.Helper()
	cmd := protocol.Command{CommandID: configType + "-" + itoa(int(version)), Type: protocol.CommandConfigUpdate,
		ConfigType: configType, Version: version, Payload: json.RawMessage(payload), Statement: statement}
	data, _ := json.Marshal(cmd)
	if err := b.nc.Publish(protocol.CommandSubject(b.agentID), data); err != nil {
		b.t.Fatal(err)
	}
}

func signedConfig(t *testing.T, url, dataDir string, keys ...*authority) Config {
	cfg := testConfig(t, url, agentID, dataDir)
	cfg.Trust.InsecureSkipVerify = false
	for _, k := range keys {
		cfg.Trust.PublicKeys = append(cfg.Trust.PublicKeys, k.trusted())
	}
	return cfg
}

func (b *backend) failedAck(configType string, version int64) (protocol.Ack, bool) {
	a, ok := b.ackFor(configType, version)
	return a, ok && a.Status == protocol.AckFailed
}

// TestSignedConfigsOnly: an agent that trusts the authority's key applies signed configs (an
// environment config by the identity the fetch brought) and refuses, with a failed ack naming
// signature_invalid and without caching, every push that is unsigned, signed by another key, or signed
// for another host or another environment; the previous config keeps running.
func TestSignedConfigsOnly(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	auth := newAuthority(t, "k1")
	rogue := newAuthority(t, "k1") // same id, another key
	labels := `{"static":{"env":"prod"}}`
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{
		Configs:    map[string]json.RawMessage{"labels": json.RawMessage(labels)},
		Versions:   map[string]int64{"labels": 3, "tracing": 2},
		Statements: map[string]protocol.Signed{"labels": *auth.config("labels", 3, labels, signing.EnvironmentScope(envA)), "tracing": *auth.config("tracing", 2, "null", signing.AgentScope(agentID))},
		Identity:   auth.identity(agentID, envA),
	})
	dir := t.TempDir()
	r := start(t, signedConfig(t, ns.ClientURL(), dir, auth))
	if src := r.source("labels"); src != configsync.SourceNATS || r.a.labels.Labels()["env"] != "prod" {
		t.Fatalf("labels from %s: %v", src, r.a.labels.Labels())
	}
	be.waitFor("startup ack", func() bool { a, ok := be.ackFor("labels", 3); return ok && a.Status == protocol.AckApplied })

	refused := []struct {
		name      string
		version   int64
		statement *protocol.Signed
	}{
		{"unsigned", 4, nil},
		{"signed by an untrusted key", 5, rogue.config("labels", 5, `{"static":{"env":"evil"}}`, signing.AgentScope(agentID))},
		{"another host's config", 6, auth.config("labels", 6, `{"static":{"env":"evil"}}`, signing.AgentScope("other-agent"))},
		{"another environment's config", 7, auth.config("labels", 7, `{"static":{"env":"evil"}}`, signing.EnvironmentScope(envB))},
		{"a statement of other content", 8, auth.config("labels", 8, `{"static":{"env":"fine"}}`, signing.AgentScope(agentID))},
		{"a statement of another version", 9, auth.config("labels", 3, `{"static":{"env":"evil"}}`, signing.AgentScope(agentID))},
	}
	for _, c := range refused {
		be.pushSigned("labels", c.version, `{"static":{"env":"evil"}}`, c.statement)
		be.waitFor(c.name+" refused", func() bool { _, ok := be.failedAck("labels", c.version); return ok })
		a, _ := be.ackFor("labels", c.version)
		if !strings.HasPrefix(a.Error, protocol.CodeSignatureInvalid) {
			t.Fatalf("%s: ack error %q, want signature_invalid", c.name, a.Error)
		}
		if e, _ := r.a.cache.Get("labels"); e.Version != 3 || r.a.labels.Labels()["env"] != "prod" {
			t.Fatalf("%s: cache holds v%d, labels %v; the signed v3 must keep running", c.name, e.Version, r.a.labels.Labels())
		}
	}
	// A forged deletion is refused too.
	be.pushSigned("labels", 10, "null", auth.config("labels", 10, `{"static":{}}`, signing.AgentScope(agentID)))
	be.waitFor("forged deletion refused", func() bool { _, ok := be.failedAck("labels", 10); return ok })
	if _, ok := r.a.cache.Get("labels"); !ok {
		t.Fatal("a forged deletion removed the cached labels")
	}

	// Properly signed pushes apply: this host's own, then its environment's.
	be.pushSigned("labels", 11, `{"static":{"env":"host"}}`, auth.config("labels", 11, `{"static":{"env":"host"}}`, signing.AgentScope(agentID)))
	be.waitFor("host push applied", func() bool { a, ok := be.ackFor("labels", 11); return ok && a.Status == protocol.AckApplied })
	be.pushSigned("labels", 12, `{"static":{"env":"env"}}`, auth.config("labels", 12, `{"static":{"env":"env"}}`, signing.EnvironmentScope(envA)))
	be.waitFor("environment push applied", func() bool { a, ok := be.ackFor("labels", 12); return ok && a.Status == protocol.AckApplied })
	// An old signed config replayed is ignored by the version check (acknowledged at the held version).
	be.pushSigned("labels", 11, `{"static":{"env":"host"}}`, auth.config("labels", 11, `{"static":{"env":"host"}}`, signing.AgentScope(agentID)))
	be.waitFor("replay answered", func() bool {
		n := 0
		for _, a := range be.acks {
			if a.ConfigType == "labels" && a.Version == 12 {
				n++
			}
		}
		return n >= 2
	})
	if r.a.labels.Labels()["env"] != "env" {
		t.Fatalf("after the replay labels are %v", r.a.labels.Labels())
	}
}

// TestFetchedConfigWithBadSignatureRefused: a fetched config signed for another environment is not
// cached and is acknowledged failed; a config with a valid statement in the same reply is applied.
func TestFetchedConfigWithBadSignatureRefused(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	auth := newAuthority(t, "k1")
	labels, tracing := `{"static":{"env":"prod"}}`, `{"enabled":true,"sample_ratio":0.5}`
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{
		Configs:  map[string]json.RawMessage{"labels": json.RawMessage(labels), "tracing": json.RawMessage(tracing)},
		Versions: map[string]int64{"labels": 3, "tracing": 4},
		Statements: map[string]protocol.Signed{
			"labels":  *auth.config("labels", 3, labels, signing.EnvironmentScope(envB)),
			"tracing": *auth.config("tracing", 4, tracing, signing.EnvironmentScope(envA)),
		},
		Identity: auth.identity(agentID, envA),
	})
	cfg := signedConfig(t, ns.ClientURL(), t.TempDir(), auth)
	cfg.Defaults = Defaults{"labels": json.RawMessage(`{"static":{"env":"local"}}`)}
	r := start(t, cfg)
	be.waitFor("acks", func() bool {
		_, a := be.failedAck("labels", 3)
		b, ok := be.ackFor("tracing", 4)
		return a && ok && b.Status == protocol.AckApplied
	})
	if _, ok := r.a.cache.Get("labels"); ok || r.a.labels.Labels()["env"] != "local" {
		t.Fatalf("refused labels cached or applied: %v", r.a.labels.Labels())
	}
}

// TestTamperedCacheNotUsed: a cache entry edited by hand (value changed, statement kept) and an
// unsigned entry (an agent upgraded from an unsigned release) are not used at the next start: the
// local defaults apply, while an intact signed entry still runs from the cache.
func TestTamperedCacheNotUsed(t *testing.T) {
	auth := newAuthority(t, "k1")
	dir := t.TempDir()
	c, err := configcache.Open(dir, discard())
	if err != nil {
		t.Fatal(err)
	}
	labels, tracing := `{"static":{"env":"cached"}}`, `{"enabled":true,"sample_ratio":0.5}`
	_, err = c.Apply(
		configcache.Change{ConfigType: "labels", Data: json.RawMessage(labels), Version: 3, Statement: auth.config("labels", 3, labels, signing.AgentScope(agentID))},
		configcache.Change{ConfigType: "tracing", Data: json.RawMessage(tracing), Version: 4, Statement: auth.config("tracing", 4, tracing, signing.AgentScope(agentID))},
		configcache.Change{ConfigType: "log_shipping", Data: json.RawMessage(`{"enabled":true,"level":"debug"}`), Version: 5},
	)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, configcache.FileName)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tampered := strings.Replace(string(raw), `"cached"`, `"tampered"`, 1)
	if tampered == string(raw) {
		t.Fatal("the cache file does not hold the labels value")
	}
	if err := os.WriteFile(path, []byte(tampered), 0o600); err != nil {
		t.Fatal(err)
	}

	// No backend: the agent starts from its cache and local defaults.
	cfg := signedConfig(t, "nats://127.0.0.1:"+itoa(freePort(t)), dir, auth)
	cfg.FetchTimeout = 200 * 1e6
	cfg.Defaults = Defaults{"labels": json.RawMessage(`{"static":{"env":"local"}}`)}
	r := start(t, cfg)
	if src := r.source("labels"); src != configsync.SourceLocal || r.a.labels.Labels()["env"] != "local" {
		t.Fatalf("tampered labels: applied from %s, labels %v", src, r.a.labels.Labels())
	}
	if src := r.source("log_shipping"); src != configsync.SourceLocal {
		t.Fatalf("unsigned log_shipping applied from %s", src)
	}
	if src := r.source("tracing"); src != configsync.SourceCache {
		t.Fatalf("intact signed tracing applied from %s, want the cache", src)
	}
	if !r.logs.contains("cached config not used") {
		t.Fatalf("no warning about the refused cache entries:\n%s", r.logs.String())
	}
}

// TestTrustRequired: an agent YAML without trusted keys is refused unless it opts out explicitly, and
// the opt-out is logged loudly.
func TestTrustRequired(t *testing.T) {
	base := "agent_id: a1\nnats:\n  url: nats://127.0.0.1:4222\ndata_dir: " + t.TempDir() + "\n"
	if _, err := ParseConfig([]byte(base)); err == nil || !strings.Contains(err.Error(), "trust.public_keys") {
		t.Fatalf("config without trust: %v", err)
	}
	if _, err := ParseConfig([]byte(base + "trust:\n  public_keys:\n    - id: k1\n      public_key: bm90LWEta2V5\n")); err == nil {
		t.Fatal("a malformed public key was accepted")
	}
	auth := newAuthority(t, "k1")
	cfg, err := ParseConfig([]byte(base + "trust:\n  public_keys:\n    - id: k1\n      public_key: " + auth.trusted().PublicKey + "\n"))
	if err != nil || len(cfg.Trust.PublicKeys) != 1 {
		t.Fatalf("config with a key: %v", err)
	}
	if _, err := ParseConfig([]byte(base + "trust:\n  insecure_skip_verify: true\n")); err != nil {
		t.Fatalf("explicit opt-out: %v", err)
	}
	ns := startNATS(t, agentID, 0)
	newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{})
	r := start(t, testConfig(t, ns.ClientURL(), agentID, t.TempDir()))
	if !r.logs.contains("INSECURE: trust.insecure_skip_verify") {
		t.Fatalf("skip_verify not logged:\n%s", r.logs.String())
	}
}

// TestKeyRotationByFetch: the fetch reply carries a trusted-key list {k1, k2} signed by k1, which the
// agent (trusting k1 only) adopts and persists; configs signed by k2 then apply, configs by k1 still do,
// and after a restart without a backend the rotated set still verifies the cache. A key in no list
// (k3) is refused with signature_invalid.
func TestKeyRotationByFetch(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	k1, k2, k3 := newAuthority(t, "k1"), newAuthority(t, "k2"), newAuthority(t, "k3")
	list := signing.TrustedKeysStatement{Kind: signing.KindTrustedKeys, Version: 2,
		Keys: []signing.PublicKey{{ID: "k1", PublicKey: k1.pub}, {ID: "k2", PublicKey: k2.pub}}}
	labels := `{"static":{"env":"k2"}}`
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{
		Configs:     map[string]json.RawMessage{"labels": json.RawMessage(labels)},
		Versions:    map[string]int64{"labels": 3},
		Statements:  map[string]protocol.Signed{"labels": *k2.config("labels", 3, labels, signing.EnvironmentScope(envA))},
		Identity:    k1.identity(agentID, envA),
		TrustedKeys: k1.sign(list),
	})
	dir := t.TempDir()
	r := start(t, signedConfig(t, ns.ClientURL(), dir, k1))
	be.waitFor("k2's config applied", func() bool { a, ok := be.ackFor("labels", 3); return ok && a.Status == protocol.AckApplied })
	be.pushSigned("labels", 4, `{"static":{"env":"k1"}}`, k1.config("labels", 4, `{"static":{"env":"k1"}}`, signing.AgentScope(agentID)))
	be.waitFor("k1's push applied", func() bool { a, ok := be.ackFor("labels", 4); return ok && a.Status == protocol.AckApplied })
	be.pushSigned("labels", 5, `{"static":{"env":"k3"}}`, k3.config("labels", 5, `{"static":{"env":"k3"}}`, signing.AgentScope(agentID)))
	be.waitFor("k3's push refused", func() bool { _, ok := be.failedAck("labels", 5); return ok })
	if a, _ := be.ackFor("labels", 5); !strings.HasPrefix(a.Error, protocol.CodeSignatureInvalid) {
		t.Fatalf("k3's push acked %q", a.Error)
	}
	be.pushSigned("labels", 6, `{"static":{"env":"k2"}}`, k2.config("labels", 6, `{"static":{"env":"k2"}}`, signing.AgentScope(agentID)))
	be.waitFor("k2's push applied", func() bool { a, ok := be.ackFor("labels", 6); return ok && a.Status == protocol.AckApplied })
	r.stop(t)

	// Restart with no backend: the rotated set (from trust.json) verifies k2's cached entry.
	cfg := signedConfig(t, "nats://127.0.0.1:"+itoa(freePort(t)), dir, k1)
	cfg.FetchTimeout = 200 * 1e6
	r2 := start(t, cfg)
	if src := r2.source("labels"); src != configsync.SourceCache || r2.a.labels.Labels()["env"] != "k2" {
		t.Fatalf("after restart labels from %s: %v", src, r2.a.labels.Labels())
	}
}

// TestTrustKeysFile: trust.public_keys_file (the "id=base64" list a deployment provisions, as
// `resolver public-keys` writes it) is enough for the agent to verify: a config signed by a key in it
// applies, one signed by another key is refused. A missing or empty file stops the agent at start.
func TestTrustKeysFile(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	auth, other := newAuthority(t, "k1"), newAuthority(t, "k2")
	labels := `{"static":{"env":"file"}}`
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{
		Configs:    map[string]json.RawMessage{"labels": json.RawMessage(labels)},
		Versions:   map[string]int64{"labels": 3},
		Statements: map[string]protocol.Signed{"labels": *auth.config("labels", 3, labels, signing.AgentScope(agentID))},
		Identity:   auth.identity(agentID, envA),
	})
	keysFile := filepath.Join(t.TempDir(), "trusted-keys")
	if err := os.WriteFile(keysFile, []byte(auth.id+"="+auth.trusted().PublicKey+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := signedConfig(t, ns.ClientURL(), t.TempDir())
	cfg.Trust.PublicKeysFile = keysFile
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a config trusting a keys file only: %v", err)
	}
	r := start(t, cfg)
	be.waitFor("startup ack", func() bool { a, ok := be.ackFor("labels", 3); return ok && a.Status == protocol.AckApplied })
	if r.a.labels.Labels()["env"] != "file" {
		t.Fatalf("labels %v", r.a.labels.Labels())
	}
	be.pushSigned("labels", 4, `{"static":{"env":"evil"}}`, other.config("labels", 4, `{"static":{"env":"evil"}}`, signing.AgentScope(agentID)))
	be.waitFor("k2's push refused", func() bool { _, ok := be.failedAck("labels", 4); return ok })

	for name, content := range map[string]*string{"missing": nil, "empty": new(string)} {
		path := filepath.Join(t.TempDir(), "trusted-keys")
		if content != nil {
			if err := os.WriteFile(path, []byte(*content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c := signedConfig(t, ns.ClientURL(), t.TempDir())
		c.Trust.PublicKeysFile = path
		c.LogOutput = io.Discard
		if _, err := newAgent(c); err == nil || !strings.Contains(err.Error(), "trust.public_keys_file") {
			t.Errorf("%s keys file: agent built (%v)", name, err)
		}
	}
}

// TestUntrustedKeyPushFetchesTrustedKeys: a push signed by a key the agent does not trust yet is
// refused (signature_invalid) and makes the agent fetch once; the reply now carries a trusted-key list
// signed by the key it trusts, so it adopts the new key and applies the fetched config without a
// restart. A second push by another unknown key within keysRefetchEvery is refused without a fetch.
func TestUntrustedKeyPushFetchesTrustedKeys(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	k1, k2, k3 := newAuthority(t, "k1"), newAuthority(t, "k2"), newAuthority(t, "k3")
	labels := `{"static":{"env":"k1"}}`
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{
		Configs:    map[string]json.RawMessage{"labels": json.RawMessage(labels)},
		Versions:   map[string]int64{"labels": 3},
		Statements: map[string]protocol.Signed{"labels": *k1.config("labels", 3, labels, signing.EnvironmentScope(envA))},
		Identity:   k1.identity(agentID, envA),
	})
	cfg := signedConfig(t, ns.ClientURL(), t.TempDir(), k1)
	cfg.hooks = &hooks{keysRefetchJitter: new(time.Duration)} // fetch at once
	r := start(t, cfg)
	be.waitFor("startup ack", func() bool { a, ok := be.ackFor("labels", 3); return ok && a.Status == protocol.AckApplied })
	be.mu.Lock()
	fetches := be.fetches
	// The resolver moved to k2 and carries the list {k1, k2} signed by k1.
	rotated := `{"static":{"env":"k2"}}`
	be.reply = protocol.FetchReply{
		Configs:    map[string]json.RawMessage{"labels": json.RawMessage(rotated)},
		Versions:   map[string]int64{"labels": 4},
		Statements: map[string]protocol.Signed{"labels": *k2.config("labels", 4, rotated, signing.EnvironmentScope(envA))},
		Identity:   k1.identity(agentID, envA),
		TrustedKeys: k1.sign(signing.TrustedKeysStatement{Kind: signing.KindTrustedKeys, Version: 2,
			Keys: []signing.PublicKey{{ID: "k1", PublicKey: k1.pub}, {ID: "k2", PublicKey: k2.pub}}}),
	}
	be.mu.Unlock()

	be.pushSigned("labels", 4, rotated, k2.config("labels", 4, rotated, signing.EnvironmentScope(envA)))
	be.waitFor("k2's push refused", func() bool {
		// Any failed ack of v4: the applied one after the fetch may already have followed it.
		for _, a := range be.acks {
			if a.ConfigType == "labels" && a.Version == 4 && a.Status == protocol.AckFailed && strings.HasPrefix(a.Error, protocol.CodeSignatureInvalid) {
				return true
			}
		}
		return false
	})
	be.waitFor("the fetch brings the list and k2's config applies", func() bool {
		a, ok := be.ackFor("labels", 4)
		return ok && a.Status == protocol.AckApplied && be.fetches == fetches+1
	})
	if r.a.labels.Labels()["env"] != "k2" {
		t.Fatalf("labels after the rotation: %v", r.a.labels.Labels())
	}

	// Another unknown key right after: refused, and no second fetch (rate limited).
	be.pushSigned("labels", 5, `{"static":{"env":"k3"}}`, k3.config("labels", 5, `{"static":{"env":"k3"}}`, signing.EnvironmentScope(envA)))
	be.waitFor("k3's push refused", func() bool { _, ok := be.failedAck("labels", 5); return ok })
	// The fetch is asked for (and logged) while the push is verified, before its ack is sent.
	if n := strings.Count(r.logs.String(), "a config names a key this agent does not trust"); n != 1 {
		t.Fatalf("%d key fetches asked for after two untrusted pushes, want one:\n%s", n, r.logs.String())
	}
}
