package httpserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/health"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func get(t *testing.T, h http.Handler, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", path, rec.Body.String(), err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: content type %q", path, ct)
	}
	return rec.Code, body
}

func TestHealthzAlwaysOK(t *testing.T) {
	log, _ := testinfra.Logger(t)
	s := New(Config{}, log, []health.Check{{Name: "db", Func: func(context.Context) error { return errors.New("down") }}})
	code, body := get(t, s.Handler(), "/healthz")
	if code != http.StatusOK || body["status"] != "ok" {
		t.Fatalf("healthz = %d %v", code, body)
	}
}

func TestReadyzReflectsChecks(t *testing.T) {
	log, logs := testinfra.Logger(t)
	var dbUp atomic.Bool
	checks := []health.Check{
		{Name: "postgres", Func: func(context.Context) error {
			if !dbUp.Load() {
				return errors.New("connection refused")
			}
			return nil
		}},
		{Name: "nats", Func: func(context.Context) error { return nil }},
	}
	s := New(Config{ReadinessTimeout: time.Second}, log, checks)

	code, body := get(t, s.Handler(), "/readyz")
	if code != http.StatusServiceUnavailable || body["status"] != "unavailable" {
		t.Fatalf("readyz with a failing check = %d %v", code, body)
	}
	list := body["checks"].([]any)
	first := list[0].(map[string]any)
	if first["name"] != "postgres" || first["ok"] != false || first["error"] != "connection refused" {
		t.Fatalf("failing check reported as %v", first)
	}
	if second := list[1].(map[string]any); second["name"] != "nats" || second["ok"] != true {
		t.Fatalf("passing check reported as %v", second)
	}
	if logs.FilterMessage("readiness check failed").Len() != 1 {
		t.Fatal("failed check not logged")
	}

	dbUp.Store(true)
	code, body = get(t, s.Handler(), "/readyz")
	if code != http.StatusOK || body["status"] != "ok" {
		t.Fatalf("readyz with passing checks = %d %v", code, body)
	}
}

func TestReadyzWithoutChecks(t *testing.T) {
	log, _ := testinfra.Logger(t)
	code, body := get(t, New(Config{}, log, nil).Handler(), "/readyz")
	if code != http.StatusOK {
		t.Fatalf("readyz = %d %v", code, body)
	}
	if list, ok := body["checks"].([]any); !ok || len(list) != 0 {
		t.Fatalf("checks = %#v, want an empty list", body["checks"])
	}
}

func TestPanicsBecome500(t *testing.T) {
	log, logs := testinfra.Logger(t)
	s := New(Config{}, log, nil)
	s.Router().HandleFunc("/boom", func(http.ResponseWriter, *http.Request) { panic("bug") })
	code, body := get(t, s.Handler(), "/boom")
	if code != http.StatusInternalServerError || body["error"] == nil {
		t.Fatalf("panic answered %d %v", code, body)
	}
	if logs.FilterMessage("http handler panicked").Len() != 1 {
		t.Fatal("panic not logged")
	}
}

func TestConfigDefaultsHardenTheServer(t *testing.T) {
	s := New(Config{}, zap.NewNop(), nil)
	if s.srv.ReadHeaderTimeout != 5*time.Second || s.srv.ReadTimeout == 0 || s.srv.WriteTimeout == 0 ||
		s.srv.IdleTimeout == 0 || s.srv.MaxHeaderBytes != 64<<10 {
		t.Fatalf("server not hardened: %+v", s.srv)
	}
}

// TestGracefulShutdown: an in-flight request completes, readiness turns 503 while draining, and new
// connections are refused afterwards.
func TestGracefulShutdown(t *testing.T) {
	log, _ := testinfra.Logger(t)
	s := New(Config{Addr: "127.0.0.1:0", ShutdownTimeout: 10 * time.Second}, log, nil)
	entered := make(chan struct{})
	release := make(chan struct{})
	s.Router().HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		// Draining is visible to readiness while this request is still in flight.
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		w.Header().Set("X-Readyz-During-Drain", http.StatusText(rec.Code))
		_, _ = io.WriteString(w, "done")
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	type result struct {
		body, readyz string
		err          error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := client.Get(base + "/slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{body: string(b), readyz: resp.Header.Get("X-Readyz-During-Drain"), err: err}
	}()
	<-entered

	shutdownDone := make(chan error, 1)
	go func() { shutdownDone <- s.Shutdown(context.Background()) }()
	// Shutdown must wait for the request; let it finish once draining has begun.
	for !s.draining.Load() {
		time.Sleep(time.Millisecond)
	}
	close(release)

	r := <-got
	if r.err != nil || r.body != "done" {
		t.Fatalf("in-flight request: %q, %v", r.body, r.err)
	}
	if r.readyz != http.StatusText(http.StatusServiceUnavailable) {
		t.Fatalf("readyz while draining = %s, want 503", r.readyz)
	}
	if err := <-shutdownDone; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := client.Get(base + "/healthz"); err == nil {
		t.Fatal("server still accepts connections after shutdown")
	}
}

func TestShutdownTimeoutIsBounded(t *testing.T) {
	log, _ := testinfra.Logger(t)
	s := New(Config{Addr: "127.0.0.1:0", ShutdownTimeout: 50 * time.Millisecond}, log, nil)
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	s.Router().HandleFunc("/stuck", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := client.Get("http://" + s.Addr() + "/stuck")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	if err := s.Shutdown(context.Background()); err == nil {
		t.Fatal("shutdown with a stuck request should report the timeout")
	}
	<-done
}

func TestStartFailsOnBusyPort(t *testing.T) {
	log, _ := testinfra.Logger(t)
	a := New(Config{Addr: "127.0.0.1:0"}, log, nil)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(context.Background())
	b := New(Config{Addr: a.Addr()}, log, nil)
	if err := b.Start(); err == nil {
		b.Shutdown(context.Background())
		t.Fatal("second server bound the same port")
	}
}

func TestModule(t *testing.T) {
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	log, _ := testinfra.Logger(t)
	var srv *Server
	app := fxtest.New(t,
		fx.Supply(log),
		fx.Provide(health.AsCheck(func() health.Check {
			return health.Check{Name: "always", Func: func(context.Context) error { return nil }}
		})),
		Module,
		fx.Invoke(func(r *mux.Router) {
			r.HandleFunc("/api/v1/ping", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "pong") })
		}),
		fx.Populate(&srv),
	)
	app.RequireStart()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/api/v1/ping": 200, "/nope": 404} {
		resp, err := client.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		if path == "/readyz" {
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if checks := body["checks"].([]any); len(checks) != 1 {
				t.Errorf("readyz ran %d checks, want the 1 from the readiness group", len(checks))
			}
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s = %d, want %d", path, resp.StatusCode, want)
		}
	}
	app.RequireStop()
}
