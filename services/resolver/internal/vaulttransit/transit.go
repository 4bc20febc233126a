// Package vaulttransit is the resolver's Vault Signer: an ed25519 key of HashiCorp Vault's Transit
// engine signs statements in batches (transit/sign/<key> with batch_input), so the private key never
// leaves Vault. A signature names its key "vault-<key name>-v<N>" after the Transit key version that
// made it, so rotating the key in Vault is a key rotation agents see (they trust public keys by id).
// The resolver authenticates with a Vault token whose policy allows only transit/sign/<key> and
// reading transit/keys/<key>.
package vaulttransit

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/vault/api"

	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// Config locates Vault and the signing key.
type Config struct {
	Addr  string
	Token string
	// TransitMount is the Transit engine mount path; default "transit".
	TransitMount string
	// Key is the Transit key name (type ed25519); default "configsync-signing".
	Key string
	// KeyVersion pins the version that signs (0: the latest). A rotation creates the new version in
	// Vault while the resolver keeps signing with the one agents trust, until they trust the new one.
	KeyVersion int
	// Timeout bounds one request to Vault; default 10s.
	Timeout time.Duration
}

// Signer signs through Vault Transit. It is safe for concurrent use.
type Signer struct {
	client  *api.Client
	mount   string
	key     string
	version int
}

var _ resolve.Signer = (*Signer)(nil)

// New returns a Signer for cfg; it does not contact Vault.
func New(cfg Config) (*Signer, error) {
	if cfg.Addr == "" || cfg.Token == "" {
		return nil, errors.New("vaulttransit: address and token are required")
	}
	if cfg.TransitMount == "" {
		cfg.TransitMount = "transit"
	}
	if cfg.Key == "" {
		cfg.Key = "configsync-signing"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	vc := api.DefaultConfig()
	vc.Address = cfg.Addr
	vc.Timeout = cfg.Timeout
	client, err := api.NewClient(vc)
	if err != nil {
		return nil, fmt.Errorf("vaulttransit: %w", err)
	}
	client.SetToken(cfg.Token)
	if cfg.KeyVersion < 0 {
		return nil, errors.New("vaulttransit: key version must not be negative")
	}
	return &Signer{client: client, mount: strings.Trim(cfg.TransitMount, "/"), key: cfg.Key, version: cfg.KeyVersion}, nil
}

// KeyID is the key id of version v of the Transit key.
func (s *Signer) KeyID(version int) string { return "vault-" + s.key + "-v" + strconv.Itoa(version) }

// Sign signs each message in one batch request (batch_input), with the pinned key version if any.
func (s *Signer) Sign(ctx context.Context, messages [][]byte) ([]resolve.Signature, error) {
	in := make([]map[string]any, len(messages))
	for i, m := range messages {
		in[i] = map[string]any{"input": base64.StdEncoding.EncodeToString(m)}
	}
	req := map[string]any{"batch_input": in}
	if s.version > 0 {
		req["key_version"] = s.version
	}
	resp, err := s.client.Logical().WriteWithContext(ctx, s.mount+"/sign/"+s.key, req)
	if err != nil {
		return nil, fmt.Errorf("vaulttransit: sign %d statements: %w", len(messages), err)
	}
	if resp == nil || resp.Data == nil {
		return nil, errors.New("vaulttransit: sign: empty response")
	}
	results, ok := resp.Data["batch_results"].([]any)
	if !ok || len(results) != len(messages) {
		return nil, fmt.Errorf("vaulttransit: sign: want %d batch results", len(messages))
	}
	out := make([]resolve.Signature, len(messages))
	for i, r := range results {
		m, _ := r.(map[string]any)
		if e, _ := m["error"].(string); e != "" {
			return nil, fmt.Errorf("vaulttransit: sign statement %d: %s", i, e)
		}
		sig, _ := m["signature"].(string)
		version, value, err := parseSignature(sig)
		if err != nil {
			return nil, fmt.Errorf("vaulttransit: sign statement %d: %w", i, err)
		}
		out[i] = resolve.Signature{KeyID: s.KeyID(version), Value: value}
	}
	return out, nil
}

// parseSignature splits Vault's "vault:v<N>:<base64>" signature.
func parseSignature(sig string) (int, []byte, error) {
	parts := strings.SplitN(sig, ":", 3)
	if len(parts) != 3 || parts[0] != "vault" || !strings.HasPrefix(parts[1], "v") {
		return 0, nil, errors.New("malformed signature")
	}
	v, err := strconv.Atoi(parts[1][1:])
	if err != nil || v < 1 {
		return 0, nil, errors.New("malformed signature version")
	}
	value, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(value) != ed25519.SignatureSize {
		return 0, nil, errors.New("malformed signature value")
	}
	return v, value, nil
}

// PublicKeys reads the public key of every version of the Transit key, by key id: what agents trust.
func (s *Signer) PublicKeys(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	resp, err := s.client.Logical().ReadWithContext(ctx, s.mount+"/keys/"+s.key)
	if err != nil {
		return nil, fmt.Errorf("vaulttransit: read key %s: %w", s.key, err)
	}
	if resp == nil || resp.Data == nil {
		return nil, fmt.Errorf("vaulttransit: key %s not found", s.key)
	}
	if t, _ := resp.Data["type"].(string); t != "ed25519" {
		return nil, fmt.Errorf("vaulttransit: key %s is of type %q, want ed25519", s.key, t)
	}
	versions, _ := resp.Data["keys"].(map[string]any)
	out := make(map[string]ed25519.PublicKey, len(versions))
	for v, info := range versions {
		n, err := strconv.Atoi(v)
		if err != nil {
			continue
		}
		m, _ := info.(map[string]any)
		b64, _ := m["public_key"].(string)
		pub, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("vaulttransit: key %s version %d: malformed public key", s.key, n)
		}
		out[s.KeyID(n)] = pub
	}
	return out, nil
}
