package natsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/protocol/protocoltest"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// setsResolver answers every agent with one config set of three types and a signed identity per host,
// as the resolver does with signing on.
type setsResolver struct{}

func (setsResolver) ResolvePush(context.Context, protocol.ResolvePushRequest) (protocol.ResolveSetsReply, error) {
	return protocol.ResolveSetsReply{}, protocol.Errorf(protocol.CodeInternal, "not used")
}

func (setsResolver) ResolveSets(_ context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error) {
	sig := func(s string) *protocol.Signed {
		return &protocol.Signed{Statement: []byte(s), KeyID: "resolver-2026-12", Signature: []byte(strings.Repeat("s", 64))}
	}
	set := protocol.ConfigSet{ClientID: "c", EnvironmentID: "e", Configs: map[string]int{"labels": 0, "intervals": 1, "watch_files": 2}}
	for _, id := range req.AgentIDs {
		set.Hosts = append(set.Hosts, protocol.SetHost{HostID: "h-" + id, AgentID: id,
			Identity: sig(`{"agent_id":"` + id + `","environment_id":"24e344af-4783-49a0-8765-598d46004fb8","kind":"identity"}`)})
	}
	return protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract, Configs: []protocol.EffectiveConfig{
		{ConfigType: "labels", ConfigData: json.RawMessage(`{"static":{"env":"prod","team":"platform","region":"eu-west-1"}}`), Version: 3, Statement: sig(`{"type":"labels","version":3}`)},
		{ConfigType: "intervals", ConfigData: json.RawMessage(`{"metrics":"30s","heartbeat":"30s"}`), Version: 2, Statement: sig(`{"type":"intervals","version":2}`)},
		{ConfigType: "watch_files", ConfigData: json.RawMessage(`{"paths":["/etc","/var/lib/app"],"exclude_patterns":["*.swp"]}`), Version: 5, Statement: sig(`{"type":"watch_files","version":5}`)},
	}, Sets: []protocol.ConfigSet{set}}, nil
}

// BenchmarkFetchServer is delivery's own work per fetch: fetches of 1,000 agents (512 in flight)
// answered by the fetch endpoint in batches, with a resolver answering in-process (no database), each
// reply carrying the agent's identity. cpu-us/fetch is this process's CPU (client, delivery and the
// in-process resolver; the NATS server's only when it runs in-process too) per fetch.
func BenchmarkFetchServer(b *testing.B) {
	benchFetchServer(b, func(*testinfra.NATSServer) deliver.Resolver { return setsResolver{} })
}

// BenchmarkFetchServerUpstream is BenchmarkFetchServer with the resolver's replies coming over NATS as
// the resolver encodes them (hosts and statements by hand), so delivery's CPU per fetch includes
// decoding them (UpstreamClient). The replying side is in this process too: its CPU is counted.
func BenchmarkFetchServerUpstream(b *testing.B) {
	benchFetchServer(b, func(srv *testinfra.NATSServer) deliver.Resolver {
		nc := srv.Connect(b)
		sub, err := nc.Subscribe(protocol.ResolveSetsSubject, func(m *nats.Msg) {
			var req protocol.ResolveSetsRequest
			if err := json.Unmarshal(m.Data, &req); err != nil {
				b.Error(err)
				return
			}
			reply, _ := setsResolver{}.ResolveSets(context.Background(), req)
			if err := m.Respond(protocoltest.EncodeSetsLikeResolver(b, reply)); err != nil {
				b.Error(err)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sub.Unsubscribe() })
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
		return NewUpstreamClient(srv.Connect(b), 10*time.Second)
	})
}

func benchFetchServer(b *testing.B, resolver func(*testinfra.NATSServer) deliver.Resolver) {
	srv := testinfra.NATS(b)
	s := NewFetchServer(deliver.NewFetcher(resolver(srv), nil, zap.NewNop()), FetchOptions{BatchOptions: natsrpc.BatchOptions{Workers: 256, Batch: 64, BatchWait: 2 * time.Millisecond, Queue: 1 << 16}}, zap.NewNop())
	nc := srv.Connect(b)
	if err := s.Start(nc); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Stop(context.Background()) })
	client := srv.Connect(b)
	replies := make(chan *nats.Msg, 4096)
	sub, err := client.ChanSubscribe("_INBOX.>", replies)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := client.Flush(); err != nil {
		b.Fatal(err)
	}
	const agents, window = 1000, 512
	reqs := make([][]byte, agents)
	for i := range reqs {
		reqs[i], _ = json.Marshal(protocol.FetchRequest{AgentID: fmt.Sprintf("lg-1764676053-%d", i)})
	}
	cpu0 := testinfra.ProcessCPU()
	b.ResetTimer()
	sent, got := 0, 0
	for got < b.N {
		for sent < b.N && sent-got < window {
			id := fmt.Sprintf("lg-1764676053-%d", sent%agents)
			if err := client.PublishRequest(protocol.FetchSubject(id), protocol.InboxPrefix(id)+".r", reqs[sent%agents]); err != nil {
				b.Fatal(err)
			}
			sent++
		}
		select {
		case msg := <-replies:
			if len(msg.Header) > 0 {
				b.Fatalf("error reply %v %s", msg.Header, msg.Data)
			}
			got++
		case <-time.After(30 * time.Second):
			b.Fatal("no reply")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((testinfra.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/fetch")
}
