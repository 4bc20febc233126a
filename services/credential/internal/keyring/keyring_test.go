package keyring_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential/internal/credential"
	"github.com/configsync/configsync/services/credential/internal/keyring"
)

var ctx = context.Background()

func key(t *testing.T) []byte {
	t.Helper()
	k, err := keyring.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

func seal(t *testing.T, k *keyring.Keyring, plaintext, aad string) string {
	t.Helper()
	cts, err := k.Encrypt(ctx, []credential.EncryptItem{{Plaintext: []byte(plaintext), AAD: []byte(aad)}})
	if err != nil {
		t.Fatal(err)
	}
	return cts[0]
}

func open(k *keyring.Keyring, ct, aad string) ([]byte, error) {
	out, err := k.Decrypt(ctx, []credential.DecryptItem{{Ciphertext: ct, AAD: []byte(aad)}})
	if err != nil {
		return nil, err
	}
	return out[0].Plaintext, out[0].Err
}

func TestRoundTripAndFormat(t *testing.T) {
	k, err := keyring.Parse("v1:" + b64(key(t)))
	if err != nil {
		t.Fatal(err)
	}
	ct := seal(t, k, `{"password":"hunter2"}`, "aad")
	if !strings.HasPrefix(ct, "local:v1:") || strings.Contains(ct, "hunter2") {
		t.Fatalf("ciphertext %q", ct)
	}
	if credential.KeyVersion(ct) != "local:v1" {
		t.Fatalf("key version %q", credential.KeyVersion(ct))
	}
	pt, err := open(k, ct, "aad")
	if err != nil || string(pt) != `{"password":"hunter2"}` {
		t.Fatalf("open: %q %v", pt, err)
	}
	// Two encryptions of one plaintext differ (fresh nonces).
	if seal(t, k, "x", "a") == seal(t, k, "x", "a") {
		t.Fatal("nonce reuse")
	}
}

func TestRotation(t *testing.T) {
	k1, k2 := key(t), key(t)
	ring1, _ := keyring.Parse("v1:" + b64(k1))
	old := seal(t, ring1, "secret", "aad")

	ring12, err := keyring.Parse("v2:" + b64(k2) + ", v1:" + b64(k1))
	if err != nil {
		t.Fatal(err)
	}
	if ring12.Newest() != 2 {
		t.Fatalf("newest %d", ring12.Newest())
	}
	fresh := seal(t, ring12, "secret", "aad")
	if !strings.HasPrefix(fresh, "local:v2:") {
		t.Fatalf("new ciphertexts use %q", credential.KeyVersion(fresh))
	}
	for _, ct := range []string{old, fresh} {
		if pt, err := open(ring12, ct, "aad"); err != nil || string(pt) != "secret" {
			t.Fatalf("open %s: %v", credential.KeyVersion(ct), err)
		}
	}
	// Once v1 is retired, v1 ciphertexts fail clearly and v2 ones still open.
	ring2, _ := keyring.New(map[uint32][]byte{2: k2})
	if _, err := open(ring2, old, "aad"); !errors.Is(err, credential.ErrDecrypt) || !strings.Contains(err.Error(), "v1 is not in the keyring") {
		t.Fatalf("retired key: %v", err)
	}
	if _, err := open(ring2, fresh, "aad"); err != nil {
		t.Fatal(err)
	}
}

func TestWrongKeyTamperAndAAD(t *testing.T) {
	k, _ := keyring.New(map[uint32][]byte{1: key(t)})
	other, _ := keyring.New(map[uint32][]byte{1: key(t)})
	ct := seal(t, k, "secret", "client-a:cred-1")

	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(ct, "local:v1:"))
	flipped := bytes.Clone(raw)
	flipped[len(flipped)-1] ^= 1
	nonceFlipped := bytes.Clone(raw)
	nonceFlipped[0] ^= 1

	cases := map[string]struct {
		ring *keyring.Keyring
		ct   string
		aad  string
	}{
		"wrong key":                 {other, ct, "client-a:cred-1"},
		"other row (AAD)":           {k, ct, "client-b:cred-1"},
		"tampered tag":              {k, "local:v1:" + base64.StdEncoding.EncodeToString(flipped), "client-a:cred-1"},
		"tampered nonce":            {k, "local:v1:" + base64.StdEncoding.EncodeToString(nonceFlipped), "client-a:cred-1"},
		"header changed to v2":      {k, strings.Replace(ct, "local:v1:", "local:v2:", 1), "client-a:cred-1"},
		"truncated":                 {k, ct[:20], "client-a:cred-1"},
		"not base64":                {k, "local:v1:!!!", "client-a:cred-1"},
		"other scheme":              {k, strings.Replace(ct, "local:", "vault:", 1), "client-a:cred-1"},
		"no version":                {k, "local:", "client-a:cred-1"},
		"bad version":               {k, "local:v01:" + ct[9:], "client-a:cred-1"},
		"empty":                     {k, "", ""},
		"version zero":              {k, "local:v0:" + ct[9:], "client-a:cred-1"},
		"version beyond uint32":     {k, "local:v99999999999:" + ct[9:], "client-a:cred-1"},
		"short payload":             {k, "local:v1:" + base64.StdEncoding.EncodeToString(raw[:12]), "client-a:cred-1"},
		"empty AAD where one bound": {k, ct, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			pt, err := open(c.ring, c.ct, c.aad)
			if !errors.Is(err, credential.ErrDecrypt) || pt != nil {
				t.Fatalf("want ErrDecrypt, got %q %v", pt, err)
			}
			if strings.Contains(err.Error(), "secret") && !strings.Contains(err.Error(), "key") {
				t.Fatalf("error mentions plaintext: %v", err)
			}
		})
	}
	// A batch keeps failures per item.
	out, err := k.Decrypt(ctx, []credential.DecryptItem{{Ciphertext: ct, AAD: []byte("client-a:cred-1")}, {Ciphertext: ct, AAD: []byte("x")}})
	if err != nil || out[0].Err != nil || out[1].Err == nil {
		t.Fatalf("batch: %v %v %v", err, out[0].Err, out[1].Err)
	}
}

func TestParseErrorsNeverEchoKeys(t *testing.T) {
	short := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	good := b64(key(t))
	for name, spec := range map[string]string{
		"empty":           "  ",
		"no version":      good,
		"short key":       "v1:" + short,
		"not base64":      "v1:" + good + "!!",
		"version zero":    "v0:" + good,
		"bad version":     "version1:" + good,
		"duplicate":       "v1:" + good + ",v1:" + good,
		"leading zero":    "v01:" + good,
		"key as version":  good[:10] + ":" + good,
		"negative":        "v-1:" + good,
		"trailing junk":   "v1:" + good + ",v2",
		"uint32 overflow": "v4294967296:" + good,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := keyring.Parse(spec)
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), good[:10]) || strings.Contains(err.Error(), short[:10]) {
				t.Fatalf("error echoes key material: %v", err)
			}
		})
	}
	// URL-safe and unpadded base64 are accepted.
	k := key(t)
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if _, err := keyring.Parse("v3:" + enc.EncodeToString(k)); err != nil {
			t.Fatalf("%v", err)
		}
	}
	// Newlines separate entries too (key files).
	r, err := keyring.Parse("v1:" + good + "\nv2:" + b64(k) + "\n")
	if err != nil || r.Newest() != 2 || len(r.Versions()) != 2 {
		t.Fatalf("multi-line: %v", err)
	}
}

func TestKeyFilePermissions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keyring")
	spec := "v1:" + b64(key(t)) + "\n"
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o666} {
		testinfra.WriteFile(t, path, []byte(spec), mode)
		_, err := keyring.LoadFile(path)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("mode %04o accepted: %v", mode, err)
		}
		if strings.Contains(err.Error(), spec[3:13]) {
			t.Fatalf("error echoes key material: %v", err)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := keyring.LoadFile(path); err != nil {
			t.Fatalf("mode %04o: %v", mode, err)
		}
	}
	if _, err := keyring.LoadFile(dir); err == nil {
		t.Fatal("a directory was accepted")
	}
	if _, err := keyring.LoadFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing file was accepted")
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("v1:short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := keyring.LoadFile(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("bad file: %v", err)
	}
}

func TestCreateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keyring")
	created, err := keyring.CreateFile(path)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("created with mode %04o", info.Mode().Perm())
	}
	before, _ := os.ReadFile(path)
	created, err = keyring.CreateFile(path)
	if err != nil || created {
		t.Fatalf("second create: %v %v", created, err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("an existing key file was overwritten")
	}
	k, err := keyring.LoadFile(path)
	if err != nil || k.Newest() != 1 {
		t.Fatalf("load created file: %v", err)
	}
}

func TestNewRejectsBadKeys(t *testing.T) {
	if _, err := keyring.New(nil); err == nil {
		t.Fatal("empty ring accepted")
	}
	if _, err := keyring.New(map[uint32][]byte{0: key(t)}); err == nil {
		t.Fatal("version 0 accepted")
	}
	if _, err := keyring.New(map[uint32][]byte{1: make([]byte, 16)}); err == nil {
		t.Fatal("AES-128 key accepted")
	}
}

func BenchmarkDecrypt3(b *testing.B) {
	k, _ := keyring.New(map[uint32][]byte{1: bytes.Repeat([]byte{7}, 32)})
	items := make([]credential.DecryptItem, 3)
	for i := range items {
		cts, _ := k.Encrypt(ctx, []credential.EncryptItem{{Plaintext: []byte(`{"password":"p","username":"u"}`), AAD: []byte("aad")}})
		items[i] = credential.DecryptItem{Ciphertext: cts[0], AAD: []byte("aad")}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Decrypt(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
}
