package testinfra

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Polling of Eventually and EventuallyNoError: the first re-check comes after minPoll, each later one
// half as long again after the previous, up to maxPoll. A condition that holds quickly is seen quickly;
// one that takes seconds (a NATS reconnect, a fan-out on a loaded machine) is not polled in a busy loop.
const (
	minPoll = 5 * time.Millisecond
	maxPoll = 100 * time.Millisecond
)

// Eventually calls cond until it returns true, and fails the test (t.Fatalf) if timeout passes first.
// msgAndArgs, when given, describe what was awaited: a format string and its arguments, or any values.
// cond runs on the calling goroutine, so it may itself fail the test. timeout only keeps a broken test
// from hanging: choose it generously (the machine may be loaded) and never assert on how long the wait
// took.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	if !poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, describe(msgAndArgs))
	}
}

// EventuallyNoError calls fn until it returns nil, and fails the test (t.Fatalf) with fn's last error if
// timeout passes first. The error says what is still missing ("3 of 5 hosts acknowledged"); msgAndArgs
// describe what was awaited, as for Eventually.
func EventuallyNoError(t testing.TB, timeout time.Duration, fn func() error, msgAndArgs ...any) {
	t.Helper()
	var last error
	if !poll(timeout, func() bool { last = fn(); return last == nil }) {
		t.Fatalf("timed out after %s waiting for %s; last error: %v", timeout, describe(msgAndArgs), last)
	}
}

// poll calls done until it returns true (reported as true) or timeout passes (false). done is always
// called at least once, and once more at the deadline.
func poll(timeout time.Duration, done func() bool) bool {
	deadline := time.Now().Add(timeout)
	wait := minPoll
	for {
		if done() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(wait, left))
		wait = min(wait+wait/2, maxPoll)
	}
}

func describe(msgAndArgs []any) string {
	switch {
	case len(msgAndArgs) == 0:
		return "the condition"
	case len(msgAndArgs) == 1:
		return fmt.Sprint(msgAndArgs[0])
	}
	if format, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

// Explain turns a check that says what it saw ("3 of 4 agents applied", false) into the error form
// EventuallyNoError polls, so the timeout message carries the last state seen.
func Explain(check func() (bool, string)) func() error {
	return func() error {
		if ok, why := check(); !ok {
			return errors.New(why)
		}
		return nil
	}
}
