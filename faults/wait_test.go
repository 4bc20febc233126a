package faults_test

import (
	"testing"
	"time"
)

// pollEvery is how often eventually re-checks its condition.
const pollEvery = 25 * time.Millisecond

// eventually polls cond until it reports done, failing the test with what and cond's last explanation
// when timeout passes first. Every wait of the suite goes through it: no sleeps stand in for a wait.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s; last state: %s", timeout, what, why)
		}
		time.Sleep(pollEvery)
	}
}
