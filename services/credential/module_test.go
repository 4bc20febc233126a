package credential_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/platform/health"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential"
	"github.com/configsync/configsync/services/credential/internal/seed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const planted = "pl4nted-module-S3CRET-0c55"

// requestTimeout only bounds a broken test; nothing asserts on timing.
const requestTimeout = 30 * time.Second

// configVars are every variable the module reads; tests set all of them so the machine's environment
// (a VAULT_ADDR, say) cannot leak in.
var configVars = []string{
	"CREDENTIAL_CIPHER", "CONFIGSYNC_KEYRING", "CONFIGSYNC_KEYRING_FILE", "CONFIGSYNC_KEYRING_CREATE",
	"VAULT_ADDR", "VAULT_TOKEN", "VAULT_ROLE_ID", "VAULT_SECRET_ID", "VAULT_APPROLE_MOUNT",
	"VAULT_TRANSIT_MOUNT", "VAULT_TRANSIT_KEY", "VAULT_NAMESPACE", "VAULT_TIMEOUT", "VAULT_MAX_RETRIES",
	"CREDENTIAL_WORKERS", "CREDENTIAL_INJECT_WORKERS", "CREDENTIAL_MAX_INJECT_ITEMS", "CREDENTIAL_REQUEST_TIMEOUT",
}

func setEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	for _, name := range configVars {
		t.Setenv(name, vars[name])
	}
}

type env struct {
	pool   *pgxpool.Pool
	nc     *nats.Conn
	log    *zap.Logger
	logs   *observer.ObservedLogs
	client string
	envID  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{pool: testinfra.Postgres(t), nc: testinfra.NATS(t).Connect(t)}
	e.log, e.logs = testinfra.Logger(t)
	t.Cleanup(func() { testinfra.AssertNotLogged(t, e.logs, planted) })
	var envs []string
	e.client, envs = seed.Client(t, e.pool, "acme", 1)
	e.envID = envs[0]
	return e
}

// app starts the credential Module in an fx app over e's pool, connection and logger, with the
// environment already set. It returns the readiness checks the module contributed.
func (e *env) app(t *testing.T) (*fxtest.App, []health.Check) {
	t.Helper()
	var checks []health.Check
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Supply(e.pool, e.nc, e.log),
		credential.Module,
		fx.Invoke(fx.Annotate(func(c []health.Check) { checks = c }, fx.ParamTags(`group:"`+health.ReadinessGroup+`"`))),
	)
	app.RequireStart()
	return app, checks
}

func (e *env) call(t *testing.T, subject string, req, out any) *protocol.Error {
	t.Helper()
	msg := testinfra.RequestJSON(t, e.nc, subject, req, requestTimeout)
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &protocol.Error{Code: code, Message: msg.Header.Get(micro.ErrorHeader)}
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		t.Fatalf("%s: %s: %v", subject, msg.Data, err)
	}
	return nil
}

func (e *env) create(t *testing.T, name string) protocol.CredentialMeta {
	t.Helper()
	var meta protocol.CredentialMeta
	if perr := e.call(t, protocol.CredentialCreateSubject, protocol.CredentialCreateRequest{ClientID: e.client, EnvironmentID: e.envID,
		Name: name, Secret: map[string]string{"password": planted, "username": "app"}}, &meta); perr != nil {
		t.Fatalf("create: %+v", perr)
	}
	return meta
}

func (e *env) rotate(t *testing.T, id string) protocol.CredentialMeta {
	t.Helper()
	var meta protocol.CredentialMeta
	if perr := e.call(t, protocol.CredentialRotateSubject, protocol.CredentialRotateRequest{ClientID: e.client, ID: id}, &meta); perr != nil {
		t.Fatalf("rotate: %+v", perr)
	}
	return meta
}

// inject asks for one host's collectors with a reference to each id.
func (e *env) inject(t *testing.T, ids ...string) protocol.InjectResult {
	t.Helper()
	var cols []map[string]any
	for i, id := range ids {
		cols = append(cols, map[string]any{"type": "mysql", "name": fmt.Sprintf("db%d", i), "host": "h", "credential_id": id})
	}
	raw, _ := json.Marshal(cols)
	var reply protocol.InjectReply
	if perr := e.call(t, protocol.CredentialInjectSubject, protocol.InjectRequest{Items: []protocol.InjectItem{
		{Key: "host", ClientID: e.client, EnvironmentID: e.envID, Collectors: raw}}}, &reply); perr != nil {
		t.Fatalf("inject: %+v", perr)
	}
	if len(reply.Results) != 1 {
		t.Fatalf("%d results", len(reply.Results))
	}
	return reply.Results[0]
}

func injected(t *testing.T, r protocol.InjectResult) {
	t.Helper()
	if r.Error != nil || !strings.Contains(string(r.Collectors), `"password":"`+planted+`"`) {
		t.Fatalf("not injected: %+v", r.Error)
	}
}

// The embedded default: a key file created on first start, then the whole service over NATS.
func TestModuleWithKeyringFile(t *testing.T) {
	e := newEnv(t)
	keyFile := filepath.Join(t.TempDir(), "keyring")
	setEnv(t, map[string]string{"CONFIGSYNC_KEYRING_FILE": keyFile, "CONFIGSYNC_KEYRING_CREATE": "true"})
	app, checks := e.app(t)
	defer app.RequireStop()

	if info, err := os.Stat(keyFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v", err)
	}
	if len(checks) != 1 || checks[0].Name != "credential-cipher" || checks[0].Func(context.Background()) != nil {
		t.Fatalf("readiness checks %+v", checks)
	}
	meta := e.create(t, "db")
	if meta.KeyVersion != "local:v1" {
		t.Fatalf("key version %s", meta.KeyVersion)
	}
	injected(t, e.inject(t, meta.ID))
}

// Vault as the cipher, moving rows written under the local keyring, then Vault dying under the service.
func TestModuleWithVault(t *testing.T) {
	e := newEnv(t)
	key := make([]byte, 32)
	copy(key, "module-test-key-module-test-key!")
	ring := "v1:" + base64.StdEncoding.EncodeToString(key)

	// Before Vault: a credential written with the local keyring.
	setEnv(t, map[string]string{"CONFIGSYNC_KEYRING": ring})
	app, _ := e.app(t)
	local := e.create(t, "legacy")
	app.RequireStop()
	if local.KeyVersion != "local:v1" {
		t.Fatalf("legacy key version %s", local.KeyVersion)
	}

	v := testinfra.Vault(t)
	setEnv(t, map[string]string{
		"CREDENTIAL_CIPHER":  "vault",
		"CONFIGSYNC_KEYRING": ring,
		"VAULT_ADDR":         v.Addr,
		"VAULT_ROLE_ID":      v.RoleID,
		"VAULT_SECRET_ID":    v.SecretID,
		"VAULT_TIMEOUT":      "2s",
		"VAULT_MAX_RETRIES":  "0",
	})
	app, checks := e.app(t)
	defer app.RequireStop()
	if len(checks) != 1 || checks[0].Func(context.Background()) != nil {
		t.Fatalf("vault readiness: %+v", checks)
	}

	fresh := e.create(t, "fresh")
	if !strings.HasPrefix(fresh.KeyVersion, "vault:v") {
		t.Fatalf("new credential under %s", fresh.KeyVersion)
	}
	// Both schemes inject in one batch (one decrypt call per scheme).
	r := e.inject(t, local.ID, fresh.ID)
	injected(t, r)
	if strings.Join(r.SecretFields, ",") != "/0/password,/0/username,/1/password,/1/username" {
		t.Fatalf("secret_fields %v", r.SecretFields)
	}
	// Rotating without a secret moves the legacy row into Vault.
	if moved := e.rotate(t, local.ID); !strings.HasPrefix(moved.KeyVersion, "vault:v") {
		t.Fatalf("rotate left %s", moved.KeyVersion)
	}
	injected(t, e.inject(t, local.ID))

	// Vault dies: inject reports unavailable per item, create fails with unavailable, readiness fails,
	// nothing panics, and the app still stops cleanly (deferred).
	v.Kill()
	r = e.inject(t, fresh.ID)
	if r.Error == nil || r.Error.Code != protocol.CodeUnavailable || !strings.Contains(r.Error.Message, fresh.ID) {
		t.Fatalf("inject with Vault down: %+v", r.Error)
	}
	var meta protocol.CredentialMeta
	if perr := e.call(t, protocol.CredentialCreateSubject, protocol.CredentialCreateRequest{ClientID: e.client,
		Name: "later", Secret: map[string]string{"password": planted}}, &meta); perr == nil || perr.Code != protocol.CodeUnavailable {
		t.Fatalf("create with Vault down: %+v", perr)
	}
	if err := checks[0].Func(context.Background()); err == nil {
		t.Fatal("readiness passes with Vault down")
	}
}

func TestConfigErrors(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("v1:"+base64.StdEncoding.EncodeToString(make([]byte, 32))), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	good := "v1:" + base64.StdEncoding.EncodeToString(make([]byte, 32))
	cases := []struct {
		name string
		cfg  credential.Config
		want string
	}{
		{"unknown cipher", credential.Config{Cipher: "rot13", Keyring: good}, "CREDENTIAL_CIPHER"},
		{"local without keys", credential.Config{Cipher: "local"}, "CONFIGSYNC_KEYRING"},
		{"both keyring sources", credential.Config{Cipher: "local", Keyring: good, KeyringFile: loose}, "not both"},
		{"key file readable by others", credential.Config{Cipher: "local", KeyringFile: loose}, "chmod 600"},
		{"bad inline keyring", credential.Config{Cipher: "local", Keyring: "v1:short"}, "CONFIGSYNC_KEYRING"},
		{"vault without address", credential.Config{Cipher: "vault", VaultToken: "t"}, "VAULT_ADDR"},
		{"vault without auth", credential.Config{Cipher: "vault", VaultAddr: "http://127.0.0.1:1"}, "token"},
		{"vault with half an AppRole", credential.Config{Cipher: "vault", VaultAddr: "http://127.0.0.1:1", VaultRoleID: "r"}, "AppRole"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := credential.New(c.cfg, e.pool, zap.NewNop())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one mentioning %q", err, c.want)
			}
			if strings.Contains(err.Error(), good[3:15]) {
				t.Fatalf("error echoes key material: %v", err)
			}
		})
	}
	if _, err := credential.New(credential.Config{Cipher: "local", Keyring: good}, e.pool, zap.NewNop()); err != nil {
		t.Fatalf("minimal local config: %v", err)
	}
}
