package keyfile_test

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configsync/configsync/services/resolver/internal/keyfile"
)

func TestCreateLoadSign(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing.key")
	wrote, err := keyfile.CreateFile(path)
	if err != nil || !wrote {
		t.Fatalf("CreateFile = %v, %v", wrote, err)
	}
	if wrote, err := keyfile.CreateFile(path); err != nil || wrote {
		t.Fatalf("second CreateFile = %v, %v; want the existing key kept", wrote, err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v", info.Mode().Perm(), err)
	}
	s, err := keyfile.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyID() != keyfile.KeyID(s.PublicKey()) || !strings.HasPrefix(s.KeyID(), "local-") {
		t.Fatalf("key id %q", s.KeyID())
	}
	msgs := [][]byte{[]byte(`{"a":1}`), []byte(`{"b":2}`)}
	sigs, err := s.Sign(context.Background(), msgs)
	if err != nil || len(sigs) != 2 {
		t.Fatalf("Sign = %v, %v", sigs, err)
	}
	for i, sig := range sigs {
		if sig.KeyID != s.KeyID() || !ed25519.Verify(s.PublicKey(), msgs[i], sig.Value) {
			t.Fatalf("signature %d does not verify", i)
		}
	}
	if ed25519.Verify(s.PublicKey(), msgs[1], sigs[0].Value) {
		t.Fatal("signature of message 0 verifies message 1")
	}
}

func TestLoadRefusesOpenModes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing.key")
	if _, err := keyfile.CreateFile(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := keyfile.LoadFile(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("LoadFile of a 0640 key = %v, want a refusal naming chmod 600", err)
	}
	if _, err := keyfile.Parse("k1:not-base64"); err == nil {
		t.Fatal("a malformed key was accepted")
	}
}
