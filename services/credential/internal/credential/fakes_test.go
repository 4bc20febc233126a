package credential_test

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/configsync/configsync/services/credential/internal/credential"
)

// countingCipher counts Decrypt calls and items at the port, and keeps the plaintexts it handed out so
// that a test can check they were zeroed.
type countingCipher struct {
	credential.Cipher
	calls, items atomic.Int64
	mu           sync.Mutex
	handedOut    [][]byte
	// fail, when set, is returned for every Decrypt call.
	fail error
}

func (c *countingCipher) Decrypt(ctx context.Context, items []credential.DecryptItem) ([]credential.Decrypted, error) {
	c.calls.Add(1)
	c.items.Add(int64(len(items)))
	if c.fail != nil {
		return nil, c.fail
	}
	out, err := c.Cipher.Decrypt(ctx, items)
	c.mu.Lock()
	for _, o := range out {
		if o.Plaintext != nil {
			c.handedOut = append(c.handedOut, o.Plaintext)
		}
	}
	c.mu.Unlock()
	return out, err
}

func (c *countingCipher) reset() {
	c.calls.Store(0)
	c.items.Store(0)
	c.mu.Lock()
	c.handedOut = nil
	c.mu.Unlock()
}

// allZeroed reports whether every plaintext handed out has been overwritten with zeros.
func (c *countingCipher) allZeroed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.handedOut {
		for _, b := range p {
			if b != 0 {
				return false
			}
		}
	}
	return true
}
