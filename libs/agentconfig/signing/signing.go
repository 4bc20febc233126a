// Package signing is ConfigSync's statement format: what the config authority (the resolver) signs
// and what an agent verifies before it caches or applies a config. A statement is the RFC 8785
// canonical JSON of a small object; it is signed with ed25519 and names its key id. Three kinds exist:
//
//   - config: {kind, config_type, version, sha256, scope} where sha256 is the hex SHA-256 of the
//     canonical redacted config_data (null for a deletion) and scope is "agent:<agent_id>" for a
//     host-specific config or "environment:<environment_id>" for one every host of an environment runs;
//   - identity: {kind, agent_id, environment_id}, binding an agent to its environment;
//   - trusted_keys: {kind, version, keys}, a new list of trusted public keys (rotation), valid when
//     signed by a key the agent already trusts.
//
// The package uses only the standard library's crypto and agentconfig's canonical form, so the agent
// can import it.
package signing

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// ErrSignatureInvalid is wrapped by every verification failure; its text is the ack error code.
var ErrSignatureInvalid = errors.New(protocol.CodeSignatureInvalid)

// ErrUntrustedKey is wrapped too when the statement names a key the verifier does not trust: a forgery,
// or a key rotation the verifier has not learnt yet (the agent then fetches the trusted-key list).
var ErrUntrustedKey = errors.New("key is not trusted")

// untrustedKeyError says which key was not trusted; it matches ErrUntrustedKey.
type untrustedKeyError struct{ id string }

func (e untrustedKeyError) Error() string        { return fmt.Sprintf("key %q is not trusted", e.id) }
func (e untrustedKeyError) Is(target error) bool { return target == ErrUntrustedKey }

// Statement kinds.
const (
	KindConfig      = "config"
	KindIdentity    = "identity"
	KindTrustedKeys = "trusted_keys"
)

// Scope prefixes.
const (
	scopeAgent       = "agent:"
	scopeEnvironment = "environment:"
)

// AgentScope is the scope of a host-specific config (host_override, merged, or a host tombstone).
func AgentScope(agentID string) string { return scopeAgent + agentID }

// EnvironmentScope is the scope of a config every host of the environment without a row of its own runs.
func EnvironmentScope(environmentID string) string { return scopeEnvironment + environmentID }

// ConfigStatement is the signed description of one effective config.
type ConfigStatement struct {
	Kind       string  `json:"kind"`
	ConfigType string  `json:"config_type"`
	Version    int64   `json:"version"`
	SHA256     *string `json:"sha256"`
	Scope      string  `json:"scope"`
}

// IdentityStatement binds an agent id to its environment id.
type IdentityStatement struct {
	Kind          string `json:"kind"`
	AgentID       string `json:"agent_id"`
	EnvironmentID string `json:"environment_id"`
}

// TrustedKeysStatement is a list of trusted public keys; Version orders lists (a lower one is a replay).
type TrustedKeysStatement struct {
	Kind    string      `json:"kind"`
	Version int64       `json:"version"`
	Keys    []PublicKey `json:"keys"`
}

// PublicKey is one trusted ed25519 public key with its id.
type PublicKey struct {
	ID        string `json:"id"`
	PublicKey []byte `json:"public_key"`
}

// DataHash is the statement hash of a config: the hex SHA-256 of the canonical form of data with the
// values at secretFields redacted (what the agent caches). Null data (a deletion) has no hash.
func DataHash(data json.RawMessage, secretFields []string) (*string, error) {
	if agentconfig.IsNull(data) {
		return nil, nil
	}
	red, err := agentconfig.Redact(data, secretFields)
	if err != nil {
		return nil, fmt.Errorf("signing: hash: %w", err)
	}
	canon, err := agentconfig.Canonicalize(red)
	if err != nil {
		return nil, fmt.Errorf("signing: hash: %w", err)
	}
	sum := sha256.Sum256(canon)
	h := hex.EncodeToString(sum[:])
	return &h, nil
}

// Encode returns the canonical JSON bytes of a statement: the bytes that are signed.
func Encode(statement any) ([]byte, error) {
	raw, err := json.Marshal(statement)
	if err != nil {
		return nil, fmt.Errorf("signing: encode statement: %w", err)
	}
	canon, err := agentconfig.Canonicalize(raw)
	if err != nil {
		return nil, fmt.Errorf("signing: encode statement: %w", err)
	}
	return canon, nil
}

// KeySet is the set of public keys an agent trusts, by key id.
type KeySet map[string]ed25519.PublicKey

// ParseKeys reads trusted keys written as "id=base64(public key)" items separated by commas or
// whitespace (the form of CONFIGSYNC_TRUST_PUBLIC_KEYS and of the agent's trust.public_keys entries).
func ParseKeys(spec string) (KeySet, error) {
	ks := KeySet{}
	for _, item := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		id, b64, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("signing: trusted key %q: want id=base64", item)
		}
		if err := ks.Add(id, b64); err != nil {
			return nil, err
		}
	}
	return ks, nil
}

// Add trusts one key given as standard base64.
func (ks KeySet) Add(id, b64 string) error {
	if id == "" {
		return errors.New("signing: trusted key: id is empty")
	}
	pub, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("signing: trusted key %s: want the base64 of a %d-byte ed25519 public key", id, ed25519.PublicKeySize)
	}
	if _, dup := ks[id]; dup {
		return fmt.Errorf("signing: trusted key %s listed twice", id)
	}
	ks[id] = ed25519.PublicKey(pub)
	return nil
}

// String renders the set in ParseKeys form, ordered by id.
func (ks KeySet) String() string {
	ids := slices.Sorted(maps.Keys(ks))
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id + "=" + base64.StdEncoding.EncodeToString(ks[id])
	}
	return strings.Join(parts, ",")
}

// verify checks s's signature with a trusted key and decodes its statement strictly into v.
func (ks KeySet) verify(s *protocol.Signed, kind string, v any) error {
	if s == nil || len(s.Statement) == 0 {
		return fmt.Errorf("%w: no signed statement", ErrSignatureInvalid)
	}
	pub, ok := ks[s.KeyID]
	if !ok {
		return fmt.Errorf("%w: %w", ErrSignatureInvalid, untrustedKeyError{truncate(s.KeyID)})
	}
	if len(s.Signature) != ed25519.SignatureSize || !ed25519.Verify(pub, s.Statement, s.Signature) {
		return fmt.Errorf("%w: bad signature by key %s", ErrSignatureInvalid, s.KeyID)
	}
	dec := json.NewDecoder(bytes.NewReader(s.Statement))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: malformed statement: %v", ErrSignatureInvalid, err)
	}
	var k struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(s.Statement, &k); err != nil || k.Kind != kind {
		return fmt.Errorf("%w: statement is not of kind %s", ErrSignatureInvalid, kind)
	}
	return nil
}

// Identity verifies a host's identity statement for agentID and returns its environment id.
func (ks KeySet) Identity(s *protocol.Signed, agentID string) (string, error) {
	var st IdentityStatement
	if err := ks.verify(s, KindIdentity, &st); err != nil {
		return "", fmt.Errorf("identity: %w", err)
	}
	if st.AgentID != agentID || st.EnvironmentID == "" {
		return "", fmt.Errorf("identity: %w: statement is for another agent", ErrSignatureInvalid)
	}
	return st.EnvironmentID, nil
}

// Config says what an agent expects a config statement to vouch for.
type Config struct {
	AgentID       string
	EnvironmentID string // from the verified identity statement; "" accepts only agent scope
	ConfigType    string
	Version       int64
	Data          json.RawMessage // null for a deletion
	SecretFields  []string
}

// VerifyConfig checks that s is a trusted signature over exactly c: its type, version, the hash of its
// redacted data (null for a deletion) and a scope that is this agent or this agent's environment.
func (ks KeySet) VerifyConfig(s *protocol.Signed, c Config) error {
	var st ConfigStatement
	if err := ks.verify(s, KindConfig, &st); err != nil {
		return err
	}
	switch {
	case st.ConfigType != c.ConfigType:
		return fmt.Errorf("%w: statement is for type %s", ErrSignatureInvalid, truncate(st.ConfigType))
	case st.Version != c.Version:
		return fmt.Errorf("%w: statement is for version %d", ErrSignatureInvalid, st.Version)
	case st.Scope != AgentScope(c.AgentID) && (c.EnvironmentID == "" || st.Scope != EnvironmentScope(c.EnvironmentID)):
		return fmt.Errorf("%w: statement scope %s is not this agent or its environment", ErrSignatureInvalid, truncate(st.Scope))
	}
	h, err := DataHash(c.Data, c.SecretFields)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSignatureInvalid, err)
	}
	switch {
	case h == nil && st.SHA256 != nil:
		return fmt.Errorf("%w: statement signs content, the config is a deletion", ErrSignatureInvalid)
	case h != nil && st.SHA256 == nil:
		return fmt.Errorf("%w: statement signs a deletion, the config has content", ErrSignatureInvalid)
	case h != nil && *h != *st.SHA256:
		return fmt.Errorf("%w: content does not match the signed hash", ErrSignatureInvalid)
	}
	return nil
}

// TrustedKeys verifies a new trusted-key list signed by a key of ks and returns it with its version.
func (ks KeySet) TrustedKeys(s *protocol.Signed) (KeySet, int64, error) {
	var st TrustedKeysStatement
	if err := ks.verify(s, KindTrustedKeys, &st); err != nil {
		return nil, 0, fmt.Errorf("trusted keys: %w", err)
	}
	next := KeySet{}
	for _, k := range st.Keys {
		if err := next.Add(k.ID, base64.StdEncoding.EncodeToString(k.PublicKey)); err != nil {
			return nil, 0, fmt.Errorf("trusted keys: %w: %v", ErrSignatureInvalid, err)
		}
	}
	if len(next) == 0 {
		return nil, 0, fmt.Errorf("trusted keys: %w: the list is empty", ErrSignatureInvalid)
	}
	return next, st.Version, nil
}

func truncate(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
