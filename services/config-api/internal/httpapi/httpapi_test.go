package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/fault"
)

func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	r := mux.NewRouter()
	New(Services{}, zap.NewNop(), Options{}).Register(r)
	registered := map[string]bool{}
	err := r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := route.GetPathTemplate()
		if err != nil {
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil {
			return nil // the subrouter's prefix route and the per-path 405 fallbacks
		}
		for _, m := range methods {
			key := strings.ToLower(m) + " " + tpl
			registered[key] = true
			if _, ok := doc.Paths[tpl][strings.ToLower(m)]; !ok {
				t.Errorf("route %s %s is missing from openapi.json", m, tpl)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(registered) < 30 {
		t.Fatalf("only %d routes registered", len(registered))
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			if !registered[method+" "+path] {
				t.Errorf("openapi.json documents %s %s, which is not routed", method, path)
			}
		}
	}
}

func TestUnknownRouteAndMethodAnswerJSON(t *testing.T) {
	r := mux.NewRouter()
	New(Services{}, zap.NewNop(), Options{}).Register(r)
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/api/v1/nothing-here", http.StatusNotFound, "not_found"},
		{http.MethodPatch, "/api/v1/clients", http.StatusMethodNotAllowed, "method_not_allowed"},
	} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, rec.Code, tc.status)
		}
		var body errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != tc.code {
			t.Errorf("%s %s: body %s, want code %s", tc.method, tc.path, rec.Body, tc.code)
		}
	}
}

func TestIfMatch(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   configs.Precondition
		bad    bool
	}{
		{header: "", want: configs.Precondition{}},
		{header: "*", want: configs.Precondition{Any: true}},
		{header: `"7"`, want: configs.Precondition{Versions: []int64{7}}},
		{header: `"7", "9"`, want: configs.Precondition{Versions: []int64{7, 9}}},
		{header: `W/"7"`, bad: true},
		{header: `7`, bad: true},
		{header: `"x"`, bad: true},
	} {
		req := httptest.NewRequest(http.MethodPut, "/", nil)
		if tc.header != "" {
			req.Header.Set("If-Match", tc.header)
		}
		got, err := ifMatch(req)
		if tc.bad {
			if !fault.Is(err, fault.PreconditionFailed) {
				t.Errorf("If-Match %q: err %v, want a precondition failure", tc.header, err)
			}
			continue
		}
		if err != nil || got.Any != tc.want.Any || len(got.Versions) != len(tc.want.Versions) {
			t.Errorf("If-Match %q: got %+v, %v; want %+v", tc.header, got, err, tc.want)
			continue
		}
		for i := range got.Versions {
			if got.Versions[i] != tc.want.Versions[i] {
				t.Errorf("If-Match %q: got %+v, want %+v", tc.header, got, tc.want)
			}
		}
	}
}

func TestDecode(t *testing.T) {
	type envelope struct {
		ConfigData json.RawMessage `json:"config_data"`
	}
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"ok", `{"config_data": {"anything": {"nested": true}}}`, 0},
		{"unknown field", `{"config_data": {}, "extra": 1}`, http.StatusBadRequest},
		{"malformed", `{"config_data": `, http.StatusBadRequest},
		{"trailing data", `{"config_data": {}} {}`, http.StatusBadRequest},
		{"empty", ``, http.StatusBadRequest},
		{"wrong type", `[]`, http.StatusBadRequest},
		{"too large", `{"config_data": "` + strings.Repeat("x", MaxBodyBytes) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPut, "/", strings.NewReader(tc.body))
			req.ContentLength = -1 // as with chunked uploads: the cap must hold while reading
			var dst envelope
			err := decode(httptest.NewRecorder(), req, &dst)
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				return
			}
			if status, _ := statusOf(err); status != tc.status {
				t.Fatalf("status %d (%v), want %d", status, err, tc.status)
			}
		})
	}
}

func TestStatusOfHidesInternalErrors(t *testing.T) {
	status, code := statusOf(errors.New("ERROR: relation \"x\" does not exist (SQLSTATE 42P01)"))
	if status != http.StatusInternalServerError || code != "internal" {
		t.Fatalf("got %d %s", status, code)
	}
	rec := httptest.NewRecorder()
	a := New(Services{}, zap.NewNop(), Options{})
	a.writeError(rec, httptest.NewRequest(http.MethodGet, "/", nil), errors.New("SQLSTATE 42P01"))
	if strings.Contains(rec.Body.String(), "SQLSTATE") || !strings.Contains(rec.Body.String(), `"internal error"`) {
		t.Fatalf("body leaks the cause: %s", rec.Body)
	}
}
