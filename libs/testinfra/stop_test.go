package testinfra

import (
	"context"
	"errors"
	"testing"
)

// StopReleasing returns once stop has returned, and stop sees the work released while it runs.
func TestStopReleasing(t *testing.T) {
	release := make(chan struct{})
	returned := false
	StopReleasing(t, func(context.Context) error {
		<-release // the work in hand finishes only once released
		returned = true
		return nil
	}, release)
	if !returned {
		t.Fatal("StopReleasing returned before stop did")
	}
}

func TestStopReleasingFailsWithStopsError(t *testing.T) {
	r := &fatalRecorder{TB: t}
	StopReleasing(r, func(context.Context) error { return errors.New("consumer stuck") }, make(chan struct{}))
	if r.failed != "stop: consumer stuck" {
		t.Fatalf("failed with %q", r.failed)
	}
}
