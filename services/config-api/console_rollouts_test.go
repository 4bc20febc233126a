package configapi_test

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
)

var (
	versionField  = regexp.MustCompile(`name="version" value="([0-9]*)"`)
	reviewedField = regexp.MustCompile(`name="reviewed" value="([^"]*)"`)
	rolloutPath   = regexp.MustCompile(`^/ui/environments/[0-9a-f-]+/configs/labels/rollouts/([0-9a-f-]{36})$`)
)

// reviewed runs the editor's dry run of text and returns the form fields a save or rollout start sends.
func (c *consoleClient) reviewed(base, text string) url.Values {
	c.t.Helper()
	editor := c.must(http.StatusOK, c.get(base), "editor")
	version := ""
	if m := versionField.FindSubmatch(editor.body); m != nil {
		version = string(m[1])
	}
	dry := c.must(http.StatusOK, c.post(base+"/dry-run", url.Values{"config_data": {text}, "version": {version}}), "dry run")
	m := reviewedField.FindSubmatch(dry.body)
	if m == nil || len(m[1]) == 0 {
		c.t.Fatalf("dry run gave no reviewed digest:\n%s", dry.body)
	}
	return url.Values{"config_data": {text}, "version": {version}, "reviewed": {string(m[1])}}
}

// stageState is the state a rollout page shows for a stage.
func stageState(body []byte, stage string) string {
	m := regexp.MustCompile(`data-stage="` + stage + `" data-stage-state="([a-z]+)"`).FindSubmatch(body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

func rolloutState(body []byte) string {
	m := regexp.MustCompile(`id="rollout-state">([a-z]+)<`).FindSubmatch(body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// TestConsoleStagedRollouts: a rollout started from the environment editor (after its dry run, with
// its If-Match and a plan typed as "1,100%") shows stage 0 running with its canary; while it runs the
// editor's Save and Delete and the history's Rollback show the 409 with a link to it, the overview and
// the editor's type list link it; pause, resume and abort are forms that redirect back, an action out
// of turn is a 409 message on the page, and an ended rollout stops refreshing and shows no action.
func TestConsoleStagedRollouts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newRolloutTenant("acme", 4)
	h.writeLabels(a, "v1")
	c := h.signIn(a.token)
	env := "/ui/environments/" + a.env.String() + "/configs/labels"

	// The list is empty, the editor offers the rollout after a dry run.
	list := c.must(http.StatusOK, c.get(env+"/rollouts"), "empty rollout list")
	if !strings.Contains(string(list.body), "No staged rollout") {
		t.Fatalf("empty list:\n%s", list.body)
	}
	form := c.reviewed(env, `{"static": {"team": "v2"}}`)
	// Invalid input is shown in the editor at its path, nothing starts: a bad plan, a bad document,
	// no dry run of this text, a stale If-Match.
	for _, bad := range []struct {
		field, value, want string
		status             int
	}{
		{"stages", "1,5%,150%", "plan.stages[", http.StatusBadRequest},
		{"stages", "1,five", "plan.stages[1]", http.StatusBadRequest},
		{"bake_seconds", "-1", "plan.bake_seconds", http.StatusBadRequest},
		{"reviewed", "stale", "dry run", http.StatusBadRequest},
		{"version", "999999", "Someone else changed this config", http.StatusPreconditionFailed},
	} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		f.Set(bad.field, bad.value)
		r := c.post(env+"/rollouts", f)
		if r.status != bad.status || !strings.Contains(string(r.body), bad.want) || !strings.Contains(string(r.body), `id="editor"`) {
			t.Errorf("start with %s=%q: status %d, want %d naming %q in the editor:\n%s", bad.field, bad.value, r.status, bad.status, bad.want, r.body)
		}
	}
	// A document the dry run already refuses is refused by the start too, at its path.
	invalidText := `{"static": {"team": 7}}`
	sum := sha256.Sum256([]byte(invalidText))
	invalid := url.Values{"config_data": {invalidText}, "version": form["version"], "reviewed": {base64.RawURLEncoding.EncodeToString(sum[:16])}}
	if r := c.post(env+"/rollouts", invalid); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "static.team") {
		t.Errorf("start with an invalid config: status %d:\n%s", r.status, r.body)
	}
	if n := h.count(`SELECT count(*) FROM rollouts`); n != 0 {
		t.Fatalf("refused starts stored %d rollouts", n)
	}

	form.Set("stages", "1,100%")
	form.Set("bake_seconds", "3600")
	started := c.must(http.StatusSeeOther, c.post(env+"/rollouts", form), "start rollout")
	m := rolloutPath.FindStringSubmatch(started.header.Get("Location"))
	if m == nil {
		t.Fatalf("start went to %q", started.header.Get("Location"))
	}
	id := m[1]
	one := env + "/rollouts/" + id

	detail := c.must(http.StatusOK, c.get(one), "rollout detail")
	body := string(detail.body)
	if rolloutState(detail.body) != "running" || stageState(detail.body, "0") != "baking" || stageState(detail.body, "1") != "pending" ||
		!strings.Contains(body, `data-count="targeted">1<`) || !strings.Contains(body, `hx-trigger="every 2s"`) ||
		!strings.Contains(body, "/pause") || !strings.Contains(body, "/promote") || !strings.Contains(body, "/abort") || strings.Contains(body, "/resume") ||
		!strings.Contains(body, "1 host;") || !strings.Contains(body, "100%") || !strings.Contains(body, "bake 3600 s") {
		t.Fatalf("started rollout page:\n%s", body)
	}
	if !strings.Contains(body, `<span class="ddel">-     &#34;team&#34;: &#34;v1&#34;</span>`) || !strings.Contains(body, `<span class="dadd">&#43;     &#34;team&#34;: &#34;v2&#34;</span>`) {
		t.Errorf("the rollout page does not show the change from v1 to v2:\n%s", body)
	}
	if n := h.count(`SELECT count(*) FROM rollout_hosts WHERE rollout_id = $1`, uuid.MustParse(id)); n != 1 {
		t.Fatalf("stage 0 reached %d hosts, want the 1 canary", n)
	}
	// Its htmx fragment is the same body, without the layout.
	frag := c.must(http.StatusOK, c.get("/ui/fragments/rollouts/"+a.env.String()+"/labels/"+id, "HX-Request", "true"), "rollout fragment")
	if strings.Contains(string(frag.body), "<html") || stageState(frag.body, "0") != "baking" {
		t.Fatalf("fragment:\n%s", frag.body)
	}

	// Links: the list, the overview and the editor's type list name the active rollout.
	for _, p := range []string{env + "/rollouts", "/ui/", env} {
		if r := c.must(http.StatusOK, c.get(p), p); !strings.Contains(string(r.body), `href="`+one+`"`) {
			t.Errorf("GET %s does not link the active rollout:\n%s", p, r.body)
		}
	}

	// While it runs, the editor's writes show the 409 naming the rollout, with a link.
	revisions := h.count(`SELECT count(*) FROM config_revisions`)
	save := c.reviewed(env, `{"static": {"team": "v3"}}`)
	del := url.Values{"confirm": {"yes"}, "version": save["version"]}
	for _, w := range []struct {
		path string
		form url.Values
	}{{env + "/save", save}, {env + "/delete", del}, {env + "/rollback", url.Values{"revision": {"1"}}}} {
		r := c.post(w.path, w.form)
		if r.status != http.StatusConflict || !strings.Contains(string(r.body), "rollout "+id) || !strings.Contains(string(r.body), `id="rollout-active-link"`) ||
			!strings.Contains(string(r.body), `href="`+one+`"`) {
			t.Errorf("POST %s during the rollout: status %d, want 409 naming and linking it:\n%s", w.path, r.status, r.body)
		}
	}
	if r := c.post(env+"/rollouts", c.reviewed(env, `{"static": {"team": "v4"}}`)); r.status != http.StatusConflict || !strings.Contains(string(r.body), id) {
		t.Errorf("a second rollout: status %d:\n%s", r.status, r.body)
	}
	if h.count(`SELECT count(*) FROM config_revisions`) != revisions {
		t.Fatal("a refused write changed the config")
	}

	// Pause, an action out of turn, resume, promote, abort.
	r := c.must(http.StatusSeeOther, c.post(one+"/pause", nil), "pause")
	if r.header.Get("Location") != one+"?done=1" {
		t.Fatalf("pause went to %q", r.header.Get("Location"))
	}
	paused := c.must(http.StatusOK, c.get(one), "paused page")
	if rolloutState(paused.body) != "paused" || !strings.Contains(string(paused.body), "/resume") || strings.Contains(string(paused.body), "/pause\"") ||
		!strings.Contains(string(paused.body), "paused by acme-ops") {
		t.Fatalf("paused page:\n%s", paused.body)
	}
	r = c.post(one+"/pause", nil)
	if r.status != http.StatusConflict || !strings.Contains(string(r.body), `id="rollout-error"`) || !strings.Contains(string(r.body), "cannot pause") ||
		rolloutState(r.body) != "paused" {
		t.Fatalf("pause of a paused rollout: status %d:\n%s", r.status, r.body)
	}
	c.must(http.StatusConflict, c.post(one+"/promote", nil), "promote while paused")
	c.must(http.StatusSeeOther, c.post(one+"/resume", nil), "resume")
	if s := rolloutState(c.get(one).body); s != "running" {
		t.Fatalf("resumed rollout is %q", s)
	}
	c.must(http.StatusSeeOther, c.post(one+"/promote", nil), "promote")
	c.must(http.StatusSeeOther, c.post(one+"/abort", nil), "abort")
	ended := c.must(http.StatusOK, c.get(one), "aborted page")
	if s := rolloutState(ended.body); s != "reverted" && s != "aborted" {
		t.Fatalf("aborted rollout is %q:\n%s", s, ended.body)
	}
	if strings.Contains(string(ended.body), "hx-trigger") || strings.Contains(string(ended.body), `id="rollout-abort"`) {
		t.Fatalf("an ended rollout still refreshes or offers actions:\n%s", ended.body)
	}
	c.must(http.StatusConflict, c.post(one+"/abort", nil), "abort of an ended rollout")
	if r := c.must(http.StatusOK, c.get(env), "editor after the rollout"); strings.Contains(string(r.body), `id="rollout-active"`) {
		t.Fatalf("the editor still shows an active rollout:\n%s", r.body)
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action LIKE 'rollout_%' AND actor = 'acme-ops'`); n < 5 {
		t.Errorf("%d rollout transitions audited, want start, pause, resume, promote and abort", n)
	}

	// From htmx, with the plan fields left empty: the default plan, and the browser is sent to the page.
	r = c.post(env+"/rollouts", c.reviewed(env, `{"static": {"team": "v5"}}`), "HX-Request", "true")
	second := rolloutPath.FindStringSubmatch(r.header.Get("HX-Redirect"))
	if r.status != http.StatusNoContent || second == nil || second[1] == id {
		t.Fatalf("htmx start: status %d, HX-Redirect %q", r.status, r.header.Get("HX-Redirect"))
	}
	page := c.must(http.StatusOK, c.get(env+"/rollouts/"+second[1]), "default-plan rollout")
	if stageState(page.body, "3") != "pending" || stageState(page.body, "4") != "" || !strings.Contains(string(page.body), "bake 300 s") {
		t.Fatalf("the default plan (1 host, 5%%, 25%%, 100%%, 300 s) is not what the page shows:\n%s", page.body)
	}
	// The list shows both, newest first.
	list = c.must(http.StatusOK, c.get(env+"/rollouts"), "rollout list")
	if i, j := strings.Index(string(list.body), second[1]), strings.Index(string(list.body), id); i < 0 || j < 0 || i > j {
		t.Fatalf("the list is not newest first:\n%s", list.body)
	}
}

// TestConsoleRolloutPagesEscapeIsolateAndNeedCSRF: every rollout page and fragment renders hostile
// values (a stage selector, an agent's error text, a token name in the reason) as text; another
// client's rollout is 404 on every page and action; the action forms refuse a post without the CSRF
// token or from another origin and change nothing.
func TestConsoleRolloutPagesEscapeIsolateAndNeedCSRF(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newRolloutTenant("acme", 3)
	b := h.newRolloutTenant("globex", 1)
	h.writeLabels(a, "v1")
	ro := h.startRollout(a, "v2", map[string]any{"stages": []map[string]any{{"hosts": 2}, {"percent": 100}}, "bake_seconds": 3600})
	// Hostile values: a selector (written past the API's parser), the error text of a failed apply
	// in stage 0, and the reason a pause by a token named like a script records.
	h.exec(`UPDATE rollouts SET plan = jsonb_set(plan::jsonb, '{stages,1,selector}', to_jsonb($1::text)) WHERE id = $2`, hostile, uuid.MustParse(ro.ID))
	h.exec(`UPDATE hosts SET last_heartbeat_at = now() WHERE environment_id = $1`, a.env)
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
	        SELECT host_id, 'labels', version, 'failed', $2, now() FROM rollout_hosts WHERE rollout_id = $1`, uuid.MustParse(ro.ID), hostile)
	var tok idObj
	h.must(201, "POST", "/api/v1/tokens", h.admin, map[string]any{"name": hostile, "client_id": a.client}).data(t, &tok)

	c := h.signIn(tok.Token)
	env := "/ui/environments/" + a.env.String() + "/configs/labels"
	one := env + "/rollouts/" + ro.ID
	c.must(http.StatusSeeOther, c.post(one+"/pause", nil), "pause by the hostile token")

	pages := []string{env + "/rollouts", one, "/ui/fragments/rollouts/" + a.env.String() + "/labels/" + ro.ID, env, "/ui/"}
	c.checkEscaped(pages)
	detail := string(c.get(one).body)
	escaped := "&lt;script&gt;alert(1)&lt;/script&gt;"
	if strings.Count(detail, escaped) < 4 || !strings.Contains(detail, `data-count="failed">2<`) {
		// selector, top error, reason (paused by …) and created-by are all on the page, as text.
		t.Errorf("the detail page does not show the hostile selector, error and reason as text:\n%s", detail)
	}
	if !strings.Contains(string(c.get(env+"/rollouts").body), "paused by "+escaped) {
		t.Error("the list does not show the pause reason as text")
	}

	// Another client's rollout is 404 on every page and action; b sees none of a's data.
	other := h.signIn(b.token)
	bEnv := "/ui/environments/" + b.env.String() + "/configs/labels"
	for _, p := range []string{env + "/rollouts", one, "/ui/fragments/rollouts/" + a.env.String() + "/labels/" + ro.ID, bEnv + "/rollouts/" + ro.ID,
		bEnv + "/rollouts/" + uuid.NewString()} {
		if r := other.get(p); r.status != http.StatusNotFound || strings.Contains(string(r.body), "acme") {
			t.Errorf("globex GET %s: status %d, want 404:\n%s", p, r.status, r.body)
		}
	}
	if r := other.must(http.StatusOK, other.get("/ui/"), "globex overview"); strings.Contains(string(r.body), ro.ID) {
		t.Error("globex's overview links acme's rollout")
	}
	for _, action := range []string{"resume", "promote", "abort", "pause"} {
		for _, p := range []string{one + "/" + action, bEnv + "/rollouts/" + ro.ID + "/" + action} {
			if r := other.post(p, nil); r.status != http.StatusNotFound {
				t.Errorf("globex POST %s: status %d, want 404", p, r.status)
			}
		}
	}
	if r := other.post(env+"/rollouts", url.Values{"config_data": {`{"static": {}}`}, "reviewed": {"x"}}); r.status != http.StatusNotFound {
		t.Errorf("globex starting a rollout in acme's environment: status %d, want 404", r.status)
	}

	// CSRF: the action forms and the start refuse a post without the token, with a wrong one, or from
	// another origin.
	audited := h.count(`SELECT count(*) FROM audit_events WHERE action LIKE 'rollout_%'`)
	for _, p := range []string{one + "/resume", one + "/promote", one + "/abort", one + "/pause", env + "/rollouts"} {
		if r := c.post(p, url.Values{"csrf": {""}}); r.status != http.StatusForbidden {
			t.Errorf("POST %s without the CSRF token: status %d, want 403", p, r.status)
		}
		if r := c.post(p, url.Values{"csrf": {strings.Repeat("A", 43)}}); r.status != http.StatusForbidden {
			t.Errorf("POST %s with a wrong CSRF token: status %d, want 403", p, r.status)
		}
		if r := c.post(p, nil, "Origin", "https://evil.example"); r.status != http.StatusForbidden {
			t.Errorf("POST %s from another origin: status %d, want 403", p, r.status)
		}
	}
	if h.count(`SELECT count(*) FROM audit_events WHERE action LIKE 'rollout_%'`) != audited ||
		h.count(`SELECT count(*) FROM rollouts WHERE state = 'paused'`) != 1 {
		t.Fatal("a refused post changed a rollout")
	}
}
