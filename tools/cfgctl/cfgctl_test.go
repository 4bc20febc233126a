package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type recorded struct {
	Method, Path, Query, IfMatch, Auth string
	Body                               map[string]any
}

// fakeAPI answers like config-api for the paths cfgctl uses and records each request.
func fakeAPI(t *testing.T, answers map[string]func(w http.ResponseWriter)) (*httptest.Server, *[]recorded) {
	t.Helper()
	var got []recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, IfMatch: r.Header.Get("If-Match"), Auth: r.Header.Get("Authorization")}
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			if err := json.Unmarshal(b, &rec.Body); err != nil {
				t.Errorf("request body is not JSON: %s", b)
			}
		}
		got = append(got, rec)
		if h, ok := answers[r.Method+" "+r.URL.Path]; ok {
			h(w)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":"not_found","message":"no such object"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func data(body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) { io.WriteString(w, `{"data":`+body+`}`) }
}

func runCLI(t *testing.T, srv *httptest.Server, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"-api", srv.URL, "-token", "tok"}, args...), &out, &errOut)
	return out.String(), err
}

func TestPutYAMLWithIfMatch(t *testing.T) {
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"PUT /api/v1/environments/env-1/agent-configs/watch_files": data(`{"config_type":"watch_files","config_data":{"paths":["/etc","/opt"]},"version":4}`),
	})
	file := filepath.Join(t.TempDir(), "wf.yaml")
	if err := os.WriteFile(file, []byte("paths:\n  - /etc\n  - /opt\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, srv, "env", "put", "env-1", "watch_files", "-f", file, "-if-match", "3")
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	r := (*got)[0]
	if r.IfMatch != `"3"` || r.Auth != "Bearer tok" {
		t.Errorf("headers: If-Match %q, Authorization %q", r.IfMatch, r.Auth)
	}
	cd, _ := r.Body["config_data"].(map[string]any)
	if paths, _ := cd["paths"].([]any); len(paths) != 2 || paths[1] != "/opt" {
		t.Errorf("YAML not sent as config_data JSON: %#v", r.Body)
	}
	if !strings.Contains(out, "version: 4") {
		t.Errorf("output lacks the version:\n%s", out)
	}
}

func TestExitCodes(t *testing.T) {
	srv, _ := fakeAPI(t, map[string]func(http.ResponseWriter){
		"PUT /api/v1/hosts/h1/agent-configs/labels": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusPreconditionFailed)
			io.WriteString(w, `{"error":{"code":"precondition_failed","message":"version changed"}}`)
		},
		"GET /api/v1/environments/e1/drift": data(`[{"host_id":"h1","hostname":"web-1","reasons":["config_hash differs"]}]`),
		"GET /api/v1/environments/e2/drift": data(`[]`),
	})
	file := filepath.Join(t.TempDir(), "l.json")
	os.WriteFile(file, []byte(`{"static":{"a":"b"}}`), 0o600)
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"host", "put", "h1", "labels", "-f", file, "-if-match", "1"}, exitConflict},
		{[]string{"host", "get", "missing", "labels"}, exitNotFound},
		{[]string{"drift", "e1"}, exitDrift},
		{[]string{"frobnicate"}, exitUsage},
		{[]string{"rollback", "env", "e1", "labels", "x"}, exitUsage},
	}
	for _, c := range cases {
		_, err := runCLI(t, srv, c.args...)
		if got := exitCode(err); err == nil || got != c.code {
			t.Errorf("%v: exit %d (err %v), want %d", c.args, got, err, c.code)
		}
	}
	out, err := runCLI(t, srv, "drift", "e2")
	if err != nil || !strings.Contains(out, "no drift") {
		t.Errorf("empty drift: err %v, out %q", err, out)
	}
}

func TestEffectiveConfigTable(t *testing.T) {
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"GET /api/v1/hosts/h1/agent-configs/watch_files": data(`{"config_type":"watch_files","config_data":{"paths":["/etc"]},"version":3,"source":"merged"}`),
	})
	out, err := runCLI(t, srv, "host", "get", "h1", "watch_files", "-explain")
	if err != nil {
		t.Fatal(err)
	}
	if (*got)[0].Query != "explain=true" {
		t.Errorf("explain not asked: %q", (*got)[0].Query)
	}
	if !strings.Contains(out, "source:  merged") || !strings.Contains(out, `"/etc"`) {
		t.Errorf("table output:\n%s", out)
	}
}

func TestLineDiff(t *testing.T) {
	got := lineDiff([]string{"a", "b", "c"}, []string{"a", "x", "c", "d"})
	want := []string{"  a", "- b", "+ x", "  c", "+ d"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lineDiff = %q, want %q", got, want)
	}
}

func TestSettingsFromEnvFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "devstack.env")
	os.WriteFile(file, []byte("# made by make run\nCONFIGSYNC_API_URL=http://127.0.0.1:9/\nexport CONFIGSYNC_TOKEN=\"cs_abc\"\n"), 0o600)
	t.Setenv("CONFIGSYNC_API_URL", "")
	t.Setenv("CONFIGSYNC_TOKEN", "")
	t.Setenv("CONFIGSYNC_CONFIG", file)
	s, err := loadSettings("", "")
	if err != nil || s.API != "http://127.0.0.1:9/" || s.Token != "cs_abc" {
		t.Fatalf("settings %+v, err %v", s, err)
	}
}

// hosts follows next_after until the last page, so an environment larger than one page is listed whole.
func TestHostsListsEveryPage(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/api/v1/environments/e1/hosts" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		queries = append(queries, r.URL.RawQuery)
		switch r.URL.Query().Get("after") {
		case "":
			io.WriteString(w, `{"data":[{"id":"h1","hostname":"web-1"},{"id":"h2","hostname":"web-2"}],"next_after":"h2"}`)
		case "h2":
			io.WriteString(w, `{"data":[{"id":"h3","hostname":"web-3"}]}`)
		default:
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	t.Cleanup(srv.Close)

	out, err := runCLI(t, srv, "hosts", "e1")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		if !strings.Contains(out, name) {
			t.Errorf("%s missing from the table:\n%s", name, out)
		}
	}
	if len(queries) != 2 || queries[0] != "" || queries[1] != "after=h2" {
		t.Errorf("requests %q, want the first page then after=h2", queries)
	}

	queries = nil
	out, err = runCLI(t, srv, "-o", "json", "hosts", "e1")
	if err != nil {
		t.Fatal(err)
	}
	var hosts []map[string]any
	if err := json.Unmarshal([]byte(out), &hosts); err != nil || len(hosts) != 3 {
		t.Fatalf("-o json: %d hosts (%v):\n%s", len(hosts), err, out)
	}
}
