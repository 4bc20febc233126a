package configapi_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestHostInventoryLabels: operators set inventory labels at registration (single and batch), by PATCH
// and in bulk; bad keys, values and selectors are 400 naming them; an over-limit or partly foreign bulk
// change writes nothing; listing and drift select hosts by ?selector=.
func TestHostInventoryLabels(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newTenant("acme")
	b := h.newTenant("globex")
	envPath := "/api/v1/environments/" + a.env.String()

	// Registration: one host, then a batch; the answer and the listing carry the labels.
	var canary hostJSON
	h.must(201, "POST", envPath+"/hosts", a.token,
		map[string]any{"hostname": "canary-1", "labels": map[string]string{"role": "web", "ring": "canary", "example.com/team": "edge"}}).data(t, &canary)
	if canary.Labels["ring"] != "canary" || len(canary.Labels) != 3 {
		t.Fatalf("registered labels = %v", canary.Labels)
	}
	entries := make([]map[string]any, 30)
	for i := range entries {
		region := []string{"eu", "us", "ap"}[i%3]
		entries[i] = map[string]any{"hostname": fmt.Sprintf("web-%02d", i), "labels": map[string]string{"role": "web", "region": region}}
		if i%10 == 0 {
			entries[i]["labels"] = map[string]string{"role": "db", "region": region}
		}
	}
	var batch []hostJSON
	h.must(201, "POST", envPath+"/hosts/batch", a.token, map[string]any{"hosts": entries}).data(t, &batch)
	if batch[0].Labels["role"] != "db" || batch[1].Labels["region"] != "us" {
		t.Fatalf("batch labels = %v, %v", batch[0].Labels, batch[1].Labels)
	}

	list := func(query string) (names []string, next string) {
		t.Helper()
		var page struct {
			Data      []hostJSON `json:"data"`
			NextAfter *uuid.UUID `json:"next_after"`
		}
		if err := json.Unmarshal(h.must(200, "GET", envPath+"/hosts?"+query, a.token, nil).body, &page); err != nil {
			t.Fatal(err)
		}
		for _, hj := range page.Data {
			names = append(names, hj.Hostname)
		}
		if page.NextAfter != nil {
			next = page.NextAfter.String()
		}
		slices.Sort(names)
		return names, next
	}
	sel := func(s string) string {
		return "selector=" + strings.NewReplacer(" ", "%20", "(", "%28", ")", "%29", "!", "%21", "=", "%3D").Replace(s)
	}

	if got, _ := list(sel("role=db")); !slices.Equal(got, []string{"web-00", "web-10", "web-20"}) {
		t.Fatalf("role=db lists %v", got)
	}
	if got, _ := list(sel("role=web,region in (eu),ring notin (canary)")); len(got) != 9 {
		t.Fatalf("web hosts in eu: %v, want 9", got)
	}
	if got, _ := list(sel("ring")); !slices.Equal(got, []string{"canary-1"}) {
		t.Fatalf("ring lists %v", got)
	}
	// !role: the tenant's first host, registered without labels.
	if got, _ := list(sel("!role")); !slices.Equal(got, []string{"acme-web-1"}) {
		t.Fatalf("!role lists %v", got)
	}
	// Pages over a selection: the cursor is the host id, no host is lost or repeated.
	var paged []string
	for next := ""; ; {
		q := sel("region=us") + "&limit=3"
		if next != "" {
			q += "&after=" + next
		}
		var got []string
		got, next = list(q)
		paged = append(paged, got...)
		if next == "" {
			break
		}
	}
	slices.Sort(paged)
	if len(paged) != 10 || len(slices.Compact(slices.Clone(paged))) != 10 {
		t.Fatalf("paged region=us: %v, want 10 distinct hosts", paged)
	}

	for _, bad := range []string{"a in (x", "role==web,,x", "-bad"} {
		r := h.do("GET", envPath+"/hosts?"+sel(bad), a.token, nil)
		if r.status != 400 || !strings.Contains(r.message(t), "selector") {
			t.Fatalf("selector %q: %d %s", bad, r.status, r.body)
		}
	}

	// PATCH: a merge patch (null removes); the result is the host.
	var patched hostJSON
	h.must(200, "PATCH", "/api/v1/hosts/"+canary.ID.String(), a.token,
		`{"labels": {"ring": null, "tier": "gold"}}`).data(t, &patched)
	if want := map[string]string{"role": "web", "example.com/team": "edge", "tier": "gold"}; !maps.Equal(patched.Labels, want) {
		t.Fatalf("patched labels = %v, want %v", patched.Labels, want)
	}
	var got hostJSON
	h.must(200, "GET", "/api/v1/hosts/"+canary.ID.String(), a.token, nil).data(t, &got)
	if !maps.Equal(got.Labels, patched.Labels) {
		t.Fatalf("read back %v, patched %v", got.Labels, patched.Labels)
	}
	refusals := []struct {
		method, path, body string
		status             int
		message            string
	}{
		{"PATCH", "/api/v1/hosts/" + canary.ID.String(), `{"labels": {"bad key": "x"}}`, 400, `labels: key "bad key" must be`},
		{"PATCH", "/api/v1/hosts/" + canary.ID.String(), `{"labels": {"k": "-x"}}`, 400, `labels: "k": value "-x" must be`},
		{"PATCH", "/api/v1/hosts/" + canary.ID.String(), `{"labels": {}}`, 400, "at least one label"},
		{"PATCH", "/api/v1/hosts/" + canary.ID.String(), `{"lables": {"k": "v"}}`, 400, "lables"},
		{"PATCH", "/api/v1/hosts/" + b.host.String(), `{"labels": {"k": "v"}}`, 404, "not found"},
		{"POST", envPath + "/hosts", `{"hostname": "x", "labels": {"k": "a b"}}`, 400, `labels "k": value "a b" must be`},
		{"POST", envPath + "/hosts/batch", `{"hosts": [{"hostname": "y"}, {"hostname": "x", "labels": {"": "v"}}]}`, 400, `hosts[1].labels: key "" must be`},
		{"POST", envPath + "/hosts/labels", fmt.Sprintf(`{"host_ids": [%q, %q], "labels": {"k": "v"}}`, canary.ID, b.host), 404, "host_ids[1]"},
		{"POST", envPath + "/hosts/labels", `{"host_ids": [], "labels": {"k": "v"}}`, 400, "host_ids"},
	}
	for _, rf := range refusals {
		r := h.do(rf.method, rf.path, a.token, rf.body)
		if r.status != rf.status || !strings.Contains(r.message(t), rf.message) {
			t.Fatalf("%s %s %s: %d %s, want %d naming %q", rf.method, rf.path, rf.body, r.status, r.body, rf.status, rf.message)
		}
	}
	if n := h.count(`SELECT count(*) FROM hosts WHERE inventory_labels ? 'k'`); n != 0 {
		t.Fatalf("%d hosts were labeled by refused requests", n)
	}
	// A patch that would take a host over the limit writes nothing, on any host of the batch.
	many := map[string]string{}
	for i := range 64 {
		many[fmt.Sprintf("k%02d", i)] = "v"
	}
	r := h.do("POST", envPath+"/hosts/labels", a.token, map[string]any{"host_ids": []uuid.UUID{batch[1].ID, canary.ID}, "labels": many})
	if r.status != 400 || !strings.Contains(r.message(t), "at most 64") {
		t.Fatalf("over-limit bulk patch: %d %s", r.status, r.body)
	}
	if n := h.count(`SELECT count(*) FROM hosts WHERE inventory_labels ? 'k00'`); n != 0 {
		t.Fatalf("the refused over-limit patch labeled %d hosts", n)
	}

	// Bulk: every host of the list, one audit event.
	var bulk struct {
		Updated int `json:"updated"`
	}
	h.must(200, "POST", envPath+"/hosts/labels", a.token,
		map[string]any{"host_ids": []uuid.UUID{batch[1].ID, batch[2].ID}, "labels": map[string]any{"ring": "canary", "region": nil}}).data(t, &bulk)
	if bulk.Updated != 2 {
		t.Fatalf("bulk updated %d hosts, want 2", bulk.Updated)
	}
	if got, _ := list(sel("ring=canary,!region")); !slices.Equal(got, []string{"web-01", "web-02"}) {
		t.Fatalf("after the bulk change ring=canary,!region lists %v", got)
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'host_labels_set'`); n != 2 {
		t.Fatalf("%d host_labels_set audit events, want 2 (one PATCH, one bulk)", n)
	}

	// Drift checks only the selected hosts.
	var d struct {
		CheckedHosts int `json:"checked_hosts"`
	}
	h.must(200, "GET", envPath+"/drift?"+sel("role=db"), a.token, nil).data(t, &d)
	if d.CheckedHosts != 3 {
		t.Fatalf("drift checked %d hosts for role=db, want 3", d.CheckedHosts)
	}
	h.must(200, "GET", envPath+"/drift", a.token, nil).data(t, &d)
	if d.CheckedHosts != 32 {
		t.Fatalf("drift checked %d hosts, want 32", d.CheckedHosts)
	}
	if r := h.do("GET", envPath+"/drift?"+sel("a in ("), a.token, nil); r.status != 400 {
		t.Fatalf("drift with a bad selector: %d %s", r.status, r.body)
	}
}
