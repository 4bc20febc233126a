// Package keyring is the credential service's local Cipher: AES-256-GCM under a ring of versioned keys
// read from a key file (mode 0600 enforced) or from an environment variable. It is the embedded default
// (`make run`) and the choice for deployments without Vault.
//
// A ciphertext is "local:v<N>:<base64(nonce || sealed)>" where N names the key. New ciphertexts use the
// highest version; older versions stay in the ring so existing rows still decrypt until the service
// re-encrypts them (credential rotate without a new secret). The "local:v<N>" header and the caller's
// associated data are authenticated with the ciphertext.
package keyring

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/configsync/configsync/libs/platform/secretfile"
	"github.com/configsync/configsync/services/credential/internal/credential"
)

// Scheme is the ciphertext prefix of this cipher.
const Scheme = "local"

// KeySize is the size of every key: AES-256.
const KeySize = 32

// Keyring is a set of versioned AES-256-GCM keys. It is safe for concurrent use.
type Keyring struct {
	aeads  map[uint32]cipher.AEAD
	newest uint32
}

var _ credential.Cipher = (*Keyring)(nil)

// New returns a Keyring over keys by version (versions start at 1; each key is KeySize bytes).
func New(keys map[uint32][]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("keyring: no keys")
	}
	k := &Keyring{aeads: make(map[uint32]cipher.AEAD, len(keys))}
	for v, key := range keys {
		if v == 0 {
			return nil, errors.New("keyring: key versions start at v1")
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("keyring: key v%d is %d bytes, want %d", v, len(key), KeySize)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("keyring: key v%d: %w", v, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("keyring: key v%d: %w", v, err)
		}
		k.aeads[v] = aead
		k.newest = max(k.newest, v)
	}
	return k, nil
}

// Parse reads a keyring spec: entries "v<N>:<base64 key>" separated by commas or whitespace, e.g.
// "v1:AAAA...,v2:BBBB...". Errors name the entry by position, never its key material.
func Parse(spec string) (*Keyring, error) {
	entries := strings.FieldsFunc(spec, func(r rune) bool {
		return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	})
	if len(entries) == 0 {
		return nil, errors.New("keyring: no keys (want \"v1:<base64 key>,v2:...\")")
	}
	keys := make(map[uint32][]byte, len(entries))
	defer func() {
		for _, key := range keys {
			clear(key)
		}
	}()
	for i, e := range entries {
		vs, b64, ok := strings.Cut(e, ":")
		if !ok {
			return nil, fmt.Errorf("keyring: entry %d is not \"v<N>:<base64 key>\"", i+1)
		}
		v, err := parseVersion(vs)
		if err != nil {
			return nil, fmt.Errorf("keyring: entry %d: %w", i+1, err)
		}
		if _, dup := keys[v]; dup {
			return nil, fmt.Errorf("keyring: entry %d: version v%d appears twice", i+1, v)
		}
		key, err := decodeKey(b64)
		if err != nil {
			return nil, fmt.Errorf("keyring: entry %d (v%d): %w", i+1, v, err)
		}
		keys[v] = key
	}
	return New(keys)
}

// LoadFile reads a keyring spec from path. The file must be a regular file that neither group nor others
// can access (mode 0600 or stricter): a key readable by other users is a leaked key.
func LoadFile(path string) (*Keyring, error) {
	return secretfile.Load("keyring", path, Parse)
}

// CreateFile writes a new key file at path holding one fresh v1 key, mode 0600, unless a file is already
// there. It reports whether it wrote one. The embedded stack uses it to get a keyring on first start.
func CreateFile(path string) (bool, error) {
	key, err := GenerateKey()
	if err != nil {
		return false, err
	}
	defer clear(key)
	line := []byte("v1:" + base64.StdEncoding.EncodeToString(key) + "\n")
	defer clear(line)
	wrote, err := secretfile.Create(path, line)
	if err != nil {
		return false, fmt.Errorf("keyring: %w", err)
	}
	return wrote, nil
}

// GenerateKey returns a fresh random key.
func GenerateKey() ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("keyring: generate key: %w", err)
	}
	return key, nil
}

// Scheme returns "local".
func (k *Keyring) Scheme() string { return Scheme }

// Newest is the version new ciphertexts are sealed under.
func (k *Keyring) Newest() uint32 { return k.newest }

// Versions returns the key versions of the ring, ascending.
func (k *Keyring) Versions() []uint32 {
	vs := make([]uint32, 0, len(k.aeads))
	for v := range k.aeads {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// Encrypt seals every item under the newest key.
func (k *Keyring) Encrypt(_ context.Context, items []credential.EncryptItem) ([]string, error) {
	aead := k.aeads[k.newest]
	header := Scheme + ":v" + strconv.FormatUint(uint64(k.newest), 10)
	out := make([]string, len(items))
	for i, it := range items {
		buf := make([]byte, aead.NonceSize(), aead.NonceSize()+len(it.Plaintext)+aead.Overhead())
		if _, err := rand.Read(buf); err != nil {
			return nil, fmt.Errorf("keyring: nonce: %w", err)
		}
		buf = aead.Seal(buf, buf[:aead.NonceSize()], it.Plaintext, aad(header, it.AAD))
		out[i] = header + ":" + base64.StdEncoding.EncodeToString(buf)
	}
	return out, nil
}

// Decrypt opens every item; an item that fails wraps credential.ErrDecrypt.
func (k *Keyring) Decrypt(_ context.Context, items []credential.DecryptItem) ([]credential.Decrypted, error) {
	out := make([]credential.Decrypted, len(items))
	for i, it := range items {
		out[i].Plaintext, out[i].Err = k.open(it)
	}
	return out, nil
}

func (k *Keyring) open(it credential.DecryptItem) ([]byte, error) {
	scheme, rest, ok := strings.Cut(it.Ciphertext, ":")
	if !ok || scheme != Scheme {
		return nil, fmt.Errorf("%w: not a %q ciphertext", credential.ErrDecrypt, Scheme)
	}
	vs, payload, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, fmt.Errorf("%w: malformed ciphertext", credential.ErrDecrypt)
	}
	v, err := parseVersion(vs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", credential.ErrDecrypt, err)
	}
	aead, ok := k.aeads[v]
	if !ok {
		return nil, fmt.Errorf("%w: key v%d is not in the keyring", credential.ErrDecrypt, v)
	}
	sealed, err := base64.StdEncoding.DecodeString(payload)
	if err != nil || len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: malformed ciphertext", credential.ErrDecrypt)
	}
	nonce, body := sealed[:aead.NonceSize()], sealed[aead.NonceSize():]
	plaintext, err := aead.Open(nil, nonce, body, aad(scheme+":"+vs, it.AAD))
	if err != nil {
		return nil, fmt.Errorf("%w: authentication failed (wrong key, tampered ciphertext or a ciphertext of another credential)", credential.ErrDecrypt)
	}
	return plaintext, nil
}

// aad authenticates the ciphertext header with the caller's associated data.
func aad(header string, callerAAD []byte) []byte {
	b := make([]byte, 0, len(header)+1+len(callerAAD))
	b = append(b, header...)
	b = append(b, 0)
	return append(b, callerAAD...)
}

func parseVersion(s string) (uint32, error) {
	digits, ok := strings.CutPrefix(s, "v")
	if !ok || digits == "" || digits[0] == '0' {
		return 0, errors.New("key version is not v<N> with N >= 1")
	}
	v, err := strconv.ParseUint(digits, 10, 32)
	if err != nil {
		return 0, errors.New("key version is not v<N> with N >= 1")
	}
	return uint32(v), nil
}

// decodeKey accepts standard or URL-safe base64, padded or not.
func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if key, err := enc.DecodeString(s); err == nil {
			if len(key) != KeySize {
				n := len(key)
				clear(key)
				return nil, fmt.Errorf("key is %d bytes, want %d", n, KeySize)
			}
			return key, nil
		}
	}
	return nil, errors.New("key is not base64")
}
