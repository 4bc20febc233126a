package resolver

import (
	"fmt"

	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/services/resolver/internal/keyfile"
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
