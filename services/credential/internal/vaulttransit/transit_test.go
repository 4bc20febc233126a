package vaulttransit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential/internal/credential"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// plantedSecret must never appear in any log entry of these tests.
const plantedSecret = "pl4nted-vault-s3cret-7f1c"

// waitBound only bounds a broken test; nothing asserts on timing.
const waitBound = 60 * time.Second

// start returns a started Transit and the observed logs, checked for the planted secret at cleanup.
func start(t *testing.T, cfg Config) (*Transit, *observer.ObservedLogs) {
	t.Helper()
	log, logs := testinfra.Logger(t)
	tr, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if err := tr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tr.Close()
		testinfra.AssertNotLogged(t, logs, plantedSecret)
	})
	return tr, logs
}

func appRoleConfig(v testinfra.VaultInfo) Config {
	return Config{Addr: v.Addr, RoleID: v.RoleID, SecretID: v.SecretID, Timeout: 5 * time.Second}
}

// rootClient is an operator's client on the dev Vault (root token), for rotating keys, sealing, revoking.
func rootClient(t *testing.T, v testinfra.VaultInfo) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = v.Addr
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(v.Token)
	t.Cleanup(cfg.HttpClient.CloseIdleConnections)
	return c
}

func secretItems(n int) ([]credential.EncryptItem, []credential.DecryptItem) {
	enc := make([]credential.EncryptItem, n)
	dec := make([]credential.DecryptItem, n)
	for i := range n {
		aad := credential.AAD("00000000-0000-0000-0000-0000000000c1", fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		enc[i] = credential.EncryptItem{Plaintext: []byte(fmt.Sprintf(`{"password":"%s-%d"}`, plantedSecret, i)), AAD: aad}
		dec[i] = credential.DecryptItem{AAD: aad}
	}
	return enc, dec
}

func encryptAll(t *testing.T, tr *Transit, enc []credential.EncryptItem, dec []credential.DecryptItem) {
	t.Helper()
	cts, err := tr.Encrypt(context.Background(), enc)
	if err != nil {
		t.Fatalf("encrypt: %v", err)
	}
	for i, ct := range cts {
		if strings.Contains(ct, plantedSecret) {
			t.Fatal("ciphertext contains the plaintext")
		}
		dec[i].Ciphertext = ct
	}
}

func decryptAll(t *testing.T, tr *Transit, enc []credential.EncryptItem, dec []credential.DecryptItem) {
	t.Helper()
	out, err := tr.Decrypt(context.Background(), dec)
	if err != nil {
		t.Fatalf("decrypt: %v", err)
	}
	for i, o := range out {
		if o.Err != nil || !bytes.Equal(o.Plaintext, enc[i].Plaintext) {
			t.Fatalf("item %d: err %v, plaintext matches: %v", i, o.Err, bytes.Equal(o.Plaintext, enc[i].Plaintext))
		}
	}
}

// One dev Vault serves the tests that neither kill, seal nor reconfigure it.
func TestTransit(t *testing.T) {
	v := testinfra.Vault(t)

	t.Run("round trip with AppRole", func(t *testing.T) {
		tr, _ := start(t, appRoleConfig(v))
		enc, dec := secretItems(5)
		encryptAll(t, tr, enc, dec)
		for _, d := range dec {
			if credential.KeyVersion(d.Ciphertext) == "" || credential.Scheme(d.Ciphertext) != Scheme {
				t.Fatalf("ciphertext %q lacks the vault:v<N>: prefix", d.Ciphertext[:12])
			}
		}
		decryptAll(t, tr, enc, dec)
		if err := tr.Check(context.Background()); err != nil {
			t.Fatalf("check: %v", err)
		}
	})

	t.Run("round trip with a token", func(t *testing.T) {
		tr, _ := start(t, Config{Addr: v.Addr, Token: v.Token})
		enc, dec := secretItems(2)
		encryptAll(t, tr, enc, dec)
		decryptAll(t, tr, enc, dec)
	})

	t.Run("associated data binds each ciphertext; failures are per item", func(t *testing.T) {
		tr, _ := start(t, appRoleConfig(v))
		enc, dec := secretItems(3)
		encryptAll(t, tr, enc, dec)
		dec[1].AAD = credential.AAD("00000000-0000-0000-0000-0000000000c2", "00000000-0000-0000-0000-000000000001")
		dec[2].Ciphertext = dec[2].Ciphertext[:len(dec[2].Ciphertext)-4] + "AAA="
		out, err := tr.Decrypt(context.Background(), dec)
		if err != nil {
			t.Fatalf("decrypt: %v", err)
		}
		if out[0].Err != nil || !bytes.Equal(out[0].Plaintext, enc[0].Plaintext) {
			t.Fatalf("item 0 should decrypt: %v", out[0].Err)
		}
		for _, i := range []int{1, 2} {
			if !errors.Is(out[i].Err, credential.ErrDecrypt) || out[i].Plaintext != nil {
				t.Fatalf("item %d: want ErrDecrypt, got %v", i, out[i].Err)
			}
		}
	})

	t.Run("key rotation keeps old ciphertexts readable and re-encryption moves them", func(t *testing.T) {
		tr, _ := start(t, appRoleConfig(v))
		enc, old := secretItems(2)
		encryptAll(t, tr, enc, old)
		before := credential.KeyVersion(old[0].Ciphertext)

		if _, err := rootClient(t, v).Logical().Write("transit/keys/configsync/rotate", nil); err != nil {
			t.Fatalf("rotate key: %v", err)
		}
		_, fresh := secretItems(2)
		encryptAll(t, tr, enc, fresh)
		after := credential.KeyVersion(fresh[0].Ciphertext)
		if after == before {
			t.Fatalf("key version still %s after rotation", after)
		}
		decryptAll(t, tr, enc, old)
		decryptAll(t, tr, enc, fresh)

		// Re-encrypting (what credential rotate does without a new secret) moves to the newest key.
		out, err := tr.Decrypt(context.Background(), old)
		if err != nil {
			t.Fatal(err)
		}
		re := make([]credential.EncryptItem, len(out))
		for i, o := range out {
			re[i] = credential.EncryptItem{Plaintext: o.Plaintext, AAD: old[i].AAD}
		}
		cts, err := tr.Encrypt(context.Background(), re)
		if err != nil {
			t.Fatal(err)
		}
		for _, ct := range cts {
			if credential.KeyVersion(ct) != after {
				t.Fatalf("re-encrypted under %s, want %s", credential.KeyVersion(ct), after)
			}
		}
	})

	t.Run("a revoked token is replaced by a fresh AppRole login", func(t *testing.T) {
		tr, logs := start(t, appRoleConfig(v))
		enc, dec := secretItems(1)
		encryptAll(t, tr, enc, dec)
		if err := rootClient(t, v).Auth().Token().RevokeTree(tr.client.Token()); err != nil {
			t.Fatalf("revoke: %v", err)
		}
		decryptAll(t, tr, enc, dec)
		if logs.FilterMessage("vault refused the token; logging in again").Len() == 0 {
			t.Fatal("no re-login was logged")
		}
	})

	t.Run("wrong AppRole secret id is unavailable, not a crash", func(t *testing.T) {
		cfg := appRoleConfig(v)
		cfg.SecretID = "00000000-0000-0000-0000-000000000000"
		tr, _ := start(t, cfg)
		enc, _ := secretItems(1)
		if _, err := tr.Encrypt(context.Background(), enc); !errors.Is(err, credential.ErrUnavailable) {
			t.Fatalf("encrypt with a bad secret id: %v, want ErrUnavailable", err)
		}
	})
}

// The AppRole token is renewed while it can be, and replaced by a new login once it reaches its max TTL.
func TestAppRoleRenewalAndRelogin(t *testing.T) {
	v := testinfra.Vault(t, "-token-ttl", "2s", "-token-max-ttl", "5s")
	tr, logs := start(t, appRoleConfig(v))
	first := tr.client.Token()

	testinfra.Eventually(t, waitBound, func() bool { return logs.FilterMessage("vault token renewed").Len() >= 1 }, "log %q seen %d times", "vault token renewed", 1)
	testinfra.Eventually(t, waitBound, func() bool { return logs.FilterMessage("vault approle login succeeded").Len() >= 2 }, "log %q seen %d times", "vault approle login succeeded", 2)
	if tr.client.Token() == first {
		t.Fatal("token unchanged after max TTL")
	}
	enc, dec := secretItems(2)
	encryptAll(t, tr, enc, dec)
	decryptAll(t, tr, enc, dec)
}

// Killing Vault mid-test turns every call into ErrUnavailable; nothing panics, and Close returns.
func TestVaultKilled(t *testing.T) {
	v := testinfra.Vault(t)
	cfg := appRoleConfig(v)
	cfg.Timeout = 2 * time.Second
	tr, _ := start(t, cfg)
	enc, dec := secretItems(2)
	encryptAll(t, tr, enc, dec)

	v.Kill()

	if _, err := tr.Encrypt(context.Background(), enc); !errors.Is(err, credential.ErrUnavailable) {
		t.Fatalf("encrypt after kill: %v, want ErrUnavailable", err)
	}
	out, err := tr.Decrypt(context.Background(), dec)
	if !errors.Is(err, credential.ErrUnavailable) || out != nil {
		t.Fatalf("decrypt after kill: %v, want ErrUnavailable", err)
	}
	if err := tr.Check(context.Background()); !errors.Is(err, credential.ErrUnavailable) {
		t.Fatalf("check after kill: %v", err)
	}
	if !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("error does not say Vault is unreachable: %v", err)
	}
}

// A sealed Vault is unavailable, with a message saying so.
func TestVaultSealed(t *testing.T) {
	v := testinfra.Vault(t)
	tr, _ := start(t, appRoleConfig(v))
	enc, dec := secretItems(1)
	encryptAll(t, tr, enc, dec)
	if err := rootClient(t, v).Sys().Seal(); err != nil {
		t.Fatalf("seal: %v", err)
	}
	_, err := tr.Decrypt(context.Background(), dec)
	if !errors.Is(err, credential.ErrUnavailable) || !strings.Contains(err.Error(), "sealed") {
		t.Fatalf("decrypt on a sealed vault: %v", err)
	}
}

// The service starts while Vault is down; calls fail with ErrUnavailable and Close returns.
func TestStartWhileVaultDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	l.Close()
	tr, logs := start(t, Config{Addr: addr, RoleID: "r", SecretID: "s", Timeout: time.Second})
	enc, _ := secretItems(1)
	if _, err := tr.Encrypt(context.Background(), enc); !errors.Is(err, credential.ErrUnavailable) {
		t.Fatalf("encrypt: %v", err)
	}
	testinfra.Eventually(t, waitBound, func() bool { return logs.FilterMessage("vault authentication failed; retrying").Len() >= 1 }, "log %q seen %d times", "vault authentication failed; retrying", 1)
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Addr: "http://127.0.0.1:1"},
		{Addr: "http://127.0.0.1:1", RoleID: "r"},
		{Addr: "http://127.0.0.1:1", SecretID: "s", Token: "t"},
	} {
		if _, err := New(cfg, zap.NewNop()); err == nil {
			t.Errorf("New(%+v) accepted an incomplete config", cfg)
		}
	}
}
