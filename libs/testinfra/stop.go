package testinfra

import (
	"context"
	"testing"
)

// StopReleasing calls stop while the caller holds work in hand (a handler blocked on release), then
// closes release so that work can finish, and fails the test if stop returns an error: the test of a
// Stop that must wait for the work in hand rather than abandon it.
func StopReleasing(t testing.TB, stop func(context.Context) error, release chan struct{}) {
	t.Helper()
	stopped := make(chan error, 1)
	go func() { stopped <- stop(context.Background()) }()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
}
