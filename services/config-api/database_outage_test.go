package configapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/configsync/configsync/libs/testinfra"
)

// While PostgreSQL refuses connections, reads and writes answer 503 "unavailable" with Retry-After and
// a body that says nothing about SQL; once it is back, the same routes work again.
func TestDatabaseOutageAnswers503(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	hostPath := "/api/v1/hosts/" + a.host.String()
	hostsPath := "/api/v1/environments/" + a.env.String() + "/hosts"
	h.must(http.StatusOK, "GET", hostPath, a.token, nil)

	restore := testinfra.RefuseConnections(t, h.pool)
	requests := []struct {
		method, path, token string
		body                any
	}{
		{"GET", hostPath, a.token, nil},
		{"GET", hostsPath, h.admin, nil},
		{"POST", hostsPath, a.token, `{"hostname": "db-1"}`},
		{"PUT", envConfigPath(a.env, "labels"), a.token, `{"config_data": {"static": {"team": "ops"}}}`},
	}
	for _, rq := range requests {
		r := h.do(rq.method, rq.path, rq.token, rq.body)
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("%s %s with the database down: status %d, want 503: %s", rq.method, rq.path, r.status, r.body)
		}
		if code := r.errCode(t); code != "unavailable" {
			t.Errorf("%s %s: code %q, want unavailable", rq.method, rq.path, code)
		}
		if msg := r.message(t); msg != "the database is unavailable; retry later" {
			t.Errorf("%s %s: message %q", rq.method, rq.path, msg)
		}
		if ra := r.header.Get("Retry-After"); ra != "1" {
			t.Errorf("%s %s: Retry-After %q, want 1", rq.method, rq.path, ra)
		}
		// Only the envelope, and nothing of the cause: no SQL, SQLSTATE, server message or database name.
		var env map[string]map[string]string
		if err := json.Unmarshal(r.body, &env); err != nil || len(env) != 1 || len(env["error"]) != 2 {
			t.Errorf("%s %s: body %s is more than the error envelope", rq.method, rq.path, r.body)
		}
		for _, leak := range []string{"SQLSTATE", "SELECT", "INSERT", "UPDATE", "FATAL", "55000", "57P01",
			"configsync_test_", "failed to connect", "127.0.0.1", "user="} {
			if strings.Contains(string(r.body), leak) {
				t.Errorf("%s %s: body leaks %q: %s", rq.method, rq.path, leak, r.body)
			}
		}
	}
	// The operator sees the cause, at Warn: an outage, not a bug.
	warned := h.logs.FilterMessage("request failed: database unavailable").FilterLevelExact(zapcore.WarnLevel).All()
	if len(warned) != len(requests) {
		t.Errorf("%d outage warnings, want %d", len(warned), len(requests))
	}
	for _, e := range warned {
		if cause, _ := e.ContextMap()["error"].(string); cause == "" {
			t.Errorf("outage logged without its cause: %+v", e.ContextMap())
		}
	}
	if n := h.logs.FilterMessage("request failed").Len(); n != 0 {
		t.Errorf("the outage was logged %d times as an internal failure", n)
	}

	restore()
	// A connection that died in the outage may still sit in the pool; a client retrying on 503, as
	// Retry-After invites, gets through.
	testinfra.EventuallyNoError(t, 15*time.Second, func() error {
		r := h.do("GET", hostPath, a.token, nil)
		switch r.status {
		case http.StatusOK:
			return nil
		case http.StatusServiceUnavailable:
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		t.Fatalf("GET %s after the outage: %d %s", hostPath, r.status, r.body)
		return nil
	}, "GET %s to answer 200 after the outage", hostPath)
	h.must(http.StatusOK, "GET", hostPath, a.token, nil)
	h.must(http.StatusOK, "GET", hostsPath, h.admin, nil)
	h.must(http.StatusCreated, "POST", hostsPath, a.token, `{"hostname": "db-1"}`)
	h.must(http.StatusOK, "PUT", envConfigPath(a.env, "labels"), a.token, `{"config_data": {"static": {"team": "ops"}}}`)
}
