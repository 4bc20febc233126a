// Package keyfile is the resolver's local Signer: an ed25519 private key read from a file that only its
// owner may access (mode 0600 or stricter). It is the embedded default (`make run`) and the choice for
// deployments without Vault. The file holds one line "<key id>:<base64 of the 32-byte seed>".
package keyfile

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/configsync/configsync/libs/platform/secretfile"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// Signer signs with one ed25519 key. It is safe for concurrent use.
type Signer struct {
	id   string
	priv ed25519.PrivateKey
}

var _ resolve.Signer = (*Signer)(nil)

// Parse reads a key file's content.
func Parse(spec string) (*Signer, error) {
	id, b64, ok := strings.Cut(strings.TrimSpace(spec), ":")
	if !ok || id == "" {
		return nil, errors.New("keyfile: want \"<key id>:<base64 seed>\"")
	}
	seed, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("keyfile: key %s: want the base64 of a %d-byte ed25519 seed", id, ed25519.SeedSize)
	}
	defer clear(seed)
	return &Signer{id: id, priv: ed25519.NewKeyFromSeed(seed)}, nil
}

// LoadFile reads the key from path, which must be a regular file that neither group nor others can
// access: a signing key readable by other users lets them sign configs every agent runs.
func LoadFile(path string) (*Signer, error) {
	return secretfile.Load("keyfile", path, Parse)
}

// CreateFile writes a fresh key to path (mode 0600) unless a file is there already, and reports
// whether it wrote one. The key id is "local-" and the first 16 hex digits of the public key's SHA-256.
func CreateFile(path string) (bool, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return false, fmt.Errorf("keyfile: generate key: %w", err)
	}
	seed := priv.Seed()
	defer clear(seed)
	defer clear(priv)
	line := []byte(KeyID(pub) + ":" + base64.StdEncoding.EncodeToString(seed) + "\n")
	defer clear(line)
	wrote, err := secretfile.Create(path, line)
	if err != nil {
		return false, fmt.Errorf("keyfile: %w", err)
	}
	return wrote, nil
}

// KeyID is the id CreateFile gives a key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "local-" + hex.EncodeToString(sum[:8])
}

// KeyID is the id of the key.
func (s *Signer) KeyID() string { return s.id }

// PublicKey is the key's public half, what agents trust.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.priv.Public().(ed25519.PublicKey) }

// Sign signs each message with the key.
func (s *Signer) Sign(_ context.Context, messages [][]byte) ([]resolve.Signature, error) {
	out := make([]resolve.Signature, len(messages))
	for i, m := range messages {
		out[i] = resolve.Signature{KeyID: s.id, Value: ed25519.Sign(s.priv, m)}
	}
	return out, nil
}
