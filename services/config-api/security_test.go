package configapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	configapi "github.com/configsync/configsync/services/config-api"
)

// TestTenantIsolation: client A's token can neither read nor write client B's environment, host,
// config or credential. Every attempt is a 404 (as if it did not exist) and an audit row.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "alpha")
	b := h.newTenant("bravo")
	h.must(200, "PUT", envConfigPath(b.env, "watch_files"), b.token, `{"config_data": {"paths": ["/b"]}}`)
	h.must(200, "PUT", hostConfigPath(b.host, "watch_files"), b.token, `{"config_data": {"paths": ["/bb"]}}`)
	var cred idObj
	h.must(201, "POST", credentialsPath(b.client), b.token,
		`{"name": "db", "secret": {"password": "bravo-secret-1"}}`).data(t, &cred)
	before := h.count(`SELECT count(*) FROM outbox`)

	env, host, client := b.env.String(), b.host.String(), b.client.String()
	attempts := []struct{ method, path, body string }{
		{"GET", "/api/v1/clients/" + client, ""},
		{"GET", "/api/v1/clients/" + client + "/environments", ""},
		{"POST", "/api/v1/clients/" + client + "/environments", `{"name": "sneaky"}`},
		{"GET", "/api/v1/environments/" + env, ""},
		{"GET", "/api/v1/environments/" + env + "/agent-configs", ""},
		{"GET", "/api/v1/environments/" + env + "/agent-configs/watch_files", ""},
		{"PUT", "/api/v1/environments/" + env + "/agent-configs/watch_files", `{"config_data": {"paths": ["/a"]}}`},
		{"PUT", "/api/v1/environments/" + env + "/agent-configs/watch_files?dry_run=true", `{"config_data": {"paths": ["/a"]}}`},
		{"DELETE", "/api/v1/environments/" + env + "/agent-configs/watch_files", ""},
		{"GET", "/api/v1/environments/" + env + "/agent-configs/watch_files/revisions", ""},
		{"POST", "/api/v1/environments/" + env + "/agent-configs/watch_files/rollback", `{"revision": 1}`},
		{"GET", "/api/v1/environments/" + env + "/hosts", ""},
		{"POST", "/api/v1/environments/" + env + "/hosts", `{"hostname": "intruder"}`},
		{"POST", "/api/v1/environments/" + env + "/hosts/batch", `{"hosts": [{"hostname": "intruder"}]}`},
		{"GET", "/api/v1/environments/" + env + "/drift", ""},
		{"GET", "/api/v1/hosts/" + host, ""},
		{"DELETE", "/api/v1/hosts/" + host, ""},
		{"GET", "/api/v1/hosts/" + host + "/agent-configs", ""},
		{"GET", "/api/v1/hosts/" + host + "/agent-configs/watch_files", ""},
		{"PUT", "/api/v1/hosts/" + host + "/agent-configs/watch_files", `{"config_data": {"paths": ["/a"]}}`},
		{"DELETE", "/api/v1/hosts/" + host + "/agent-configs/watch_files", ""},
		{"GET", "/api/v1/hosts/" + host + "/agent-configs/watch_files/revisions", ""},
		{"GET", "/api/v1/clients/" + client + "/credentials", ""},
		{"POST", "/api/v1/clients/" + client + "/credentials", `{"name": "x", "secret": {"password": "v"}}`},
		{"GET", "/api/v1/clients/" + client + "/credentials/" + cred.ID.String(), ""},
		{"DELETE", "/api/v1/clients/" + client + "/credentials/" + cred.ID.String(), ""},
		{"POST", "/api/v1/clients/" + client + "/credentials/" + cred.ID.String() + "/rotate", ""},
		// B's credential under A's own client path.
		{"GET", credentialsPath(a.client) + "/" + cred.ID.String(), ""},
		{"DELETE", credentialsPath(a.client) + "/" + cred.ID.String(), ""},
		// A's credential pointing at B's environment.
		{"POST", credentialsPath(a.client), `{"name": "y", "environment_id": "` + env + `", "secret": {"password": "v"}}`},
	}
	for _, at := range attempts {
		audits := h.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access'`)
		var body any
		if at.body != "" {
			body = at.body
		}
		r := h.do(at.method, at.path, a.token, body)
		if r.status != 404 || r.errCode(t) != "not_found" {
			t.Errorf("%s %s with A's token: %d %s, want 404", at.method, at.path, r.status, r.body)
			continue
		}
		if strings.Contains(string(r.body), "bravo") {
			t.Errorf("%s %s: the 404 reveals B: %s", at.method, at.path, r.body)
		}
		if got := h.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access'`) - audits; got != 1 {
			t.Errorf("%s %s: %d audit rows, want 1", at.method, at.path, got)
		}
	}
	// Nothing of B's changed.
	if n := h.count(`SELECT count(*) FROM outbox`); n != before {
		t.Fatalf("cross-tenant writes queued %d events", n-before)
	}
	if n := h.count(`SELECT count(*) FROM hosts WHERE revoked_at IS NOT NULL`); n != 0 {
		t.Fatal("B's host was revoked")
	}
	if n := h.count(`SELECT count(*) FROM environments WHERE name = 'sneaky'`); n != 0 {
		t.Fatal("an environment was created under B")
	}
	h.must(200, "GET", "/api/v1/clients/"+client+"/credentials/"+cred.ID.String(), b.token, nil)
	// The audit rows name the object, the token and both clients.
	var actor, object string
	var owner uuid.UUID
	if err := h.pool.QueryRow(context.Background(),
		`SELECT actor, client_id, object FROM audit_events WHERE action = 'cross_tenant_access' ORDER BY id LIMIT 1`).Scan(&actor, &owner, &object); err != nil {
		t.Fatal(err)
	}
	if actor != "alpha-ops" || owner != b.client || object != "client:"+client {
		t.Fatalf("audit row: %s %s %s", actor, owner, object)
	}
	// A plain miss is a 404 without an audit row.
	audits := h.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access'`)
	h.must(404, "GET", "/api/v1/hosts/"+uuid.NewString(), a.token, nil)
	if h.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access'`) != audits {
		t.Fatal("a miss was audited as cross-tenant")
	}
	// A client token lists only its own client.
	var clients []idObj
	h.must(200, "GET", "/api/v1/clients", a.token, nil).data(t, &clients)
	if len(clients) != 1 || clients[0].ID != a.client {
		t.Fatalf("A sees clients %+v", clients)
	}
	h.must(200, "GET", "/api/v1/clients", h.admin, nil).data(t, &clients)
	if len(clients) != 2 {
		t.Fatalf("admin sees %d clients", len(clients))
	}
}

// TestAuthentication: bearer tokens, admin-only routes, revocation, the bootstrap path.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	for _, tok := range []string{"", "nope", "cst_" + strings.Repeat("A", 43)} {
		r := h.must(401, "GET", "/api/v1/clients", tok, nil)
		if r.errCode(t) != "unauthorized" || r.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("token %q: %s", tok, r.body)
		}
	}
	r := h.do("GET", "/api/v1/clients", "", nil, "Authorization", "Basic "+h.admin)
	if r.status != 401 {
		t.Fatalf("basic auth accepted: %d", r.status)
	}
	// Admin-only routes.
	if code := h.must(403, "POST", "/api/v1/tokens", a.token, `{"name": "mine"}`).errCode(t); code != "forbidden" {
		t.Fatal(code)
	}
	h.must(403, "POST", "/api/v1/clients", a.token, `{"name": "other"}`)
	h.must(404, "POST", "/api/v1/tokens", h.admin, map[string]any{"name": "x", "client_id": uuid.New()})
	h.must(400, "POST", "/api/v1/tokens", h.admin, `{"name": ""}`)
	h.must(409, "POST", "/api/v1/clients", h.admin, `{"name": "acme"}`)

	// Issue, use, revoke.
	var tok idObj
	h.must(201, "POST", "/api/v1/tokens", h.admin, `{"name": "second-admin"}`).data(t, &tok)
	if !strings.HasPrefix(tok.Token, "cst_") || tok.ID == uuid.Nil {
		t.Fatalf("issued %+v", tok)
	}
	h.must(201, "POST", "/api/v1/clients", tok.Token, `{"name": "made-by-second"}`)
	var stored []byte
	if err := h.pool.QueryRow(context.Background(), `SELECT token_hash FROM api_tokens WHERE id = $1`, tok.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) != 32 || strings.Contains(string(stored), tok.Token) {
		t.Fatal("token not stored as a SHA-256")
	}
	h.must(403, "DELETE", "/api/v1/tokens/"+tok.ID.String(), a.token, nil)
	h.must(204, "DELETE", "/api/v1/tokens/"+tok.ID.String(), h.admin, nil)
	h.must(401, "GET", "/api/v1/clients", tok.Token, nil)
	h.must(404, "DELETE", "/api/v1/tokens/"+tok.ID.String(), h.admin, nil)

	// Bootstrap from Go, as devstack does.
	boot, err := configapi.BootstrapAdminToken(context.Background(), h.pool, "devstack")
	if err != nil {
		t.Fatal(err)
	}
	h.must(200, "GET", "/api/v1/clients", boot, nil)
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action IN ('token_issued', 'token_revoked')`); n < 3 {
		t.Fatalf("%d token audit rows", n)
	}
}

// TestRequestHygiene: body cap, malformed JSON, unknown fields, unknown types, invalid data, and the
// error envelope everywhere.
func TestRequestHygiene(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	path := envConfigPath(a.env, "watch_files")

	huge := `{"config_data": {"paths": ["` + strings.Repeat("a", 1<<20) + `"]}}`
	if code := h.must(413, "PUT", path, a.token, huge).errCode(t); code != "payload_too_large" {
		t.Fatal(code)
	}
	for _, tc := range []struct{ name, body, code string }{
		{"malformed", `{"config_data": {"paths": [`, "invalid_request"},
		{"not an object", `["config_data"]`, "invalid_request"},
		{"unknown envelope field", `{"config_data": {"paths": []}, "version": 3}`, "invalid_request"},
		{"trailing garbage", `{"config_data": {"paths": []}} x`, "invalid_request"},
		{"missing config_data", `{}`, "invalid_request"},
		{"null config_data", `{"config_data": null}`, "invalid_request"},
		{"unknown key in the type", `{"config_data": {"pathz": ["/etc"]}}`, "invalid_config"},
		{"wrong shape", `{"config_data": {"paths": "/etc"}}`, "invalid_config"},
		{"empty body", ``, "invalid_request"},
	} {
		var body any = tc.body
		if tc.body == "" {
			body = nil
		}
		r := h.do("PUT", path, a.token, body)
		if r.status != 400 || r.errCode(t) != tc.code {
			t.Errorf("%s: %d %s, want 400 %s", tc.name, r.status, r.body, tc.code)
		}
	}
	// The message names the offending field.
	if msg := h.must(400, "PUT", path, a.token, `{"config_data": {"pathz": ["/etc"]}}`).message(t); !strings.Contains(msg, "pathz") {
		t.Fatalf("message does not name the field: %q", msg)
	}
	if msg := h.must(400, "PUT", path, a.token, `{"config_data": {}, "extra": 1}`).message(t); !strings.Contains(msg, "extra") {
		t.Fatalf("message does not name the unknown field: %q", msg)
	}
	// Unknown config types are 400 on every verb and level.
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		for _, p := range configPaths(a, "firewall") {
			var body any
			if m == "PUT" {
				body = `{"config_data": {}}`
			}
			if code := h.must(400, m, p, a.token, body).errCode(t); code != "unknown_config_type" {
				t.Errorf("%s %s: %s", m, p, code)
			}
		}
	}
	h.must(400, "GET", "/api/v1/environments/not-a-uuid/agent-configs", a.token, nil)
	h.must(400, "GET", "/api/v1/hosts/"+a.host.String()+"/agent-configs/intervals?explain=maybe", a.token, nil)
	h.must(412, "PUT", path, a.token, `{"config_data": {"paths": []}}`, "If-Match", `"1"`)
	h.must(412, "PUT", path, a.token, `{"config_data": {"paths": []}}`, "If-Match", `W/"1"`)
	if code := h.must(405, "PATCH", path, a.token, `{}`).errCode(t); code != "method_not_allowed" {
		t.Fatal(code)
	}
	if n := h.count(`SELECT count(*) FROM outbox`); n != 0 {
		t.Fatalf("refused requests queued %d events", n)
	}
}

// TestAccessLog: one line per request with the route template and token id, never bodies or tokens.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	h.must(200, "PUT", envConfigPath(a.env, "labels"), a.token,
		`{"config_data": {"static": {"marker": "body-marker-42"}}}`)
	found := false
	for _, e := range h.logs.FilterMessage("http request").All() {
		f := e.ContextMap()
		if f["route"] == "/api/v1/environments/{envID}/agent-configs/{configType}" && f["method"] == "PUT" {
			found = f["status"] == int64(200) && f["token_id"] != nil && f["duration"] != nil
		}
	}
	if !found {
		t.Fatal("no access log line for the PUT with route template, status and token id")
	}
	h.noLogContains("body-marker-42")
	h.noLogContains(a.token)
	h.noLogContains(h.admin)
}

// TestConfigTypesAndOpenAPI: the type registry and the OpenAPI document are served.
func TestConfigTypesAndOpenAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var types []struct {
		Name          string         `json:"name"`
		MergeStrategy string         `json:"merge_strategy"`
		Schema        map[string]any `json:"schema"`
	}
	h.must(200, "GET", "/api/v1/agent-config-types", h.admin, nil).data(t, &types)
	if len(types) != len(agentconfig.TypeNames()) {
		t.Fatalf("%d types", len(types))
	}
	for _, ty := range types {
		if ty.MergeStrategy == "" || len(ty.Schema) == 0 {
			t.Fatalf("type %+v lacks schema or strategy", ty)
		}
	}
	r := h.must(200, "GET", "/api/v1/openapi.json", "", nil)
	if !strings.Contains(string(r.body), `"openapi": "3.1.0"`) {
		t.Fatal("not an OpenAPI 3.1 document")
	}
}

// TestTenantRoutes: a client token manages its own environments.
func TestTenantRoutes(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	var c idObj
	h.must(200, "GET", "/api/v1/clients/"+a.client.String(), a.token, nil).data(t, &c)
	if c.ID != a.client {
		t.Fatalf("client %+v", c)
	}
	var staging idObj
	h.must(201, "POST", "/api/v1/clients/"+a.client.String()+"/environments", a.token, `{"name": "staging"}`).data(t, &staging)
	if staging.ClientID != a.client {
		t.Fatalf("environment %+v", staging)
	}
	h.must(409, "POST", "/api/v1/clients/"+a.client.String()+"/environments", a.token, `{"name": "staging"}`)
	var envs []struct {
		ID   uuid.UUID `json:"id"`
		Name string    `json:"name"`
	}
	h.must(200, "GET", "/api/v1/clients/"+a.client.String()+"/environments", a.token, nil).data(t, &envs)
	if len(envs) != 2 || envs[0].Name != "prod" || envs[1].Name != "staging" {
		t.Fatalf("environments %+v", envs)
	}
	var env idObj
	h.must(200, "GET", "/api/v1/environments/"+staging.ID.String(), a.token, nil).data(t, &env)
	if env.ID != staging.ID || env.ClientID != a.client {
		t.Fatalf("environment %+v", env)
	}
	h.must(404, "GET", "/api/v1/clients/"+uuid.NewString()+"/environments", h.admin, nil)
}
