package protocol

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// retry_after_ms is untrusted input: honoured only on an unavailable refusal, and clamped.
func TestServerRetryAfter(t *testing.T) {
	busy := func(code string, ms int64) error {
		return fmt.Errorf("config fetch: backend error: %w", &Error{Code: code, Message: "m", RetryAfterMS: ms})
	}
	cases := []struct {
		err  error
		want time.Duration
		ok   bool
	}{
		{busy(CodeUnavailable, 1500), 1500 * time.Millisecond, true},
		{busy(CodeUnavailable, 1), MinServerRetry, true},
		{busy(CodeUnavailable, 1<<50), MaxServerRetry, true},
		{busy(CodeUnavailable, -5), 0, false},
		{busy(CodeUnavailable, 0), 0, false},
		{busy(CodeNotFound, 1500), 0, false},
		{errors.New("nats: timeout"), 0, false},
		{nil, 0, false},
	}
	for _, c := range cases {
		if got, ok := ServerRetryAfter(c.err); got != c.want || ok != c.ok {
			t.Errorf("%v: %v %v, want %v %v", c.err, got, ok, c.want, c.ok)
		}
	}
}

// The agent's own backoff doubles from 1 s to 60 s, jittered over [d/2, d].
func TestFetchBackoff(t *testing.T) {
	for attempt, d := range map[int]time.Duration{-1: time.Second, 0: time.Second, 1: 2 * time.Second, 5: 32 * time.Second, 6: time.Minute, 40: time.Minute} {
		for range 50 {
			if got := FetchBackoff(attempt); got < d/2 || got > d {
				t.Fatalf("attempt %d: %v, want in [%v, %v]", attempt, got, d/2, d)
			}
		}
	}
}
