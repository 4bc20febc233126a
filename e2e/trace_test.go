package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/platform/tracing/otlpsink"
	"github.com/configsync/configsync/libs/protocol"
)

// agentSpan is what an agent ships of one finished span on configsync.agent.<id>.traces.
type agentSpan struct {
	TraceID  string `json:"trace_id"`
	SpanID   string `json:"span_id"`
	ParentID string `json:"parent_id"`
	Name     string `json:"name"`
}

// TestOneTraceFromPutToAck: with the services exporting to an in-process OTLP receiver at ratio 1.0
// and the agent's tracing on, one environment write yields, under one trace id, config-api's PUT
// span, the outbox relay's span, delivery's push, resolve and publish spans, the agent's config.apply
// span (shipped over NATS, as the agent ships all its spans) and ack-ingest's ack.ingest span, each
// the child of the one before it across the process boundaries.
func TestOneTraceFromPutToAck(t *testing.T) {
	sink, err := otlpsink.Start("127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	s := startStack(t, stackOptions{replicas: 1, agents: []string{"traced-1"}, serviceEnv: []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink.Endpoint(),
		"CONFIGSYNC_TRACE_SAMPLE_RATIO=1",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}})
	ag := s.agents["traced-1"]
	s.waitOnline(1)

	var mu sync.Mutex
	var shipped []agentSpan
	nc, err := nats.Connect(s.nats.URL(), nats.UserCredentials(s.obsCreds), nats.RootCAs(s.nats.CAFile()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(protocol.ObservationSubject(ag.agentID, "traces"), func(m *nats.Msg) {
		var sp agentSpan
		if json.Unmarshal(m.Data, &sp) == nil {
			mu.Lock()
			shipped = append(shipped, sp)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	tracingV := s.putEnvConfig(1, "tracing", map[string]any{"enabled": true, "sample_ratio": 1})
	s.waitApplied(1, convergeTimeout, "tracing", tracingV, ag)
	labelsV := s.putEnvConfig(1, "labels", map[string]any{"static": map[string]any{"team": "trace"}})
	s.waitApplied(1, convergeTimeout, "labels", labelsV, ag)

	// The labels apply span names the trace; the rest must share it.
	var apply agentSpan
	s.eventually(convergeTimeout, "the agent ships its apply span of a pushed command", func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, sp := range shipped {
			if sp.Name == "config.apply" && sp.ParentID != "" {
				apply = sp
			}
		}
		if apply.TraceID == "" {
			return fmt.Errorf("agent spans so far: %+v", shipped)
		}
		return nil
	})
	want := []string{"config-api/PUT /api/v1/environments/{envID}/agent-configs/{configType}", "config-api/outbox.publish",
		"delivery/delivery.push", "delivery/resolve", "delivery/publish", "ack-ingest/ack.ingest"}
	var byName map[string]otlpsink.Span
	s.eventually(convergeTimeout, "every backend span of the write's trace reaches the OTLP receiver", func() error {
		byName = map[string]otlpsink.Span{}
		var names []string
		for _, sp := range sink.Spans(apply.TraceID) {
			byName[sp.Service+"/"+sp.Name] = sp
			names = append(names, sp.Service+"/"+sp.Name)
		}
		for _, w := range want {
			if _, ok := byName[w]; !ok {
				sort.Strings(names)
				return fmt.Errorf("trace %s has %s, no %s", apply.TraceID, strings.Join(names, ", "), w)
			}
		}
		return nil
	})
	parentOf := func(child, parent string) {
		if byName[child].ParentID != byName[parent].SpanID {
			t.Errorf("%s's parent is %s, want %s (%s)", child, byName[child].ParentID, parent, byName[parent].SpanID)
		}
	}
	parentOf("config-api/outbox.publish", want[0])
	parentOf("delivery/delivery.push", "config-api/outbox.publish")
	parentOf("delivery/resolve", "delivery/delivery.push")
	parentOf("delivery/publish", "delivery/delivery.push")
	if apply.ParentID != byName["delivery/publish"].SpanID {
		t.Errorf("the agent's apply span's parent is %s, want delivery's publish span %s", apply.ParentID, byName["delivery/publish"].SpanID)
	}
	if byName["ack-ingest/ack.ingest"].ParentID != apply.SpanID {
		t.Errorf("ack.ingest's parent is %s, want the agent's apply span %s", byName["ack-ingest/ack.ingest"].ParentID, apply.SpanID)
	}
}
