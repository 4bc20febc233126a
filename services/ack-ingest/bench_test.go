package ackingest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/natsapi"
)

const benchAgents = 10000

// benchStack is a stack with benchAgents hosts and ack-ingest running with its default configuration.
func benchStack(b *testing.B) *stack {
	b.Helper()
	s := newBenchStack(b)
	svc := ackingest.New(ackingest.Config{BatchSize: 1000, BatchWait: 5 * time.Millisecond, Writers: 2, AckWait: 30 * time.Second,
		RetryDelay: time.Second, MaxRetryDelay: 30 * time.Second, HostCacheSize: 100000}, s.pool, s.js, zap.NewNop())
	svc.Start()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	return s
}

// BenchmarkIngestAcks measures sustained acks/s from agents' publishes to committed rows: agents
// publish b.N acks (10,000 agents, ten config types, rising versions) while ack-ingest writes them.
func BenchmarkIngestAcks(b *testing.B) {
	benchIngest(b, protocol.AcksStream, natsapi.AcksDurable, "acks/s", func(i int, agent string) (string, any) {
		return protocol.AckSubject(agent), ack(agent, agentconfig.TypeNames()[(i/benchAgents)%10], int64(i/benchAgents+1), protocol.AckApplied, "")
	})
}

// BenchmarkIngestHeartbeats measures sustained heartbeats/s: agents publish b.N heartbeats (10,000
// agents) while ack-ingest writes them. The stream keeps only each agent's latest heartbeat, so the
// rate counts the heartbeats actually written.
func BenchmarkIngestHeartbeats(b *testing.B) {
	benchIngest(b, protocol.HeartbeatsStream, natsapi.HeartbeatsDurable, "heartbeats/s", func(i int, agent string) (string, any) {
		return protocol.HeartbeatSubject(agent), heartbeat(agent, fmt.Sprintf("hash-%d", i), int64(i))
	})
}

// benchIngest publishes b.N messages, message i from agent-(i mod benchAgents) on the subject and with
// the body message gives, to a benchStack, waits until the stream's durable consumer has settled
// them all and reports the rate of the messages it was handed, in unit.
func benchIngest(b *testing.B, stream, durable, unit string, message func(i int, agent string) (subject string, body any)) {
	s := benchStack(b)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		subject, body := message(i, fmt.Sprintf("agent-%d", i%benchAgents))
		s.publish(b, subject, body)
	}
	delivered := waitIngested(b, s, stream, durable)
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(delivered)/elapsed.Seconds(), unit)
}

// waitIngested waits until the stream holds every message published and the consumer has settled them
// all (testinfra.Drained), and returns how many it was handed. It polls every 5ms rather than with Eventually's growing
// interval: the wait is part of the measured rate. Until ack-ingest has made its durable, Drained
// reports it missing and the wait goes on.
func waitIngested(b *testing.B, s *stack, stream, durable string) uint64 {
	b.Helper()
	if err := s.nc.Flush(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	published := s.publishedTo()[stream]
	for testinfra.Drained(ctx, s.js, stream, durable, published) != nil {
		time.Sleep(5 * time.Millisecond)
	}
	cons, err := s.js.Consumer(ctx, stream, durable)
	if err != nil {
		b.Fatal(err)
	}
	info := cons.CachedInfo()
	return info.Delivered.Consumer - uint64(info.NumRedelivered)
}
