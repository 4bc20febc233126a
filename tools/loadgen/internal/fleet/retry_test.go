package fleet

import (
	"testing"
	"time"
)

// Agents refused by a busy backend come back after its retry_after_ms, as the agent does, and the
// fleet reports when the last of them had its config. An agent that can never be answered (unknown)
// is left without config once the retry window closes, and then no time is reported.
func TestFleetRetriesAsTheAgentDoes(t *testing.T) {
	url := startNATS(t)
	backend := newFakeBackend(t, url)
	backend.refuseFirst = 150
	f, err := New(Config{URL: url, Conns: 2, FetchTimeout: 5 * time.Second}, agentIDs(20, "lg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Subscribe(); err != nil {
		t.Fatal(err)
	}
	<-f.Start(StartOptions{Fetch: true, Jitter: 100 * time.Millisecond, RetryFor: time.Minute})
	st, rs := f.Stats(), f.RetryStats()
	if st.FetchOK != 0 || st.FetchFailed != 20 || st.FetchErrors["error unavailable"] != 20 {
		t.Fatalf("first attempts: %+v, want all 20 refused", st)
	}
	if rs.Retries != 20 || rs.RetriedOK != 20 || rs.ServerDelays != 20 || rs.GaveUp != 0 {
		t.Fatalf("retries %+v, want one each, after the backend's delay", rs)
	}
	if rs.AllConfigured < 150*time.Millisecond {
		t.Fatalf("every agent configured %v after boot, before the backend's 150ms delay could pass", rs.AllConfigured)
	}
	backend.mu.Lock()
	defer backend.mu.Unlock()
	for id, n := range backend.fetches {
		if n != 2 {
			t.Errorf("%s fetched %d times, want 2", id, n)
		}
	}
}

func TestFleetRetryGivesUpAtTheDeadline(t *testing.T) {
	url := startNATS(t)
	newFakeBackend(t, url).refuseFirst = 5000 // longer than the retry window
	f, err := New(Config{URL: url, Conns: 1, FetchTimeout: 5 * time.Second}, agentIDs(5, "lg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Subscribe(); err != nil {
		t.Fatal(err)
	}
	<-f.Start(StartOptions{Fetch: true, RetryFor: time.Second})
	if rs := f.RetryStats(); rs.GaveUp != 5 || rs.Retries != 0 || rs.AllConfigured != 0 {
		t.Fatalf("retries %+v, want 5 agents given up without a retry and no completion time", rs)
	}
}
