package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// runWithIO runs cfgctl against srv with the given standard input and returns stdout and stderr.
func runWithIO(t *testing.T, srv *httptest.Server, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := runIO(context.Background(), append([]string{"-api", srv.URL, "-token", "tok"}, args...), strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), err
}

// batchAPI is a fake config-api for host registration that answers each entry with its own creds, and
// fails the request number failAt (1-based; 0 never) with a 409 naming hosts[3].
type batchAPI struct {
	mu       sync.Mutex
	requests [][]registration // entries of each batch request, in order
	failAt   int
	issued   int
}

func (b *batchAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Hosts []registration `json:"hosts"`
	}
	if r.Method != http.MethodPost || r.URL.Path != "/api/v1/environments/env-1/hosts/batch" {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":"not_found","message":"no such object"}}`)
		return
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	b.requests = append(b.requests, req.Hosts)
	n := len(b.requests)
	b.mu.Unlock()
	if n == b.failAt {
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"error":{"code":"conflict","message":"hosts[3].agent_id: a host with agent_id \"%s\" already exists"}}`, req.Hosts[3].AgentID)
		return
	}
	out := make([]map[string]string, len(req.Hosts))
	for i, h := range req.Hosts {
		b.mu.Lock()
		b.issued++
		id := b.issued
		b.mu.Unlock()
		agent := h.AgentID
		if agent == "" {
			agent = fmt.Sprintf("gen-%d", id)
		}
		out[i] = map[string]string{"id": fmt.Sprintf("h-%d", id), "agent_id": agent, "hostname": h.Hostname,
			"nats_credentials": "SEED-SECRET-" + agent}
	}
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"data": out})
}

func (b *batchAPI) sizes() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s []int
	for _, r := range b.requests {
		s = append(s, len(r))
	}
	return s
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

const hostCreds = "-----BEGIN NATS USER JWT-----\neyJ0eXAi\n------END NATS USER JWT------\nSUAxxSEEDsecret\n"

func registerAnswer(creds string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusCreated)
		b, _ := json.Marshal(map[string]any{"data": map[string]string{"id": "h-1", "agent_id": "web-1-agent", "hostname": "web-1",
			"environment_id": "env-1", "nats_credentials": creds}})
		w.Write(b)
	}
}

func TestHostsRegisterWritesCredsFile(t *testing.T) {
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"POST /api/v1/environments/env-1/hosts": registerAnswer(hostCreds),
	})
	credsPath := filepath.Join(t.TempDir(), "web-1.creds")
	// Flags after the positional arguments, as operators type them.
	out, errOut, err := runWithIO(t, srv, "", "hosts", "register", "env-1", "web-1", "-agent-id", "web-1-agent", "-creds-out", credsPath)
	if err != nil {
		t.Fatalf("register: %v (stderr %s)", err, errOut)
	}
	if len(*got) != 1 || (*got)[0].Body["hostname"] != "web-1" || (*got)[0].Body["agent_id"] != "web-1-agent" {
		t.Fatalf("requests: %+v", *got)
	}
	b, err := os.ReadFile(credsPath)
	if err != nil || string(b) != hostCreds {
		t.Fatalf("creds file: %q, %v", b, err)
	}
	if m := fileMode(t, credsPath); m != 0o600 {
		t.Errorf("creds file mode %o, want 600", m)
	}
	for _, s := range []string{out, errOut} {
		if strings.Contains(s, "SEED") || strings.Contains(s, "eyJ0eXAi") {
			t.Errorf("credentials printed:\n%s", s)
		}
	}
	if !strings.Contains(out, "h-1") || !strings.Contains(out, "web-1-agent") || !strings.Contains(out, credsPath) {
		t.Errorf("output lacks the host:\n%s", out)
	}

	// An existing file is not overwritten, and nothing is registered.
	_, _, err = runWithIO(t, srv, "", "hosts", "register", "env-1", "web-2", "-creds-out", credsPath)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "-force") {
		t.Errorf("overwrite without -force: exit %d, err %v", exitCode(err), err)
	}
	if len(*got) != 1 {
		t.Errorf("a host was registered although its creds could not be saved: %d requests", len(*got))
	}
	// -force replaces it, and narrows a wider mode.
	os.Chmod(credsPath, 0o644)
	os.WriteFile(credsPath, []byte("old content that is longer than the new credentials file, to see truncation"+strings.Repeat("x", 200)), 0o644)
	if _, _, err := runWithIO(t, srv, "", "hosts", "register", "env-1", "web-3", "-creds-out", credsPath, "-force"); err != nil {
		t.Fatalf("register -force: %v", err)
	}
	if b, _ := os.ReadFile(credsPath); string(b) != hostCreds {
		t.Errorf("forced creds file: %q", b)
	}
	if m := fileMode(t, credsPath); m != 0o600 {
		t.Errorf("forced creds file mode %o, want 600", m)
	}
}

func TestHostsRegisterWithoutCredsOut(t *testing.T) {
	srv, _ := fakeAPI(t, map[string]func(http.ResponseWriter){
		"POST /api/v1/environments/env-1/hosts": registerAnswer(hostCreds),
	})
	out, errOut, err := runWithIO(t, srv, "", "hosts", "register", "env-1", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out+errOut, "SEED") {
		t.Errorf("credentials printed in table mode:\nstdout %s\nstderr %s", out, errOut)
	}
	if !strings.Contains(errOut, "shown only once and were not saved") {
		t.Errorf("no warning on stderr: %q", errOut)
	}
	if !strings.Contains(out, "not saved") {
		t.Errorf("table does not say the creds were not saved:\n%s", out)
	}
	// -o json is the raw answer, credentials included (documented), still with the warning.
	out, errOut, err = runWithIO(t, srv, "", "-o", "json", "hosts", "register", "env-1", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	var ans registeredHost
	if err := json.Unmarshal([]byte(out), &ans); err != nil || ans.NATSCredentials != hostCreds {
		t.Errorf("-o json answer %q (err %v) lacks the credentials", out, err)
	}
	if strings.Contains(errOut, "SEED") || !strings.Contains(errOut, "warning") {
		t.Errorf("stderr with -o json: %q", errOut)
	}
}

func TestHostsRegisterBatchChunksFromStdin(t *testing.T) {
	api := &batchAPI{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	var in strings.Builder
	in.WriteString("# fleet of 2,500\n\n")
	for i := 1; i <= 2500; i++ {
		if i%2 == 0 {
			fmt.Fprintf(&in, "  web-%d   agent-%d  \n", i, i)
		} else {
			fmt.Fprintf(&in, "web-%d\n", i)
		}
		if i%700 == 0 {
			in.WriteString("\n# a comment in the middle\n")
		}
	}
	dir := filepath.Join(t.TempDir(), "creds", "prod")
	out, errOut, err := runWithIO(t, srv, in.String(), "hosts", "register-batch", "env-1", "-f", "-", "-creds-dir", dir)
	if err != nil {
		t.Fatalf("register-batch: %v\n%s", err, errOut)
	}
	if s := api.sizes(); fmt.Sprint(s) != "[1000 1000 500]" {
		t.Fatalf("batch sizes %v, want [1000 1000 500]", s)
	}
	if first, last := api.requests[1][0], api.requests[2][499]; first.Hostname != "web-1001" || last != (registration{"web-2500", "agent-2500"}) {
		t.Errorf("entries out of order: chunk 2 starts %+v, chunk 3 ends %+v", first, last)
	}
	if api.requests[0][0].AgentID != "" {
		t.Errorf("a line without agent_id sent one: %+v", api.requests[0][0])
	}
	if m := fileMode(t, dir); m != 0o700 {
		t.Errorf("creds dir mode %o, want 700", m)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.creds"))
	if len(files) != 2500 {
		t.Fatalf("%d creds files, want 2500", len(files))
	}
	for _, f := range []string{filepath.Join(dir, "agent-2500.creds"), filepath.Join(dir, "gen-1.creds")} {
		b, err := os.ReadFile(f)
		if err != nil || !strings.HasPrefix(string(b), "SEED-SECRET-") {
			t.Errorf("%s: %q, %v", f, b, err)
		}
		if m := fileMode(t, f); m != 0o600 {
			t.Errorf("%s mode %o, want 600", f, m)
		}
	}
	if strings.Contains(out+errOut, "SEED-SECRET") {
		t.Error("credentials printed")
	}
	if n := strings.Count(errOut, "host(s) registered"); n != 3 || !strings.Contains(errOut, "chunk 3/3: 500 host(s) registered (2500/2500)") {
		t.Errorf("progress lines on stderr:\n%s", errOut)
	}
	if lines := strings.Count(out, "\n"); lines != 2501 || !strings.Contains(out, "agent-2500") {
		t.Errorf("table has %d lines, want header + 2500", lines)
	}

	// The same agent ids again: their creds files are in the way, so nothing is sent.
	before := len(api.sizes())
	_, _, err = runWithIO(t, srv, "web-x agent-2\n", "hosts", "register-batch", "env-1", "-f", "-", "-creds-dir", dir)
	if exitCode(err) != exitUsage || len(api.sizes()) != before {
		t.Errorf("existing creds file: exit %d (%v), %d requests sent", exitCode(err), err, len(api.sizes())-before)
	}
}

func TestHostsRegisterBatchStopsAtFailedChunk(t *testing.T) {
	api := &batchAPI{failAt: 2}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "hosts.txt")
	var in strings.Builder
	in.WriteString("# header\n")
	for i := 1; i <= 2500; i++ {
		fmt.Fprintf(&in, "web-%d agent-%d\n", i, i)
	}
	os.WriteFile(file, []byte(in.String()), 0o600)
	out, errOut, err := runWithIO(t, srv, "", "hosts", "register-batch", "env-1", "-f", file)
	if exitCode(err) != exitConflict {
		t.Fatalf("exit %d (%v), want %d", exitCode(err), err, exitConflict)
	}
	// hosts[3] of chunk 2 is entry 1004, on line 1005 (after the header comment).
	for _, want := range []string{"chunk 2 of 3", "lines 1002-2001", "1000 host(s) of earlier chunks are registered", "hosts[3] is line 1005"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if s := api.sizes(); fmt.Sprint(s) != "[1000 1000]" {
		t.Errorf("requests %v: the third chunk was sent after a failure", s)
	}
	if lines := strings.Count(out, "\n"); lines != 1001 {
		t.Errorf("table of the registered hosts has %d lines, want 1001", lines)
	}
	if !strings.Contains(errOut, "warning") || strings.Contains(out+errOut, "SEED-SECRET") {
		t.Errorf("stderr %q", errOut)
	}
}

func TestHostsFileErrors(t *testing.T) {
	api := &batchAPI{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	for _, c := range []struct{ in, want string }{
		{"web-1\nweb-2 a b\n", "line 2"},
		{"web-1 a\nweb-2 a\n", `agent_id "a" is already on line 1`},
		{"web-1\n\nweb-1\n", `hostname "web-1" is already on line 1`},
		{"web-1 bad/id\n", "agent_id must be"},
		{"# nothing\n\n", "holds no hosts"},
	} {
		_, _, err := runWithIO(t, srv, c.in, "hosts", "register-batch", "env-1", "-f", "-")
		if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%q: exit %d, err %v, want usage error with %q", c.in, exitCode(err), err, c.want)
		}
	}
	if n := len(api.sizes()); n != 0 {
		t.Errorf("%d requests sent for broken files", n)
	}
}

const credMeta = `{"id":"c-1","client_id":"cl-1","environment_id":"env-1","name":"mysql-main","fields":["password","username"],"key_version":"k2","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-02T00:00:00Z"}`

func TestCredentialsCommands(t *testing.T) {
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"GET /api/v1/clients/cl-1/credentials":             data(`[` + credMeta + `]`),
		"POST /api/v1/clients/cl-1/credentials":            data(credMeta),
		"POST /api/v1/clients/cl-1/credentials/c-1/rotate": data(credMeta),
		"DELETE /api/v1/clients/cl-1/credentials/c-1": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusNoContent)
		},
	})
	secretFile := filepath.Join(t.TempDir(), "mysql.yaml")
	os.WriteFile(secretFile, []byte("username: monitor\npassword: 0123-hunter2\n"), 0o600)
	noSecret := func(label, s string) {
		t.Helper()
		if strings.Contains(s, "hunter2") || strings.Contains(s, "s3cr3t") {
			t.Errorf("%s shows a secret value:\n%s", label, s)
		}
	}

	out, errOut, err := runWithIO(t, srv, "", "credentials", "list", "cl-1")
	if err != nil || !strings.Contains(out, "mysql-main") || !strings.Contains(out, "password, username") {
		t.Errorf("list: %v\n%s", err, out)
	}

	out, errOut, err = runWithIO(t, srv, "", "credentials", "create", "cl-1", "mysql-main", "-env", "env-1", "-f", secretFile)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	r := (*got)[len(*got)-1]
	secret, _ := r.Body["secret"].(map[string]any)
	if r.Body["name"] != "mysql-main" || r.Body["environment_id"] != "env-1" || secret["username"] != "monitor" || secret["password"] != "0123-hunter2" {
		t.Errorf("create body: %+v", r.Body)
	}
	if !strings.Contains(out, "c-1") || !strings.Contains(out, "k2") {
		t.Errorf("create output:\n%s", out)
	}
	noSecret("create stdout", out)
	noSecret("create stderr", errOut)

	// JSON from standard input; without -env no environment_id is sent.
	out, errOut, err = runWithIO(t, srv, `{"password": "s3cr3t"}`, "credentials", "create", "cl-1", "web-basic", "-f", "-")
	if err != nil {
		t.Fatalf("create from stdin: %v", err)
	}
	r = (*got)[len(*got)-1]
	secret, _ = r.Body["secret"].(map[string]any)
	if _, has := r.Body["environment_id"]; has || secret["password"] != "s3cr3t" || len(secret) != 1 {
		t.Errorf("create from stdin body: %+v", r.Body)
	}
	noSecret("create stdin stdout", out)
	noSecret("create stdin stderr", errOut)

	out, errOut, err = runWithIO(t, srv, "password: hunter2-new\n", "credentials", "rotate", "cl-1", "c-1", "-f", "-")
	r = (*got)[len(*got)-1]
	if secret, _ = r.Body["secret"].(map[string]any); err != nil || r.Path != "/api/v1/clients/cl-1/credentials/c-1/rotate" || secret["password"] != "hunter2-new" {
		t.Errorf("rotate: %v, request %+v", err, r)
	}
	noSecret("rotate", out+errOut)
	// Without -f the API re-encrypts under the newest key: no body at all.
	if _, _, err := runWithIO(t, srv, "", "credentials", "rotate", "cl-1", "c-1"); err != nil || (*got)[len(*got)-1].Body != nil {
		t.Errorf("rotate without secret: %v, body %+v", err, (*got)[len(*got)-1].Body)
	}
	// -o json is the API's metadata, which holds no secret either.
	out, _, err = runWithIO(t, srv, "", "-o", "json", "credentials", "rotate", "cl-1", "c-1", "-f", secretFile)
	if err != nil || !strings.Contains(out, `"key_version": "k2"`) {
		t.Errorf("rotate -o json: %v\n%s", err, out)
	}
	noSecret("rotate json", out)

	out, _, err = runWithIO(t, srv, "", "credentials", "delete", "cl-1", "c-1", "-force")
	if r = (*got)[len(*got)-1]; err != nil || r.Method != http.MethodDelete || r.Query != "force=true" || !strings.Contains(out, "deleted") {
		t.Errorf("delete -force: %v, request %+v, out %q", err, r, out)
	}
	_, _, err = runWithIO(t, srv, "", "credentials", "delete", "cl-1", "c-1")
	if r = (*got)[len(*got)-1]; err != nil || r.Query != "" {
		t.Errorf("delete: %v, query %q", err, r.Query)
	}
}

func TestCredentialDeleteInUse(t *testing.T) {
	srv, _ := fakeAPI(t, map[string]func(http.ResponseWriter){
		"DELETE /api/v1/clients/cl-1/credentials/c-2": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"credential_in_use","message":"2 configs reference the credential: environment env-1, host h-9"}}`)
		},
	})
	_, _, err := runWithIO(t, srv, "", "credentials", "delete", "cl-1", "c-2")
	if exitCode(err) != exitConflict {
		t.Fatalf("in-use delete: exit %d (%v), want %d", exitCode(err), err, exitConflict)
	}
	if !strings.Contains(err.Error(), "2 configs reference the credential: environment env-1, host h-9") || !strings.Contains(err.Error(), "-force") {
		t.Errorf("error does not carry the API's message and the hint: %v", err)
	}
}

func TestSecretFileErrorsNeverQuoteValues(t *testing.T) {
	srv, got := fakeAPI(t, nil)
	for _, in := range []string{
		`{"password": ["hunter2"]}`,
		`{"password": 12345678}`,
		"password:\n  - hunter2\n",
		"password: hunter2\npassword: hunter2\n",
		"password: [hunter2\n",
		"hunter2",
		"{}",
	} {
		_, errOut, err := runWithIO(t, srv, in, "credentials", "create", "cl-1", "x", "-f", "-")
		if exitCode(err) != exitUsage {
			t.Errorf("%q: exit %d (%v), want usage", in, exitCode(err), err)
		}
		if msg := fmt.Sprint(err) + errOut; strings.Contains(msg, "hunter2") || strings.Contains(msg, "12345678") {
			t.Errorf("%q: error quotes the secret: %s", in, msg)
		}
	}
	if _, _, err := runWithIO(t, srv, "", "credentials", "create", "cl-1", "x"); exitCode(err) != exitUsage {
		t.Errorf("create without -f: exit %d", exitCode(err))
	}
	if len(*got) != 0 {
		t.Errorf("%d requests sent for broken secret files", len(*got))
	}
}

// -target sets allowed targets at create and replaces them at rotate (alone or with a new secret);
// -clear-targets sends an empty list; the metadata shows them, or "any".
func TestCredentialTargetFlags(t *testing.T) {
	const bound = `{"id":"c-1","client_id":"cl-1","name":"pg","fields":["password"],"allowed_targets":["*.prod.example.com:*","db.internal:5432"],"key_version":"k1"}`
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"GET /api/v1/clients/cl-1/credentials":             data(`[` + bound + `,` + credMeta + `]`),
		"POST /api/v1/clients/cl-1/credentials":            data(bound),
		"POST /api/v1/clients/cl-1/credentials/c-1/rotate": data(bound),
	})
	targets := func(body map[string]any) []string {
		list, ok := body["allowed_targets"].([]any)
		if !ok {
			return nil
		}
		out := []string{}
		for _, v := range list {
			out = append(out, v.(string))
		}
		return out
	}
	out, _, err := runWithIO(t, srv, `{"password": "s3cr3t"}`, "credentials", "create", "cl-1", "pg", "-f", "-",
		"-target", "db.internal:5432", "-target", "*.prod.example.com:*")
	r := (*got)[len(*got)-1]
	if err != nil || strings.Join(targets(r.Body), " ") != "db.internal:5432 *.prod.example.com:*" {
		t.Fatalf("create -target: %v, body %+v", err, r.Body)
	}
	if !strings.Contains(out, "allowed_targets:  *.prod.example.com:*, db.internal:5432") {
		t.Errorf("create output:\n%s", out)
	}

	// Targets alone: no secret in the body.
	if _, _, err := runWithIO(t, srv, "", "credentials", "rotate", "cl-1", "c-1", "-target", "db2.internal:5432"); err != nil {
		t.Fatal(err)
	}
	r = (*got)[len(*got)-1]
	if _, has := r.Body["secret"]; has || strings.Join(targets(r.Body), " ") != "db2.internal:5432" {
		t.Errorf("rotate -target body %+v", r.Body)
	}
	if _, _, err := runWithIO(t, srv, "", "credentials", "rotate", "cl-1", "c-1", "-clear-targets"); err != nil {
		t.Fatal(err)
	}
	if r = (*got)[len(*got)-1]; targets(r.Body) == nil || len(targets(r.Body)) != 0 {
		t.Errorf("rotate -clear-targets body %+v", r.Body)
	}
	n := len(*got)
	if _, _, err := runWithIO(t, srv, "", "credentials", "rotate", "cl-1", "c-1", "-clear-targets", "-target", "x:1"); exitCode(err) != exitUsage || len(*got) != n {
		t.Errorf("-clear-targets with -target: exit %d (%v)", exitCode(err), err)
	}
	out, _, err = runWithIO(t, srv, "", "credentials", "list", "cl-1")
	if err != nil || !strings.Contains(out, "TARGETS") || !strings.Contains(out, "*.prod.example.com:*, db.internal:5432") || !strings.Contains(out, "any") {
		t.Errorf("list: %v\n%s", err, out)
	}
}

func TestHostsRevokeChunksAndReissueCreds(t *testing.T) {
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"POST /api/v1/environments/env-1/hosts/revoke": func(w http.ResponseWriter) { io.WriteString(w, `{"data":{"revoked":1000}}`) },
		"POST /api/v1/hosts/h-1/credentials":           data(`{"id":"h-1","agent_id":"web-1-agent","nats_credentials":` + strconv.Quote(hostCreds) + `}`),
	})
	ids := make([]string, 1500)
	for i := range ids {
		ids[i] = fmt.Sprintf("h-%d", i)
	}
	out, _, err := runWithIO(t, srv, "", append([]string{"hosts", "revoke", "env-1"}, ids...)...)
	if err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if len(*got) != 2 || len((*got)[0].Body["host_ids"].([]any)) != 1000 || len((*got)[1].Body["host_ids"].([]any)) != 500 {
		t.Fatalf("requests: %d", len(*got))
	}
	if !strings.Contains(out, "revoked 2000 hosts") {
		t.Fatalf("output %q", out)
	}

	credsPath := filepath.Join(t.TempDir(), "web-1.creds")
	if _, _, err := runWithIO(t, srv, "", "hosts", "reissue-creds", "h-1"); err == nil {
		t.Fatal("reissue-creds without -creds-out accepted")
	}
	out, errOut, err := runWithIO(t, srv, "", "hosts", "reissue-creds", "h-1", "-creds-out", credsPath)
	if err != nil {
		t.Fatalf("reissue-creds: %v (%s)", err, errOut)
	}
	if b, err := os.ReadFile(credsPath); err != nil || string(b) != hostCreds || fileMode(t, credsPath) != 0o600 {
		t.Fatalf("creds file: %q %v", b, err)
	}
	if strings.Contains(out+errOut, "SEED") {
		t.Fatal("credentials printed")
	}
}
