package configapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeAPI registers hosts; the first attempt for agents ending in "-flaky" lands but answers 503, so
// the retry meets a 409.
type fakeAPI struct {
	mu        sync.Mutex
	hosts     map[string]bool
	attempts  map[string]int
	inFlight  atomic.Int64
	maxFlight atomic.Int64
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxFlight.Load()
		if n <= m || f.maxFlight.CompareAndSwap(m, n) {
			break
		}
	}
	if r.Header.Get("Authorization") != "Bearer tok" || r.Method != http.MethodPost || r.URL.Path != "/api/v1/environments/env-1/hosts" {
		http.Error(w, `{"error":{"code":"not_found","message":"no"}}`, http.StatusNotFound)
		return
	}
	var req struct{ Hostname, AgentID string }
	if err := json.NewDecoder(r.Body).Decode(&struct {
		Hostname *string `json:"hostname"`
		AgentID  *string `json:"agent_id"`
	}{&req.Hostname, &req.AgentID}); err != nil {
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts[req.AgentID]++
	if f.hosts[req.AgentID] {
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":{"code":"conflict","message":"agent_id taken"}}`))
		return
	}
	f.hosts[req.AgentID] = true
	if strings.HasSuffix(req.AgentID, "-flaky") && f.attempts[req.AgentID] == 1 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"data":{"id":"h-` + req.AgentID + `","agent_id":"` + req.AgentID + `"}}`))
}

func TestRegisterHostsBoundedWithRetries(t *testing.T) {
	fake := &fakeAPI{hosts: map[string]bool{}, attempts: map[string]int{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := New(srv.URL, "tok", 4)
	ids := []string{"a-1", "a-2-flaky", "a-3", "a-4", "a-5", "a-6-flaky", "a-7", "a-8", "a-9", "a-10"}
	var seen []int
	reg, err := c.RegisterHosts(context.Background(), "env-1", ids, 4, func(done int) { seen = append(seen, done) })
	if err != nil {
		t.Fatal(err)
	}
	if reg.Hosts != len(ids) || reg.Retries != 2 || reg.Concurrency != 4 {
		t.Fatalf("registration = %+v", reg)
	}
	if len(fake.hosts) != len(ids) {
		t.Fatalf("%d hosts registered", len(fake.hosts))
	}
	if m := fake.maxFlight.Load(); m > 4 {
		t.Fatalf("%d requests in flight, bound 4", m)
	}
	if len(seen) != 1 || seen[0] != len(ids) {
		t.Fatalf("progress calls = %v, want one at the end", seen)
	}
}

func TestRegisterHostsStopsOnPermanentError(t *testing.T) {
	fake := &fakeAPI{hosts: map[string]bool{"taken": true}, attempts: map[string]int{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := New(srv.URL, "tok", 2)
	_, err := c.RegisterHosts(context.Background(), "env-1", []string{"ok-1", "taken", "ok-2"}, 1, nil)
	if !IsConflict(err) || !strings.Contains(err.Error(), "taken") {
		t.Fatalf("err = %v, want a conflict naming the agent", err)
	}
	if fake.attempts["taken"] != 1 {
		t.Fatalf("a first-attempt 409 was retried %d times", fake.attempts["taken"])
	}
}
