package credential

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Cipher encrypts and decrypts credential secrets in batches. Ciphertexts are self-describing strings
// "<scheme>:v<key version>:<payload>" (for example "local:v2:..." or "vault:v1:..."), so a store can
// hold ciphertexts of several key versions and rotation never loses old rows.
//
// Every item carries associated data (AAD) that is authenticated with it: a ciphertext only opens
// with the AAD it was sealed with, which binds it to one credential row.
type Cipher interface {
	// Scheme is the ciphertext prefix this cipher writes and reads ("local", "vault").
	Scheme() string
	// Encrypt seals every item under the newest key and returns the ciphertexts in order. It fails as
	// a whole (an error wrapping ErrUnavailable when the backend cannot be reached).
	Encrypt(ctx context.Context, items []EncryptItem) ([]string, error)
	// Decrypt opens every item in one round trip and returns one result per item, in order. A result's
	// Err (wrapping ErrDecrypt or ErrUnavailable) fails that item alone; a returned error means no item
	// was opened. Callers zero each Plaintext once they are done with it.
	Decrypt(ctx context.Context, items []DecryptItem) ([]Decrypted, error)
}

// EncryptItem is one plaintext to seal with its associated data.
type EncryptItem struct {
	Plaintext []byte
	AAD       []byte
}

// DecryptItem is one ciphertext to open with the associated data it was sealed with.
type DecryptItem struct {
	Ciphertext string
	AAD        []byte
}

// Decrypted is the outcome of one DecryptItem.
type Decrypted struct {
	Plaintext []byte
	Err       error
}

// AAD is the associated data binding a credential's ciphertext to its row: a ciphertext copied into
// another credential's row, or another client's, no longer decrypts. Both ids are canonical UUIDs.
func AAD(clientID, credentialID string) []byte {
	return []byte("configsync/credential/v1:" + clientID + ":" + credentialID)
}

// KeyVersion returns the "<scheme>:v<n>" prefix of a ciphertext (stored as the row's key_version).
func KeyVersion(ciphertext string) string {
	scheme, rest, ok := strings.Cut(ciphertext, ":")
	if !ok {
		return ""
	}
	version, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return scheme + ":" + version
}

// Scheme returns the scheme prefix of a ciphertext, or "" when it has none.
func Scheme(ciphertext string) string {
	scheme, _, ok := strings.Cut(ciphertext, ":")
	if !ok {
		return ""
	}
	return scheme
}

// encodeSecret is the plaintext form of a secret: a JSON object of string fields (sorted keys).
func encodeSecret(secret map[string]string) ([]byte, error) {
	b, err := json.Marshal(secret)
	if err != nil {
		return nil, fmt.Errorf("credential: encode secret: %w", err)
	}
	return b, nil
}

// decodeSecret parses a decrypted plaintext. The JSON decoder's own error is not kept: its message can
// quote a character of the plaintext.
func decodeSecret(plaintext []byte) (map[string]string, error) {
	var secret map[string]string
	if err := json.Unmarshal(plaintext, &secret); err != nil || secret == nil {
		return nil, fmt.Errorf("%w: plaintext is not a secret object", ErrDecrypt)
	}
	return secret, nil
}

// Ciphers encrypts with a primary Cipher and decrypts each ciphertext with the cipher of its scheme, so
// a deployment can move from the local keyring to Vault (or back): old rows still open, and rotating
// them re-encrypts under the primary.
type Ciphers struct {
	primary  Cipher
	byScheme map[string]Cipher
}

var _ Cipher = (*Ciphers)(nil)

// NewCiphers returns a Cipher writing with primary and reading with primary and every cipher of others.
func NewCiphers(primary Cipher, others ...Cipher) *Ciphers {
	c := &Ciphers{primary: primary, byScheme: map[string]Cipher{}}
	for _, o := range others {
		c.byScheme[o.Scheme()] = o
	}
	c.byScheme[primary.Scheme()] = primary
	return c
}

// Scheme is the primary cipher's scheme.
func (c *Ciphers) Scheme() string { return c.primary.Scheme() }

// Encrypt seals with the primary cipher.
func (c *Ciphers) Encrypt(ctx context.Context, items []EncryptItem) ([]string, error) {
	return c.primary.Encrypt(ctx, items)
}

// Decrypt groups items by scheme and makes one Decrypt call per scheme present. A scheme whose call
// fails fails its own items only.
func (c *Ciphers) Decrypt(ctx context.Context, items []DecryptItem) ([]Decrypted, error) {
	out := make([]Decrypted, len(items))
	groups := map[string][]int{}
	var order []string
	for i, it := range items {
		s := Scheme(it.Ciphertext)
		if _, ok := c.byScheme[s]; !ok {
			out[i].Err = fmt.Errorf("%w: no cipher configured for ciphertext scheme %q", ErrDecrypt, s)
			continue
		}
		if _, seen := groups[s]; !seen {
			order = append(order, s)
		}
		groups[s] = append(groups[s], i)
	}
	for _, s := range order {
		idx := groups[s]
		batch := make([]DecryptItem, len(idx))
		for j, i := range idx {
			batch[j] = items[i]
		}
		res, err := c.byScheme[s].Decrypt(ctx, batch)
		if err == nil && len(res) != len(batch) {
			err = fmt.Errorf("credential: %s cipher returned %d results for %d ciphertexts", s, len(res), len(batch))
		}
		for j, i := range idx {
			if err != nil {
				out[i].Err = err
				continue
			}
			out[i] = res[j]
		}
	}
	return out, nil
}
