package credential_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential/internal/credential"
	"github.com/configsync/configsync/services/credential/internal/credential/credentialtest"
	"github.com/configsync/configsync/services/credential/internal/seed"
)

const (
	clientA = "0a000000-0000-4000-8000-000000000001"
	clientB = "0b000000-0000-4000-8000-000000000002"
	envA1   = "0a000000-0000-4000-8000-0000000000e1"
	envA2   = "0a000000-0000-4000-8000-0000000000e2"
	envB1   = "0b000000-0000-4000-8000-0000000000e1"

	// secretValue is planted in every credential; it must never show up in a reply error or a log.
	secretValue = "pl4nted-S3CRET-value-91d2"
)

type fixture struct {
	store    *credentialtest.MemStore
	cipher   *countingCipher
	service  *credential.Service
	injector *credential.Injector
	logs     *observer.ObservedLogs
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	log, logs := testinfra.Logger(t)
	if _, ok := t.(*testing.B); ok {
		log = zap.NewNop()
	}
	f := &fixture{store: credentialtest.NewMemStore(), cipher: &countingCipher{Cipher: seed.Keyring(t)}, logs: logs}
	f.store.AddClient(clientA, envA1, envA2)
	f.store.AddClient(clientB, envB1)
	f.service = credential.NewService(f.store, f.cipher)
	f.injector = credential.NewInjector(f.store, f.cipher, log)
	return f
}

func (f *fixture) create(t testing.TB, clientID, envID, name string, secret map[string]string) string {
	t.Helper()
	meta, err := f.service.Create(context.Background(), protocol.CredentialCreateRequest{
		ClientID: clientID, EnvironmentID: envID, Name: name, Secret: secret})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return meta.ID
}

func collectors(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mysql(name, credID string) map[string]any {
	c := map[string]any{"type": "mysql", "name": name, "host": "db", "port": 3306}
	if credID != "" {
		c["credential_id"] = credID
	}
	return c
}

// TestInjectRules is the spec's credential resolution table, one case per rule, all in one batch so that
// each also shows that a failing item leaves the others alone.
func TestInjectRules(t *testing.T) {
	f := newFixture(t)
	anyEnv := f.create(t, clientA, "", "db-any-env", map[string]string{"username": "app", "password": secretValue})
	inEnvA1 := f.create(t, clientA, envA1, "db-env-a1", map[string]string{"password": secretValue + "-a1"})
	otherClient := f.create(t, clientB, "", "db-client-b", map[string]string{"password": secretValue + "-b"})
	tampered := f.create(t, clientA, "", "db-tampered", map[string]string{"password": secretValue + "-t"})
	swapped := f.create(t, clientA, "", "db-swapped", map[string]string{"password": secretValue + "-s"})
	missing := "0a000000-0000-4000-8000-00000000dead"

	ct := f.store.Ciphertext(tampered)
	f.store.SetCiphertext(tampered, ct[:len(ct)-6]+"AAAAA=")
	// A ciphertext moved from another row fails its AAD check, even between rows of one client.
	f.store.SetCiphertext(swapped, f.store.Ciphertext(anyEnv))

	cases := []struct {
		name     string
		envID    string
		clientID string
		cols     json.RawMessage
		// wantCode empty means success.
		wantCode    string
		wantReason  string
		wantSecrets []string
	}{
		{name: "no credential reference passes through", cols: collectors(t, []any{mysql("plain", "")})},
		{name: "client-wide credential injects in any environment", envID: envA2,
			cols: collectors(t, []any{mysql("p", anyEnv)}), wantSecrets: []string{"/0/password", "/0/username"}},
		{name: "environment credential injects in its environment", envID: envA1,
			cols: collectors(t, []any{mysql("p", inEnvA1)}), wantSecrets: []string{"/0/password"}},
		{name: "environment scoping", envID: envA2, cols: collectors(t, []any{mysql("p", inEnvA1)}),
			wantCode: protocol.CodeCredentialFailed, wantReason: "credential " + inEnvA1 + " is scoped to another environment"},
		{name: "client scoping", cols: collectors(t, []any{mysql("p", otherClient)}),
			wantCode: protocol.CodeCredentialFailed, wantReason: "credential " + otherClient + " not found"},
		{name: "not found", cols: collectors(t, []any{mysql("p", missing)}),
			wantCode: protocol.CodeCredentialFailed, wantReason: "credential " + missing + " not found"},
		{name: "not a UUID is not found", cols: collectors(t, []any{mysql("p", "db-password")}),
			wantCode: protocol.CodeCredentialFailed, wantReason: "credential db-password not found"},
		{name: "decryption error", cols: collectors(t, []any{mysql("p", tampered)}),
			wantCode: protocol.CodeCredentialFailed, wantReason: "credential " + tampered + " could not be decrypted"},
		{name: "ciphertext moved to another row", cols: collectors(t, []any{mysql("p", swapped)}),
			wantCode: protocol.CodeCredentialFailed, wantReason: "credential " + swapped + " could not be decrypted"},
		{name: "all-or-nothing: one bad reference fails the whole item", envID: envA1,
			cols:     collectors(t, []any{mysql("ok", anyEnv), mysql("ok2", inEnvA1), mysql("bad", missing)}),
			wantCode: protocol.CodeCredentialFailed, wantReason: "credential " + missing + " not found"},
		{name: "several collectors, one credential", envID: envA1,
			cols:        collectors(t, []any{mysql("a", anyEnv), map[string]any{"type": "http", "name": "h", "url": "http://x"}, mysql("b", anyEnv)}),
			wantSecrets: []string{"/0/password", "/0/username", "/2/password", "/2/username"}},
		{name: "null collectors pass through", cols: json.RawMessage("null")},
		{name: "collectors must be an array", cols: json.RawMessage(`{"type":"mysql"}`),
			wantCode: protocol.CodeInvalidRequest, wantReason: "collectors: collectors config is not an array"},
		{name: "credential_id must be a string", cols: json.RawMessage(`[{"type":"mysql","name":"p","credential_id":7}]`),
			wantCode: protocol.CodeInvalidRequest, wantReason: "collectors: collectors[0].credential_id is not a string"},
		{name: "client_id must be a UUID", clientID: "acme", cols: collectors(t, []any{mysql("p", anyEnv)}),
			wantCode: protocol.CodeInvalidRequest, wantReason: "client_id is not a UUID"},
	}
	items := make([]protocol.InjectItem, len(cases))
	for i, c := range cases {
		items[i] = protocol.InjectItem{Key: c.name, ClientID: clientA, EnvironmentID: envA1, Collectors: c.cols}
		if c.clientID != "" {
			items[i].ClientID = c.clientID
		}
		if c.envID != "" {
			items[i].EnvironmentID = c.envID
		}
	}
	results, err := f.injector.Inject(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(cases) {
		t.Fatalf("%d results for %d items", len(results), len(cases))
	}
	for i, c := range cases {
		r := results[i]
		t.Run(c.name, func(t *testing.T) {
			if r.Key != c.name {
				t.Fatalf("result %d has key %q", i, r.Key)
			}
			if c.wantCode != "" {
				if r.Error == nil || r.Error.Code != c.wantCode || r.Error.Message != c.wantReason {
					t.Fatalf("error %+v, want %s %q", r.Error, c.wantCode, c.wantReason)
				}
				if r.Collectors != nil || r.SecretFields != nil {
					t.Fatalf("a failed item carries collectors %s / %v", r.Collectors, r.SecretFields)
				}
				return
			}
			if r.Error != nil {
				t.Fatalf("unexpected error %+v", r.Error)
			}
			if strings.Contains(string(r.Collectors), "credential_id") {
				t.Fatalf("credential_id left in %s", r.Collectors)
			}
			if fmt.Sprint(r.SecretFields) != fmt.Sprint(c.wantSecrets) {
				t.Fatalf("secret_fields %v, want %v", r.SecretFields, c.wantSecrets)
			}
			if len(c.wantSecrets) == 0 && string(r.Collectors) != string(c.cols) {
				t.Fatalf("collectors changed without references: %s", r.Collectors)
			}
		})
	}

	// Spot-check the injected values and that non-secret fields survive.
	var got []map[string]any
	if err := json.Unmarshal(results[1].Collectors, &got); err != nil {
		t.Fatal(err)
	}
	if got[0]["password"] != secretValue || got[0]["username"] != "app" || got[0]["host"] != "db" || got[0]["port"] != float64(3306) {
		t.Fatalf("injected collector %v", got[0])
	}

	// Only credentials an item may use were decrypted: not the other client's, and each once.
	if calls := f.cipher.calls.Load(); calls != 1 {
		t.Fatalf("%d decrypt calls in one batch, want 1", calls)
	}
	if items := f.cipher.items.Load(); items != 4 {
		t.Fatalf("%d credentials decrypted, want 4 (any-env, env-a1, tampered, swapped)", items)
	}
	if !f.cipher.allZeroed() {
		t.Fatal("decrypted plaintexts were not zeroed after the batch")
	}
	for _, r := range results {
		if r.Error != nil && strings.Contains(r.Error.Message, secretValue) {
			t.Fatalf("error reason leaks the secret: %s", r.Error.Message)
		}
	}
	testinfra.AssertNotLogged(t, f.logs, secretValue)
	if f.logs.FilterMessage("credential injection failed").Len() == 0 {
		t.Fatal("item failures were not logged")
	}
}

// A batch of 1,000 items sharing 3 credentials makes one decrypt call for 3 credentials.
func TestInjectDecryptsEachCredentialOncePerBatch(t *testing.T) {
	f := newFixture(t)
	ids := []string{
		f.create(t, clientA, "", "one", map[string]string{"password": secretValue + "1"}),
		f.create(t, clientA, envA1, "two", map[string]string{"password": secretValue + "2"}),
		f.create(t, clientA, "", "three", map[string]string{"password": secretValue + "3", "username": "u"}),
	}
	items := batch(t, 1000, ids)
	results, err := f.injector.Inject(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Error != nil {
			t.Fatalf("item %s failed: %+v", r.Key, r.Error)
		}
	}
	if calls, n := f.cipher.calls.Load(), f.cipher.items.Load(); calls != 1 || n > 3 {
		t.Fatalf("%d decrypt calls for %d credentials; want 1 call, at most 3 credentials", calls, n)
	}

	// Nothing is cached across batches: the next batch decrypts again, once.
	f.cipher.reset()
	if _, err := f.injector.Inject(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	if calls, n := f.cipher.calls.Load(), f.cipher.items.Load(); calls != 1 || n != 3 {
		t.Fatalf("second batch: %d calls for %d credentials", calls, n)
	}
	if !f.cipher.allZeroed() {
		t.Fatal("plaintexts not zeroed")
	}

	credential.Wipe(results)
	for _, r := range results {
		if r.Collectors != nil {
			t.Fatal("Wipe left collectors")
		}
	}
}

// batch builds n items over hosts of client A in environment A1, each referencing the credentials in
// turn (two collectors each).
func batch(t testing.TB, n int, ids []string) []protocol.InjectItem {
	items := make([]protocol.InjectItem, n)
	for i := range items {
		items[i] = protocol.InjectItem{
			Key:           fmt.Sprintf("host-%d", i),
			ClientID:      clientA,
			EnvironmentID: envA1,
			Collectors: collectors(t, []any{
				mysql("primary", ids[i%len(ids)]),
				map[string]any{"type": "redis", "name": "cache", "host": "r", "port": 6379, "credential_id": ids[(i+1)%len(ids)]},
				map[string]any{"type": "http", "name": fmt.Sprintf("check-%d", i), "url": "http://localhost"},
			}),
		}
	}
	return items
}

// When the cipher is unavailable, items that need it fail with code unavailable; others still succeed.
func TestInjectCipherUnavailable(t *testing.T) {
	f := newFixture(t)
	id := f.create(t, clientA, "", "db", map[string]string{"password": secretValue})
	f.cipher.fail = fmt.Errorf("%w: vault is sealed", credential.ErrUnavailable)
	results, err := f.injector.Inject(context.Background(), []protocol.InjectItem{
		{Key: "needs", ClientID: clientA, EnvironmentID: envA1, Collectors: collectors(t, []any{mysql("p", id)})},
		{Key: "plain", ClientID: clientA, EnvironmentID: envA1, Collectors: collectors(t, []any{mysql("p", "")})},
	})
	if err != nil {
		t.Fatal(err)
	}
	if e := results[0].Error; e == nil || e.Code != protocol.CodeUnavailable || !strings.Contains(e.Message, id) {
		t.Fatalf("item needing the cipher: %+v", e)
	}
	if results[1].Error != nil || results[1].Collectors == nil {
		t.Fatalf("item without references: %+v", results[1])
	}
}

// A store failure fails the whole batch.
func TestInjectStoreFailure(t *testing.T) {
	f := newFixture(t)
	inj := credential.NewInjector(failingStore{f.store}, f.cipher, zap.NewNop())
	_, err := inj.Inject(context.Background(), []protocol.InjectItem{
		{Key: "k", ClientID: clientA, EnvironmentID: envA1, Collectors: collectors(t, []any{mysql("p", clientA)})}})
	if err == nil {
		t.Fatal("store failure not reported")
	}
}

type failingStore struct{ *credentialtest.MemStore }

func (failingStore) SealedByIDs(context.Context, []string) (map[string]credential.Sealed, error) {
	return nil, errors.New("connection refused")
}

func TestInjectEmptyBatch(t *testing.T) {
	f := newFixture(t)
	results, err := f.injector.Inject(context.Background(), nil)
	if err != nil || len(results) != 0 {
		t.Fatalf("empty batch: %v %v", results, err)
	}
	if f.cipher.calls.Load() != 0 {
		t.Fatal("empty batch decrypted")
	}
}

func BenchmarkInject1000Items3Credentials(b *testing.B) {
	f := newFixture(b)
	ids := []string{
		f.create(b, clientA, "", "one", map[string]string{"password": secretValue + "1"}),
		f.create(b, clientA, envA1, "two", map[string]string{"password": secretValue + "2", "username": "svc"}),
		f.create(b, clientA, "", "three", map[string]string{"password": secretValue + "3"}),
	}
	items := batch(b, 1000, ids)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		results, err := f.injector.Inject(ctx, items)
		if err != nil {
			b.Fatal(err)
		}
		if results[999].Error != nil {
			b.Fatal(results[999].Error)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(f.cipher.items.Load())/float64(f.cipher.calls.Load()), "decrypts/batch")
}

// nopLog is a test logger (entries go to t.Log).
func nopLog(t testing.TB) *zap.Logger {
	l, _ := testinfra.Logger(t)
	return l
}
