package natsconn

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// BenchmarkStreamStore measures the CPU (server and client, one process) of storing a message published
// with core NATS, as agents publish acks and heartbeats, in the acks stream (removed once the pull
// consumer acks it, as ack-ingest does) and in the heartbeats stream (one kept per agent: each new
// heartbeat removes the agent's previous one), with the stream's storage as configured, in memory, and
// (file-sync, file-async) with the other persistence mode than configured: heartbeats are persisted
// asynchronously on one replica, acks are not (see heartbeatsPersistMode).
func BenchmarkStreamStore(b *testing.B) {
	asyncMode, syncMode := jetstream.AsyncPersistMode, jetstream.DefaultPersistMode
	for _, c := range []struct {
		name    string
		stream  int
		storage jetstream.StorageType
		mode    *jetstream.PersistModeType // nil: as configured
	}{
		{"acks/file", 1, jetstream.FileStorage, nil}, {"acks/file-async", 1, jetstream.FileStorage, &asyncMode},
		{"acks/memory", 1, jetstream.MemoryStorage, nil},
		{"heartbeats/file", 2, jetstream.FileStorage, nil}, {"heartbeats/file-sync", 2, jetstream.FileStorage, &syncMode},
		{"heartbeats/memory", 2, jetstream.MemoryStorage, nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			srv := testinfra.NATS(b)
			nc := srv.Connect(b)
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			cfg := StreamConfigs(StreamOptions{})[c.stream]
			cfg.Storage = c.storage
			if c.storage == jetstream.MemoryStorage {
				cfg.PersistMode = jetstream.DefaultPersistMode // asynchronous persistence is for files only
			}
			if c.mode != nil {
				cfg.PersistMode = *c.mode
			}
			cfg.MaxBytes = 256 << 20
			if _, err := js.CreateStream(ctx, cfg); err != nil {
				b.Fatal(err)
			}
			cons, err := js.CreateOrUpdateConsumer(ctx, cfg.Name, jetstream.ConsumerConfig{Durable: "b", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10000})
			if err != nil {
				b.Fatal(err)
			}
			payload := []byte(`{"agent_id":"0b8e4f7a-6c1d-4c47-9a51-3f1d2f3e4a5b","config_type":"collectors","version":42,"status":"applied","applied_at":"2026-12-02T11:00:00.123456Z"}`)
			subjects := make([]string, 20000)
			for i := range subjects {
				subjects[i] = protocol.AckSubject(fmt.Sprintf("agent-%05d", i))
				if c.stream == 2 {
					subjects[i] = protocol.HeartbeatSubject(fmt.Sprintf("agent-%05d", i))
				}
			}
			b.ResetTimer()
			start := testinfra.ProcessCPU()
			done := make(chan struct{})
			go func() {
				defer close(done)
				// Until the last message published: a heartbeat the consumer had not reached yet may
				// have been replaced by the agent's next one, the last one never is.
				for last := false; !last; {
					batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
					if err != nil {
						b.Error(err)
						return
					}
					for m := range batch.Messages() {
						_ = m.Ack()
						if md, err := m.Metadata(); err == nil && md.Sequence.Stream >= uint64(b.N) {
							last = true
						}
					}
				}
			}()
			for i := 0; i < b.N; i++ {
				if err := nc.Publish(subjects[i%len(subjects)], payload); err != nil {
					b.Fatal(err)
				}
				if i%1000 == 999 {
					_ = nc.Flush()
				}
			}
			<-done
			_ = nc.Flush()
			b.ReportMetric(float64((testinfra.ProcessCPU()-start).Microseconds())/float64(b.N), "cpu-µs/msg")
		})
	}
}
