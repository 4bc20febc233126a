package credential_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/credential/internal/credential"
	"github.com/configsync/configsync/services/credential/internal/credential/credentialtest"
	"github.com/configsync/configsync/services/credential/internal/keyring"
)

func TestCreateValidation(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("x", 201)
	cases := []struct {
		name string
		req  protocol.CredentialCreateRequest
		want error
	}{
		{"missing client", protocol.CredentialCreateRequest{Name: "n", Secret: map[string]string{"password": "p"}}, credential.ErrInvalidRequest},
		{"client not a UUID", protocol.CredentialCreateRequest{ClientID: "acme", Name: "n", Secret: map[string]string{"password": "p"}}, credential.ErrInvalidRequest},
		{"environment not a UUID", protocol.CredentialCreateRequest{ClientID: clientA, EnvironmentID: "prod", Name: "n", Secret: map[string]string{"password": "p"}}, credential.ErrInvalidRequest},
		{"empty name", protocol.CredentialCreateRequest{ClientID: clientA, Secret: map[string]string{"password": "p"}}, credential.ErrInvalidRequest},
		{"long name", protocol.CredentialCreateRequest{ClientID: clientA, Name: long, Secret: map[string]string{"password": "p"}}, credential.ErrInvalidRequest},
		{"control character in name", protocol.CredentialCreateRequest{ClientID: clientA, Name: "a\nb", Secret: map[string]string{"password": "p"}}, credential.ErrInvalidRequest},
		{"no secret", protocol.CredentialCreateRequest{ClientID: clientA, Name: "n"}, credential.ErrInvalidRequest},
		{"empty field name", protocol.CredentialCreateRequest{ClientID: clientA, Name: "n", Secret: map[string]string{"": "p"}}, credential.ErrInvalidRequest},
		{"reserved field", protocol.CredentialCreateRequest{ClientID: clientA, Name: "n", Secret: map[string]string{"type": "p"}}, credential.ErrInvalidRequest},
		{"credential_id field", protocol.CredentialCreateRequest{ClientID: clientA, Name: "n", Secret: map[string]string{"credential_id": "p"}}, credential.ErrInvalidRequest},
		{"field a collector cannot take", protocol.CredentialCreateRequest{ClientID: clientA, Name: "n", Secret: map[string]string{"api_key": "p"}}, credential.ErrInvalidRequest},
		{"field name of another case", protocol.CredentialCreateRequest{ClientID: clientA, Name: "n", Secret: map[string]string{"Password": "p"}}, credential.ErrInvalidRequest},
		{"invalid UTF-8 value", protocol.CredentialCreateRequest{ClientID: clientA, Name: "n", Secret: map[string]string{"password": "\xff"}}, credential.ErrInvalidRequest},
		{"huge value", protocol.CredentialCreateRequest{ClientID: clientA, Name: "n", Secret: map[string]string{"password": strings.Repeat("x", 17<<10)}}, credential.ErrInvalidRequest},
		{"unknown client", protocol.CredentialCreateRequest{ClientID: "0c000000-0000-4000-8000-000000000003", Name: "n", Secret: map[string]string{"password": "p"}}, credential.ErrNotFound},
		{"environment of another client", protocol.CredentialCreateRequest{ClientID: clientA, EnvironmentID: envB1, Name: "n", Secret: map[string]string{"password": "p"}}, credential.ErrNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.Secret = withPlanted(c.req.Secret)
			_, err := f.service.Create(context.Background(), c.req)
			if !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			if strings.Contains(err.Error(), secretValue) {
				t.Fatalf("error leaks the secret: %v", err)
			}
		})
	}
	f.create(t, clientA, "", "dup", map[string]string{"password": "p"})
	if _, err := f.service.Create(context.Background(), protocol.CredentialCreateRequest{ClientID: clientA, Name: "dup",
		Secret: map[string]string{"password": "p"}}); !errors.Is(err, credential.ErrConflict) {
		t.Fatalf("duplicate name: %v", err)
	}
	// The same name under another client is fine.
	f.create(t, clientB, "", "dup", map[string]string{"password": "p"})
}

// withPlanted adds the planted secret as a value (of an allowed field the case does not set) so that
// validation errors can be checked for leaks.
func withPlanted(secret map[string]string) map[string]string {
	if secret == nil {
		return nil
	}
	out := map[string]string{"username": secretValue}
	for k, v := range secret {
		out[k] = v
	}
	return out
}

func TestMetadataNeverCarriesSecrets(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	meta, err := f.service.Create(ctx, protocol.CredentialCreateRequest{ClientID: clientA, EnvironmentID: envA1, Name: "db",
		Secret: map[string]string{"password": secretValue, "username": "app"}})
	if err != nil {
		t.Fatal(err)
	}
	if meta.ClientID != clientA || meta.EnvironmentID != envA1 || meta.Name != "db" || meta.KeyVersion != "local:v1" ||
		strings.Join(meta.Fields, ",") != "password,username" || meta.CreatedAt.IsZero() {
		t.Fatalf("create reply %+v", meta)
	}
	ref := protocol.CredentialRef{ClientID: clientA, ID: meta.ID}
	got, err := f.service.Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	list, err := f.service.List(ctx, protocol.CredentialListRequest{ClientID: clientA})
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := f.service.Rotate(ctx, protocol.CredentialRotateRequest{ClientID: clientA, ID: meta.ID, Secret: map[string]string{"password": secretValue + "2"}})
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := f.service.Delete(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, reply := range []any{meta, got, list, rotated, deleted} {
		b, _ := json.Marshal(reply)
		if strings.Contains(string(b), secretValue) || strings.Contains(string(b), "ciphertext") || strings.Contains(string(b), "local:v1:") {
			t.Fatalf("reply carries secret material: %s", b)
		}
	}
	if len(list.Credentials) != 1 || list.Credentials[0].ID != meta.ID {
		t.Fatalf("list %+v", list)
	}
}

func TestScopedByClient(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := f.create(t, clientA, envA1, "db", map[string]string{"password": "p"})
	f.create(t, clientA, "", "any", map[string]string{"password": "p"})
	ref := protocol.CredentialRef{ClientID: clientB, ID: id}
	if _, err := f.service.Get(ctx, ref); !errors.Is(err, credential.ErrNotFound) {
		t.Fatalf("get from another client: %v", err)
	}
	if _, err := f.service.Delete(ctx, ref); !errors.Is(err, credential.ErrNotFound) {
		t.Fatalf("delete from another client: %v", err)
	}
	if _, err := f.service.Rotate(ctx, protocol.CredentialRotateRequest{ClientID: clientB, ID: id}); !errors.Is(err, credential.ErrNotFound) {
		t.Fatalf("rotate from another client: %v", err)
	}
	if l, _ := f.service.List(ctx, protocol.CredentialListRequest{ClientID: clientB}); len(l.Credentials) != 0 {
		t.Fatalf("client B lists %v", l.Credentials)
	}
	if l, _ := f.service.List(ctx, protocol.CredentialListRequest{ClientID: clientA, EnvironmentID: envA1}); len(l.Credentials) != 1 {
		t.Fatalf("environment filter: %v", l.Credentials)
	}
	if _, err := f.service.Get(ctx, protocol.CredentialRef{ClientID: clientA, ID: "x"}); !errors.Is(err, credential.ErrInvalidRequest) {
		t.Fatalf("get with a bad id: %v", err)
	}
}

// injectOne injects one collector referencing id for a host of client A in environment A1.
func injectOne(t *testing.T, inj *credential.Injector, id string) protocol.InjectResult {
	t.Helper()
	res, err := inj.Inject(context.Background(), []protocol.InjectItem{
		{Key: "k", ClientID: clientA, EnvironmentID: envA1, Collectors: collectors(t, []any{mysql("p", id)})}})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

func TestRotateNewSecretAndDelete(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := f.create(t, clientA, "", "db", map[string]string{"password": "old", "username": "u"})
	meta, err := f.service.Rotate(ctx, protocol.CredentialRotateRequest{ClientID: clientA, ID: id, Secret: map[string]string{"password": "new"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(meta.Fields, ",") != "password" {
		t.Fatalf("fields after rotate: %v", meta.Fields)
	}
	r := injectOne(t, f.injector, id)
	if r.Error != nil || !strings.Contains(string(r.Collectors), `"password":"new"`) || strings.Contains(string(r.Collectors), "username") {
		t.Fatalf("after rotate: %+v %s", r.Error, r.Collectors)
	}
	if _, err := f.service.Rotate(ctx, protocol.CredentialRotateRequest{ClientID: clientA, ID: id, Secret: map[string]string{}}); !errors.Is(err, credential.ErrInvalidRequest) {
		t.Fatalf("rotate to an empty secret: %v", err)
	}
	if _, err := f.service.Delete(ctx, protocol.CredentialRef{ClientID: clientA, ID: id}); err != nil {
		t.Fatal(err)
	}
	if r := injectOne(t, f.injector, id); r.Error == nil || r.Error.Code != protocol.CodeCredentialFailed {
		t.Fatalf("inject after delete: %+v", r)
	}
}

// A credential may hold only the fields every collector that takes a credential_id accepts: any other
// would make the agent reject the collectors config it is injected into. Create and rotate refuse it,
// naming the field and the allowed names, and leave the stored credential unchanged.
func TestSecretFieldsLimitedToInjectable(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	wantMessage := func(t *testing.T, err error, field string) {
		t.Helper()
		if !errors.Is(err, credential.ErrInvalidRequest) {
			t.Fatalf("err %v, want ErrInvalidRequest", err)
		}
		for _, want := range []string{`"` + field + `"`, "password, username"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %s", err, want)
			}
		}
		if strings.Contains(err.Error(), secretValue) {
			t.Errorf("error leaks the secret: %v", err)
		}
	}
	_, err := f.service.Create(ctx, protocol.CredentialCreateRequest{ClientID: clientA, Name: "api",
		Secret: map[string]string{"password": secretValue, "api_key": secretValue}})
	wantMessage(t, err, "api_key")

	id := f.create(t, clientA, "", "db", map[string]string{"password": "old", "username": "u"})
	_, err = f.service.Rotate(ctx, protocol.CredentialRotateRequest{ClientID: clientA, ID: id,
		Secret: map[string]string{"token": secretValue}})
	wantMessage(t, err, "token")
	if r := injectOne(t, f.injector, id); r.Error != nil || !strings.Contains(string(r.Collectors), `"password":"old"`) ||
		!strings.Contains(string(r.Collectors), `"username":"u"`) {
		t.Fatalf("a refused rotation changed the credential: %+v %s", r.Error, r.Collectors)
	}
}

// Rotating without a secret re-encrypts under the newest key, after which the old key can be retired.
func TestRotateReencryptsUnderNewestKey(t *testing.T) {
	ctx := context.Background()
	k1, _ := keyring.GenerateKey()
	k2, _ := keyring.GenerateKey()
	ringV1, err := keyring.New(map[uint32][]byte{1: k1})
	if err != nil {
		t.Fatal(err)
	}
	store := credentialtest.NewMemStore()
	store.AddClient(clientA, envA1)
	svc := credential.NewService(store, ringV1)
	meta, err := svc.Create(ctx, protocol.CredentialCreateRequest{ClientID: clientA, Name: "db", Secret: map[string]string{"password": secretValue}})
	if err != nil {
		t.Fatal(err)
	}

	ringV12, _ := keyring.New(map[uint32][]byte{1: k1, 2: k2})
	svc = credential.NewService(store, ringV12)
	// Before the re-encryption, the old row still injects with the two-key ring.
	if r := injectOne(t, credential.NewInjector(store, ringV12, nopLog(t)), meta.ID); r.Error != nil {
		t.Fatalf("old ciphertext under the new ring: %+v", r.Error)
	}
	rotated, err := svc.Rotate(ctx, protocol.CredentialRotateRequest{ClientID: clientA, ID: meta.ID})
	if err != nil {
		t.Fatal(err)
	}
	if rotated.KeyVersion != "local:v2" || !rotated.UpdatedAt.After(meta.UpdatedAt) && !rotated.UpdatedAt.Equal(meta.UpdatedAt) {
		t.Fatalf("after rotate: %+v", rotated)
	}
	if strings.Join(rotated.Fields, ",") != "password" {
		t.Fatalf("fields changed: %v", rotated.Fields)
	}

	// v1 retired: the row still opens with v2 alone, and holds the same secret.
	ringV2, _ := keyring.New(map[uint32][]byte{2: k2})
	r := injectOne(t, credential.NewInjector(store, ringV2, nopLog(t)), meta.ID)
	if r.Error != nil || !strings.Contains(string(r.Collectors), secretValue) {
		t.Fatalf("after retiring v1: %+v", r.Error)
	}
}

// Ciphers reads every configured scheme and writes with the primary; rotate migrates rows.
func TestCiphersMigrateBetweenSchemes(t *testing.T) {
	ctx := context.Background()
	kOld, _ := keyring.GenerateKey()
	oldRing, _ := keyring.New(map[uint32][]byte{1: kOld})
	store := credentialtest.NewMemStore()
	store.AddClient(clientA, envA1)
	meta, err := credential.NewService(store, oldRing).Create(ctx, protocol.CredentialCreateRequest{ClientID: clientA, Name: "db",
		Secret: map[string]string{"password": secretValue}})
	if err != nil {
		t.Fatal(err)
	}
	primary := &schemeCipher{scheme: "test"}
	both := &countingCipher{Cipher: credential.NewCiphers(primary, oldRing)}
	if r := injectOne(t, credential.NewInjector(store, both, nopLog(t)), meta.ID); r.Error != nil {
		t.Fatalf("old scheme through Ciphers: %+v", r.Error)
	}
	rotated, err := credential.NewService(store, both).Rotate(ctx, protocol.CredentialRotateRequest{ClientID: clientA, ID: meta.ID})
	if err != nil {
		t.Fatal(err)
	}
	if rotated.KeyVersion != "test:v1" {
		t.Fatalf("rotate under Ciphers wrote %s", rotated.KeyVersion)
	}
	if r := injectOne(t, credential.NewInjector(store, credential.NewCiphers(primary), nopLog(t)), meta.ID); r.Error != nil {
		t.Fatalf("new scheme alone: %+v", r.Error)
	}
	// A scheme nobody reads fails that item only.
	if r := injectOne(t, credential.NewInjector(store, credential.NewCiphers(oldRing), nopLog(t)), meta.ID); r.Error == nil {
		t.Fatal("unknown scheme decrypted")
	}
}

// schemeCipher is a toy reversible cipher with its own scheme (not secure; for routing tests only).
type schemeCipher struct{ scheme string }

func (c *schemeCipher) Scheme() string { return c.scheme }

func (c *schemeCipher) Encrypt(_ context.Context, items []credential.EncryptItem) ([]string, error) {
	out := make([]string, len(items))
	for i, it := range items {
		b, _ := json.Marshal(struct {
			P []byte
			A []byte
		}{it.Plaintext, it.AAD})
		out[i] = c.scheme + ":v1:" + string(b)
	}
	return out, nil
}

func (c *schemeCipher) Decrypt(_ context.Context, items []credential.DecryptItem) ([]credential.Decrypted, error) {
	out := make([]credential.Decrypted, len(items))
	for i, it := range items {
		var v struct {
			P []byte
			A []byte
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(it.Ciphertext, c.scheme+":v1:")), &v); err != nil || string(v.A) != string(it.AAD) {
			out[i].Err = credential.ErrDecrypt
			continue
		}
		out[i].Plaintext = v.P
	}
	return out, nil
}

func TestKeyVersion(t *testing.T) {
	for in, want := range map[string]string{
		"local:v1:abc": "local:v1", "vault:v12:x:y": "vault:v12", "local": "", "local:v1": "", "": "",
	} {
		if got := credential.KeyVersion(in); got != want {
			t.Errorf("KeyVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
