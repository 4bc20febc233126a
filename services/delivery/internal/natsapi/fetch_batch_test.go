package natsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// gatedResolver resolves every agent to the same labels config. While gate is set, ResolveSets
// waits for it to be closed (or, unless holdPastDeadline, for its context); it records the agents of
// each request.
type gatedResolver struct {
	mu               sync.Mutex
	gate             chan struct{}
	holdPastDeadline bool
	requests         [][]string
	entered          chan struct{} // receives once per ResolveSets call
}

func newGatedResolver(gated bool) *gatedResolver {
	r := &gatedResolver{entered: make(chan struct{}, 1000)}
	if gated {
		r.gate = make(chan struct{})
	}
	return r
}

func (r *gatedResolver) ResolvePush(context.Context, protocol.ResolvePushRequest) (protocol.ResolveSetsReply, error) {
	return protocol.ResolveSetsReply{}, protocol.Errorf(protocol.CodeInternal, "not used")
}

func (r *gatedResolver) ResolveSets(ctx context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error) {
	r.mu.Lock()
	r.requests = append(r.requests, slices.Clone(req.AgentIDs))
	gate := r.gate
	r.mu.Unlock()
	r.entered <- struct{}{}
	switch {
	case gate != nil && r.holdPastDeadline:
		<-gate
	case gate != nil:
		select {
		case <-gate:
		case <-ctx.Done():
			return protocol.ResolveSetsReply{}, ctx.Err()
		}
	}
	set := protocol.ConfigSet{ClientID: "c", EnvironmentID: "e", Configs: map[string]int{"labels": 0}}
	for _, id := range req.AgentIDs {
		set.Hosts = append(set.Hosts, protocol.SetHost{HostID: "h-" + id, AgentID: id})
	}
	return protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract, Configs: []protocol.EffectiveConfig{
		{ConfigType: "labels", ConfigData: json.RawMessage(`{"static":{"env":"prod"}}`), Version: 3},
	}, Sets: []protocol.ConfigSet{set}}, nil
}

func (r *gatedResolver) agentsRequested() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests)
}

type fetchServerFixture struct {
	server *FetchServer
	client *nats.Conn
	logs   *observer.ObservedLogs
}

func startFetchServer(t *testing.T, r *gatedResolver, opts FetchOptions) fetchServerFixture {
	t.Helper()
	srv := testinfra.NATS(t)
	log, logs := testinfra.Logger(t)
	s := NewFetchServer(deliver.NewFetcher(r, nil, log), opts, log)
	nc := srv.Connect(t)
	if err := s.Start(nc); err != nil {
		t.Fatal(err)
	}
	// The endpoint's subscription must reach the server before the first fetch is published.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.gate != nil {
			select {
			case <-r.gate:
			default:
				close(r.gate)
			}
		}
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return fetchServerFixture{server: s, client: srv.Connect(t), logs: logs}
}

// fetchAsync sends agent's fetch and returns where its reply will arrive.
func (f fetchServerFixture) fetchAsync(t *testing.T, agent string) <-chan *nats.Msg {
	t.Helper()
	inbox := protocol.InboxPrefix(agent) + "." + nats.NewInbox()[len("_INBOX."):]
	ch := make(chan *nats.Msg, 1)
	sub, err := f.client.ChanSubscribe(inbox, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	data, _ := json.Marshal(protocol.FetchRequest{AgentID: agent})
	if err := f.client.PublishRequest(protocol.FetchSubject(agent), inbox, data); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// waitReply waits for a reply; the bound only guards a hung test.
func waitReply(t *testing.T, ch <-chan *nats.Msg) *nats.Msg {
	t.Helper()
	select {
	case msg := <-ch:
		return msg
	case <-time.After(30 * time.Second):
		t.Fatal("no reply")
		return nil
	}
}

func waitEntered(t *testing.T, r *gatedResolver) {
	t.Helper()
	select {
	case <-r.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the resolver was never asked")
	}
}

func replyCode(t *testing.T, msg *nats.Msg) string {
	t.Helper()
	var r protocol.FetchReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatalf("reply %s: %v", msg.Data, err)
	}
	if r.Error != nil {
		if h := msg.Header.Get(micro.ErrorCodeHeader); h != r.Error.Code {
			t.Fatalf("error header %q, body %q", h, r.Error.Code)
		}
		return r.Error.Code
	}
	if r.Versions["labels"] != 3 {
		t.Fatalf("reply without the labels config: %s", msg.Data)
	}
	return ""
}

// With every batch busy and the queue full, a fetch is refused at once with "unavailable" instead of
// waiting unseen in the subscription; the queued ones are answered once the batch is.
func TestFullQueueRefusesAtOnce(t *testing.T) {
	r := newGatedResolver(true)
	f := startFetchServer(t, r, FetchOptions{BatchOptions: natsrpc.BatchOptions{Workers: 1, Batch: 1, Queue: 1}})
	first := f.fetchAsync(t, "agent-1")
	waitEntered(t, r)                    // agent-1's batch holds the only slot
	queued := f.fetchAsync(t, "agent-2") // takes the queue's one place (requests are read in order)
	refused := waitReply(t, f.fetchAsync(t, "agent-3"))
	if code := replyCode(t, refused); code != protocol.CodeUnavailable {
		t.Fatalf("refused fetch: code %q, want %q", code, protocol.CodeUnavailable)
	}
	close(r.gate)
	if code := replyCode(t, waitReply(t, first)); code != "" {
		t.Fatalf("first fetch: %s", code)
	}
	if code := replyCode(t, waitReply(t, queued)); code != "" {
		t.Fatalf("queued fetch: %s", code)
	}
	eventually(t, func() bool { return f.logs.FilterMessage("queue full, requests refused").Len() > 0 })
}

// A fetch that waited in the queue longer than the fetch timeout is dropped without being resolved:
// its agent has given up.
func TestFetchWaitingPastTimeoutIsDropped(t *testing.T) {
	r := newGatedResolver(true)
	r.holdPastDeadline = true
	f := startFetchServer(t, r, FetchOptions{BatchOptions: natsrpc.BatchOptions{Workers: 1, Batch: 1, Queue: 8, Timeout: 300 * time.Millisecond}})
	first := f.fetchAsync(t, "agent-1")
	waitEntered(t, r)
	f.fetchAsync(t, "agent-2")
	eventually(t, func() bool { return f.server.Queued() == 1 }) // agent-2 queued, its arrival noted
	// Hold agent-1's batch, and so the only slot, until agent-2 has waited past its timeout.
	time.Sleep(400 * time.Millisecond)
	close(r.gate)
	waitReply(t, first) // an answer, even if late
	eventually(t, func() bool {
		return f.logs.FilterMessage("requests dropped after waiting longer than their timeout").Len() > 0
	})
	for _, req := range r.agentsRequested() {
		if slices.Contains(req, "agent-2") {
			t.Fatalf("the expired fetch was resolved: %v", r.agentsRequested())
		}
	}
}

// Fetches that arrive while a batch runs are answered together, in batches of at most opts.Batch,
// each agent with its own reply.
func TestFetchesAreBatched(t *testing.T) {
	r := newGatedResolver(true)
	f := startFetchServer(t, r, FetchOptions{BatchOptions: natsrpc.BatchOptions{Workers: 8, Batch: 8, Queue: 100}})
	first := f.fetchAsync(t, "agent-0")
	waitEntered(t, r)
	var replies []<-chan *nats.Msg
	for i := 1; i <= 20; i++ {
		replies = append(replies, f.fetchAsync(t, fmt.Sprintf("agent-%d", i)))
	}
	// Let the server queue all of them before the slot frees up.
	eventually(t, func() bool { return f.server.Queued() == 20 })
	close(r.gate)
	waitReply(t, first)
	for i, ch := range replies {
		msg := waitReply(t, ch)
		if code := replyCode(t, msg); code != "" {
			t.Fatalf("agent-%d: %s", i+1, code)
		}
	}
	reqs := r.agentsRequested()
	if len(reqs) != 4 { // agent-0, then 20 queued fetches in batches of 8
		t.Fatalf("%d resolver requests %v, want 4", len(reqs), reqs)
	}
	for _, req := range reqs {
		if len(req) > 8 {
			t.Fatalf("a batch of %d agents, want at most 8", len(req))
		}
	}
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
