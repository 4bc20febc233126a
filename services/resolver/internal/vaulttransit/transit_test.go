package vaulttransit_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"testing"

	"github.com/hashicorp/vault/api"

	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver"
	"github.com/configsync/configsync/services/resolver/internal/vaulttransit"
)

// signingVault returns the dev Vault, with the ed25519 Transit key configsync-signing created, and a
// client holding its root token.
func signingVault(t *testing.T) (testinfra.VaultInfo, *api.Client) {
	t.Helper()
	v := testinfra.Vault(t)
	root, err := api.NewClient(&api.Config{Address: v.Addr})
	if err != nil {
		t.Fatal(err)
	}
	root.SetToken(v.Token)
	if _, err := root.Logical().Write("transit/keys/configsync-signing", map[string]any{"type": "ed25519"}); err != nil {
		t.Fatalf("create ed25519 key: %v", err)
	}
	return v, root
}

// TestSignWithDevVault signs a batch (one batch_input request) with an ed25519 Transit key of the real
// dev Vault, checks every signature against the public key Vault publishes, then rotates the key in
// Vault: new signatures name the new version's key id and verify with its public key, the old key id
// stays listed, and a signer pinned to the old version keeps using it. A token with only the signing
// policy signs with its key and no other.
func TestSignWithDevVault(t *testing.T) {
	v, root := signingVault(t)
	ctx := context.Background()
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
	// Pinned to version 1 (agents do not trust v2 yet), the resolver keeps signing with it.
	pinned, err := vaulttransit.New(vaulttransit.Config{Addr: v.Addr, Token: v.Token, KeyVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	sigs, err := pinned.Sign(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, sig := range sigs {
		if sig.KeyID != "vault-configsync-signing-v1" || !ed25519.Verify(keys[sig.KeyID], msgs[i], sig.Value) {
			t.Fatalf("pinned signature %d by %s does not verify with v1", i, sig.KeyID)
		}
	}
	// A token whose policy allows only signing with and reading this key (deploy/README.md) signs,
	// and can do nothing else with Transit.
	if err := root.Sys().PutPolicy("configsync-signer", `path "transit/sign/configsync-signing" { capabilities = ["update"] }
path "transit/keys/configsync-signing" { capabilities = ["read"] }
`); err != nil {
		t.Fatal(err)
	}
	tok, err := root.Auth().Token().Create(&api.TokenCreateRequest{Policies: []string{"configsync-signer"}, NoDefaultPolicy: true})
	if err != nil {
		t.Fatal(err)
	}
	limited, err := vaulttransit.New(vaulttransit.Config{Addr: v.Addr, Token: tok.Auth.ClientToken})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := limited.Sign(ctx, msgs); err != nil {
		t.Fatalf("the signing policy's token cannot sign: %v", err)
	}
	if _, err := limited.PublicKeys(ctx); err != nil {
		t.Fatalf("the signing policy's token cannot read the public keys: %v", err)
	}
	wrongKey, err := vaulttransit.New(vaulttransit.Config{Addr: v.Addr, Token: tok.Auth.ClientToken, Key: "configsync"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrongKey.Sign(ctx, msgs); err == nil {
		t.Fatal("the signing policy's token signed with another key")
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

// TestRotationCommandsWithVault: the resolver's commands in Vault mode, as the rotation procedure runs
// them. After the Transit key is rotated, `resolver public-keys` lists both versions; with the resolver
// pinned to version 1 (RESOLVER_VAULT_SIGNING_KEY_VERSION), `resolver sign-trusted-keys` signs the new
// set with v1, which an agent trusting only v1 accepts.
func TestRotationCommandsWithVault(t *testing.T) {
	v, root := signingVault(t)
	ctx := context.Background()
	cfg := resolver.Config{VaultAddr: v.Addr, VaultToken: v.Token, VaultMount: "transit", VaultSigningKey: "configsync-signing"}
	before, err := resolver.PublicKeys(ctx, cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := signing.ParseKeys(before)
	if err != nil || len(v1) != 1 || v1["vault-configsync-signing-v1"] == nil {
		t.Fatalf("public keys before rotation: %q, %v", before, err)
	}
	if _, err := root.Logical().Write("transit/keys/configsync-signing/rotate", nil); err != nil {
		t.Fatal(err)
	}
	after, err := resolver.PublicKeys(ctx, cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	both, err := signing.ParseKeys(after)
	if err != nil || len(both) != 2 {
		t.Fatalf("public keys after rotation: %q, %v", after, err)
	}
	cfg.VaultSigningKeyVersion = 1
	doc, err := resolver.SignTrustedKeys(ctx, cfg, 2, after)
	if err != nil {
		t.Fatal(err)
	}
	var s protocol.Signed
	if err := json.Unmarshal(doc, &s); err != nil {
		t.Fatal(err)
	}
	next, version, err := v1.TrustedKeys(&s)
	if err != nil || version != 2 || next.String() != both.String() {
		t.Fatalf("an agent trusting v1 read the list as %s v%d, %v; want %s v2", next, version, err, both)
	}
}
