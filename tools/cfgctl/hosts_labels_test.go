package main

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestHostsLabelCommands: -label at registration, one host's labels by PATCH (k=v sets, k- removes),
// and a bulk change that lists the hosts matching -selector and relabels them by id.
func TestHostsLabelCommands(t *testing.T) {
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"POST /api/v1/environments/e1/hosts":        func(w http.ResponseWriter) { w.WriteHeader(201); data(`{"id":"h9","hostname":"web-9"}`)(w) },
		"PATCH /api/v1/hosts/h1":                    data(`{"id":"h1","hostname":"web-1","labels":{"role":"web","tier":"gold"}}`),
		"GET /api/v1/environments/e1/hosts":         data(`[{"id":"h1","labels":{"role":"web"}},{"id":"h2","labels":{"role":"web"}}]`),
		"POST /api/v1/environments/e1/hosts/labels": data(`{"updated":2}`),
	})
	if _, err := runCLI(t, srv, "hosts", "register", "e1", "web-9", "-label", "role=web", "-label", "region=eu"); err != nil {
		t.Fatal(err)
	}
	reg := (*got)[0].Body["labels"].(map[string]any)
	if reg["role"] != "web" || reg["region"] != "eu" || len(reg) != 2 {
		t.Fatalf("registration labels = %v", reg)
	}

	out, err := runCLI(t, srv, "hosts", "label", "h1", "tier=gold", "ring-")
	if err != nil {
		t.Fatal(err)
	}
	patch := (*got)[1].Body["labels"].(map[string]any)
	if v, ok := patch["ring"]; !ok || v != nil || patch["tier"] != "gold" || len(patch) != 2 {
		t.Fatalf("PATCH labels = %v, want tier=gold and ring removed (null)", patch)
	}
	if !strings.Contains(out, "role=web,tier=gold") {
		t.Fatalf("output %q does not show the labels", out)
	}

	out, err = runCLI(t, srv, "hosts", "label", "-env", "e1", "-selector", "role=web,region in (eu)", "ring=canary")
	if err != nil {
		t.Fatal(err)
	}
	list, bulk := (*got)[2], (*got)[3]
	if q, _ := url.ParseQuery(list.Query); q.Get("selector") != "role=web,region in (eu)" {
		t.Fatalf("hosts listed with query %q", list.Query)
	}
	ids := bulk.Body["host_ids"].([]any)
	if !slices.Equal(ids, []any{"h1", "h2"}) || bulk.Body["labels"].(map[string]any)["ring"] != "canary" {
		t.Fatalf("bulk body = %v", bulk.Body)
	}
	if !strings.Contains(out, "2 host(s) relabeled") {
		t.Fatalf("output %q", out)
	}

	for _, bad := range [][]string{
		{"hosts", "label", "h1"},
		{"hosts", "label", "h1", "nochange"},
		{"hosts", "label", "-env", "e1", "k=v"},
	} {
		if _, err := runCLI(t, srv, bad...); err == nil {
			t.Errorf("%q was accepted", bad)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}

	if _, err := runCLI(t, srv, "drift", "e1", "-selector", "role=db"); err == nil || !strings.Contains(err.Error(), "no such object") {
		t.Fatalf("drift: %v", err)
	}
	if last := (*got)[len(*got)-1]; last.Path != "/api/v1/environments/e1/drift" || last.Query != "selector=role%3Ddb" {
		t.Fatalf("drift requested %s?%s", last.Path, last.Query)
	}
}
