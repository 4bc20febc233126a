package configapi_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// driftReport is the API's drift report of an environment: the drifted and the pending hosts.
type driftReport struct {
	Hosts []struct {
		HostID       uuid.UUID `json:"host_id"`
		Hostname     string    `json:"hostname"`
		ExpectedHash string    `json:"expected_hash"`
	} `json:"hosts"`
	Pending []struct {
		HostID   uuid.UUID `json:"host_id"`
		Hostname string    `json:"hostname"`
	} `json:"pending"`
}

func (h *harness) driftReport(env uuid.UUID) driftReport {
	h.t.Helper()
	var r driftReport
	h.must(http.StatusOK, "GET", "/api/v1/environments/"+env.String()+"/drift", h.admin, nil).data(h.t, &r)
	return r
}

// expectedHash is the config hash the API's drift report expects host to report (the host must be
// drifted when asked: it is listed only then).
func expectedHash(t *testing.T, h *harness, env, host uuid.UUID) string {
	t.Helper()
	for _, d := range h.driftReport(env).Hosts {
		if d.HostID == host {
			return d.ExpectedHash
		}
	}
	t.Fatalf("host %s is not in the drift report", host)
	return ""
}

var hostRowPattern = regexp.MustCompile(`(?s)<tr>\s*<td><a href="/ui/hosts/([0-9a-f-]+)">([^<]+)</a>(.*?)</tr>`)

// hostRows reads a hosts page: each row's hostname and hash-agreement verdict.
func hostRows(t *testing.T, body string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range hostRowPattern.FindAllStringSubmatch(body, -1) {
		verdict := "none"
		for _, v := range []string{"in sync", "pending", "drifted"} {
			if strings.Contains(m[3], `">`+v+`</span>`) {
				verdict = v
			}
		}
		out[m[2]] = verdict
	}
	return out
}

// The console has one drift rule, the API's: the overview's drifted count, the hosts page's drifted
// filter and its hash-agreement column name exactly the hosts GET /drift lists, including where a rule of
// versions alone would disagree (a pending ack, a hash that differs at the right versions, a failed
// apply of the expected version).
func TestConsoleDriftIsTheAPIsDrift(t *testing.T) {
	h, tn := newTenantHarness(t, "acme") // acme-web-1: never seen, so drifted
	env := tn.env.String()
	h.must(http.StatusOK, "PUT", "/api/v1/environments/"+env+"/agent-configs/labels", h.admin, `{"config_data": {"static": {"team": "a"}}}`)
	labels := int64(h.count(`SELECT version FROM environment_configs WHERE environment_id = $1 AND config_type = 'labels'`, tn.env))
	register := func(name string) uuid.UUID {
		var o idObj
		h.must(http.StatusCreated, "POST", "/api/v1/environments/"+env+"/hosts", h.admin, map[string]any{"hostname": name}).data(t, &o)
		return o.ID
	}
	inSync, pending, hashOnly, failedApply := register("in-sync"), register("pending"), register("hash-only"), register("failed-apply")
	hash := expectedHash(t, h, tn.env, inSync)
	report := func(id uuid.UUID, hash string, version int64) {
		h.exec(`UPDATE hosts SET last_heartbeat_at = now(), config_hash = $2, config_versions = jsonb_build_object('labels', $3::bigint) WHERE id = $1`, id, hash, version)
	}
	report(inSync, hash, labels)
	// pending: it acked applying the expected version; its heartbeat still reports the one before.
	report(pending, "previous-hash", labels-1)
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, applied_at) VALUES ($1, 'labels', $2, 'applied', now())`, pending, labels)
	// hash-only: the right versions, another hash.
	report(hashOnly, "0000000000000000000000000000000000000000000000000000000000000000", labels)
	// failed-apply: the right versions and hash, but its agent refused the expected version.
	report(failedApply, hash, labels)
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at) VALUES ($1, 'labels', $2, 'failed', 'denied by policy', now())`, failedApply, labels)

	api := h.driftReport(tn.env)
	var apiDrifted, apiPending []string
	for _, d := range api.Hosts {
		apiDrifted = append(apiDrifted, d.Hostname)
	}
	for _, d := range api.Pending {
		apiPending = append(apiPending, d.Hostname)
	}
	slices.Sort(apiDrifted)
	if strings.Join(apiDrifted, ",") != "acme-web-1,failed-apply,hash-only" || strings.Join(apiPending, ",") != "pending" {
		t.Fatalf("the API's drift report: drifted %v, pending %v", apiDrifted, apiPending)
	}

	c := h.signIn(tn.token)
	// Before the first drift pass the drifted filter lists nothing and says why.
	body := string(c.must(http.StatusOK, c.get("/ui/hosts?env="+env+"&status=drifted"), "drifted hosts").body)
	if rows := hostRows(t, body); len(rows) != 0 || !strings.Contains(body, "has not been computed yet") {
		t.Fatalf("drifted filter before the first drift pass: %v\n%s", rows, body)
	}
	h.refreshFleetStats()

	// The hash column of the unfiltered list: the API's verdict per host.
	all := hostRows(t, string(c.must(http.StatusOK, c.get("/ui/hosts?env="+env), "hosts").body))
	want := map[string]string{"acme-web-1": "drifted", "failed-apply": "drifted", "hash-only": "drifted", "pending": "pending", "in-sync": "in sync"}
	for name, verdict := range want {
		if all[name] != verdict {
			t.Errorf("hash column of %s: %q, want %q (all: %v)", name, all[name], verdict, all)
		}
	}
	// The drifted filter: exactly the API's drifted hosts, with the time of the drift pass.
	body = string(c.must(http.StatusOK, c.get("/ui/hosts?env="+env+"&status=drifted"), "drifted hosts").body)
	var filtered []string
	for name := range hostRows(t, body) {
		filtered = append(filtered, name)
	}
	slices.Sort(filtered)
	if !slices.Equal(filtered, apiDrifted) {
		t.Fatalf("drifted filter %v, the API's drift report %v", filtered, apiDrifted)
	}
	if !strings.Contains(body, "drift report of") {
		t.Errorf("the drifted filter does not say when the drift report was computed: %s", body)
	}
	// The overview's counts: 3 drifted; stale are those behind or never reported (acme-web-1 only:
	// failed-apply and hash-only report the expected version).
	frag := string(c.must(http.StatusOK, c.get("/ui/fragments/overview/"+env), "summary").body)
	if !strings.Contains(frag, `<dd data-count="drifted">3</dd>`) || !strings.Contains(frag, `<dd data-count="stale">1</dd>`) {
		t.Fatalf("overview counts: %s", frag)
	}
	// The drift pass replaces what it stored: once the pending host reports, and the hash-only host's
	// hash is right, they leave (or stay out of) the list.
	report(pending, hash, labels)
	report(hashOnly, hash, labels)
	h.refreshFleetStats()
	filtered = filtered[:0]
	for name := range hostRows(t, string(c.get("/ui/hosts?env="+env+"&status=drifted").body)) {
		filtered = append(filtered, name)
	}
	slices.Sort(filtered)
	if strings.Join(filtered, ",") != "acme-web-1,failed-apply" {
		t.Fatalf("drifted filter after the hosts caught up: %v", filtered)
	}
	// A revoked host leaves the list at once (the drift rows are kept until the next pass).
	h.must(http.StatusOK, "DELETE", "/api/v1/hosts/"+failedApply.String(), h.admin, nil)
	if rows := hostRows(t, string(c.get("/ui/hosts?env="+env+"&status=drifted").body)); len(rows) != 1 {
		t.Fatalf("drifted filter after a revocation: %v", rows)
	}
}

// The hosts page filters by inventory label with the API's selector syntax (libs/protocol/selector):
// the same hosts as GET .../hosts?selector=, paged, in a URL that keeps the filter.
func TestConsoleHostsFilterByInventoryLabels(t *testing.T) {
	h, tn := newTenantHarness(t, "acme")
	env := tn.env.String()
	regs := make([]map[string]any, 0, 12)
	for i := range 12 {
		labels := map[string]string{"role": []string{"web", "db"}[i%2], "region": []string{"eu", "us", "ap"}[i%3]}
		if i%4 == 0 {
			labels["canary"] = ""
		}
		regs = append(regs, map[string]any{"hostname": "h" + string(rune('a'+i)), "labels": labels})
	}
	h.must(http.StatusCreated, "POST", "/api/v1/environments/"+env+"/hosts/batch", h.admin, map[string]any{"hosts": regs})
	c := h.signIn(tn.token)

	for _, sel := range []string{"role=web", "role!=web", "region in (eu,us)", "region notin (eu)", "canary", "!canary",
		"role=db,region in (ap,us),!canary", "role==web, canary"} {
		var api []struct {
			Hostname string `json:"hostname"`
		}
		h.must(http.StatusOK, "GET", "/api/v1/environments/"+env+"/hosts?limit=100&selector="+url.QueryEscape(sel), h.admin, nil).data(t, &api)
		var want []string
		for _, d := range api {
			want = append(want, d.Hostname)
		}
		slices.Sort(want)
		// Paged by 2 in the console, following its next links.
		var got []string
		next := "/ui/hosts?env=" + env + "&limit=2&selector=" + url.QueryEscape(sel)
		for pages := 0; next != "" && pages < 20; pages++ {
			body := string(c.must(http.StatusOK, c.get(next), "hosts "+sel).body)
			for _, m := range hostRowPattern.FindAllStringSubmatch(body, -1) {
				got = append(got, m[2])
			}
			next = ""
			if m := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(body); m != nil {
				next = html.UnescapeString(m[1]) // as a browser reads the attribute
				u, err := url.Parse(next)
				if err != nil || u.Query().Get("selector") == "" {
					t.Fatalf("the next page's URL %q lost the selector", next)
				}
			}
		}
		if !slices.Equal(got, want) || len(want) == 0 {
			t.Errorf("selector %q: console %v, API %v", sel, got, want)
		}
	}
	// The filter shows in the form; a malformed selector is a 400 that names the problem, as text.
	body := string(c.must(http.StatusOK, c.get("/ui/hosts?env="+env+"&selector="+url.QueryEscape("role=web")), "filtered").body)
	if !strings.Contains(body, `name="selector" type="search" value="role=web"`) {
		t.Errorf("the selector is not kept in the form: %s", body)
	}
	r := c.must(http.StatusBadRequest, c.get("/ui/hosts?env="+env+"&selector="+url.QueryEscape(`role=<script>alert(1)</script>`)), "bad selector")
	if !strings.Contains(string(r.body), "label selector") || strings.Contains(string(r.body), "<script>alert") {
		t.Fatalf("bad selector: %s", r.body)
	}
}

// The audit log page filters by actor, object and time, and shows a client only its own events.
func TestConsoleAuditLogFilters(t *testing.T) {
	h := newHarness(t)
	a, b := h.newTenant("alpha"), h.newTenant("bravo")
	var ah, bh idObj
	h.must(http.StatusCreated, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", a.token, map[string]any{"hostname": "alpha-extra"}).data(t, &ah)
	h.must(http.StatusCreated, "POST", "/api/v1/environments/"+b.env.String()+"/hosts", b.token, map[string]any{"hostname": "bravo-extra"}).data(t, &bh)
	c := h.signIn(h.admin)
	page := func(c *consoleClient, q url.Values) string {
		t.Helper()
		return string(c.must(http.StatusOK, c.get("/ui/audit?"+q.Encode()), "audit "+q.Encode()).body)
	}
	const none = "No events match."
	if all := page(c, nil); !strings.Contains(all, "<td>alpha-ops</td>") || !strings.Contains(all, "<td>bravo-ops</td>") {
		t.Fatalf("the admin's audit log lacks an actor: %s", all)
	}
	byActor := page(c, url.Values{"actor": {"alpha-ops"}})
	if !strings.Contains(byActor, "<td>alpha-ops</td>") || strings.Contains(byActor, "<td>bravo-ops</td>") || strings.Contains(byActor, "<td>test-admin</td>") ||
		!strings.Contains(byActor, `name="actor" value="alpha-ops"`) {
		t.Fatalf("actor filter: %s", byActor)
	}
	object := "host:" + bh.ID.String()
	byObject := page(c, url.Values{"object": {object}})
	if !strings.Contains(byObject, "<td>host_registered</td>") || !strings.Contains(byObject, "<td>bravo-ops</td>") ||
		strings.Contains(byObject, "alpha-ops") || strings.Count(byObject, "<td><code>"+object+"</code></td>") != 1 {
		t.Fatalf("object filter: %s", byObject)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if body := page(c, url.Values{"since": {future}}); !strings.Contains(body, none) {
		t.Fatalf("since in the future still lists events: %s", body)
	}
	if body := page(c, url.Values{"until": {past}}); !strings.Contains(body, none) {
		t.Fatalf("until an hour ago still lists events: %s", body)
	}
	if body := page(c, url.Values{"since": {past}, "until": {future}, "actor": {"bravo-ops"}}); !strings.Contains(body, "<td><code>"+object+"</code></td>") {
		t.Fatalf("a window around now loses bravo's event: %s", body)
	}
	c.must(http.StatusBadRequest, c.get("/ui/audit?since=yesterday"), "malformed time")
	// A client sees only its own events, whatever it filters by.
	own := h.signIn(a.token)
	if body := page(own, url.Values{"object": {object}}); !strings.Contains(body, none) || strings.Contains(body, "bravo-ops") {
		t.Fatalf("alpha reads bravo's events through the filter: %s", body)
	}
	if body := page(own, url.Values{"object": {"host:" + ah.ID.String()}}); !strings.Contains(body, "<td>alpha-ops</td>") {
		t.Fatalf("alpha does not see its own event: %s", body)
	}
}
