package testinfra

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message instead of stopping the test.
type fatalRecorder struct {
	testing.TB
	failed string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	calls := 0
	Eventually(t, 10*time.Second, func() bool { calls++; return calls == 4 }, "the fourth call")
	if calls != 4 {
		t.Fatalf("cond called %d times, want it called until it held (4)", calls)
	}
	n := 0
	EventuallyNoError(t, 10*time.Second, func() error {
		if n++; n < 3 {
			return fmt.Errorf("call %d", n)
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("fn called %d times, want 3", n)
	}
}

func TestEventuallyFailsWithTheMessage(t *testing.T) {
	r := &fatalRecorder{TB: t}
	calls := 0
	Eventually(r, 30*time.Millisecond, func() bool { calls++; return false }, "host %s online", "h1")
	if !strings.Contains(r.failed, "timed out after 30ms waiting for host h1 online") {
		t.Fatalf("failure %q", r.failed)
	}
	if calls < 2 {
		t.Fatalf("cond called %d times before giving up, want it re-checked", calls)
	}

	r = &fatalRecorder{TB: t}
	EventuallyNoError(r, 20*time.Millisecond, func() error { return errors.New("2 of 3 acks") }, "acks")
	if !strings.Contains(r.failed, "waiting for acks; last error: 2 of 3 acks") {
		t.Fatalf("failure %q", r.failed)
	}

	r = &fatalRecorder{TB: t}
	Eventually(r, 0, func() bool { return false })
	if !strings.Contains(r.failed, "waiting for the condition") {
		t.Fatalf("failure %q", r.failed)
	}
	r = &fatalRecorder{TB: t}
	Eventually(r, 0, func() bool { return true })
	if r.failed != "" {
		t.Fatalf("a condition that holds at once failed: %q", r.failed)
	}
}
