// Package ciphermetrics counts the credential service's encryptions and decryptions by cipher (the
// ciphertext scheme: local keyring or Vault Transit) and result, wrapping a credential.Cipher.
package ciphermetrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/services/credential/internal/credential"
)

// Wrap returns c counting into m's registry; c itself when m is nil.
func Wrap(c credential.Cipher, m *metrics.Metrics) credential.Cipher {
	if m == nil {
		return c
	}
	return &cipher{Cipher: c,
		decrypts: metrics.RegisterCounterVec(m, "credential", "decrypts_total",
			"Credential ciphertexts decrypted, by cipher (local, vault, other) and result (ok, error).", "cipher", "result"),
		encrypts: metrics.RegisterCounterVec(m, "credential", "encrypts_total",
			"Credential secrets encrypted, by cipher (local, vault) and result (ok, error).", "cipher", "result"),
	}
}

type cipher struct {
	credential.Cipher
	decrypts, encrypts *prometheus.CounterVec
}

// label keeps the cipher label to the known schemes.
func label(scheme string) string {
	switch scheme {
	case "local", "vault":
		return scheme
	}
	return "other"
}

func (c *cipher) Encrypt(ctx context.Context, items []credential.EncryptItem) ([]string, error) {
	out, err := c.Cipher.Encrypt(ctx, items)
	c.encrypts.WithLabelValues(label(c.Scheme()), metrics.Result(err)).Add(float64(len(items)))
	return out, err
}

func (c *cipher) Decrypt(ctx context.Context, items []credential.DecryptItem) ([]credential.Decrypted, error) {
	out, err := c.Cipher.Decrypt(ctx, items)
	for i, it := range items {
		result := "ok"
		if err != nil || i >= len(out) || out[i].Err != nil {
			result = "error"
		}
		c.decrypts.WithLabelValues(label(credential.Scheme(it.Ciphertext)), result).Inc()
	}
	return out, err
}
