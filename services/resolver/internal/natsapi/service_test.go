package natsapi

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// requestTimeout only bounds a broken test; nothing asserts on timing.
const requestTimeout = 10 * time.Second

// blockingStore holds every HostPage call until release is closed.
type blockingStore struct {
	fuzzStore
	entered chan struct{}
	release chan struct{}
}

func (s *blockingStore) HostPage(ctx context.Context, q resolve.HostPageQuery) ([]resolve.PageHost, error) {
	s.entered <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.fuzzStore.HostPage(ctx, q)
}

func startService(t *testing.T, nc *nats.Conn, store resolve.Store, opts Options) *Service {
	t.Helper()
	log, _ := testinfra.Logger(t)
	s := New(resolve.New(store, resolve.Options{}), opts, log)
	if err := s.Start(nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

func request(t *testing.T, nc *nats.Conn, subject string, body any) *nats.Msg {
	t.Helper()
	return testinfra.RequestJSON(t, nc, subject, body, requestTimeout)
}

// A push page that is stuck in the store does not hold up single-host resolves, nor a second page.
func TestPushDoesNotBlockResolve(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	store := &blockingStore{entered: make(chan struct{}, 4), release: make(chan struct{})}
	startService(t, nc, store, Options{Workers: 2, BatchWorkers: 2})

	var replies []*nats.Msg
	done := make(chan *nats.Msg, 2)
	for range 2 {
		sendPushPage(t, nc, done)
	}
	<-store.entered
	<-store.entered // both pages are in the store at once

	msg := request(t, nc, protocol.ResolveSubject, protocol.ResolveRequest{AgentID: "agent-1"})
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("resolve failed while push pages ran: %s %s", code, msg.Header.Get(micro.ErrorHeader))
	}
	var reply protocol.ResolveReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.Configs["healthcheck"].Version != 2 {
		t.Fatalf("resolve reply %s: %v", msg.Data, err)
	}

	close(store.release)
	for range 2 {
		replies = append(replies, <-done)
	}
	for _, m := range replies {
		var page protocol.ResolveSetsReply
		if err := json.Unmarshal(m.Data, &page); err != nil || len(page.Sets) != 1 || len(page.Sets[0].Hosts) != 1 {
			t.Fatalf("push reply %s: %v", m.Data, err)
		}
	}
}

// sendPushPage asks for a push page of fuzzHost's environment without waiting: the reply goes to
// replies.
func sendPushPage(t *testing.T, nc *nats.Conn, replies chan *nats.Msg) {
	t.Helper()
	data, _ := json.Marshal(protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: fuzzHost.EnvironmentID, ConfigType: "healthcheck"})
	inbox := nats.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.PublishRequest(protocol.ResolvePushSubject, inbox, data); err != nil {
		t.Fatal(err)
	}
}

func TestErrorReplies(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	startService(t, nc, fuzzStore{}, Options{})
	cases := []struct {
		subject string
		body    string
		code    string
	}{
		{protocol.ResolveSubject, `{"agent_id":"agent-404"}`, protocol.CodeNotFound},
		{protocol.ResolveSubject, `{"agent_id":"agent-1","types":["nope"]}`, protocol.CodeInvalidRequest},
		{protocol.ResolveSubject, `not json`, protocol.CodeInvalidRequest},
		{protocol.ResolveSubject, ``, protocol.CodeInvalidRequest},
		{protocol.ResolveSubject, `{"agent_id":"agent-1","tpyes":["labels"]}`, protocol.CodeInvalidRequest},
		{protocol.ResolvePushSubject, `{"contract":1,"environment_id":"00000000-0000-0000-0000-000000000404","config_type":"labels"}`, protocol.CodeNotFound},
		{protocol.ResolvePushSubject, `{"contract":1,"environment_id":"00000000-0000-0000-0000-0000000000e1","config_type":"labels","limit":-1}`, protocol.CodeInvalidRequest},
		{protocol.ResolvePushSubject, "{\"contract\":1,\"environment_id\":\"\n\"}", protocol.CodeInvalidRequest},
		{protocol.ResolvePushSubject, `{"contract":2,"environment_id":"00000000-0000-0000-0000-0000000000e1","config_type":"labels"}`, protocol.CodeContractMismatch},
	}
	for _, c := range cases {
		msg, err := nc.Request(c.subject, []byte(c.body), requestTimeout)
		if err != nil {
			t.Fatalf("%s %q: %v", c.subject, c.body, err)
		}
		if got := msg.Header.Get(micro.ErrorCodeHeader); got != c.code {
			t.Errorf("%s %q: code %q (%s), want %q", c.subject, c.body, got, msg.Header.Get(micro.ErrorHeader), c.code)
		}
		var body struct {
			Error protocol.Error `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &body); err != nil || body.Error.Code != c.code || body.Error.Message == "" {
			t.Errorf("%s %q: body %s does not carry the error", c.subject, c.body, msg.Data)
		}
	}
}

// Stop waits for in-flight requests, which still get their replies.
func TestStopWaitsForInFlight(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	store := &blockingStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	log, _ := testinfra.Logger(t)
	s := New(resolve.New(store, resolve.Options{}), Options{}, log)
	if err := s.Start(nc); err != nil {
		t.Fatal(err)
	}
	replies := make(chan *nats.Msg, 1)
	sendPushPage(t, nc, replies)
	<-store.entered
	testinfra.StopReleasing(t, s.Stop, store.release)
	// The service shares nc: once a round trip completes, a reply published before Stop returned has
	// been delivered to the subscription's channel.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-replies:
		if m.Header.Get(micro.ErrorCodeHeader) != "" {
			t.Fatalf("in-flight push page failed: %s", m.Header.Get(micro.ErrorHeader))
		}
	default:
		t.Fatal("Stop returned before the in-flight reply was sent")
	}
}

// Wrong-typed and oversized requests on both endpoints are refused with invalid_request, the error
// stays small (at most a truncated name is quoted back), and the service keeps answering.
func TestWrongTypedAndOversizedRequests(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	startService(t, nc, fuzzStore{}, Options{})
	big := strings.Repeat("P", 900<<10)
	manyTypes := `"labels"` + strings.Repeat(`,"labels"`, 100_000)
	manyIDs := `"x"` + strings.Repeat(`,"x"`, 200_000)
	binary := strings.Repeat("\x00\xff", 450<<10)
	env := `"contract":1,"environment_id":"` + fuzzHost.EnvironmentID + `"`
	cases := []struct {
		name, subject, body string
	}{
		{"host_id a number", protocol.ResolveSubject, `{"host_id":1}`},
		{"agent_id an array", protocol.ResolveSubject, `{"agent_id":["agent-1"]}`},
		{"types a string", protocol.ResolveSubject, `{"agent_id":"agent-1","types":"labels"}`},
		{"types of numbers", protocol.ResolveSubject, `{"agent_id":"agent-1","types":[1,2]}`},
		{"explain a string", protocol.ResolveSubject, `{"agent_id":"agent-1","explain":"yes"}`},
		{"resolve an array", protocol.ResolveSubject, `[{"agent_id":"agent-1"}]`},
		{"resolve a string", protocol.ResolveSubject, `"agent-1"`},
		{"resolve null", protocol.ResolveSubject, `null`},
		{"resolve a number", protocol.ResolveSubject, `7`},
		{"huge agent_id", protocol.ResolveSubject, `{"agent_id":"` + big + `"}`},
		{"huge types list", protocol.ResolveSubject, `{"agent_id":"agent-1","types":[` + manyTypes + `]}`},
		{"huge unknown field", protocol.ResolveSubject, `{"agent_id":"agent-1","pad":"` + big + `"}`},
		{"resolve binary", protocol.ResolveSubject, binary},
		{"environment_id a number", protocol.ResolvePushSubject, `{"contract":1,"environment_id":1,"config_type":"labels"}`},
		{"contract a string", protocol.ResolvePushSubject, `{"contract":"1",` + env[len(`"contract":1,`):] + `,"config_type":"labels"}`},
		{"config_type an array", protocol.ResolvePushSubject, `{` + env + `,"config_type":["labels"]}`},
		{"host_ids a string", protocol.ResolvePushSubject, `{` + env + `,"config_type":"labels","host_ids":"x"}`},
		{"host_ids of numbers", protocol.ResolvePushSubject, `{` + env + `,"config_type":"labels","host_ids":[1]}`},
		{"online_since a number", protocol.ResolvePushSubject, `{` + env + `,"config_type":"labels","online_since":1}`},
		{"online_since not a time", protocol.ResolvePushSubject, `{` + env + `,"config_type":"labels","online_since":"yesterday"}`},
		{"after a number", protocol.ResolvePushSubject, `{` + env + `,"config_type":"labels","after":1}`},
		{"limit a string", protocol.ResolvePushSubject, `{` + env + `,"config_type":"labels","limit":"5"}`},
		{"limit a fraction", protocol.ResolvePushSubject, `{` + env + `,"config_type":"labels","limit":0.5}`},
		{"limit out of range", protocol.ResolvePushSubject, `{` + env + `,"config_type":"labels","limit":1e30}`},
		{"push an array", protocol.ResolvePushSubject, `[]`},
		{"push null", protocol.ResolvePushSubject, `null`},
		{"huge config_type", protocol.ResolvePushSubject, `{` + env + `,"config_type":"` + big + `"}`},
		{"huge host_ids list", protocol.ResolvePushSubject, `{` + env + `,"config_type":"labels","host_ids":[` + manyIDs + `]}`},
		{"huge unknown field", protocol.ResolvePushSubject, `{` + env + `,"config_type":"labels","pad":"` + big + `"}`},
		{"push binary", protocol.ResolvePushSubject, binary},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg, err := nc.Request(c.subject, []byte(c.body), requestTimeout)
			if err != nil {
				t.Fatal(err)
			}
			if got := msg.Header.Get(micro.ErrorCodeHeader); got != protocol.CodeInvalidRequest {
				t.Fatalf("code %q (%s), want %q", got, msg.Header.Get(micro.ErrorHeader), protocol.CodeInvalidRequest)
			}
			if len(msg.Data) > 1024 || len(msg.Header.Get(micro.ErrorHeader)) > 1024 {
				t.Fatalf("the error echoes the payload: %.300s", msg.Data)
			}
		})
	}
	msg := request(t, nc, protocol.ResolveSubject, protocol.ResolveRequest{AgentID: "agent-1"})
	var reply protocol.ResolveReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.Configs["healthcheck"].Version != 2 {
		t.Fatalf("resolve after the malformed requests: %s", msg.Data)
	}
	msg = request(t, nc, protocol.ResolvePushSubject, protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: fuzzHost.EnvironmentID, ConfigType: "healthcheck"})
	var page protocol.ResolveSetsReply
	if err := json.Unmarshal(msg.Data, &page); err != nil || len(page.Sets) != 1 || len(page.Sets[0].Hosts) != 1 {
		t.Fatalf("push page after the malformed requests: %s", msg.Data)
	}
}
