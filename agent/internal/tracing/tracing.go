// Package tracing owns the agent's OpenTelemetry TracerProvider. Its sampler is swapped live when the
// tracing config changes (toggle and sample ratio), so spans start or stop being recorded without a
// restart. Finished sampled spans are summarised and handed to an export function (the agent publishes
// them on its "traces" observation subject).
package tracing

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Span is the summary of one finished span that leaves the agent.
type Span struct {
	TraceID    string            `json:"trace_id"`
	SpanID     string            `json:"span_id"`
	ParentID   string            `json:"parent_id,omitempty"`
	Name       string            `json:"name"`
	Start      time.Time         `json:"start"`
	DurationMS float64           `json:"duration_ms"`
	Status     string            `json:"status,omitempty"`
	Attrs      map[string]string `json:"attrs,omitempty"`
}

// Config is the tracing config type: the toggle and the sample ratio (0..1).
type Config struct {
	Enabled     bool
	SampleRatio float64
}

// Provider wraps an SDK TracerProvider whose sampler follows Apply.
type Provider struct {
	tp      *sdktrace.TracerProvider
	sampler *switchSampler
	ended   atomic.Int64
	cfg     atomic.Pointer[Config]
}

// New returns a provider that samples nothing until Apply enables it. export gets every finished,
// sampled span; it must not block.
func New(export func(Span)) *Provider {
	p := &Provider{sampler: &switchSampler{}}
	p.sampler.set(sdktrace.NeverSample())
	p.cfg.Store(&Config{})
	p.tp = sdktrace.NewTracerProvider(
		sdktrace.WithSampler(p.sampler),
		sdktrace.WithSpanProcessor(&exportProcessor{p: p, export: export}),
	)
	return p
}

// Tracer returns the agent's tracer.
func (p *Provider) Tracer() trace.Tracer {
	return p.tp.Tracer("github.com/configsync/configsync/agent")
}

// Apply switches the sampler: disabled samples nothing; enabled samples SampleRatio of new traces (and
// follows the parent's decision for child spans).
func (p *Provider) Apply(cfg Config) error {
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return fmt.Errorf("tracing: sample_ratio %v outside 0..1", cfg.SampleRatio)
	}
	var s sdktrace.Sampler = sdktrace.NeverSample()
	if cfg.Enabled {
		s = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))
	}
	p.sampler.set(s)
	p.cfg.Store(&cfg)
	return nil
}

// Current returns the config in force.
func (p *Provider) Current() Config { return *p.cfg.Load() }

// Ended reports how many sampled spans have finished (and been exported) so far.
func (p *Provider) Ended() int64 { return p.ended.Load() }

// Shutdown flushes and stops the provider.
func (p *Provider) Shutdown(ctx context.Context) error { return p.tp.Shutdown(ctx) }

type switchSampler struct {
	cur atomic.Pointer[sdktrace.Sampler]
}

func (s *switchSampler) set(v sdktrace.Sampler) { s.cur.Store(&v) }

func (s *switchSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return (*s.cur.Load()).ShouldSample(p)
}

func (s *switchSampler) Description() string { return "Switch{" + (*s.cur.Load()).Description() + "}" }

// exportProcessor hands finished spans straight to export: spans are few (one per task run or config
// apply), so batching would only add a goroutine.
type exportProcessor struct {
	p      *Provider
	export func(Span)
}

func (e *exportProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (e *exportProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	e.p.ended.Add(1)
	if e.export == nil {
		return
	}
	out := Span{
		TraceID:    s.SpanContext().TraceID().String(),
		SpanID:     s.SpanContext().SpanID().String(),
		Name:       s.Name(),
		Start:      s.StartTime().UTC(),
		DurationMS: float64(s.EndTime().Sub(s.StartTime()).Microseconds()) / 1000,
	}
	if s.Parent().IsValid() {
		out.ParentID = s.Parent().SpanID().String()
	}
	if st := s.Status(); st.Code != 0 {
		out.Status = st.Code.String()
		if st.Description != "" {
			out.Status += ": " + st.Description
		}
	}
	if attrs := s.Attributes(); len(attrs) > 0 {
		out.Attrs = make(map[string]string, len(attrs))
		for _, a := range attrs {
			out.Attrs[string(a.Key)] = a.Value.Emit()
		}
	}
	e.export(out)
}

func (e *exportProcessor) Shutdown(context.Context) error   { return nil }
func (e *exportProcessor) ForceFlush(context.Context) error { return nil }
