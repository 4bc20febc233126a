package workerpool

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPoolBoundsConcurrency(t *testing.T) {
	p := New(3)
	var running, peak atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	go func() {
		for i := 0; i < 10; i++ {
			p.Go(func() {
				n := running.Add(1)
				for {
					old := peak.Load()
					if n <= old || peak.CompareAndSwap(old, n) {
						break
					}
				}
				started <- struct{}{}
				<-release
				running.Add(-1)
			})
		}
	}()
	for i := 0; i < 3; i++ {
		<-started
	}
	select {
	case <-started:
		t.Fatal("a fourth task started while three held the pool")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	for i := 3; i < 10; i++ {
		<-started
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if peak.Load() != 3 {
		t.Fatalf("peak concurrency %d, want 3", peak.Load())
	}
	if p.Go(func() {}) {
		t.Fatal("a closed pool accepted a task")
	}
}

func TestCloseWaitsOrGivesUp(t *testing.T) {
	p := New(1)
	release := make(chan struct{})
	p.Go(func() { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); err == nil {
		t.Fatal("Close returned while a task was still running")
	}
	close(release)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
