package vaulttransit_test

import (
	"context"
	"crypto/ed25519"
	"testing"

	"github.com/hashicorp/vault/api"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver/internal/vaulttransit"
)

// TestSignWithDevVault signs a batch with an ed25519 Transit key of the real dev Vault, checks every
// signature against the public key Vault publishes, then rotates the key in Vault: new signatures name
// the new version's key id and verify with its public key, and the old key id stays listed.
func TestSignWithDevVault(t *testing.T) {
	v := testinfra.Vault(t)
	ctx := context.Background()
	root, err := api.NewClient(&api.Config{Address: v.Addr})
	if err != nil {
		t.Fatal(err)
	}
	root.SetToken(v.Token)
	if _, err := root.Logical().Write("transit/keys/configsync-signing", map[string]any{"type": "ed25519"}); err != nil {
		t.Fatalf("create ed25519 key: %v", err)
	}
	s, err := vaulttransit.New(vaulttransit.Config{Addr: v.Addr, Token: v.Token})
	if err != nil {
		t.Fatal(err)
	}
	msgs := [][]byte{[]byte(`{"kind":"config","version":1}`), []byte(`{"kind":"config","version":2}`)}
	check := func(wantID string) {
		t.Helper()
		sigs, err := s.Sign(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := s.PublicKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, sig := range sigs {
			if sig.KeyID != wantID {
				t.Fatalf("signature %d by %s, want %s", i, sig.KeyID, wantID)
			}
			if !ed25519.Verify(keys[sig.KeyID], msgs[i], sig.Value) {
				t.Fatalf("signature %d does not verify with %s", i, sig.KeyID)
			}
			if ed25519.Verify(keys[sig.KeyID], msgs[1-i], sig.Value) {
				t.Fatalf("signature %d verifies another message", i)
			}
		}
	}
	check("vault-configsync-signing-v1")
	if _, err := root.Logical().Write("transit/keys/configsync-signing/rotate", nil); err != nil {
		t.Fatal(err)
	}
	check("vault-configsync-signing-v2")
	keys, err := s.PublicKeys(ctx)
	if err != nil || len(keys) != 2 {
		t.Fatalf("public keys after rotation = %d, %v; want both versions", len(keys), err)
	}

	// A key of another type is refused when its public keys are read.
	if _, err := root.Logical().Write("transit/keys/aes", map[string]any{"type": "aes256-gcm96"}); err != nil {
		t.Fatal(err)
	}
	other, _ := vaulttransit.New(vaulttransit.Config{Addr: v.Addr, Token: v.Token, Key: "aes"})
	if _, err := other.PublicKeys(ctx); err == nil {
		t.Fatal("an aes key was accepted as a signing key")
	}
}
