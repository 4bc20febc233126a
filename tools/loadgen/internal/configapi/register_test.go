package configapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeAPI registers batches of hosts all or none, as config-api does; the first attempt of a batch
// holding an agent ending in "-flaky" lands but answers 503, so the retry meets a 409.
type fakeAPI struct {
	mu        sync.Mutex
	hosts     map[string]string // agent id -> hostname
	attempts  map[string]int    // first agent id of a batch -> attempts
	sizes     []int             // entries of every batch request
	inFlight  atomic.Int64
	maxFlight atomic.Int64
}

func newFakeAPI(taken ...string) *fakeAPI {
	f := &fakeAPI{hosts: map[string]string{}, attempts: map[string]int{}}
	for _, id := range taken {
		f.hosts[id] = id
	}
	return f
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
	time.Sleep(5 * time.Millisecond) // let concurrent requests overlap
	if r.Header.Get("Authorization") != "Bearer tok" || r.Method != http.MethodPost || r.URL.Path != "/api/v1/environments/env-1/hosts/batch" {
		http.Error(w, `{"error":{"code":"not_found","message":"no"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Hosts []struct {
			Hostname string `json:"hostname"`
			AgentID  string `json:"agent_id"`
		} `json:"hosts"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || len(req.Hosts) == 0 || len(req.Hosts) > MaxBatch {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"code":"invalid_request","message":"hosts must list 1 to 1000 hosts"}}`))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sizes = append(f.sizes, len(req.Hosts))
	f.attempts[req.Hosts[0].AgentID]++
	flaky := false
	for i, h := range req.Hosts {
		if _, ok := f.hosts[h.AgentID]; ok {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprintf(w, `{"error":{"code":"conflict","message":"hosts[%d].agent_id: a host with agent_id \"%s\" already exists; nothing was registered"}}`, i, h.AgentID)
			return
		}
		flaky = flaky || strings.HasSuffix(h.AgentID, "-flaky")
	}
	out := make([]map[string]string, len(req.Hosts))
	for i, h := range req.Hosts {
		f.hosts[h.AgentID] = h.Hostname
		out[i] = map[string]string{"id": "h-" + h.AgentID, "agent_id": h.AgentID}
	}
	if flaky && f.attempts[req.Hosts[0].AgentID] == 1 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"data": out})
}

func agentIDs(n int, flaky ...int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("a-%d", i)
		if slices.Contains(flaky, i) {
			ids[i] += "-flaky"
		}
	}
	return ids
}

func TestRegisterHostsInBoundedBatchesWithRetries(t *testing.T) {
	fake := newFakeAPI()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := New(srv.URL, "tok", 4)
	// 4,500 hosts: chunks of 1000, 1000, 1000, 1000, 500; the 2nd and 5th fail once after landing.
	ids := agentIDs(4500, 1500, 4499)
	var seen []int
	reg, err := c.RegisterHosts(context.Background(), "env-1", ids, 2, func(done int) { seen = append(seen, done) })
	if err != nil {
		t.Fatal(err)
	}
	if reg.Hosts != len(ids) || reg.Batches != 5 || reg.Retries != 2 || reg.Concurrency != 2 || reg.PerSecond <= 0 {
		t.Fatalf("registration = %+v", reg)
	}
	if len(fake.hosts) != len(ids) {
		t.Fatalf("%d hosts registered, want %d", len(fake.hosts), len(ids))
	}
	for _, id := range ids {
		if fake.hosts[id] != id {
			t.Fatalf("agent %s registered with hostname %q", id, fake.hosts[id])
		}
	}
	sizes := slices.Clone(fake.sizes)
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{500, 500, 1000, 1000, 1000, 1000, 1000}) {
		t.Fatalf("batch sizes %v, want five chunks of at most %d plus two retries", fake.sizes, MaxBatch)
	}
	if m := fake.maxFlight.Load(); m != 2 {
		t.Fatalf("%d requests in flight at most, want 2 (the bound, reached)", m)
	}
	if len(seen) != 5 || !slices.IsSorted(seen) || seen[len(seen)-1] != len(ids) {
		t.Fatalf("progress calls = %v, want one per chunk, rising to %d", seen, len(ids))
	}
}

func TestRegisterHostsFewerChunksThanConcurrency(t *testing.T) {
	fake := newFakeAPI()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	reg, err := New(srv.URL, "tok", 8).RegisterHosts(context.Background(), "env-1", agentIDs(10), 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Hosts != 10 || reg.Batches != 1 || reg.Concurrency != 1 || len(fake.sizes) != 1 {
		t.Fatalf("registration = %+v, batch sizes %v", reg, fake.sizes)
	}
}

func TestRegisterHostsStopsOnPermanentError(t *testing.T) {
	fake := newFakeAPI("a-1500")
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := New(srv.URL, "tok", 1)
	reg, err := c.RegisterHosts(context.Background(), "env-1", agentIDs(3000), 1, nil)
	if !IsConflict(err) || !strings.Contains(err.Error(), `"a-1500"`) {
		t.Fatalf("err = %v, want a conflict naming the agent", err)
	}
	if fake.attempts["a-1000"] != 1 {
		t.Fatalf("a first-attempt 409 was retried: %d attempts", fake.attempts["a-1000"])
	}
	if _, ok := fake.hosts["a-2000"]; ok || reg.Hosts != 1000 {
		t.Fatalf("registration went on after a permanent error: %+v", reg)
	}
}
