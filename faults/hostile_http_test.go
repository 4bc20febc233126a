package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// route is one method and path template of config-api, as its OpenAPI document lists it.
type route struct{ method, path string }

func (r route) String() string { return r.method + " " + r.path }

var pathParam = regexp.MustCompile(`\{[A-Za-z]+\}`)

// params lists the path parameters of the route, in order.
func (r route) params() []string {
	var out []string
	for _, m := range pathParam.FindAllString(r.path, -1) {
		out = append(out, strings.Trim(m, "{}"))
	}
	return out
}

// fill substitutes the route's parameters: values[name], escaped.
func (r route) fill(values map[string]string) string {
	return pathParam.ReplaceAllStringFunc(r.path, func(m string) string {
		return url.PathEscape(values[strings.Trim(m, "{}")])
	})
}

// openAPIRoutes reads every route from the running config-api's /api/v1/openapi.json, so a route added
// later is covered without touching this suite.
func openAPIRoutes(t testing.TB, api *apiClient) []route {
	t.Helper()
	r := api.as("").send(http.MethodGet, "/api/v1/openapi.json", nil)
	if r.status != http.StatusOK {
		t.Fatalf("openapi.json: %s", r)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	var out []route
	for path, ops := range doc.Paths {
		for m := range ops {
			switch m {
			case "get", "put", "post", "delete", "patch":
				out = append(out, route{strings.ToUpper(m), path})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	if len(out) < 20 {
		t.Fatalf("openapi.json lists only %d routes", len(out))
	}
	return out
}

// validBody is a well-formed body for a route (nil for routes without one).
func validBody(r route) any {
	switch {
	case r.method == http.MethodPut:
		return `{"config_data":{"interval_seconds":5,"timeout_seconds":1}}`
	case r.method == http.MethodPatch:
		return `{"labels":{"intruder":"yes"}}`
	case r.method != http.MethodPost:
		return nil
	case strings.HasSuffix(r.path, "/rollouts"):
		return `{"config_data":{"interval_seconds":5,"timeout_seconds":1}}`
	case strings.HasSuffix(r.path, "/rollback"):
		return `{"revision":1}`
	case strings.HasSuffix(r.path, "/rotate"):
		return `{"secret":{"password":"rotated"}}`
	case strings.HasSuffix(r.path, "/credentials"):
		return `{"name":"intruder","secret":{"password":"p"}}`
	case strings.HasSuffix(r.path, "/hosts"):
		return `{"hostname":"intruder"}`
	case strings.HasSuffix(r.path, "/tokens"):
		return `{"name":"intruder"}`
	default:
		return `{"name":"intruder"}`
	}
}

// tenantObjects are the ids a tenant owns, by path parameter name.
func tenantObjects(t testing.TB, api, ops *apiClient, ten tenant, prefix string) map[string]string {
	t.Helper()
	h := api.registerHosts(ten.EnvID, prefix, 1)[0]
	ops.putEnv(ten.EnvID, "healthcheck", `{"interval_seconds":30,"timeout_seconds":3}`)
	ops.putHost(h.ID, "healthcheck", `{"interval_seconds":10}`)
	var cred struct{ ID string }
	ops.must(http.MethodPost, "/api/v1/clients/"+ten.ClientID+"/credentials", map[string]any{"name": prefix + "-db", "secret": map[string]string{"password": "pw"}}, &cred)
	return map[string]string{"clientID": ten.ClientID, "envID": ten.EnvID, "hostID": h.ID, "credID": cred.ID,
		"tokenID": ten.TokenID, "configType": "healthcheck",
		// No rollout runs here (one would refuse this suite's PUTs with 409): an id of none, so an
		// authenticated request is a 404 and an unauthenticated one must still be refused with 401.
		"rolloutID": uuid.NewString()}
}

// TestHostileHTTPInput sends malformed, wrong-typed, oversized and otherwise hostile requests to every
// config-api route (taken from its OpenAPI document), then has one client's token try every route on
// another client's objects.
//
// Setup: every service in-process; two tenants, each with an environment, a host, an environment
// config, a host override, a credential and a client-scoped token. State is compared before and after
// with a digest of every table.
//
// Proves: each hostile request gets a 4xx with the error envelope (never a 2xx, a 5xx or a hang) and
// changes nothing; each cross-tenant request gets 404, writes a cross_tenant_access audit event naming
// the owner, and changes nothing else; the API keeps serving.
func TestHostileHTTPInput(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startBackend(nil, nil)
	api := s.startAPI()
	a, b := api.newTenant("hostile-a"), api.newTenant("hostile-b")
	opsA, opsB := api.as(a.Token), api.as(b.Token)
	mine := tenantObjects(t, api, opsA, a, "a")
	theirs := tenantObjects(t, api, opsB, b, "b")
	routes := openAPIRoutes(t, api)
	s.settle()

	// expectRefused checks one hostile request: a 4xx (in allowed, if given) with the error envelope.
	expectRefused := func(t *testing.T, what string, r response, allowed ...int) {
		t.Helper()
		switch {
		case r.err != nil:
			t.Errorf("%s: no answer: %v", what, r.err)
		case r.status < 400 || r.status >= 500:
			t.Errorf("%s: %s, want a 4xx", what, r)
		case len(allowed) > 0 && !slices.Contains(allowed, r.status):
			t.Errorf("%s: %s, want one of %v", what, r, allowed)
		case r.errorCode() == "":
			t.Errorf("%s: %s is not an error envelope", what, r)
		}
	}

	before := s.snapshot()
	t.Run("path parameters", func(t *testing.T) {
		const traversal = "../../../etc/passwd"
		bad := []string{"not-a-uuid", "' OR 1=1 --", strings.Repeat("9", 5000), uuid.NewString(), "\x00", traversal, "%2e%2e"}
		for _, rt := range routes {
			for _, p := range rt.params() {
				for _, v := range bad {
					values := maps.Clone(mine)
					values[p] = v
					r := opsA.send(rt.method, rt.fill(values), validBody(rt))
					what := fmt.Sprintf("%s with %s=%.20q", rt, p, v)
					if v == traversal && r.status == http.StatusNotFound {
						continue // the cleaned path left /api/v1: the router's plain 404, no route was reached
					}
					expectRefused(t, what, r)
				}
			}
		}
	})

	t.Run("bodies", func(t *testing.T) {
		bodies := []payload{
			{"truncated", []byte(`{"name":"x`)},
			{"not JSON", []byte(`name=x`)},
			{"array", []byte(`[1,2]`)},
			{"string", []byte(`"x"`)},
			{"number", []byte(`42`)},
			{"null", []byte(`null`)},
			{"two values", []byte(`{} {}`)},
			{"unknown field", []byte(`{"zzz":1}`)},
			{"nested 12k deep", []byte(strings.Repeat(`{"a":`, 12000) + `1` + strings.Repeat(`}`, 12000))},
			{"oversized (1 MiB + 1)", []byte(`{"config_data":{"paths":["` + strings.Repeat("a", 1<<20) + `"]}}`)},
		}
		// Every envelope field of every route, with values of the wrong JSON type for it.
		wrong := map[string][]string{
			"name": {`7`, `[1]`, `{"k":1}`, `true`, `1e400`}, "hostname": {`7`, `[1]`, `{"k":1}`, `false`},
			"agent_id": {`7`, `[1]`, `{"k":1}`, `true`}, "client_id": {`7`, `[1]`, `"not-a-uuid"`, `true`},
			"environment_id": {`7`, `[1]`, `"not-a-uuid"`, `true`}, "config_data": {`"x"`, `7`, `[1]`, `true`},
			"secret": {`"x"`, `7`, `[1]`, `{"password":7}`, `true`}, "revision": {`"x"`, `[1]`, `{"k":1}`, `true`, `1e400`, `1.5`},
		}
		for f, values := range wrong {
			for _, v := range values {
				bodies = append(bodies, payload{"wrong-typed " + f + "=" + v, []byte(`{"` + f + `":` + v + `}`)})
			}
		}
		nul := []payload{
			{"NUL in a name", []byte(`{"name":"a\u0000b","hostname":"a\u0000b","secret":{"password":"p"}}`)},
			{"NUL in config data", []byte(`{"config_data":{"interval_seconds":5,"timeout_seconds":1,"x\u0000":1}}`)},
			{"empty name", []byte(`{"name":"","hostname":""}`)},
			{"invalid agent id", []byte(`{"hostname":"ok-name","agent_id":"no spaces allowed!"}`)},
			{"config of another type", []byte(`{"config_data":{"paths":["/etc"]}}`)},
			{"config with a wrong-typed field", []byte(`{"config_data":{"interval_seconds":"5"}}`)},
			{"null config", []byte(`{"config_data":null}`)},
			{"negative revision", []byte(`{"revision":-1}`)},
		}
		for _, rt := range routes {
			if rt.method != http.MethodPost && rt.method != http.MethodPut {
				continue
			}
			for _, p := range append(bodies, nul...) {
				r := opsA.send(rt.method, rt.fill(mine), p.data)
				expectRefused(t, fmt.Sprintf("%s body %s", rt, p.name), r)
			}
		}
	})

	t.Run("query, headers and authentication", func(t *testing.T) {
		env := "/api/v1/environments/" + mine["envID"] + "/agent-configs/healthcheck"
		host := "/api/v1/hosts/" + mine["hostID"] + "/agent-configs/healthcheck"
		for _, path := range []string{env, host} {
			for _, q := range []string{"?dry_run=maybe", "?dry_run=1%00"} {
				expectRefused(t, "PUT "+path+q, opsA.send(http.MethodPut, path+q, validBody(route{method: http.MethodPut})), http.StatusBadRequest)
			}
			for _, tag := range []string{`W/"1"`, `"abc"`, `1`} {
				r := opsA.send(http.MethodPut, path, validBody(route{method: http.MethodPut}), "If-Match", tag)
				expectRefused(t, "PUT "+path+" If-Match "+tag, r, http.StatusBadRequest, http.StatusPreconditionFailed)
			}
		}
		for _, rt := range routes {
			for _, q := range []string{"?limit=-1", "?limit=abc", "?explain=2", "?after=%27%20OR%201%3D1"} {
				if rt.method != http.MethodGet {
					continue
				}
				if r := opsA.send(rt.method, rt.fill(mine)+q, nil); r.err != nil || r.status >= 500 {
					t.Errorf("%s%s: %s", rt, q, r)
				}
			}
			if rt.path == "/api/v1/openapi.json" {
				continue
			}
			for _, auth := range []string{"", "Bearer ", "Bearer not-a-token", "Basic YWRtaW46YWRtaW4=", "Bearer " + strings.Repeat("x", 8000)} {
				c := api.as("")
				r := c.send(rt.method, rt.fill(mine), validBody(rt), "Authorization", auth)
				expectRefused(t, fmt.Sprintf("%s with Authorization %.20q", rt, auth), r, http.StatusUnauthorized)
			}
		}
	})
	if after := s.snapshot(); after.diff(before) != "" {
		t.Errorf("hostile requests changed stored data: %s", after.diff(before))
	}

	t.Run("cross-tenant", func(t *testing.T) {
		before := s.snapshot("audit_events")
		for _, rt := range routes {
			if len(rt.params()) == 0 {
				continue
			}
			// A route a client token may not use at all (admin only) answers 403 whatever the object:
			// that reveals nothing about B's objects, and it is not an access to them.
			nobody := map[string]string{"configType": "healthcheck"}
			for _, p := range rt.params() {
				if p != "configType" {
					nobody[p] = uuid.NewString()
				}
			}
			if r := opsA.send(rt.method, rt.fill(nobody), validBody(rt)); r.status == http.StatusForbidden {
				expectRefused(t, "client A: "+rt.String()+" on client B's objects", opsA.send(rt.method, rt.fill(theirs), validBody(rt)), http.StatusForbidden)
				continue
			}
			audits := s.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access' AND client_id = $1`, b.ClientID)
			r := opsA.send(rt.method, rt.fill(theirs), validBody(rt))
			expectRefused(t, "client A: "+rt.String()+" on client B's objects", r, http.StatusNotFound)
			if n := s.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access' AND client_id = $1`, b.ClientID); n <= audits {
				t.Errorf("client A: %s on client B's objects wrote no cross_tenant_access audit event", rt)
			}
		}
		if r := opsA.send(http.MethodGet, "/api/v1/clients", nil); strings.Contains(string(r.body), b.ClientID) {
			t.Errorf("client A's client list shows client B: %s", r)
		}
		if after := s.snapshot("audit_events"); after.diff(before) != "" {
			t.Errorf("cross-tenant requests changed stored data: %s", after.diff(before))
		}
	})

	// The API still serves both tenants.
	opsA.putEnv(mine["envID"], "healthcheck", `{"interval_seconds":31,"timeout_seconds":3}`)
	opsB.must(http.MethodGet, "/api/v1/hosts/"+theirs["hostID"]+"/agent-configs/healthcheck", nil, nil)
	var n int
	if err := s.db.QueryRow(context.Background(), `SELECT count(*) FROM clients`).Scan(&n); err != nil || n != 2 {
		t.Errorf("clients: %d, %v", n, err)
	}
}
