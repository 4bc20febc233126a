package configapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"go.uber.org/zap"

	configapi "github.com/configsync/configsync/services/config-api"
)

// consoleClient is a browser stand-in for the web console: a cookie jar, no redirect following (so
// redirects are asserted), and the CSRF token of the last page read.
type consoleClient struct {
	t      testing.TB
	h      *harness
	http   *http.Client
	csrf   string
	origin string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (h *harness) newConsoleClient() *consoleClient {
	jar, _ := cookiejar.New(nil)
	return &consoleClient{t: h.t, h: h, origin: h.srv.URL, http: &http.Client{
		Jar:           jar,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// signIn opens a console session with an API token, as the sign-in form does.
func (h *harness) signIn(token string) *consoleClient {
	h.t.Helper()
	c := h.newConsoleClient()
	r := c.signIn(token)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/" {
		h.t.Fatalf("sign in: status %d, location %q: %s", r.status, r.header.Get("Location"), r.body)
	}
	c.get("/ui/") // reads the CSRF token
	return c
}

func (c *consoleClient) signIn(token string) response {
	c.t.Helper()
	form := c.get("/ui/signin")
	m := csrfField.FindSubmatch(form.body)
	if m == nil {
		c.t.Fatalf("sign-in form has no csrf field: %s", form.body)
	}
	return c.send("POST", "/ui/signin", url.Values{"token": {token}, "csrf": {string(m[1])}, "next": {"/ui/"}}, "Origin", c.origin)
}

func (c *consoleClient) get(path string, headers ...string) response {
	c.t.Helper()
	r := c.send("GET", path, nil, headers...)
	if m := csrfField.FindSubmatch(r.body); m != nil && r.status == http.StatusOK {
		c.csrf = string(m[1])
	}
	return r
}

// post sends a form with the session's CSRF token from the console's origin.
func (c *consoleClient) post(path string, form url.Values, headers ...string) response {
	c.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, set := form["csrf"]; !set {
		form.Set("csrf", c.csrf)
	}
	return c.send("POST", path, form, append([]string{"Origin", c.origin}, headers...)...)
}

func (c *consoleClient) send(method, path string, form url.Values, headers ...string) response {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
		headers = append([]string{"Content-Type", "application/x-www-form-urlencoded"}, headers...)
	}
	r, err := roundTrip(c.http, method, c.h.srv.URL+path, body, headers...)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (c *consoleClient) must(want int, r response, what string) response {
	c.t.Helper()
	if r.status != want {
		c.t.Fatalf("%s: status %d, want %d:\n%s", what, r.status, want, r.body)
	}
	return r
}

// checkEscaped reads each page in full and as an htmx fragment: each must be an HTML 200 that shows no
// planted <script>alert… value as markup.
func (c *consoleClient) checkEscaped(pages []string) {
	c.t.Helper()
	for _, p := range pages {
		for _, htmx := range []bool{false, true} {
			var r response
			if htmx {
				r = c.get(p, "HX-Request", "true")
			} else {
				r = c.get(p)
			}
			if r.status != http.StatusOK {
				c.t.Errorf("GET %s (htmx %v): status %d:\n%s", p, htmx, r.status, r.body)
				continue
			}
			body := string(r.body)
			if strings.Contains(body, "<script>alert") {
				c.t.Errorf("GET %s (htmx %v) renders a hostile value as markup:\n%s", p, htmx, body)
			}
			if ct := r.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
				c.t.Errorf("GET %s: Content-Type %q", p, ct)
			}
		}
	}
}

func sessionCookie(t testing.TB, r response) *http.Cookie {
	t.Helper()
	for _, ck := range (&http.Response{Header: r.header}).Cookies() {
		if ck.Name == "configsync_session" {
			return ck
		}
	}
	t.Fatalf("no session cookie in %v", r.header)
	return nil
}

func TestConsoleSignInSessionsAndSignOut(t *testing.T) {
	h := newHarness(t)
	c := h.newConsoleClient()

	// No session: pages send the browser to the sign-in form, keeping where it was going.
	r := c.get("/ui/hosts?env=x")
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/signin?next=%2Fui%2Fhosts%3Fenv%3Dx" {
		t.Fatalf("without a session: %d %q", r.status, r.header.Get("Location"))
	}
	// htmx requests get a redirect header instead.
	r = c.get("/ui/fragments/overview/"+uuid.NewString(), "HX-Request", "true")
	if r.status != http.StatusUnauthorized || r.header.Get("HX-Redirect") != "/ui/signin" {
		t.Fatalf("htmx without a session: %d %q", r.status, r.header.Get("HX-Redirect"))
	}

	// The sign-in form itself is protected: a post without the form's token, or from another origin, is refused.
	c.get("/ui/signin")
	c.must(http.StatusForbidden, c.send("POST", "/ui/signin", url.Values{"token": {h.admin}}, "Origin", c.origin), "sign-in without the form token")
	form := c.get("/ui/signin")
	tok := string(csrfField.FindSubmatch(form.body)[1])
	c.must(http.StatusForbidden, c.send("POST", "/ui/signin", url.Values{"token": {h.admin}, "csrf": {tok}}, "Origin", "https://evil.example"), "sign-in from another origin")
	c.must(http.StatusUnauthorized, c.signIn("cst_not-a-token"), "sign-in with a wrong token")
	if h.count(`SELECT count(*) FROM console_sessions`) != 0 {
		t.Fatal("a refused sign-in stored a session")
	}

	r = c.must(http.StatusSeeOther, c.signIn(h.admin), "sign-in")
	ck := sessionCookie(t, r)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/ui/" || ck.MaxAge <= 0 {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui/, not Secure over plain http", ck)
	}
	// Only the hash of the session id is stored.
	sum := sha256.Sum256([]byte(ck.Value))
	if h.count(`SELECT count(*) FROM console_sessions WHERE id_hash = $1`, sum[:]) != 1 ||
		h.count(`SELECT count(*) FROM console_sessions WHERE encode(id_hash, 'escape') LIKE '%' || $1 || '%'`, ck.Value) != 0 {
		t.Fatal("the session is not stored as the hash of its id alone")
	}
	page := c.must(http.StatusOK, c.get("/ui/"), "overview")
	if !strings.Contains(string(page.body), "Fleet overview") || !strings.Contains(string(page.body), "test-admin") {
		t.Fatalf("overview: %s", page.body)
	}
	for _, hdr := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options"} {
		if page.header.Get(hdr) == "" {
			t.Errorf("page lacks %s", hdr)
		}
	}
	if h.count(`SELECT count(*) FROM audit_events WHERE action = 'console_signed_in' AND actor = 'test-admin'`) != 1 {
		t.Error("the sign-in was not audited")
	}

	// Sign-out needs the CSRF token too, then ends the session everywhere.
	c.must(http.StatusForbidden, c.post("/ui/signout", url.Values{"csrf": {"wrong"}}), "sign-out without the token")
	r = c.must(http.StatusSeeOther, c.post("/ui/signout", nil), "sign-out")
	if r.header.Get("Location") != "/ui/signin" {
		t.Fatalf("sign-out went to %q", r.header.Get("Location"))
	}
	if h.count(`SELECT count(*) FROM console_sessions WHERE id_hash = $1`, sum[:]) != 0 {
		t.Fatal("sign-out left the session in the database")
	}
	// Even a browser that kept the old cookie is no longer signed in.
	replay := h.newConsoleClient()
	u, _ := url.Parse(h.srv.URL + "/ui/")
	replay.http.Jar.SetCookies(u, []*http.Cookie{{Name: "configsync_session", Value: ck.Value, Path: "/ui/"}})
	c.must(http.StatusSeeOther, replay.get("/ui/"), "old cookie after sign-out")
	// Neither the API token nor the session id ever reaches the log.
	h.noLogContains(h.admin)
	h.noLogContains(ck.Value)
	if len(h.logs.FilterMessage("console request").FilterField(zap.String("route", "POST /ui/signin")).All()) == 0 {
		t.Error("sign-ins are not in the access log")
	}
}

func TestConsoleSessionEndsWithItsTokenAndExpires(t *testing.T) {
	h, tn := newTenantHarness(t, "acme")
	c := h.signIn(tn.token)
	c.must(http.StatusOK, c.get("/ui/"), "overview")

	var tokenID uuid.UUID
	if err := h.pool.QueryRow(context.Background(), `SELECT token_id FROM console_sessions`).Scan(&tokenID); err != nil {
		t.Fatal(err)
	}
	h.must(http.StatusNoContent, "DELETE", "/api/v1/tokens/"+tokenID.String(), h.admin, nil)
	c.must(http.StatusSeeOther, c.get("/ui/"), "session of a revoked token")

	admin := h.signIn(h.admin)
	h.exec(`UPDATE console_sessions SET expires_at = now() - interval '1 second'`)
	admin.must(http.StatusSeeOther, admin.get("/ui/"), "expired session")
	// The next sign-in sweeps expired sessions.
	h.signIn(h.admin)
	if n := h.count(`SELECT count(*) FROM console_sessions WHERE expires_at <= now()`); n != 0 {
		t.Fatalf("%d expired sessions left after a sign-in", n)
	}
}

// Behind a TLS-terminating proxy the console is reached over http, but the browser is on https: the
// public URL makes the cookie Secure and is the only origin accepted.
func TestConsolePublicURLBehindTLSProxy(t *testing.T) {
	h := newHarness(t, withPublicURL("https://configsync.example.com"))
	c := h.newConsoleClient()
	c.origin = "https://configsync.example.com"
	r := c.must(http.StatusSeeOther, c.signIn(h.admin), "sign-in from the public origin")
	if ck := sessionCookie(t, r); !ck.Secure {
		t.Fatal("the session cookie is not Secure although the public URL is https")
	}
	if r.header.Get("Strict-Transport-Security") == "" {
		t.Error("no HSTS header behind an https public URL")
	}
	// The jar keeps Secure cookies away from the plain-http test server; hand it over as a proxy would.
	u, _ := url.Parse(h.srv.URL + "/ui/")
	ck := sessionCookie(t, r)
	c.http.Jar.SetCookies(u, []*http.Cookie{{Name: ck.Name, Value: ck.Value, Path: "/ui/"}})
	c.must(http.StatusOK, c.get("/ui/"), "overview")
	// The server's own (internal) origin is not the console's.
	c.must(http.StatusForbidden, c.post("/ui/signout", nil, "Origin", h.srv.URL), "post from the internal origin")
	c.must(http.StatusSeeOther, c.post("/ui/signout", nil), "post from the public origin")
}

const hostile = `<script>alert(1)</script>`

// consolePages are every page and fragment of a tenant's objects.
func consolePages(tn tenant) []string {
	env, host := tn.env.String(), tn.host.String()
	return []string{
		"/ui/",
		"/ui/fragments/overview/" + env,
		"/ui/hosts?env=" + env + "&status=drifted",
		"/ui/hosts?env=" + env,
		"/ui/hosts?env=" + env + "&status=failed&hostname=web",
		"/ui/hosts/" + host,
		"/ui/environments/" + env + "/configs/collectors",
		"/ui/environments/" + env + "/configs/collectors/revisions",
		"/ui/environments/" + env + "/configs/collectors/progress",
		"/ui/fragments/progress/" + env + "/collectors",
		"/ui/hosts/" + host + "/configs/collectors",
		"/ui/hosts/" + host + "/configs/collectors/revisions",
		"/ui/hosts/" + host + "/configs/collectors/progress",
		"/ui/fragments/progress/hosts/" + host + "/collectors",
		"/ui/credentials?client=" + tn.client.String(),
		"/ui/audit",
		"/ui/audit?actor=" + url.QueryEscape(hostile),
	}
}

func TestConsoleEveryPageRendersHostileValuesAsText(t *testing.T) {
	h, tn := newTenantHarness(t, "acme")
	// Hostile values everywhere an operator can put one: hostname, environment name, config data,
	// an agent's apply error, a credential name, a token name (the audit actor).
	var hst idObj
	h.must(201, "POST", "/api/v1/environments/"+tn.env.String()+"/hosts", h.admin, map[string]any{"hostname": hostile}).data(t, &hst)
	h.exec(`UPDATE environments SET name = $1 WHERE id = $2`, hostile, tn.env)
	h.exec(`UPDATE clients SET name = $1 WHERE id = $2`, hostile, tn.client)
	h.must(201, "POST", "/api/v1/tokens", h.admin, map[string]any{"name": hostile, "client_id": tn.client})
	var cred idObj
	h.must(201, "POST", credentialsPath(tn.client), h.admin,
		map[string]any{"name": hostile, "secret": map[string]string{"password": "pw-" + hostile}}).data(t, &cred)
	collectors := `[{"type": "http", "name": "` + strings.ReplaceAll(hostile, `"`, `\"`) + `", "url": "http://x/` + "%3Cscript%3E" + `"},` +
		`{"type": "mysql", "name": "db", "host": "db", "port": 3306, "credential_id": "` + cred.ID.String() + `"}]`
	h.must(200, "PUT", envConfigPath(tn.env, "collectors"), h.admin, `{"config_data": `+collectors+`}`)
	h.must(200, "PUT", hostConfigPath(tn.host, "collectors"), h.admin, `{"config_data": [{"type":"tcp","name":"`+strings.ReplaceAll(hostile, `"`, `\"`)+`","address":"db:1"}]}`)
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
	        VALUES ($1, 'collectors', 1, 'failed', $2, now()), ($3, 'collectors', 1, 'failed', $2, now())`, tn.host, hostile, hst.ID)
	h.exec(`UPDATE hosts SET last_heartbeat_at = now(), config_hash = $1, config_versions = '{"collectors": 1}' WHERE id = $2`, hostile, tn.host)

	c := h.signIn(h.admin)
	pages := append(consolePages(tn), "/ui/hosts/"+hst.ID.String(), "/ui/credentials")
	c.checkEscaped(pages)
	// The values are there, as text.
	for _, p := range []string{"/ui/hosts?env=" + tn.env.String(), "/ui/hosts/" + tn.host.String(), "/ui/audit", "/ui/"} {
		if body := string(c.get(p).body); !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("GET %s does not show the hostile value as text:\n%s", p, body)
		}
	}
	// The host page shows the credential by name and its secret only as [REDACTED].
	body := string(c.get("/ui/hosts/" + tn.host.String()).body)
	if !strings.Contains(body, "[REDACTED]") || strings.Contains(body, "pw-") {
		t.Errorf("host page does not redact the credential:\n%s", body)
	}
}

func TestConsoleTenantIsolation(t *testing.T) {
	h := newHarness(t)
	a, b := h.newTenant("alpha"), h.newTenant("bravo")
	h.must(200, "PUT", envConfigPath(b.env, "labels"), h.admin, `{"config_data": {"static": {"team": "bravo-secret-team"}}}`)
	c := h.signIn(a.token)

	for _, p := range consolePages(b) {
		if p == "/ui/" || strings.HasPrefix(p, "/ui/audit") {
			continue
		}
		r := c.get(p)
		if r.status != http.StatusNotFound {
			t.Errorf("client alpha GET %s: status %d, want 404:\n%s", p, r.status, r.body)
		}
		if strings.Contains(string(r.body), "bravo") {
			t.Errorf("client alpha GET %s shows bravo's data:\n%s", p, r.body)
		}
	}
	// Its own pages work, and show nothing of bravo.
	for _, p := range consolePages(a) {
		r := c.get(p)
		if r.status != http.StatusOK {
			t.Errorf("client alpha GET %s: status %d:\n%s", p, r.status, r.body)
		}
		if strings.Contains(string(r.body), "bravo") {
			t.Errorf("client alpha GET %s shows bravo's objects:\n%s", p, r.body)
		}
	}
	// Writes to another client's objects are 404 and change nothing.
	before := h.count(`SELECT count(*) FROM config_revisions`)
	envBase := "/ui/environments/" + b.env.String() + "/configs/labels"
	doc := `{"static": {"team": "alpha-was-here"}}`
	for _, p := range []string{envBase + "/dry-run", envBase + "/save", envBase + "/delete", envBase + "/rollback",
		"/ui/hosts/" + b.host.String() + "/configs/labels/save"} {
		r := c.post(p, url.Values{"config_data": {doc}, "reviewed": {"x"}, "confirm": {"yes"}, "revision": {"1"}})
		if r.status != http.StatusNotFound {
			t.Errorf("client alpha POST %s: status %d, want 404:\n%s", p, r.status, r.body)
		}
	}
	for _, p := range []string{"/ui/clients/" + b.client.String() + "/credentials",
		"/ui/clients/" + b.client.String() + "/credentials/" + uuid.NewString() + "/delete",
		"/ui/clients/" + b.client.String() + "/credentials/" + uuid.NewString() + "/targets"} {
		r := c.post(p, url.Values{"name": {"x"}, "secret_password": {"y"}, "confirm": {"yes"}, "allowed_targets": {"a:1"}})
		if r.status != http.StatusNotFound {
			t.Errorf("client alpha POST %s: status %d, want 404:\n%s", p, r.status, r.body)
		}
	}
	if h.count(`SELECT count(*) FROM config_revisions`) != before {
		t.Fatal("a cross-tenant console write changed a config")
	}
	if h.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access' AND actor = 'alpha-ops'`) == 0 {
		t.Error("cross-tenant console access was not audited")
	}
	// The audit page shows alpha only its own client's events.
	if body := string(c.get("/ui/audit").body); strings.Contains(body, "bravo-ops") {
		t.Errorf("alpha's audit page shows bravo's events:\n%s", body)
	}
}

func TestConsoleRefusesStateChangesWithoutCSRFToken(t *testing.T) {
	h, tn := newTenantHarness(t, "acme")
	h.must(200, "PUT", envConfigPath(tn.env, "labels"), h.admin, `{"config_data": {"static": {"a": "1"}}}`)
	var cred idObj
	h.must(201, "POST", credentialsPath(tn.client), h.admin,
		map[string]any{"name": "db", "secret": map[string]string{"password": "pw"}}).data(t, &cred)
	c := h.signIn(h.admin)
	env, host := "/ui/environments/"+tn.env.String()+"/configs/labels", "/ui/hosts/"+tn.host.String()+"/configs/labels"
	credBase := "/ui/clients/" + tn.client.String() + "/credentials"
	posts := []string{env + "/dry-run", env + "/save", env + "/delete", env + "/rollback", host + "/dry-run", host + "/save",
		host + "/delete", host + "/rollback", credBase, credBase + "/" + cred.ID.String() + "/rotate",
		credBase + "/" + cred.ID.String() + "/delete", credBase + "/" + cred.ID.String() + "/targets", "/ui/signout"}
	revisions, credentials := h.count(`SELECT count(*) FROM config_revisions`), h.count(`SELECT count(*) FROM audit_events WHERE action LIKE 'credential_%'`)
	form := func() url.Values {
		return url.Values{"config_data": {`{"static": {"a": "2"}}`}, "confirm": {"yes"}, "revision": {"1"}, "name": {"n"}, "secret_password": {"x"},
			"allowed_targets": {"db.example:5432"}}
	}
	for _, p := range posts {
		noToken := form()
		noToken.Set("csrf", "")
		if r := c.post(p, noToken); r.status != http.StatusForbidden {
			t.Errorf("POST %s without the CSRF token: status %d, want 403", p, r.status)
		}
		wrong := form()
		wrong.Set("csrf", strings.Repeat("A", 43))
		if r := c.post(p, wrong); r.status != http.StatusForbidden {
			t.Errorf("POST %s with a wrong CSRF token: status %d, want 403", p, r.status)
		}
		if r := c.post(p, form(), "Origin", "https://evil.example"); r.status != http.StatusForbidden {
			t.Errorf("POST %s with the token from another origin: status %d, want 403", p, r.status)
		}
		f := form()
		f.Set("csrf", c.csrf)
		if r := c.send("POST", p, f); r.status != http.StatusForbidden {
			t.Errorf("POST %s with neither Origin nor Referer: status %d, want 403", p, r.status)
		}
	}
	if h.count(`SELECT count(*) FROM config_revisions`) != revisions || h.count(`SELECT count(*) FROM audit_events WHERE action LIKE 'credential_%'`) != credentials {
		t.Fatal("a refused request changed something")
	}
	// A same-origin Referer stands in for a missing Origin; the header token works as the form field does.
	r := c.send("POST", env+"/dry-run", url.Values{"config_data": {`{"static": {"a": "2"}}`}, "csrf": {c.csrf}}, "Referer", h.srv.URL+env)
	c.must(http.StatusOK, r, "dry run with a same-origin Referer")
	r = c.send("POST", env+"/dry-run", url.Values{"config_data": {`{"static": {"a": "2"}}`}}, "Origin", h.srv.URL, "X-CSRF-Token", c.csrf)
	c.must(http.StatusOK, r, "dry run with the token in X-CSRF-Token")
}

func TestConsoleConfigEditorDryRunSaveConflictDeleteRollback(t *testing.T) {
	h, tn := newTenantHarness(t, "acme")
	c := h.signIn(h.admin)
	base := "/ui/environments/" + tn.env.String() + "/configs/watch_files"

	page := c.must(http.StatusOK, c.get(base), "editor")
	if !strings.Contains(string(page.body), "none yet") {
		t.Fatalf("a new config's editor: %s", page.body)
	}
	// Validation errors come back in the editor, at the path the API names, with the text kept.
	r := c.must(http.StatusBadRequest, c.post(base+"/dry-run", url.Values{"config_data": {"{\n  \"paths\": [\"/etc\",\n}"}}), "malformed JSON")
	if !strings.Contains(string(r.body), "line 3") || !strings.Contains(string(r.body), "&#34;/etc&#34;") {
		t.Fatalf("malformed JSON: %s", r.body)
	}
	r = c.must(http.StatusBadRequest, c.post(base+"/dry-run", url.Values{"config_data": {`{"pathz": ["/etc"]}`}}), "unknown key")
	if !strings.Contains(string(r.body), "pathz") || !strings.Contains(string(r.body), `aria-invalid="true"`) {
		t.Fatalf("unknown key: %s", r.body)
	}
	// Saving needs a dry run of exactly the text being saved.
	doc := `{"paths": ["/etc", "/opt"]}`
	c.must(http.StatusBadRequest, c.post(base+"/save", url.Values{"config_data": {doc}}), "save without a dry run")
	r = c.must(http.StatusOK, c.post(base+"/dry-run", url.Values{"config_data": {doc}}, "HX-Request", "true"), "dry run")
	body := string(r.body)
	if !strings.Contains(body, "acme-web-1") || !strings.Contains(body, "&#43;   &#34;paths&#34;") || strings.Contains(body, "<html") {
		t.Fatalf("dry run fragment lacks the host's diff (or is a whole page): %s", body)
	}
	reviewed := regexp.MustCompile(`name="reviewed" value="([^"]+)"`).FindStringSubmatch(body)[1]
	if n := h.count(`SELECT count(*) FROM environment_configs`); n != 0 {
		t.Fatal("the dry run wrote a config")
	}
	c.must(http.StatusBadRequest, c.post(base+"/save", url.Values{"config_data": {`{"paths": ["/"]}`}, "reviewed": {reviewed}}), "save of another text")
	r = c.must(http.StatusOK, c.post(base+"/save", url.Values{"config_data": {doc}, "reviewed": {reviewed}}), "save")
	if !strings.Contains(string(r.body), "Saved as version") {
		t.Fatalf("save: %s", r.body)
	}
	var v1 int64
	if err := h.pool.QueryRow(context.Background(), `SELECT version FROM environment_configs`).Scan(&v1); err != nil {
		t.Fatal(err)
	}
	// Another writer moves the config: the console's save at the old version is a 412 that shows theirs.
	h.must(200, "PUT", envConfigPath(tn.env, "watch_files"), h.admin, `{"config_data": {"paths": ["/srv"]}}`)
	mine := `{"paths": ["/etc", "/opt", "/var"]}`
	form := url.Values{"config_data": {mine}, "version": {itoa64(v1)}, "exists": {"true"}}
	r = c.post(base+"/dry-run", form)
	form.Set("reviewed", regexp.MustCompile(`name="reviewed" value="([^"]+)"`).FindStringSubmatch(string(r.body))[1])
	r = c.must(http.StatusPreconditionFailed, c.post(base+"/save", form), "stale save")
	if !strings.Contains(string(r.body), `id="conflict"`) || !strings.Contains(string(r.body), "&#34;/srv&#34;") {
		t.Fatalf("conflict not shown: %s", r.body)
	}
	var data string
	if err := h.pool.QueryRow(context.Background(), `SELECT config_data::text FROM environment_configs`).Scan(&data); err != nil || !strings.Contains(data, "/srv") {
		t.Fatalf("the conflicting save overwrote the other writer: %s (%v)", data, err)
	}
	// Deleting needs the confirmation box and the current version.
	cur := currentVersion(t, h)
	c.must(http.StatusBadRequest, c.post(base+"/delete", url.Values{"version": {itoa64(cur)}}), "delete without confirmation")
	c.must(http.StatusPreconditionFailed, c.post(base+"/delete", url.Values{"version": {itoa64(v1)}, "confirm": {"yes"}}), "delete at a stale version")
	r = c.must(http.StatusOK, c.post(base+"/delete", url.Values{"version": {itoa64(cur)}, "confirm": {"yes"}}), "delete")
	if !strings.Contains(string(r.body), "Deleted") {
		t.Fatalf("delete: %s", r.body)
	}
	// History: diff of any two revisions, and a rollback to the first.
	r = c.must(http.StatusOK, c.get(base+"/revisions?a="+itoa64(v1)+"&b="+itoa64(cur)), "revisions")
	if !strings.Contains(string(r.body), "-     &#34;/etc&#34;,") || !strings.Contains(string(r.body), "Roll back to version "+itoa64(v1)) {
		t.Fatalf("revisions: %s", r.body)
	}
	deleted := currentVersion(t, h)
	c.must(http.StatusPreconditionFailed, c.post(base+"/rollback", url.Values{"revision": {itoa64(v1)}, "version": {itoa64(cur)}}), "rollback at a stale version")
	r = c.must(http.StatusSeeOther, c.post(base+"/rollback", url.Values{"revision": {itoa64(v1)}}), "rollback")
	if !strings.Contains(r.header.Get("Location"), "rolled_back=") {
		t.Fatalf("rollback went to %q", r.header.Get("Location"))
	}
	if err := h.pool.QueryRow(context.Background(), `SELECT config_data::text FROM environment_configs`).Scan(&data); err != nil || !strings.Contains(data, "/opt") {
		t.Fatalf("rollback did not restore version %d: %s (%v)", v1, data, err)
	}
	if currentVersion(t, h) <= deleted {
		t.Fatal("the rollback did not write a new version")
	}

	// Apply progress counts the acks at the latest version.
	latest := currentVersion(t, h)
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at) VALUES ($1, 'watch_files', $2, 'failed', 'path /opt denied by policy', now())`, tn.host, latest)
	r = c.must(http.StatusOK, c.get("/ui/fragments/progress/"+tn.env.String()+"/watch_files"), "progress")
	if !strings.Contains(string(r.body), `data-count="failed">1<`) || !strings.Contains(string(r.body), "path /opt denied by policy") {
		t.Fatalf("progress: %s", r.body)
	}

	// Host level: the override editor saves with the effective version as If-Match.
	hbase := "/ui/hosts/" + tn.host.String() + "/configs/watch_files"
	page = c.must(http.StatusOK, c.get(hbase), "host editor")
	version := regexp.MustCompile(`name="version" value="([^"]*)"`).FindStringSubmatch(string(page.body))[1]
	if version != itoa64(latest) {
		t.Fatalf("host editor loaded version %q, want the effective %d", version, latest)
	}
	hform := url.Values{"config_data": {`{"exclude_patterns": ["*.tmp"]}`}, "version": {version}}
	r = c.must(http.StatusOK, c.post(hbase+"/dry-run", hform), "host dry run")
	hform.Set("reviewed", regexp.MustCompile(`name="reviewed" value="([^"]+)"`).FindStringSubmatch(string(r.body))[1])
	c.must(http.StatusOK, c.post(hbase+"/save", hform), "host save")
	if h.count(`SELECT count(*) FROM host_configs WHERE host_id = $1 AND config_data ? 'exclude_patterns'`, tn.host) != 1 {
		t.Fatal("the host override was not saved")
	}
}

func currentVersion(t *testing.T, h *harness) int64 {
	t.Helper()
	var v int64
	if err := h.pool.QueryRow(context.Background(), `SELECT version FROM environment_configs`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func TestConsoleCredentialsSecretTypedOnce(t *testing.T) {
	h, tn := newTenantHarness(t, "acme")
	c := h.signIn(tn.token)
	base := "/ui/clients/" + tn.client.String() + "/credentials"
	const secret = "correct-horse-battery-staple"

	c.get("/ui/credentials")
	r := c.must(http.StatusSeeOther, c.post(base, url.Values{"name": {"orders-db"}, "secret_username": {"app"}, "secret_password": {secret}}), "create")
	list := c.must(http.StatusOK, c.get(r.header.Get("Location")), "list")
	if !strings.Contains(string(list.body), "orders-db") || !strings.Contains(string(list.body), "password=[REDACTED]") || strings.Contains(string(list.body), secret) {
		t.Fatalf("credential list: %s", list.body)
	}
	var id uuid.UUID
	if err := h.pool.QueryRow(context.Background(), `SELECT id FROM credentials WHERE name = 'orders-db'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	r = c.must(http.StatusBadRequest, c.post(base, url.Values{"name": {"no-secret"}}), "create without a secret")
	if !strings.Contains(string(r.body), "secret must have at least one field") {
		t.Fatalf("create without a secret: %s", r.body)
	}
	c.must(http.StatusSeeOther, c.post(base+"/"+id.String()+"/rotate", url.Values{"secret_password": {secret + "-2"}}), "rotate")
	c.must(http.StatusBadRequest, c.post(base+"/"+id.String()+"/delete", nil), "delete without confirmation")
	c.must(http.StatusSeeOther, c.post(base+"/"+id.String()+"/delete", url.Values{"confirm": {"yes"}}), "delete")
	if h.count(`SELECT count(*) FROM credentials`) != 0 {
		t.Fatal("the credential was not deleted")
	}
	for _, action := range []string{"credential_created", "credential_rotated", "credential_deleted"} {
		if h.count(`SELECT count(*) FROM audit_events WHERE action = $1 AND actor = 'acme-ops'`, action) != 1 {
			t.Errorf("no %s audit event", action)
		}
	}
	h.noLogContains(secret)
}

func TestConsoleCredentialAllowedTargets(t *testing.T) {
	h, tn := newTenantHarness(t, "acme")
	c := h.signIn(tn.token)
	base := "/ui/clients/" + tn.client.String() + "/credentials"
	c.get("/ui/credentials")
	targets := func(name string) string {
		t.Helper()
		var got string
		if err := h.pool.QueryRow(context.Background(), `SELECT COALESCE(array_to_string(allowed_targets, ','), 'NULL') FROM credentials WHERE name = $1`, name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	// Created with targets, one a line (blank lines and commas tolerated); shown in the list as text.
	r := c.must(http.StatusSeeOther, c.post(base, url.Values{"name": {"orders-db"}, "secret_password": {"pw"},
		"allowed_targets": {"db1.example.internal:5432\r\n\r\n db2.example.internal:5432 ,"}}), "create with targets")
	if got := targets("orders-db"); got != "db1.example.internal:5432,db2.example.internal:5432" {
		t.Fatalf("allowed targets after create: %s", got)
	}
	list := string(c.must(http.StatusOK, c.get(r.header.Get("Location")), "list").body)
	if !strings.Contains(list, "<code>db2.example.internal:5432</code>") {
		t.Fatalf("the list does not show the allowed targets: %s", list)
	}
	var id uuid.UUID
	if err := h.pool.QueryRow(context.Background(), `SELECT id FROM credentials WHERE name = 'orders-db'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	// Replaced, then cleared; a rotation of the secret leaves them alone; an invalid pattern is a 400
	// naming it, shown on the page, and changes nothing.
	c.must(http.StatusSeeOther, c.post(base+"/"+id.String()+"/targets", url.Values{"allowed_targets": {"db3.example.internal:5432"}}), "set targets")
	if got := targets("orders-db"); got != "db3.example.internal:5432" {
		t.Fatalf("allowed targets after set: %s", got)
	}
	c.must(http.StatusSeeOther, c.post(base+"/"+id.String()+"/rotate", url.Values{"secret_password": {"pw2"}}), "rotate")
	if got := targets("orders-db"); got != "db3.example.internal:5432" {
		t.Fatalf("a rotation changed the allowed targets: %s", got)
	}
	bad := c.post(base+"/"+id.String()+"/targets", url.Values{"allowed_targets": {"<script>alert(1)</script>"}})
	if bad.status != http.StatusBadRequest || !strings.Contains(string(bad.body), "allowed_targets") || strings.Contains(string(bad.body), "<script>alert") {
		t.Fatalf("invalid target: %d %s", bad.status, bad.body)
	}
	c.must(http.StatusBadRequest, c.post(base+"/"+id.String()+"/targets", url.Values{}), "set targets without the field")
	if got := targets("orders-db"); got != "db3.example.internal:5432" {
		t.Fatalf("a refused change altered the allowed targets: %s", got)
	}
	c.must(http.StatusSeeOther, c.post(base+"/"+id.String()+"/targets", url.Values{"allowed_targets": {""}}), "clear targets")
	if got := targets("orders-db"); got != "" && got != "NULL" {
		t.Fatalf("allowed targets after clearing: %s", got)
	}
}

func TestConsoleHostApplyProgress(t *testing.T) {
	h, tn := newTenantHarness(t, "acme")
	c := h.signIn(tn.token)
	page := "/ui/hosts/" + tn.host.String() + "/configs/labels/progress"
	fragment := "/ui/fragments/progress/hosts/" + tn.host.String() + "/labels"
	if body := string(c.must(http.StatusOK, c.get(page), "progress without a config").body); !strings.Contains(body, "The host has no effective labels config") {
		t.Fatalf("progress without a config: %s", body)
	}
	h.must(200, "PUT", hostConfigPath(tn.host, "labels"), h.admin, `{"config_data": {"static": {"rack": "r1"}}}`)
	version := h.count(`SELECT version FROM host_configs WHERE host_id = $1 AND config_type = 'labels'`, tn.host)
	counts := func(path string) string {
		t.Helper()
		body := string(c.must(http.StatusOK, c.get(path), path).body)
		var out []string
		for _, key := range []string{"applied", "failed", "pending"} {
			m := regexp.MustCompile(`data-count="` + key + `">(\d+)<`).FindStringSubmatch(body)
			if m == nil {
				t.Fatalf("no %s count in %s", key, body)
			}
			out = append(out, m[1])
		}
		return strings.Join(out, "/")
	}
	// An acknowledgement of an older version leaves the change pending on an online host (one that
	// never heartbeated counts as offline, as in the apply-status API); the host's ack at the new
	// version turns it applied, or failed with its error (shown as text).
	h.exec(`UPDATE hosts SET last_heartbeat_at = now() WHERE id = $1`, tn.host)
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, applied_at) VALUES ($1, 'labels', $2, 'applied', now())`, tn.host, version-1)
	if got := counts(page); got != "0/0/1" {
		t.Fatalf("applied/failed/pending before the ack: %s, want 0/0/1", got)
	}
	h.exec(`UPDATE host_config_apply_status SET version = $2 WHERE host_id = $1`, tn.host, version)
	if got := counts(fragment); got != "1/0/0" {
		t.Fatalf("applied/failed/pending after the ack: %s, want 1/0/0", got)
	}
	h.exec(`UPDATE host_config_apply_status SET status = 'failed', error = $2 WHERE host_id = $1`, tn.host, hostile)
	body := string(c.get(fragment).body)
	if got := counts(fragment); got != "0/1/0" || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") || strings.Contains(body, "<script>alert") {
		t.Fatalf("a failed ack: %s, %s", got, body)
	}
	// The editor of the host override links to it.
	if body := string(c.get("/ui/hosts/" + tn.host.String() + "/configs/labels").body); !strings.Contains(body, `href="/ui/hosts/`+tn.host.String()+`/configs/labels/progress"`) {
		t.Errorf("the host editor does not link to its apply progress: %s", body)
	}
}

func TestAuditLogReadRoute(t *testing.T) {
	h := newHarness(t)
	a, b := h.newTenant("alpha"), h.newTenant("bravo")
	var all struct {
		Data []struct {
			ID       int64     `json:"id"`
			Actor    string    `json:"actor"`
			ClientID uuid.UUID `json:"client_id"`
			Action   string    `json:"action"`
			Object   string    `json:"object"`
		} `json:"data"`
		NextBefore int64 `json:"next_before"`
	}
	decode := func(r response) {
		t.Helper()
		all.Data, all.NextBefore = nil, 0
		if err := json.Unmarshal(r.body, &all); err != nil {
			t.Fatalf("audit page: %v: %s", err, r.body)
		}
	}
	decode(h.must(200, "GET", "/api/v1/audit", h.admin, nil))
	if len(all.Data) < 4 {
		t.Fatalf("admin sees %d events, want at least the two tokens and two hosts: %+v", len(all.Data), all.Data)
	}
	for i := 1; i < len(all.Data); i++ {
		if all.Data[i].ID >= all.Data[i-1].ID {
			t.Fatal("events are not newest first")
		}
	}
	decode(h.must(200, "GET", "/api/v1/audit", a.token, nil))
	if len(all.Data) == 0 {
		t.Fatal("a client sees none of its own events")
	}
	for _, ev := range all.Data {
		if ev.ClientID != a.client {
			t.Fatalf("client alpha sees an event of another client: %+v", ev)
		}
	}
	decode(h.must(200, "GET", "/api/v1/audit?object=host:"+b.host.String(), h.admin, nil))
	if len(all.Data) != 1 || all.Data[0].Action != "host_registered" {
		t.Fatalf("object filter: %+v", all.Data)
	}
	decode(h.must(200, "GET", "/api/v1/audit?object=host:"+b.host.String(), a.token, nil))
	if len(all.Data) != 0 {
		t.Fatalf("client alpha reads bravo's host events: %+v", all.Data)
	}
	// Bravo learns of alpha's attempt on its host, but not alpha's ids.
	h.must(404, "GET", "/api/v1/hosts/"+b.host.String(), a.token, nil)
	r := h.must(200, "GET", "/api/v1/audit?object=host:"+b.host.String(), b.token, nil)
	if !strings.Contains(string(r.body), "cross_tenant_access") || strings.Contains(string(r.body), a.client.String()) ||
		strings.Contains(string(r.body), "alpha-ops") || !strings.Contains(string(r.body), "(another client)") {
		t.Fatalf("bravo's view of the cross-tenant attempt: %s", r.body)
	}
	if r := h.must(200, "GET", "/api/v1/audit?object=host:"+b.host.String(), h.admin, nil); !strings.Contains(string(r.body), a.client.String()) {
		t.Fatalf("the admin does not see who attempted: %s", r.body)
	}
	decode(h.must(200, "GET", "/api/v1/audit?actor=test-admin&limit=1", h.admin, nil))
	if len(all.Data) != 1 || all.NextBefore == 0 {
		t.Fatalf("paging: %+v next %d", all.Data, all.NextBefore)
	}
	first := all.Data[0].ID
	decode(h.must(200, "GET", "/api/v1/audit?actor=test-admin&limit=1&before="+itoa64(all.NextBefore), h.admin, nil))
	if len(all.Data) != 1 || all.Data[0].ID >= first {
		t.Fatalf("second page: %+v", all.Data)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	decode(h.must(200, "GET", "/api/v1/audit?since="+future, h.admin, nil))
	if len(all.Data) != 0 {
		t.Fatalf("since in the future: %+v", all.Data)
	}
	h.must(400, "GET", "/api/v1/audit?since=yesterday", h.admin, nil)
	h.must(400, "GET", "/api/v1/audit?limit=5000", h.admin, nil)
	h.must(401, "GET", "/api/v1/audit", "", nil)
}

// Sessions live in PostgreSQL: a session opened on one config-api replica is served by another, CSRF
// token included (it derives from the session id, not from replica memory).
func TestConsoleSessionServedByAnyReplica(t *testing.T) {
	h := newHarness(t)
	first := h.signIn(h.admin)
	router := mux.NewRouter()
	replica, err := configapi.New(configapi.Config{OnlineWindow: 90 * time.Second, RequestTimeout: 5 * time.Second}, h.pool, h.nc, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	replica.Register(router)
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)

	u, _ := url.Parse(h.srv.URL + "/ui/")
	second := h.newConsoleClient()
	second.origin = srv.URL
	su, _ := url.Parse(srv.URL + "/ui/")
	second.http.Jar.SetCookies(su, first.http.Jar.Cookies(u))
	second.h = &harness{t: t, srv: srv}
	page := second.must(http.StatusOK, second.get("/ui/"), "overview on the other replica")
	if second.csrf == "" || second.csrf != first.csrf || !strings.Contains(string(page.body), "test-admin") {
		t.Fatalf("the other replica's page: csrf %q vs %q", second.csrf, first.csrf)
	}
	second.must(http.StatusSeeOther, second.post("/ui/signout", nil), "sign-out on the other replica")
	first.must(http.StatusSeeOther, first.get("/ui/"), "the first replica after sign-out elsewhere")
}

func TestConsoleStaticAssetsAndUnknownPages(t *testing.T) {
	h := newHarness(t)
	c := h.newConsoleClient()
	r := c.must(http.StatusOK, c.get("/ui/static/htmx.min.js"), "htmx")
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") || !strings.Contains(string(r.body), "htmx") {
		t.Fatalf("htmx served as %q", ct)
	}
	c.must(http.StatusOK, c.get("/ui/static/console.css"), "style sheet")
	c.must(http.StatusNotFound, c.get("/ui/static/README.md"), "a file that is not an asset")
	r = c.must(http.StatusMovedPermanently, c.get("/ui"), "/ui")
	if r.header.Get("Location") != "/ui/" {
		t.Fatalf("/ui redirects to %q", r.header.Get("Location"))
	}
	c.must(http.StatusSeeOther, c.get("/ui/no-such-page"), "unknown page without a session")
	signed := h.signIn(h.admin)
	signed.must(http.StatusNotFound, signed.get("/ui/no-such-page"), "unknown page")
	signed.must(http.StatusNotFound, signed.get("/ui/hosts/not-a-uuid"), "malformed id")
	signed.must(http.StatusNotFound, signed.get("/ui/environments/"+uuid.NewString()+"/configs/no_such_type"), "unknown config type")
	signed.must(http.StatusNotFound, signed.get("/ui/hosts/"+uuid.NewString()), "missing host")
	// The sign-in redirect never leaves the console.
	form := c.get("/ui/signin")
	tok := string(csrfField.FindSubmatch(form.body)[1])
	r = c.send("POST", "/ui/signin", url.Values{"token": {h.admin}, "csrf": {tok}, "next": {"https://evil.example/"}}, "Origin", c.origin)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/" {
		t.Fatalf("sign-in with a foreign next: %d %q", r.status, r.header.Get("Location"))
	}
}

func TestConsoleOverviewCountsAndWorstOffenders(t *testing.T) {
	h, a := newTenantHarness(t, "alpha") // one never-seen host each
	h.newTenant("bravo")
	register := func(tn tenant, name string) uuid.UUID {
		var o idObj
		h.must(201, "POST", "/api/v1/environments/"+tn.env.String()+"/hosts", h.admin, map[string]any{"hostname": name}).data(t, &o)
		return o.ID
	}
	failing, stale, fine, revoked := register(a, "failing"), register(a, "stale"), register(a, "fine"), register(a, "revoked")
	behind := register(a, "behind")
	h.must(200, "PUT", envConfigPath(a.env, "labels"), h.admin, `{"config_data": {"static": {"team": "a"}}}`)
	labels := h.count(`SELECT version FROM environment_configs WHERE environment_id = $1 AND config_type = 'labels'`, a.env)
	// Config state as the agents report it: fine holds the effective labels and reports their hash (in
	// sync); failing reports a version ahead of them (drifted, not stale); behind reports none (drifted
	// and stale); stale is offline and never reported (drifted and stale, as in the API's report, which
	// checks offline hosts too), as is alpha-web-1, which was never seen.
	// fine also has a labels override of its own, newer than the environment's: its effective labels
	// version is the override's, which it reports.
	h.must(200, "PUT", hostConfigPath(fine, "labels"), h.admin, `{"config_data": {"static": {"rack": "r1"}}}`)
	fineLabels := h.count(`SELECT version FROM host_configs WHERE host_id = $1 AND config_type = 'labels'`, fine)
	if fineLabels <= labels {
		t.Fatalf("the override's version %d is not after the environment's %d", fineLabels, labels)
	}
	h.exec(`UPDATE hosts SET last_heartbeat_at = now(), config_versions = jsonb_build_object('labels', $2::bigint), config_hash = $3 WHERE id = $1`,
		fine, fineLabels, expectedHash(t, h, a.env, fine))
	h.exec(`UPDATE hosts SET last_heartbeat_at = now(), config_versions = jsonb_build_object('labels', $2::bigint) WHERE id = $1`, failing, labels+100)
	h.exec(`UPDATE hosts SET last_heartbeat_at = now(), config_versions = '{}' WHERE id = $1`, behind)
	h.exec(`UPDATE hosts SET last_heartbeat_at = now() - interval '1 hour' WHERE id = $1`, stale)
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at) VALUES
	        ($1, 'labels', 1, 'failed', 'x', now()), ($1, 'intervals', 1, 'failed', 'y', now()), ($2, 'labels', 1, 'applied', NULL, now())`, failing, fine)
	h.must(200, "DELETE", "/api/v1/hosts/"+revoked.String(), h.admin, nil)

	count := func(body, key string) string {
		m := regexp.MustCompile(`data-count="` + key + `">(\d+)<`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no %s count in %s", key, body)
		}
		return m[1]
	}
	admin := h.signIn(h.admin)
	body := string(admin.must(http.StatusOK, admin.get("/ui/fragments/overview/"+a.env.String()), "alpha's summary").body)
	if !strings.Contains(body, `data-count="drifted" data-pending="true"`) || !strings.Contains(body, "not computed yet") {
		t.Fatalf("before the first fleet stats, the summary claims drift counts: %s", body)
	}
	// The fleet stats, as the fleet metrics lease holder computes them every period.
	h.refreshFleetStats()
	body = string(admin.must(http.StatusOK, admin.get("/ui/fragments/overview/"+a.env.String()), "alpha's summary").body)
	if !strings.Contains(body, "Drifted and stale as of") {
		t.Fatalf("the summary does not say when drift was computed: %s", body)
	}
	for key, want := range map[string]string{"online": "3", "offline": "2", "never": "1", "failed": "1", "active": "5", "revoked": "1", "drifted": "4", "stale": "3"} {
		if got := count(body, key); got != want {
			t.Errorf("alpha's %s count is %s, want %s", key, got, want)
		}
	}
	// Worst first: the most failed types, then the oldest (or no) heartbeat; healthy and revoked hosts never.
	order := regexp.MustCompile(`<td><a href="/ui/hosts/[^"]+">([^<]+)</a></td>`).FindAllStringSubmatch(body, -1)
	var names []string
	for _, m := range order {
		names = append(names, m[1])
	}
	if strings.Join(names, ",") != "failing,alpha-web-1,stale" {
		t.Fatalf("worst offenders %v, want failing, alpha-web-1 (never seen), stale", names)
	}
	// The drifted filter lists exactly the hosts the count counts.
	list := string(admin.must(http.StatusOK, admin.get("/ui/hosts?env="+a.env.String()+"&status=drifted"), "drifted hosts").body)
	var listed []string
	for _, m := range regexp.MustCompile(`<td><a href="/ui/hosts/[^"]+">([^<]+)</a></td>`).FindAllStringSubmatch(list, -1) {
		listed = append(listed, m[1])
	}
	if strings.Join(listed, ",") != "alpha-web-1,behind,failing,stale" {
		t.Fatalf("drifted hosts %v, want alpha-web-1, behind, failing, stale", listed)
	}
	if !strings.Contains(list, `<option value="drifted" selected>`) {
		t.Errorf("the status filter does not show drifted selected: %s", list)
	}
	// The whole overview shows both clients' environments with the same numbers to an admin, and only
	// alpha's to alpha.
	page := string(admin.get("/ui/").body)
	if !strings.Contains(page, "alpha / prod") || !strings.Contains(page, "bravo / prod") ||
		!strings.Contains(page, `<td><a href="/ui/hosts/`+failing.String()+`">failing</a></td><td>2</td>`) ||
		!strings.Contains(page, `<dd data-count="drifted">4</dd>`) {
		t.Fatalf("admin overview: %s", page)
	}
	own := h.signIn(a.token)
	page = string(own.get("/ui/").body)
	if !strings.Contains(page, "alpha / prod") || strings.Contains(page, "bravo") {
		t.Fatalf("alpha's overview: %s", page)
	}
}
