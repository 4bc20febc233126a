package backoff_test

import (
	"context"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/platform/backoff"
)

func TestSleepWaitsTheDuration(t *testing.T) {
	start := time.Now()
	if !backoff.Sleep(context.Background(), 20*time.Millisecond) {
		t.Fatal("Sleep with a live context reported false")
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Fatalf("Sleep returned after %s, before its 20ms", took)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	done := make(chan bool, 1)
	go func() { done <- backoff.Sleep(ctx, time.Hour) }()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("Sleep reported the hour passed after its context was cancelled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep did not return when its context was cancelled")
	}
	if backoff.Sleep(ctx, time.Hour) {
		t.Fatal("Sleep with an ended context reported true")
	}
}
