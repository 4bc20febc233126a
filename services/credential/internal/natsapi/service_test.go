package natsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential/internal/credential"
	"github.com/configsync/configsync/services/credential/internal/postgres"
	"github.com/configsync/configsync/services/credential/internal/seed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// requestTimeout only bounds a broken test; nothing asserts on timing.
const requestTimeout = 30 * time.Second

// planted is the secret value every test credential holds; no log entry and no error may contain it.
const planted = "pl4nted-e2e-S3CRET-6b0e"

// countingCipher counts Decrypt calls and items at the port.
type countingCipher struct {
	credential.Cipher
	calls, items atomic.Int64
}

func (c *countingCipher) Decrypt(ctx context.Context, items []credential.DecryptItem) ([]credential.Decrypted, error) {
	c.calls.Add(1)
	c.items.Add(int64(len(items)))
	return c.Cipher.Decrypt(ctx, items)
}

type stack struct {
	nc     *nats.Conn
	pool   *pgxpool.Pool
	cipher *countingCipher
	logs   *observer.ObservedLogs
	client string
	other  string
	envs   []string
}

// newStack runs the service on an embedded NATS server over a fresh PostgreSQL database with a
// one-key keyring. Logs are checked for the planted secret at cleanup.
func newStack(t *testing.T, natsOpts ...testinfra.NATSOption) *stack {
	t.Helper()
	pool := testinfra.Postgres(t)
	srv := testinfra.NATS(t, natsOpts...)
	nc := srv.Connect(t)
	log, logs := testinfra.Logger(t)
	st := &stack{nc: nc, pool: pool, cipher: &countingCipher{Cipher: seed.Keyring(t)}, logs: logs}
	store := postgres.NewStore(pool)
	s := New(credential.NewService(store, st.cipher), credential.NewInjector(store, st.cipher, log), Options{}, log)
	if err := s.Start(nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
		testinfra.AssertNotLogged(t, logs, planted)
	})
	st.client, st.envs = seed.Client(t, pool, "acme", 2)
	st.other, _ = seed.Client(t, pool, "globex", 1)
	return st
}

// call sends body (a value or raw []byte) and decodes a successful reply into out; it returns the
// error of an error reply (code from the micro header, checked against the body).
func (st *stack) call(t *testing.T, subject string, body any, out any) *protocol.Error {
	t.Helper()
	msg := testinfra.RequestJSON(t, st.nc, subject, body, requestTimeout)
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		var e struct {
			Error protocol.Error `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &e); err != nil || e.Error.Code != code || e.Error.Message == "" {
			t.Fatalf("%s: error body %s does not match header %s", subject, msg.Data, code)
		}
		if strings.Contains(string(msg.Data), planted) || strings.Contains(msg.Header.Get(micro.ErrorHeader), planted) {
			t.Fatalf("%s: error reply leaks the secret", subject)
		}
		return &e.Error
	}
	if out != nil {
		// Decode into a zero value: reused slices would keep stale elements' omitted fields.
		v := reflect.ValueOf(out).Elem()
		v.Set(reflect.Zero(v.Type()))
		if err := json.Unmarshal(msg.Data, out); err != nil {
			t.Fatalf("%s: reply %s: %v", subject, msg.Data, err)
		}
	}
	return nil
}

func (st *stack) create(t *testing.T, envID, name string, secret map[string]string) protocol.CredentialMeta {
	t.Helper()
	var meta protocol.CredentialMeta
	if e := st.call(t, protocol.CredentialCreateSubject, protocol.CredentialCreateRequest{
		ClientID: st.client, EnvironmentID: envID, Name: name, Secret: secret}, &meta); e != nil {
		t.Fatalf("create %s: %+v", name, e)
	}
	return meta
}

func TestEndToEnd(t *testing.T) {
	st := newStack(t)
	db := st.create(t, "", "db", map[string]string{"username": "app", "password": planted})
	cache := st.create(t, st.envs[0], "cache", map[string]string{"password": planted + "-cache"})
	api := st.create(t, "", "api", map[string]string{"username": "svc-api", "password": planted + "-api"})
	if db.KeyVersion != "local:v1" || db.ClientID != st.client || strings.Join(db.Fields, ",") != "password,username" {
		t.Fatalf("create reply %+v", db)
	}

	var got protocol.CredentialMeta
	if e := st.call(t, protocol.CredentialGetSubject, protocol.CredentialRef{ClientID: st.client, ID: db.ID}, &got); e != nil || got.ID != db.ID {
		t.Fatalf("get: %+v %+v", e, got)
	}
	var list protocol.CredentialListReply
	if e := st.call(t, protocol.CredentialListSubject, protocol.CredentialListRequest{ClientID: st.client}, &list); e != nil || len(list.Credentials) != 3 {
		t.Fatalf("list: %+v %+v", e, list)
	}
	if e := st.call(t, protocol.CredentialListSubject, protocol.CredentialListRequest{ClientID: st.client, EnvironmentID: st.envs[0]}, &list); e != nil || len(list.Credentials) != 1 {
		t.Fatalf("list env: %+v %+v", e, list)
	}

	// 1,000 hosts sharing 3 credentials: one decrypt call for 3 credentials.
	ids := []string{db.ID, cache.ID, api.ID}
	items := make([]protocol.InjectItem, 1000)
	for i := range items {
		items[i] = protocol.InjectItem{Key: fmt.Sprintf("host-%d", i), ClientID: st.client, EnvironmentID: st.envs[0],
			Collectors: json.RawMessage(fmt.Sprintf(`[{"type":"mysql","name":"db","host":"h","port":3306,"credential_id":%q},`+
				`{"type":"redis","name":"cache","host":"r","credential_id":%q}]`, ids[i%3], ids[(i+1)%3]))}
	}
	st.cipher.calls.Store(0)
	st.cipher.items.Store(0)
	var reply protocol.InjectReply
	if e := st.call(t, protocol.CredentialInjectSubject, protocol.InjectRequest{Items: items}, &reply); e != nil {
		t.Fatalf("inject: %+v", e)
	}
	if len(reply.Results) != 1000 {
		t.Fatalf("%d results", len(reply.Results))
	}
	for i, r := range reply.Results {
		if r.Key != items[i].Key || r.Error != nil || strings.Contains(string(r.Collectors), "credential_id") || len(r.SecretFields) == 0 {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if c, n := st.cipher.calls.Load(), st.cipher.items.Load(); c != 1 || n != 3 {
		t.Fatalf("%d decrypt calls for %d credentials, want 1 for 3", c, n)
	}
	var first []map[string]any
	if err := json.Unmarshal(reply.Results[0].Collectors, &first); err != nil {
		t.Fatal(err)
	}
	if first[0]["password"] != planted || first[0]["username"] != "app" || first[1]["password"] != planted+"-cache" {
		t.Fatalf("injected %v", first)
	}
	if strings.Join(reply.Results[0].SecretFields, ",") != "/0/password,/0/username,/1/password" {
		t.Fatalf("secret_fields %v", reply.Results[0].SecretFields)
	}

	// The spec's scoping rules over the wire, mixed in one batch with a good item.
	globexCred := createFor(t, st, st.other, "theirs")
	mixed := []protocol.InjectItem{
		{Key: "ok", ClientID: st.client, EnvironmentID: st.envs[1], Collectors: refs(db.ID)},
		{Key: "env", ClientID: st.client, EnvironmentID: st.envs[1], Collectors: refs(cache.ID)},
		{Key: "client", ClientID: st.client, EnvironmentID: st.envs[0], Collectors: refs(globexCred)},
		{Key: "missing", ClientID: st.client, EnvironmentID: st.envs[0], Collectors: refs(uuid.NewString())},
	}
	if e := st.call(t, protocol.CredentialInjectSubject, protocol.InjectRequest{Items: mixed}, &reply); e != nil {
		t.Fatalf("inject: %+v", e)
	}
	if reply.Results[0].Error != nil {
		t.Fatalf("good item failed: %+v", reply.Results[0].Error)
	}
	for _, r := range reply.Results[1:] {
		if r.Error == nil || r.Error.Code != protocol.CodeCredentialFailed || r.Collectors != nil {
			t.Fatalf("item %s: %+v", r.Key, r)
		}
	}

	// Rotate to a new secret, then re-encrypt in place; inject follows.
	var rotated protocol.CredentialMeta
	if e := st.call(t, protocol.CredentialRotateSubject, protocol.CredentialRotateRequest{ClientID: st.client, ID: db.ID,
		Secret: map[string]string{"password": planted + "-v2"}}, &rotated); e != nil || strings.Join(rotated.Fields, ",") != "password" {
		t.Fatalf("rotate: %+v %+v", e, rotated)
	}
	if e := st.call(t, protocol.CredentialRotateSubject, protocol.CredentialRotateRequest{ClientID: st.client, ID: db.ID}, &rotated); e != nil || rotated.KeyVersion != "local:v1" {
		t.Fatalf("re-encrypt: %+v %+v", e, rotated)
	}
	if e := st.call(t, protocol.CredentialInjectSubject, protocol.InjectRequest{Items: mixed[:1]}, &reply); e != nil ||
		!strings.Contains(string(reply.Results[0].Collectors), `"password":"`+planted+`-v2"`) {
		t.Fatalf("inject after rotate: %+v %s", e, reply.Results[0].Collectors)
	}

	var deleted protocol.CredentialMeta
	if e := st.call(t, protocol.CredentialDeleteSubject, protocol.CredentialRef{ClientID: st.client, ID: db.ID}, &deleted); e != nil || deleted.ID != db.ID {
		t.Fatalf("delete: %+v", e)
	}
	if e := st.call(t, protocol.CredentialInjectSubject, protocol.InjectRequest{Items: mixed[:1]}, &reply); e != nil ||
		reply.Results[0].Error == nil || !strings.Contains(reply.Results[0].Error.Message, db.ID+" not found") {
		t.Fatalf("inject after delete: %+v %+v", e, reply.Results[0])
	}
}

func createFor(t *testing.T, st *stack, clientID, name string) string {
	t.Helper()
	var meta protocol.CredentialMeta
	if e := st.call(t, protocol.CredentialCreateSubject, protocol.CredentialCreateRequest{
		ClientID: clientID, Name: name, Secret: map[string]string{"password": planted}}, &meta); e != nil {
		t.Fatalf("create: %+v", e)
	}
	return meta.ID
}

func refs(id string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`[{"type":"postgres","name":"p","host":"h","port":5432,"credential_id":%q}]`, id))
}

func TestErrorReplies(t *testing.T) {
	st := newStack(t)
	db := st.create(t, "", "db", map[string]string{"password": planted})
	tooMany := protocol.InjectRequest{Items: make([]protocol.InjectItem, 10001)}
	cases := []struct {
		name    string
		subject string
		body    any
		code    string
	}{
		{"malformed create holding a secret", protocol.CredentialCreateSubject,
			[]byte(`{"client_id":"` + st.client + `","name":"x","secret":{"password":"` + planted + `"`), protocol.CodeInvalidRequest},
		{"syntax error right after a secret", protocol.CredentialCreateSubject,
			[]byte(`{"secret":{"password":"` + planted + `"x}}`), protocol.CodeInvalidRequest},
		{"secret value of the wrong type", protocol.CredentialCreateSubject,
			[]byte(`{"client_id":"` + st.client + `","name":"x","secret":{"password":["` + planted + `"]}}`), protocol.CodeInvalidRequest},
		{"unknown field", protocol.CredentialCreateSubject,
			[]byte(`{"client_id":"` + st.client + `","name":"x","envronment_id":"e","secret":{"password":"` + planted + `"}}`), protocol.CodeInvalidRequest},
		{"reserved secret field", protocol.CredentialCreateSubject,
			protocol.CredentialCreateRequest{ClientID: st.client, Name: "x", Secret: map[string]string{"type": planted}}, protocol.CodeInvalidRequest},
		{"secret field a collector cannot take", protocol.CredentialCreateSubject,
			protocol.CredentialCreateRequest{ClientID: st.client, Name: "x", Secret: map[string]string{"api_key": planted}}, protocol.CodeInvalidRequest},
		{"rotate to a secret field a collector cannot take", protocol.CredentialRotateSubject,
			protocol.CredentialRotateRequest{ClientID: st.client, ID: db.ID, Secret: map[string]string{"password": planted, "token": planted}}, protocol.CodeInvalidRequest},
		{"duplicate name", protocol.CredentialCreateSubject,
			protocol.CredentialCreateRequest{ClientID: st.client, Name: "db", Secret: map[string]string{"password": planted}}, protocol.CodeConflict},
		{"unknown client", protocol.CredentialCreateSubject,
			protocol.CredentialCreateRequest{ClientID: uuid.NewString(), Name: "db", Secret: map[string]string{"password": planted}}, protocol.CodeNotFound},
		{"environment of another client", protocol.CredentialCreateSubject,
			protocol.CredentialCreateRequest{ClientID: st.other, EnvironmentID: st.envs[0], Name: "db", Secret: map[string]string{"password": planted}}, protocol.CodeNotFound},
		{"get another client's credential", protocol.CredentialGetSubject, protocol.CredentialRef{ClientID: st.other, ID: db.ID}, protocol.CodeNotFound},
		{"get with a bad id", protocol.CredentialGetSubject, protocol.CredentialRef{ClientID: st.client, ID: "nope"}, protocol.CodeInvalidRequest},
		{"delete unknown", protocol.CredentialDeleteSubject, protocol.CredentialRef{ClientID: st.client, ID: uuid.NewString()}, protocol.CodeNotFound},
		{"rotate to an invalid secret", protocol.CredentialRotateSubject,
			protocol.CredentialRotateRequest{ClientID: st.client, ID: db.ID, Secret: map[string]string{"": planted}}, protocol.CodeInvalidRequest},
		{"list without client", protocol.CredentialListSubject, []byte(`{}`), protocol.CodeInvalidRequest},
		{"empty body", protocol.CredentialListSubject, []byte(``), protocol.CodeInvalidRequest},
		{"inject without items", protocol.CredentialInjectSubject, []byte(`{}`), protocol.CodeInvalidRequest},
		{"inject over the item limit", protocol.CredentialInjectSubject, tooMany, protocol.CodeInvalidRequest},
		{"inject with trailing data", protocol.CredentialInjectSubject, []byte(`{"items":[]} {}`), protocol.CodeInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := st.call(t, c.subject, c.body, nil)
			if e == nil || e.Code != c.code {
				t.Fatalf("got %+v, want code %s", e, c.code)
			}
			if strings.Contains(e.Message, planted) {
				t.Fatalf("error message leaks the secret: %s", e.Message)
			}
		})
	}
	// An empty batch is a valid request with no results.
	var reply protocol.InjectReply
	if e := st.call(t, protocol.CredentialInjectSubject, protocol.InjectRequest{Items: []protocol.InjectItem{}}, &reply); e != nil || len(reply.Results) != 0 {
		t.Fatalf("empty batch: %+v %+v", e, reply)
	}
}

// A reply that would exceed the server's max payload is refused with a clear error.
func TestInjectReplyOverMaxPayload(t *testing.T) {
	st := newStack(t, testinfra.WithServerOptions(func(o *server.Options) { o.MaxPayload = 8 << 10 }))
	db := st.create(t, "", "db", map[string]string{"password": strings.Repeat("p", 4000) + planted})
	items := []protocol.InjectItem{
		{Key: "a", ClientID: st.client, EnvironmentID: st.envs[0], Collectors: refs(db.ID)},
		{Key: "b", ClientID: st.client, EnvironmentID: st.envs[0], Collectors: refs(db.ID)},
	}
	e := st.call(t, protocol.CredentialInjectSubject, protocol.InjectRequest{Items: items}, nil)
	if e == nil || e.Code != protocol.CodeInvalidRequest || !strings.Contains(e.Message, "max payload") {
		t.Fatalf("got %+v", e)
	}
}

// Stop answers requests that arrive after it with unavailable (or not at all) and never panics.
func TestStopIsClean(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	s := New(credential.NewService(nil, nil), credential.NewInjector(nil, nil, zap.NewNop()), Options{}, zap.NewNop())
	if err := s.Start(nc); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
