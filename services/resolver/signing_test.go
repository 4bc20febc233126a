package resolver_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver"
)

// newKey makes a key file and returns its path and its public key set ("id=base64").
func newKey(t *testing.T, name string) (string, signing.KeySet) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".key")
	pub, err := resolver.EnsureSigningKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := signing.ParseKeys(pub)
	if err != nil || len(ks) != 1 {
		t.Fatalf("public key of %s: %q, %v", name, pub, err)
	}
	return path, ks
}

// TestSignTrustedKeys: `resolver sign-trusted-keys` signs the new trusted set with the configured key.
// An agent that trusts the old key accepts the document (the check its trust store runs,
// signing.KeySet.TrustedKeys) and adopts exactly the listed keys at the given version; the same list
// signed by a key the agent does not trust is refused; bad input is refused before anything is signed.
func TestSignTrustedKeys(t *testing.T) {
	ctx := context.Background()
	oldPath, oldKeys := newKey(t, "old")
	_, newKeys := newKey(t, "new")
	roguePath, _ := newKey(t, "rogue")
	both := signing.KeySet{}
	for _, ks := range []signing.KeySet{oldKeys, newKeys} {
		for id, pub := range ks {
			both[id] = pub
		}
	}

	doc := func(keyFile string, version int64, keys string) (*protocol.Signed, error) {
		out, err := resolver.SignTrustedKeys(ctx, resolver.Config{SigningKeyFile: keyFile}, version, keys)
		if err != nil {
			return nil, err
		}
		var s protocol.Signed
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatalf("the document is not a signed statement: %v\n%s", err, out)
		}
		return &s, nil
	}

	s, err := doc(oldPath, 2, both.String())
	if err != nil {
		t.Fatal(err)
	}
	next, version, err := oldKeys.TrustedKeys(s)
	if err != nil {
		t.Fatalf("an agent trusting the old key refused the list it signed: %v", err)
	}
	if version != 2 || next.String() != both.String() {
		t.Fatalf("adopted keys %s at version %d, want %s at 2", next, version, both)
	}
	// An agent that trusts only the new key cannot check the old key's signature.
	if _, _, err := newKeys.TrustedKeys(s); !errors.Is(err, signing.ErrSignatureInvalid) {
		t.Fatalf("a list signed by a key the agent does not trust: %v", err)
	}

	forged, err := doc(roguePath, 3, newKeys.String())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := oldKeys.TrustedKeys(forged); !errors.Is(err, signing.ErrSignatureInvalid) {
		t.Fatalf("a list signed by an untrusted key was accepted: %v", err)
	}

	for name, c := range map[string]struct {
		keyFile string
		version int64
		keys    string
	}{
		"version 0":        {oldPath, 0, both.String()},
		"no keys":          {oldPath, 2, ""},
		"malformed key":    {oldPath, 2, "k1=bm90LWEta2V5"},
		"no signing key":   {"", 2, both.String()},
		"missing key file": {filepath.Join(t.TempDir(), "none.key"), 2, both.String()},
	} {
		if _, err := doc(c.keyFile, c.version, c.keys); err == nil {
			t.Errorf("%s: a trusted-key list was signed", name)
		}
	}
}

// TestPublicKeys: `resolver public-keys -create` generates a missing key file (0600) and prints its
// public key in the form agents trust; later runs print the same key; without -create a missing key
// file, and no key at all, are errors.
func TestPublicKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "signing.key")
	if _, err := resolver.PublicKeys(ctx, resolver.Config{SigningKeyFile: path}, false); err == nil {
		t.Fatal("public keys of a missing key file without -create")
	}
	first, err := resolver.PublicKeys(ctx, resolver.Config{SigningKeyFile: path}, true)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := signing.ParseKeys(first)
	if err != nil || len(ks) != 1 {
		t.Fatalf("public keys %q: %v", first, err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("generated key file: %v, %v", info, err)
	}
	again, err := resolver.PublicKeys(ctx, resolver.Config{SigningKeyFile: path}, false)
	if err != nil || again != first {
		t.Fatalf("second run = %q, %v; want %q", again, err, first)
	}
	// What it prints verifies what the key signs.
	doc, err := resolver.SignTrustedKeys(ctx, resolver.Config{SigningKeyFile: path}, 1, first)
	if err != nil {
		t.Fatal(err)
	}
	var s protocol.Signed
	if err := json.Unmarshal(doc, &s); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ks.TrustedKeys(&s); err != nil {
		t.Fatalf("the printed key does not verify the key's signature: %v", err)
	}
	if _, err := resolver.PublicKeys(ctx, resolver.Config{}, true); err == nil {
		t.Fatal("public keys with no signing key configured")
	}
}

// TestInstallSigningKeyFile: a key mounted group-readable (as a Kubernetes Secret volume gives it),
// which the resolver refuses to load, is installed 0600 where it loads, with the same public key; a file
// that is not a key is refused and nothing is written.
func TestInstallSigningKeyFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	made := filepath.Join(dir, "made.key")
	pub, err := resolver.EnsureSigningKeyFile(made)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(made)
	if err != nil {
		t.Fatal(err)
	}
	mounted := filepath.Join(dir, "mounted.key")
	if err := os.WriteFile(mounted, raw, 0o440); err != nil {
		t.Fatal(err)
	}
	if _, err := resolver.PublicKeys(ctx, resolver.Config{SigningKeyFile: mounted}, false); err == nil {
		t.Fatal("a group-readable key file was loaded")
	}
	installed := filepath.Join(dir, "signing.key")
	got, err := resolver.InstallSigningKeyFile(mounted, installed)
	if err != nil || got != pub {
		t.Fatalf("install = %q, %v; want %q", got, err, pub)
	}
	info, err := os.Stat(installed)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("installed key: %v, %v; want mode 0600", info, err)
	}
	if loaded, err := resolver.PublicKeys(ctx, resolver.Config{SigningKeyFile: installed}, false); err != nil || loaded != pub {
		t.Fatalf("installed key loads as %q, %v", loaded, err)
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("REPLACE_ME\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.key")
	if _, err := resolver.InstallSigningKeyFile(bad, other); err == nil {
		t.Fatal("a placeholder was installed as a key")
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("something was written for a refused key: %v", err)
	}
}
