package configapi_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// TestCredentials: metadata only in and out; the secret reaches the credential service and nothing else.
func TestCredentials(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	base := credentialsPath(a.client)
	const secret = "s3cr3t-planted-value"

	var meta protocol.CredentialMeta
	r := h.must(201, "POST", base, a.token, `{"name": "mysql-main", "environment_id": "`+a.env.String()+`", "secret": {"password": "`+secret+`", "username": "monitor"}}`)
	r.data(t, &meta)
	if meta.Name != "mysql-main" || meta.ClientID != a.client.String() || meta.EnvironmentID != a.env.String() ||
		strings.Join(meta.Fields, ",") != "password,username" {
		t.Fatalf("created %s", r.body)
	}
	if strings.Contains(string(r.body), secret) {
		t.Fatal("the secret was returned")
	}
	h.must(409, "POST", base, a.token, `{"name": "mysql-main", "secret": {"password": "x"}}`)
	h.must(400, "POST", base, a.token, `{"name": "empty", "secret": {}}`)
	h.must(400, "POST", base, a.token, `{"name": "bad", "secret": {"password": 5}}`)
	h.must(404, "POST", base, a.token, `{"name": "ghost-env", "environment_id": "`+uuid.NewString()+`", "secret": {"password": "v"}}`)

	var list []protocol.CredentialMeta
	h.must(200, "GET", base, a.token, nil).data(t, &list)
	if len(list) != 1 || list[0].ID != meta.ID {
		t.Fatalf("list %+v", list)
	}
	var got protocol.CredentialMeta
	h.must(200, "GET", base+"/"+meta.ID, a.token, nil).data(t, &got)
	if got.ID != meta.ID {
		t.Fatalf("get %+v", got)
	}
	var rotated protocol.CredentialMeta
	h.must(200, "POST", base+"/"+meta.ID+"/rotate", a.token, nil).data(t, &rotated)
	if strings.Join(rotated.Fields, ",") != "password,username" {
		t.Fatalf("re-encrypted fields %v", rotated.Fields)
	}
	h.must(200, "POST", base+"/"+meta.ID+"/rotate", a.token, `{"secret": {"password": "rotated-planted-value"}}`).data(t, &rotated)
	if strings.Join(rotated.Fields, ",") != "password" {
		t.Fatalf("rotated fields %v", rotated.Fields)
	}
	// The credential service holds the new secret, encrypted: injecting it yields the plaintext.
	if got := h.inject(a, meta.ID); got != "rotated-planted-value" {
		t.Fatalf("injected password %q", got)
	}
	if n := h.count(`SELECT count(*) FROM credentials WHERE ciphertext LIKE '%planted%'`); n != 0 {
		t.Fatal("a secret is stored in clear")
	}
	h.must(400, "POST", base+"/"+meta.ID+"/rotate", a.token, `{"secret": {"password": "x"}, "name": "y"}`)
	h.must(204, "DELETE", base+"/"+meta.ID, a.token, nil)
	h.must(404, "GET", base+"/"+meta.ID, a.token, nil)
	h.must(404, "DELETE", base+"/"+meta.ID, a.token, nil)

	// The secret reached the credential service and nothing else: not the logs, not the audit trail,
	// not any table config-api writes.
	h.noLogContains(secret)
	h.noLogContains("rotated-planted-value")
	for _, q := range []string{
		`SELECT count(*) FROM audit_events WHERE detail::text LIKE '%' || $1 || '%'`,
		`SELECT count(*) FROM outbox WHERE payload::text LIKE '%' || $1 || '%'`,
	} {
		if n := h.count(q, secret); n != 0 {
			t.Fatalf("%s: secret found", q)
		}
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action LIKE 'credential_%'`); n != 4 {
		t.Fatalf("%d credential audit rows, want 4", n)
	}
}

// TestCredentialSecretFieldsMustBeInjectable: a credential's fields are injected into every collector that
// references it, and the agent rejects a collectors config holding a field its type does not take. So
// create and rotate refuse any field outside agentconfig.SecretFields with a 400 naming the field and the
// allowed names, and change nothing.
func TestCredentialSecretFieldsMustBeInjectable(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	base := credentialsPath(a.client)
	const planted = "api-key-planted-value"

	refused := func(r response, field string) {
		t.Helper()
		if code := r.errCode(t); code != "invalid_request" {
			t.Fatalf("code %q: %s", code, r.body)
		}
		msg := r.message(t)
		for _, want := range []string{`"` + field + `"`, "password, username"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q does not name %s", msg, want)
			}
		}
		if strings.Contains(string(r.body), planted) {
			t.Errorf("the refusal echoes the secret: %s", r.body)
		}
	}

	refused(h.must(400, "POST", base, a.token, map[string]any{
		"name": "api", "secret": map[string]string{"password": "pw", "api_key": planted}}), "api_key")
	refused(h.must(400, "POST", base, a.token, map[string]any{
		"name": "api", "environment_id": a.env, "secret": map[string]string{"api_key": planted}}), "api_key")
	var list []protocol.CredentialMeta
	if h.must(200, "GET", base, a.token, nil).data(t, &list); len(list) != 0 {
		t.Fatalf("a refused create stored a credential: %+v", list)
	}

	var meta protocol.CredentialMeta
	h.must(201, "POST", base, a.token, map[string]any{
		"name": "web", "environment_id": a.env, "secret": map[string]string{"username": "monitor", "password": "pw-1"}}).data(t, &meta)
	refused(h.must(400, "POST", base+"/"+meta.ID+"/rotate", a.token, map[string]any{
		"secret": map[string]string{"password": "pw-2", "api_key": planted}}), "api_key")
	if got := h.inject(a, meta.ID); got != "pw-1" {
		t.Fatalf("a refused rotation changed the secret: injected %q", got)
	}
	h.noLogContains(planted)
}

// TestCredentialsOnlyWhereTheyApply: an http collector takes basic auth from a credential, and what the
// credential service injects passes the agent's validation; a tcp collector takes no credential, and a
// PUT giving it one is refused with the path named, before anything is stored.
func TestCredentialsOnlyWhereTheyApply(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	var meta protocol.CredentialMeta
	h.must(201, "POST", credentialsPath(a.client), a.token, map[string]any{
		"name": "web", "secret": map[string]string{"username": "monitor", "password": "basic-pw"}}).data(t, &meta)

	collectors := []map[string]any{
		{"type": "http", "name": "api", "url": "https://api.internal/health", "credential_id": meta.ID},
		{"type": "redis", "name": "cache", "host": "r", "credential_id": meta.ID},
	}
	h.must(200, "PUT", envConfigPath(a.env, "collectors"), a.token, map[string]any{"config_data": collectors})

	// Inject as delivery would, then validate as the agent does.
	stored, err := json.Marshal(collectors)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(protocol.InjectRequest{Items: []protocol.InjectItem{{
		Key: "k", ClientID: a.client.String(), EnvironmentID: a.env.String(), Collectors: stored}}})
	msg, err := h.nc.Request(protocol.CredentialInjectSubject, data, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply protocol.InjectReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil || len(reply.Results) != 1 || reply.Results[0].Error != nil {
		t.Fatalf("inject reply: %s", msg.Data)
	}
	injected := reply.Results[0].Collectors
	if err := agentconfig.ValidateDelivered(agentconfig.Collectors, injected, reply.Results[0].SecretFields); err != nil {
		t.Fatalf("the agent would reject the injected collectors: %v", err)
	}
	var cs agentconfig.CollectorsConfig
	if err := json.Unmarshal(injected, &cs); err != nil || cs[0].Username != "monitor" || cs[0].Password != "basic-pw" {
		t.Fatalf("http collector after injection: %+v (%v)", cs, err)
	}

	before := h.count(`SELECT count(*) FROM host_configs WHERE config_type = 'collectors'`)
	withTCP := map[string]any{"config_data": append(collectors,
		map[string]any{"type": "tcp", "name": "ssh", "address": "localhost:22", "credential_id": meta.ID})}
	for _, path := range configPaths(a, "collectors") {
		r := h.must(400, "PUT", path, a.token, withTCP)
		if code := r.errCode(t); code != "invalid_config" {
			t.Fatalf("PUT %s: code %q", path, code)
		}
		if msg := r.message(t); !strings.Contains(msg, "collectors[2].credential_id") || !strings.Contains(msg, "tcp collectors take no credentials") {
			t.Fatalf("PUT %s: message %q", path, msg)
		}
	}
	if after := h.count(`SELECT count(*) FROM host_configs WHERE config_type = 'collectors'`); after != before {
		t.Fatalf("a refused host PUT stored a config: %d rows, were %d", after, before)
	}
	var env struct {
		ConfigData json.RawMessage `json:"config_data"`
	}
	h.must(200, "GET", envConfigPath(a.env, "collectors"), a.token, nil).data(t, &env)
	if strings.Contains(string(env.ConfigData), `"tcp"`) {
		t.Fatalf("a refused environment PUT changed the config: %s", env.ConfigData)
	}
}
