package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/agentconfig"
)

// bodyRoute is a route that reads a JSON request body. {type} is replaced by a config type.
type bodyRoute struct {
	method, path string
}

var bodyRoutes = []bodyRoute{
	{http.MethodPut, "/api/v1/environments/" + memEnv.String() + "/agent-configs/{type}"},
	{http.MethodPut, "/api/v1/hosts/" + memHost.String() + "/agent-configs/{type}"},
	{http.MethodPut, "/api/v1/environments/" + memEnv.String() + "/agent-configs/{type}?dry_run=true"},
	{http.MethodPut, "/api/v1/hosts/" + memHost.String() + "/agent-configs/{type}?dry_run=true"},
	{http.MethodPost, "/api/v1/environments/" + memEnv.String() + "/agent-configs/{type}/rollback"},
	{http.MethodPost, "/api/v1/hosts/" + memHost.String() + "/agent-configs/{type}/rollback"},
	{http.MethodPost, "/api/v1/tokens"},
	{http.MethodPost, "/api/v1/clients"},
	{http.MethodPost, "/api/v1/clients/" + memClient.String() + "/environments"},
	{http.MethodPost, "/api/v1/environments/" + memEnv.String() + "/hosts"},
	{http.MethodPost, "/api/v1/clients/" + memClient.String() + "/credentials"},
	{http.MethodPost, "/api/v1/clients/" + memClient.String() + "/credentials/" + memCred.String() + "/rotate"},
	{http.MethodPost, "/api/v1/environments/" + memEnv.String() + "/hosts/batch"},
}

// fuzzTypes are the config types a route's {type} takes: every registered type and an unknown one.
var fuzzTypes = append(agentconfig.TypeNames(), "bogus")

func (r bodyRoute) target(configType string) string {
	return strings.ReplaceAll(r.path, "{type}", configType)
}

func serve(h http.Handler, method, target string, body io.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, body)
	req.Header.Set("Authorization", "Bearer "+memAdminToken)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// checkEnvelope fails unless rec carries a JSON body in the envelope its status calls for.
func checkEnvelope(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("status %d with Content-Type %q", rec.Code, ct)
	}
	if rec.Code >= 400 {
		var body errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code == "" || body.Error.Message == "" {
			t.Fatalf("status %d without an error body: %s", rec.Code, rec.Body)
		}
		return
	}
	var body struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body.Data) == 0 {
		t.Fatalf("status %d without a data body: %s", rec.Code, rec.Body)
	}
}

// FuzzRequestBodies sends arbitrary bodies to every route that decodes one, over an in-memory backend
// that never fails: nothing panics, nothing answers 5xx (a 5xx here could only come from decoding or
// validation), malformed JSON is a 4xx, every answer is in its JSON envelope, only configs that pass
// the type registry reach the repository, and only secrets within the limits reach the credential
// service.
func FuzzRequestBodies(f *testing.F) {
	seeds := []struct {
		route, typ uint8
		body       string
	}{
		{0, 0, `{"config_data":[{"type":"tcp","name":"ssh","address":"localhost:22"}]}`},
		{0, 2, `{"config_data":{"static":{"env":"prod"}}}`},
		{1, 9, `{"config_data":{"enabled":true,"level":"debug"}}`},
		{2, 7, `{"config_data":{"interval_seconds":60,"timeout_seconds":5}}`},
		{3, 0, `{"config_data":[{"type":"postgres","name":"db","host":"h","port":5432,"credential_id":"` + memCred.String() + `"}]}`},
		{0, 10, `{"config_data":{}}`},
		{0, 1, `{"config_data":{"metrics":"soon"}}`},
		{0, 1, `{"config_data":null}`},
		{0, 1, `{"config_data":{"metrics":"30s"},"extra":1}`},
		{4, 2, `{"revision":1}`},
		{5, 0, `{"revision":-1}`},
		{5, 0, `{"revision":"1"}`},
		{6, 0, `{"name":"ci","client_id":"` + memClient.String() + `"}`},
		{6, 0, `{"name":"ci","client_id":"not-a-uuid"}`},
		{7, 0, `{"name":"acme"}`},
		{7, 0, `{"name":17}`},
		{8, 0, `{"name":"staging"}`},
		{9, 0, `{"hostname":"web-2","agent_id":"agent-2"}`},
		{9, 0, `{"hostname":"web-2","agent_id":"a b"}`},
		{10, 0, `{"name":"db","environment_id":"` + memEnv.String() + `","secret":{"password":"pw","username":"u"}}`},
		{10, 0, `{"name":"db","secret":{"password":["pw"]}}`},
		{11, 0, `{"secret":{"password":"new"}}`},
		{11, 0, ``},
		{12, 0, `{"hosts":[{"hostname":"web-2","agent_id":"agent-2"},{"hostname":"web-3"}]}`},
		{12, 0, `{"hosts":[{"hostname":"web-2","agent_id":"a"},{"hostname":"web-3","agent_id":"a"}]}`},
		{12, 0, `{"hosts":[]}`},
		{0, 0, `[]`}, {0, 0, `null`}, {0, 0, `{`}, {0, 0, `{"config_data":{}} {}`}, {0, 0, "\xff"},
	}
	for _, s := range seeds {
		f.Add(s.route, s.typ, []byte(s.body))
	}
	h, backend := newMemAPI(zap.NewNop())
	f.Fuzz(func(t *testing.T, route, typ uint8, body []byte) {
		r := bodyRoutes[int(route)%len(bodyRoutes)]
		configType := fuzzTypes[int(typ)%len(fuzzTypes)]
		rec := serve(h, r.method, r.target(configType), bytes.NewReader(body))
		if rec.Code >= 500 {
			t.Fatalf("%s %s: status %d: %s", r.method, r.target(configType), rec.Code, rec.Body)
		}
		trimmed := bytes.TrimSpace(body)
		if len(trimmed) > 0 && !json.Valid(trimmed) && rec.Code < 400 {
			t.Fatalf("%s %s: malformed JSON answered %d", r.method, r.target(configType), rec.Code)
		}
		if rec.Code == http.StatusRequestEntityTooLarge && len(body) <= MaxBodyBytes {
			t.Fatalf("%d-byte body answered 413", len(body))
		}
		checkEnvelope(t, rec)
		for _, w := range backend.takeWrites() {
			if err := agentconfig.Validate(configType, w.Data); err != nil {
				t.Fatalf("invalid %s config reached the repository: %v", configType, err)
			}
		}
		for _, secret := range backend.takeSecrets() {
			if len(secret) > agentconfig.MaxSecretFields {
				t.Fatalf("secret with %d fields reached the credential service", len(secret))
			}
			for k, v := range secret {
				if k == "" || len(k) > agentconfig.MaxSecretFieldName || len(v) > agentconfig.MaxSecretValueBytes {
					t.Fatalf("secret field %q (%d bytes) reached the credential service", k, len(v))
				}
			}
		}
	})
}

// The fuzz harness must reach the success paths, or it would only ever test refusals.
func TestMemAPIAnswersBodies(t *testing.T) {
	h, _ := newMemAPI(zap.NewNop())
	for _, tc := range []struct {
		route  int
		typ    string
		body   string
		status int
	}{
		{0, "collectors", `{"config_data":[{"type":"tcp","name":"ssh","address":"localhost:22"}]}`, http.StatusOK},
		{1, "log_shipping", `{"config_data":{"enabled":true,"level":"debug"}}`, http.StatusOK},
		{2, "healthcheck", `{"config_data":{"interval_seconds":60}}`, http.StatusOK},
		{3, "labels", `{"config_data":{"static":{"rack":"r1"}}}`, http.StatusOK},
		{4, "labels", `{"revision":1}`, http.StatusOK},
		{5, "collectors", `{"revision":1}`, http.StatusOK},
		{6, "", `{"name":"ci","client_id":"` + memClient.String() + `"}`, http.StatusCreated},
		{7, "", `{"name":"globex"}`, http.StatusCreated},
		{8, "", `{"name":"staging"}`, http.StatusCreated},
		{9, "", `{"hostname":"web-2","agent_id":"agent-2"}`, http.StatusCreated},
		{10, "", `{"name":"db","environment_id":"` + memEnv.String() + `","secret":{"password":"pw"}}`, http.StatusCreated},
		{11, "", `{"secret":{"password":"new"}}`, http.StatusOK},
		{11, "", ``, http.StatusOK},
		{12, "", `{"hosts":[{"hostname":"web-2","agent_id":"agent-2"},{"hostname":"web-3"}]}`, http.StatusCreated},
		// Wrong types, unknown fields, malformed and unknown config types.
		{0, "bogus", `{"config_data":{}}`, http.StatusBadRequest},
		{0, "intervals", `{"config_data":{"metrics":30}}`, http.StatusBadRequest},
		{0, "intervals", `{"config_data":{"metrics":"30s"},"dry_run":true}`, http.StatusBadRequest},
		{1, "labels", `{"config_data":"labels"}`, http.StatusBadRequest},
		{4, "labels", `{"revision":"1"}`, http.StatusBadRequest},
		{4, "labels", `{"revision":1.5}`, http.StatusBadRequest},
		{6, "", `{"name":["ci"]}`, http.StatusBadRequest},
		{7, "", `{"name":null}`, http.StatusBadRequest},
		{8, "", `"staging"`, http.StatusBadRequest},
		{9, "", `{"hostname":"web-2","agent_id":7}`, http.StatusBadRequest},
		{10, "", `{"name":"db","secret":"pw"}`, http.StatusBadRequest},
		{10, "", `{"name":"db","secret":{"password":1}}`, http.StatusBadRequest},
		{11, "", `{"secret":{"password":null,"x":{}}}`, http.StatusBadRequest},
		{11, "", `{`, http.StatusBadRequest},
		{12, "", `{"hosts":[]}`, http.StatusBadRequest},
		{12, "", `{"hosts":[{"hostname":"web-2","agent_id":"a"},{"hostname":"web-3","agent_id":"a"}]}`, http.StatusBadRequest},
		{12, "", `{"hosts":[{"hostname":"web-2","extra":1}]}`, http.StatusBadRequest},
		{12, "", `{"hostname":"web-2"}`, http.StatusBadRequest},
	} {
		r := bodyRoutes[tc.route]
		rec := serve(h, r.method, r.target(tc.typ), strings.NewReader(tc.body))
		if rec.Code != tc.status {
			t.Errorf("%s %s %s: status %d, want %d: %s", r.method, r.target(tc.typ), tc.body, rec.Code, tc.status, rec.Body)
			continue
		}
		checkEnvelope(t, rec)
	}
}

// patternReader yields n bytes of a JSON-looking body without allocating them, and counts what was read.
type patternReader struct {
	n, read int
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.read >= p.n {
		return 0, io.EOF
	}
	k := min(len(b), p.n-p.read)
	for i := range b[:k] {
		b[i] = 'x'
	}
	if p.read == 0 && k > 0 {
		b[0] = '{'
	}
	p.read += k
	return k, nil
}

// The 1 MiB cap holds on every body route, whether or not the client declares the length: a huge body
// is answered 413 after reading at most the cap, and the request allocates a bounded amount.
func TestBodyCapOnEveryRoute(t *testing.T) {
	h, _ := newMemAPI(zap.NewNop())
	const huge = 64 << 20
	for _, r := range bodyRoutes {
		target := r.target("labels")
		// Chunked upload: no Content-Length, so only the read cap stops it.
		body := &patternReader{n: huge}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rec := serve(h, r.method, target, body)
		runtime.ReadMemStats(&after)
		if rec.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s %s chunked: status %d, want 413", r.method, target, rec.Code)
		}
		checkEnvelope(t, rec)
		if body.read > MaxBodyBytes+1 {
			t.Errorf("%s %s chunked: read %d bytes of the body, cap %d", r.method, target, body.read, MaxBodyBytes)
		}
		// Reading up to the cap into a growing buffer allocates a small multiple of it.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*MaxBodyBytes {
			t.Errorf("%s %s chunked: allocated %d bytes for a %d-byte body", r.method, target, alloc, huge)
		}

		// Declared length over the cap: refused before reading anything.
		body = &patternReader{n: huge}
		req := httptest.NewRequest(r.method, target, body)
		req.ContentLength = huge
		req.Header.Set("Authorization", "Bearer "+memAdminToken)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge || body.read != 0 {
			t.Errorf("%s %s declared: status %d after reading %d bytes, want 413 after none", r.method, target, rec.Code, body.read)
		}
	}
}

// An unauthenticated body is never read at all.
func TestUnauthenticatedBodyIsNotRead(t *testing.T) {
	h, _ := newMemAPI(zap.NewNop())
	for _, r := range bodyRoutes {
		body := &patternReader{n: 1 << 20}
		req := httptest.NewRequest(r.method, r.target("labels"), body)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || body.read != 0 {
			t.Errorf("%s %s: status %d after reading %d bytes", r.method, r.path, rec.Code, body.read)
		}
	}
}
