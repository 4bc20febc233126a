package tracing

import (
	"context"
	"sync"
	"testing"
)

func TestApplySwapsSamplerLive(t *testing.T) {
	var mu sync.Mutex
	var spans []Span
	p := New(func(s Span) { mu.Lock(); spans = append(spans, s); mu.Unlock() })
	defer p.Shutdown(context.Background())
	tr := p.Tracer()
	run := func(n int) {
		for i := 0; i < n; i++ {
			_, s := tr.Start(context.Background(), "task.metrics")
			s.End()
		}
	}
	run(50)
	if p.Ended() != 0 {
		t.Fatalf("disabled tracing recorded %d spans", p.Ended())
	}
	if err := p.Apply(Config{Enabled: true, SampleRatio: 1}); err != nil {
		t.Fatal(err)
	}
	run(50)
	if p.Ended() != 50 {
		t.Fatalf("ratio 1 recorded %d of 50", p.Ended())
	}
	_ = p.Apply(Config{Enabled: true, SampleRatio: 0})
	run(50)
	if p.Ended() != 50 {
		t.Fatalf("ratio 0 recorded spans")
	}
	// Ratio 0.5 samples a share of random trace ids: some, not all, of 400.
	_ = p.Apply(Config{Enabled: true, SampleRatio: 0.5})
	run(400)
	got := p.Ended() - 50
	if got == 0 || got == 400 {
		t.Fatalf("ratio 0.5 recorded %d of 400", got)
	}
	_ = p.Apply(Config{Enabled: false, SampleRatio: 1})
	before := p.Ended()
	run(50)
	if p.Ended() != before {
		t.Fatal("disabling did not stop recording")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(spans) != int(before) || spans[0].Name != "task.metrics" || spans[0].TraceID == "" {
		t.Fatalf("exported %d spans, first %+v", len(spans), spans[0])
	}
	if err := p.Apply(Config{Enabled: true, SampleRatio: 2}); err == nil {
		t.Fatal("ratio 2 accepted")
	}
}
