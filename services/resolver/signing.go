package resolver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/keyfile"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
	"github.com/configsync/configsync/services/resolver/internal/vaulttransit"
)

// EnsureSigningKeyFile creates a 0600 ed25519 signing key at path unless one is there, and returns the
// public key agents must trust in the "id=base64" form of CONFIGSYNC_TRUST_PUBLIC_KEYS. tools/devstack
// calls it on every start (the key is generated on the first).
func EnsureSigningKeyFile(path string) (string, error) {
	if _, err := keyfile.CreateFile(path); err != nil {
		return "", fmt.Errorf("resolver: %w", err)
	}
	s, err := keyfile.LoadFile(path)
	if err != nil {
		return "", fmt.Errorf("resolver: %w", err)
	}
	return signing.KeySet{s.KeyID(): s.PublicKey()}.String(), nil
}

// InstallSigningKeyFile copies a key file from a place its mode cannot be chosen (a Kubernetes Secret
// volume: owned by root, group-readable through the pod's fsGroup) to dst, owned by the running user
// with mode 0600, where the resolver loads it; the content is checked first and nothing is written when
// it is not a key. It returns the key's public key in the "id=base64" form agents trust.
func InstallSigningKeyFile(src, dst string) (string, error) {
	raw, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("resolver: install signing key: %w", err)
	}
	defer clear(raw)
	s, err := keyfile.Parse(string(raw))
	if err != nil {
		return "", fmt.Errorf("resolver: install signing key from %s: %w", src, err)
	}
	tmp := dst + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("resolver: install signing key: %w", err)
	}
	_, werr := f.Write(raw)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("resolver: install signing key: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("resolver: install signing key: %w", err)
	}
	return signing.KeySet{s.KeyID(): s.PublicKey()}.String(), nil
}

// PublicKeys returns the public keys of the configured signing key, in the "id=base64" form of
// CONFIGSYNC_TRUST_PUBLIC_KEYS and of an agent's trust.public_keys_file: every version of the Vault
// Transit key when Vault is configured, else the key file's key. With create, a missing key file is
// generated first (0600): how a deployment provisions the key and its agents' trust in one step.
func PublicKeys(ctx context.Context, cfg Config, create bool) (string, error) {
	switch {
	case cfg.VaultAddr != "":
		s, err := vaulttransit.New(vaulttransit.Config{Addr: cfg.VaultAddr, Token: cfg.VaultToken,
			TransitMount: cfg.VaultMount, Key: cfg.VaultSigningKey, Timeout: cfg.RequestTimeout})
		if err != nil {
			return "", fmt.Errorf("resolver: %w", err)
		}
		keys, err := s.PublicKeys(ctx)
		if err != nil {
			return "", fmt.Errorf("resolver: %w", err)
		}
		return signing.KeySet(keys).String(), nil
	case cfg.SigningKeyFile != "" && create:
		return EnsureSigningKeyFile(cfg.SigningKeyFile)
	case cfg.SigningKeyFile != "":
		s, err := keyfile.LoadFile(cfg.SigningKeyFile)
		if err != nil {
			return "", fmt.Errorf("resolver: %w", err)
		}
		return signing.KeySet{s.KeyID(): s.PublicKey()}.String(), nil
	default:
		return "", errors.New("resolver: no signing key configured (RESOLVER_SIGNING_KEY_FILE or RESOLVER_VAULT_ADDR)")
	}
}

// configuredSigner returns the Signer cfg selects (Vault Transit, else the key file), or an error when
// neither is configured.
func configuredSigner(cfg Config) (resolve.Signer, error) {
	s, err := newSigner(cfg, zap.NewNop())
	if err == nil && s == nil {
		err = errors.New("resolver: no signing key configured (RESOLVER_SIGNING_KEY_FILE or RESOLVER_VAULT_ADDR)")
	}
	return s, err
}

// SignTrustedKeys signs a trusted-key list (version, "id=base64" keys) with the configured key: the
// key agents trust now vouches for the next set. The result is the content of RESOLVER_TRUSTED_KEYS_FILE.
func SignTrustedKeys(ctx context.Context, cfg Config, version int64, keys string) ([]byte, error) {
	ks, err := signing.ParseKeys(keys)
	if err != nil {
		return nil, err
	}
	if len(ks) == 0 || version < 1 {
		return nil, errors.New("resolver: a trusted-key list needs at least one key and a version of 1 or more")
	}
	st := signing.TrustedKeysStatement{Kind: signing.KindTrustedKeys, Version: version}
	for _, id := range strings.Split(ks.String(), ",") {
		id, _, _ = strings.Cut(id, "=")
		st.Keys = append(st.Keys, signing.PublicKey{ID: id, PublicKey: ks[id]})
	}
	b, err := signing.Encode(st)
	if err != nil {
		return nil, err
	}
	signer, err := configuredSigner(cfg)
	if err != nil {
		return nil, err
	}
	sigs, err := signer.Sign(ctx, [][]byte{b})
	if err != nil {
		return nil, fmt.Errorf("resolver: sign trusted keys: %w", err)
	}
	return json.MarshalIndent(protocol.Signed{Statement: b, KeyID: sigs[0].KeyID, Signature: sigs[0].Value}, "", "  ")
}

// readTrustedKeys reads a signed trusted-key list written by SignTrustedKeys.
func readTrustedKeys(path string) (*protocol.Signed, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("resolver: trusted keys: %w", err)
	}
	var s protocol.Signed
	if err := json.Unmarshal(raw, &s); err != nil || len(s.Statement) == 0 || len(s.Signature) == 0 {
		return nil, fmt.Errorf("resolver: trusted keys %s: not a signed statement", path)
	}
	var st signing.TrustedKeysStatement
	if err := json.Unmarshal(s.Statement, &st); err != nil || st.Kind != signing.KindTrustedKeys {
		return nil, fmt.Errorf("resolver: trusted keys %s: not a trusted-key list", path)
	}
	return &s, nil
}
