package e2e

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver"
)

// TestKeyRotation walks the README's rotation procedure on real processes. Statements the old key
// signed stay valid while agents trust it (an agent that trusts only the old key, starting from an
// empty cache after the resolver moved to the new key, applies the stored old-key statements); new
// configs are signed with the new key; an agent that does not trust it yet acknowledges them
// signature_invalid, which GET /environments/{id}/drift and the host's apply status show, and keeps
// its running config. A trusted-key list made by `resolver sign-trusted-keys` with a key the agents do
// not trust is refused; the same list signed with the old key is adopted from the fetch and the agent
// converges without its YAML changing. Last, a config published on an agent's command subject by a
// NATS user that is not delivery, signed by an untrusted key, is refused with a failed ack.
func TestKeyRotation(t *testing.T) {
	s := startStack(t, stackOptions{replicas: 1, agents: []string{"host-a", "host-b"}})
	a, b := s.agents["host-a"], s.agents["host-b"]
	s.waitOnline(1)
	oldKeys := s.trustedSet()
	oldID := onlyKeyID(t, oldKeys)

	// The old key signs the first config.
	v1 := s.putEnvConfig(1, "labels", map[string]any{"static": map[string]any{"key": "old"}})
	s.waitApplied(1, convergeTimeout, "labels", v1, a, b)
	s.assertPushedKey(a, "labels", v1, oldID)

	// 1-2. A new key; host-a trusts both (its YAML, restarted), host-b still the old one only.
	secrets := filepath.Join(s.dir, "secrets")
	newPath := filepath.Join(secrets, "signing-new.key")
	newKeys := keySetOf(t, newPath)
	newID := onlyKeyID(t, newKeys)
	both := union(oldKeys, newKeys)
	s.restartAgentTrusting(a, both)

	// 3. The resolver signs with the new key.
	s.restartService("resolver", "RESOLVER_SIGNING_KEY_FILE="+newPath)

	// The old key's statements stay valid while trusted: host-b, its cache and trust state gone,
	// fetches the stored old-key statements and applies them.
	if !b.proc.stop(t) {
		t.Errorf("host-b's agent needed SIGKILL to stop")
	}
	for _, f := range []string{b.cachePath(), filepath.Join(b.dataDir, "trust.json")} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	fetchesBefore := len(s.obs.fetchRepliesTo(b.agentID))
	b.proc.start(t)
	s.eventually(convergeTimeout, "host-b, trusting the old key only, re-caching labels from old-key statements", func() error {
		replies := s.obs.fetchRepliesTo(b.agentID)
		if len(replies) <= fetchesBefore {
			return errors.New("no fetch by host-b since its restart")
		}
		rep := replies[len(replies)-1]
		if st, ok := rep.Statements["labels"]; !ok || st.KeyID != oldID || rep.Identity == nil || rep.Identity.KeyID != oldID {
			return fmt.Errorf("fetch reply statements %v, identity %v: want the stored statements of %s", keyIDs(rep.Statements), rep.Identity, oldID)
		}
		st, ok := cachedStatement(b, "labels")
		if !ok || st.KeyID != oldID {
			return fmt.Errorf("host-b's cached labels statement: %v (ok %v)", st, ok)
		}
		return nil
	})

	// New configs use the new key: host-a applies, host-b refuses and drift says why.
	v2 := s.putEnvConfig(1, "labels", map[string]any{"static": map[string]any{"key": "new"}})
	s.waitApplied(1, convergeTimeout, "labels", v2, a)
	s.assertPushedKey(a, "labels", v2, newID)
	s.waitSignatureInvalidInDrift(b, "labels", v2)
	if e := s.mustCacheEntry(b, "labels"); e.Version != v1 {
		t.Errorf("host-b caches labels v%d after refusing v%d, want its running v%d", e.Version, v2, v1)
	}

	// A trusted-key list signed by a key the agents do not trust is refused.
	roguePath := filepath.Join(secrets, "signing-rogue.key")
	keySetOf(t, roguePath)
	forged := s.signTrustedKeys(roguePath, 2, both, filepath.Join(secrets, "trusted-keys-forged.json"))
	s.restartService("resolver", "RESOLVER_SIGNING_KEY_FILE="+newPath, "RESOLVER_TRUSTED_KEYS_FILE="+forged)
	refusedBefore := len(b.proc.logLines("fetched trusted-key list refused"))
	failedBefore := s.obs.failedAcks(b.agentID, "labels", v2)
	s.restartAgent(b)
	s.eventually(convergeTimeout, "host-b refusing the forged trusted-key list and, still, the new key's config", func() error {
		if len(b.proc.logLines("fetched trusted-key list refused")) <= refusedBefore {
			return errors.New("host-b did not log the refused list")
		}
		if s.obs.failedAcks(b.agentID, "labels", v2) <= failedBefore {
			return errors.New("host-b sent no new failed ack of the new key's config after its restart")
		}
		return nil
	})
	s.waitSignatureInvalidInDrift(b, "labels", v2)

	// The list signed by the old key is adopted: host-b converges, its YAML unchanged.
	list := s.signTrustedKeys(filepath.Join(secrets, "signing.key"), 2, both, filepath.Join(secrets, "trusted-keys.json"))
	s.restartService("resolver", "RESOLVER_SIGNING_KEY_FILE="+newPath, "RESOLVER_TRUSTED_KEYS_FILE="+list)
	rotatedBefore := len(b.proc.logLines("trusted keys rotated"))
	s.restartAgent(b)
	s.waitApplied(1, convergeTimeout, "labels", v2, b)
	if len(b.proc.logLines("trusted keys rotated")) <= rotatedBefore {
		t.Errorf("host-b applied the new key's config without logging the rotation")
	}
	s.waitConverged(1, convergeTimeout)

	// A NATS user that is not delivery (the test's observer, allowed to publish anywhere) pushes a
	// config signed by an untrusted key: refused with a failed ack, the running config kept.
	forgedV := v2 + 1000
	payload := json.RawMessage(`{"static":{"key":"forged"}}`)
	h, err := signing.DataHash(payload, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := signWithKeyFile(t, roguePath, signing.ConfigStatement{Kind: signing.KindConfig, ConfigType: "labels", Version: forgedV,
		SHA256: h, Scope: signing.AgentScope(b.agentID)})
	cmd, _ := json.Marshal(protocol.Command{CommandID: "forged-1", Type: protocol.CommandConfigUpdate, ConfigType: "labels",
		Version: forgedV, Payload: payload, Statement: st})
	if err := s.obs.nc.Publish(protocol.CommandSubject(b.agentID), cmd); err != nil {
		t.Fatal(err)
	}
	s.waitSignatureInvalidInDrift(b, "labels", forgedV)
	if e := s.mustCacheEntry(b, "labels"); e.Version != v2 || bytes.Contains(e.ConfigData, []byte("forged")) {
		t.Errorf("host-b caches labels v%d %s after the forged push, want v%d", e.Version, e.ConfigData, v2)
	}
	if err := s.alive(); err != nil {
		t.Fatal(err)
	}
}

// failedAcks counts the signature_invalid acks one agent published for a type and version.
func (o *observer) failedAcks(agentID, configType string, version int64) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, a := range o.acks {
		if a.AgentID == agentID && a.ConfigType == configType && a.Version == version &&
			a.Status == protocol.AckFailed && strings.HasPrefix(a.Error, protocol.CodeSignatureInvalid) {
			n++
		}
	}
	return n
}

// trustedSet is the stack's resolver key as agents trust it.
func (s *stack) trustedSet() signing.KeySet {
	s.t.Helper()
	ks := signing.KeySet{}
	for _, k := range s.trustKeys {
		if err := ks.Add(k["id"], k["public_key"]); err != nil {
			s.t.Fatal(err)
		}
	}
	return ks
}

// keySetOf creates a key file at path (unless there) and returns its public key.
func keySetOf(t *testing.T, path string) signing.KeySet {
	t.Helper()
	pub, err := resolver.EnsureSigningKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := signing.ParseKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func onlyKeyID(t *testing.T, ks signing.KeySet) string {
	t.Helper()
	if len(ks) != 1 {
		t.Fatalf("key set %s: want one key", ks)
	}
	for id := range ks {
		return id
	}
	return ""
}

func union(sets ...signing.KeySet) signing.KeySet {
	out := signing.KeySet{}
	for _, ks := range sets {
		for id, k := range ks {
			out[id] = k
		}
	}
	return out
}

func keyIDs(m map[string]protocol.Signed) map[string]string {
	out := map[string]string{}
	for t, s := range m {
		out[t] = s.KeyID
	}
	return out
}

// signWithKeyFile signs a statement with a key file, as a holder of that key could.
func signWithKeyFile(t *testing.T, path string, statement any) *protocol.Signed {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	id, seedB64, _ := strings.Cut(strings.TrimSpace(string(raw)), ":")
	seed, err := base64.StdEncoding.DecodeString(seedB64)
	if err != nil || len(seed) != ed25519.SeedSize {
		t.Fatalf("key file %s: %v", path, err)
	}
	b, err := signing.Encode(statement)
	if err != nil {
		t.Fatal(err)
	}
	return &protocol.Signed{Statement: b, KeyID: id, Signature: ed25519.Sign(ed25519.NewKeyFromSeed(seed), b)}
}

// assertPushedKey checks that the push of a type's version to agent a carried a statement of keyID.
func (s *stack) assertPushedKey(a *agent, configType string, version int64, keyID string) {
	s.t.Helper()
	cmds := s.obs.commandsFor(a.agentID, configType, version)
	if len(cmds) == 0 {
		s.t.Fatalf("no push of %s v%d to %s seen", configType, version, a.hostname)
	}
	for _, c := range cmds {
		if c.cmd.Statement == nil || c.cmd.Statement.KeyID != keyID {
			s.t.Errorf("push of %s v%d to %s carries statement %v, want one signed by %s", configType, version, a.hostname, c.cmd.Statement, keyID)
		}
	}
}

// cachedStatement is the statement an agent's cache file keeps with a type's entry.
func cachedStatement(a *agent, configType string) (protocol.Signed, bool) {
	raw, err := os.ReadFile(a.cachePath())
	if err != nil {
		return protocol.Signed{}, false
	}
	var entries []struct {
		ConfigType string           `json:"config_type"`
		Statement  *protocol.Signed `json:"statement"`
	}
	if json.Unmarshal(raw, &entries) != nil {
		return protocol.Signed{}, false
	}
	for _, e := range entries {
		if e.ConfigType == configType && e.Statement != nil {
			return *e.Statement, true
		}
	}
	return protocol.Signed{}, false
}

// waitSignatureInvalidInDrift waits until the API shows agent a's failed apply of a type's version with
// signature_invalid, both in the host's apply status and as a reason in the environment's drift.
func (s *stack) waitSignatureInvalidInDrift(a *agent, configType string, version int64) {
	s.t.Helper()
	s.eventually(convergeTimeout, fmt.Sprintf("%s's signature_invalid for %s v%d in its status and in drift", a.hostname, configType, version), func() error {
		h, r, ok := s.host(1, a)
		if !ok {
			return errors.New(r.String())
		}
		st := h.ApplyStatus[configType]
		if st.Version != version || st.Status != protocol.AckFailed || !strings.HasPrefix(st.Error, protocol.CodeSignatureInvalid) {
			return fmt.Errorf("apply_status[%s] = %s", configType, jsonString(st))
		}
		d, r, ok := s.drift(1)
		if !ok {
			return errors.New(r.String())
		}
		want := fmt.Sprintf("%s: version %d failed to apply: %s", configType, version, protocol.CodeSignatureInvalid)
		for _, dh := range d.Hosts {
			if dh.HostID != a.hostID {
				continue
			}
			for _, reason := range dh.Reasons {
				if strings.HasPrefix(reason, want) {
					return nil
				}
			}
			return fmt.Errorf("drift lists %s with reasons %q", a.hostname, dh.Reasons)
		}
		return fmt.Errorf("drift does not list %s: %s", a.hostname, r.body)
	})
}

// restartService restarts every replica of kind with env (NAME=value) set on top of its environment
// (the last setting of a name wins) and waits until each is ready.
func (s *stack) restartService(kind string, env ...string) {
	s.t.Helper()
	for _, svc := range s.services[kind] {
		if !svc.proc.stop(s.t) {
			s.t.Errorf("%s needed SIGKILL to stop", svc.name)
		}
		svc.proc.env = append(svc.proc.env, env...)
		svc.proc.start(s.t)
	}
	for _, svc := range s.services[kind] {
		s.waitReady(svc)
	}
}

// restartAgent restarts an agent process and waits for its next "agent running" line.
func (s *stack) restartAgent(a *agent) {
	s.t.Helper()
	runs := len(a.proc.logLines("agent running"))
	if !a.proc.stop(s.t) {
		s.t.Errorf("%s's agent needed SIGKILL to stop", a.hostname)
	}
	a.proc.start(s.t)
	s.eventually(convergeTimeout, a.hostname+" running again", func() error {
		if len(a.proc.logLines("agent running")) <= runs {
			return errors.New("no new 'agent running' line")
		}
		return nil
	})
}

// restartAgentTrusting rewrites agent a's trust.public_keys to keys and restarts it.
func (s *stack) restartAgentTrusting(a *agent, keys signing.KeySet) {
	s.t.Helper()
	path := filepath.Join(s.dir, "agents", a.hostname, "agent.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		s.t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		s.t.Fatal(err)
	}
	var list []map[string]string
	for _, item := range strings.Split(keys.String(), ",") {
		id, key, _ := strings.Cut(item, "=")
		list = append(list, map[string]string{"id": id, "public_key": key})
	}
	cfg["trust"] = map[string]any{"public_keys": list}
	if raw, err = yaml.Marshal(cfg); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		s.t.Fatal(err)
	}
	s.restartAgent(a)
}

// signTrustedKeys runs `resolver sign-trusted-keys` with the key file keyFile, writes its output to out
// and returns out.
func (s *stack) signTrustedKeys(keyFile string, version int64, keys signing.KeySet, out string) string {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.bins, "resolver"), "sign-trusted-keys", "-version", fmt.Sprint(version), "-keys", keys.String())
	cmd.Env = append(baseEnv(), "RESOLVER_SIGNING_KEY_FILE="+keyFile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		s.t.Fatalf("resolver sign-trusted-keys: %v\n%s", err, stderr.String())
	}
	if err := os.WriteFile(out, stdout.Bytes(), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return out
}
