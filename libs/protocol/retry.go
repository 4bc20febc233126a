package protocol

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Bounds on a backend's retry_after_ms as an agent honours it: the value arrives over NATS, so it is
// untrusted input; a hostile or broken value can neither make an agent hammer the backend nor give up
// on it.
const (
	MinServerRetry = 100 * time.Millisecond
	MaxServerRetry = 5 * time.Minute
)

// ServerRetryAfter is the delay a failed fetch's error asked for (an "unavailable" refusal with
// retry_after_ms, as delivery sends when its queue is full), clamped to [MinServerRetry,
// MaxServerRetry]. ok is false when the error asks for nothing.
func ServerRetryAfter(err error) (d time.Duration, ok bool) {
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != CodeUnavailable || pe.RetryAfterMS <= 0 {
		return 0, false
	}
	d = time.Duration(min(pe.RetryAfterMS, MaxServerRetry.Milliseconds())) * time.Millisecond
	return max(d, MinServerRetry), true
}

// FetchBackoff is an agent's own delay before fetch attempt+1 when the backend asked for none: from
// 1 s doubling to 60 s, jittered over [d/2, d].
func FetchBackoff(attempt int) time.Duration {
	d := time.Minute
	if attempt < 6 {
		d = time.Second << max(attempt, 0)
	}
	return d/2 + rand.N(d/2+1)
}
