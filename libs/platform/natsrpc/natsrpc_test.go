package natsrpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait of these tests only to fail a hung test; nothing asserts on timing.
const wait = 30 * time.Second

var errDomain = errors.New("no such thing")

func mapError(_ string, err error) *protocol.Error {
	if errors.Is(err, errDomain) {
		return protocol.Errorf(protocol.CodeNotFound, "%s", err.Error())
	}
	return nil
}

// serve starts a server with one endpoint "test.echo" answered by d.
func serve(t *testing.T, nc *nats.Conn, d natsrpc.Dispatcher, cfg natsrpc.Config) *natsrpc.Server {
	t.Helper()
	log, _ := testinfra.Logger(t)
	cfg.Service = micro.Config{Name: "testsvc", Version: "1.0.0"}
	if cfg.MapError == nil {
		cfg.MapError = mapError
	}
	s, err := natsrpc.NewServer(nc, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Handle(natsrpc.Endpoint{Name: "echo", Subject: "test.echo"}, d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	// The server has the endpoint's subscription before another connection sends to it.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

// replies subscribes to the inbox prefix and returns a function sending a request with reply subject
// prefix+suffix.
func replies(t *testing.T, nc *nats.Conn) (*nats.Subscription, func(suffix, body string)) {
	t.Helper()
	prefix := nats.NewInbox()
	sub, err := nc.SubscribeSync(prefix + ".>")
	if err != nil {
		t.Fatal(err)
	}
	return sub, func(suffix, body string) {
		if err := nc.PublishRequest("test.echo", prefix+"."+suffix, []byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

func next(t *testing.T, sub *nats.Subscription) *nats.Msg {
	t.Helper()
	msg, err := sub.NextMsg(wait)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	return msg
}

func suffix(msg *nats.Msg) string { return msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:] }

// assertError checks both forms of an error reply: the micro headers and the body.
func assertError(t *testing.T, msg *nats.Msg, code string) *protocol.Error {
	t.Helper()
	if got := msg.Header.Get(micro.ErrorCodeHeader); got != code {
		t.Fatalf("header code %q, want %q (body %s)", got, code, msg.Data)
	}
	var body struct{ Error *protocol.Error }
	if err := json.Unmarshal(msg.Data, &body); err != nil || body.Error == nil || body.Error.Code != code {
		t.Fatalf("body %s, want error code %q", msg.Data, code)
	}
	if msg.Header.Get(micro.ErrorHeader) == "" {
		t.Fatal("no description header")
	}
	return body.Error
}

func TestPoolAnswersJSONAndMappedErrors(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	serve(t, nc, natsrpc.NewPool(natsrpc.PoolOptions{Workers: 2}, func(_ context.Context, r *natsrpc.Request) (any, error) {
		switch string(r.Data) {
		case "missing":
			return nil, errDomain
		case "bug":
			return nil, errors.New("a detail the caller must not see")
		case "raw":
			return json.RawMessage(`{"raw":true}`), nil
		}
		return map[string]string{"echo": string(r.Data)}, nil
	}), natsrpc.Config{})
	c := natsrpc.NewClient(srv.Connect(t), wait)
	ctx := context.Background()

	var got map[string]any
	if err := c.Call(ctx, "test.echo", json.RawMessage("hi"), &got); err != nil || got["echo"] != "hi" {
		t.Fatalf("echo: %v %v", got, err)
	}
	if err := c.Call(ctx, "test.echo", json.RawMessage("raw"), &got); err != nil || got["raw"] != true {
		t.Fatalf("raw: %v %v", got, err)
	}
	var perr *protocol.Error
	if err := c.Call(ctx, "test.echo", json.RawMessage("missing"), &got); !errors.As(err, &perr) ||
		perr.Code != protocol.CodeNotFound || perr.Message != errDomain.Error() {
		t.Fatalf("mapped error: %v", err)
	}
	if err := c.Call(ctx, "test.echo", json.RawMessage("bug"), &got); !errors.As(err, &perr) ||
		perr.Code != protocol.CodeInternal || strings.Contains(perr.Message, "detail") {
		t.Fatalf("unmapped error: %v", err)
	}
	if err := c.Call(ctx, "test.nobody", json.RawMessage("x"), nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no responders: %v", err)
	}
}

// With a queue, requests beyond the workers and the queue are refused at once with unavailable; the
// admitted ones are still answered.
func TestPoolRefusesWhenQueueFull(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	started, release := make(chan struct{}, 10), make(chan struct{})
	serve(t, nc, natsrpc.NewPool(natsrpc.PoolOptions{Workers: 1, Queue: 1}, func(_ context.Context, r *natsrpc.Request) (any, error) {
		started <- struct{}{}
		<-release
		return json.RawMessage(`"ok"`), nil
	}), natsrpc.Config{})
	client := srv.Connect(t)
	sub, send := replies(t, client)
	send("1", "a")
	select {
	case <-started: // the only worker is busy
	case <-time.After(wait):
		t.Fatal("first request never started")
	}
	send("2", "b") // waits in the queue
	send("3", "c") // refused
	msg := next(t, sub)
	if suffix(msg) != "3" {
		t.Fatalf("first reply to %s, want the refused request 3", msg.Subject)
	}
	if e := assertError(t, msg, protocol.CodeUnavailable); !strings.Contains(e.Message, "busy") {
		t.Fatalf("refusal message %q", e.Message)
	}
	close(release)
	seen := map[string]bool{}
	for range 2 {
		msg := next(t, sub)
		if string(msg.Data) != `"ok"` {
			t.Fatalf("reply %s to %s", msg.Data, msg.Subject)
		}
		seen[suffix(msg)] = true
	}
	if !seen["1"] || !seen["2"] {
		t.Fatalf("answered %v, want 1 and 2", seen)
	}
}

// Without a queue, a busy pool holds the subscription back: requests wait, none is refused.
func TestPoolWithoutQueueHoldsBack(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	var running, peak atomic.Int32
	release := make(chan struct{})
	serve(t, nc, natsrpc.NewPool(natsrpc.PoolOptions{Workers: 2}, func(_ context.Context, r *natsrpc.Request) (any, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		return json.RawMessage(`"ok"`), nil
	}), natsrpc.Config{})
	sub, send := replies(t, srv.Connect(t))
	for i := range 10 {
		send(string(rune('a'+i)), "x")
	}
	close(release)
	for range 10 {
		if msg := next(t, sub); string(msg.Data) != `"ok"` {
			t.Fatalf("reply %s (%v)", msg.Data, msg.Header)
		}
	}
	if p := peak.Load(); p > 2 {
		t.Fatalf("%d requests ran at once, want at most 2", p)
	}
}

func TestPoolRecoversPanics(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	serve(t, nc, natsrpc.NewPool(natsrpc.PoolOptions{Workers: 1}, func(_ context.Context, r *natsrpc.Request) (any, error) {
		if string(r.Data) == "panic" {
			panic("secret-looking value")
		}
		return json.RawMessage(`"ok"`), nil
	}), natsrpc.Config{})
	client := srv.Connect(t)
	msg, err := client.Request("test.echo", []byte("panic"), wait)
	if err != nil {
		t.Fatal(err)
	}
	assertError(t, msg, protocol.CodeInternal)
	// The worker survived and the server still answers.
	if msg, err := client.Request("test.echo", []byte("fine"), wait); err != nil || string(msg.Data) != `"ok"` {
		t.Fatalf("after a panic: %v %v", msg, err)
	}
}

// A reply over the server's max payload is answered as internal instead of never arriving.
func TestReplyOverMaxPayload(t *testing.T) {
	srv := testinfra.NATS(t, testinfra.WithServerOptions(func(o *server.Options) { o.MaxPayload = 4096 }))
	nc := srv.Connect(t)
	// Respond sends the error reply before it returns, so the client can read it before the handler
	// has Respond's result: the result is handed over on a channel.
	respondErr := make(chan error, 1)
	serve(t, nc, natsrpc.NewPool(natsrpc.PoolOptions{Workers: 1}, func(_ context.Context, r *natsrpc.Request) (any, error) {
		body := make([]byte, 0, 8192)
		body = append(body, '"')
		body = append(body, strings.Repeat("x", 8000)...)
		body = append(body, '"')
		respondErr <- r.Respond(body)
		return nil, nil
	}), natsrpc.Config{})
	msg, err := srv.Connect(t).Request("test.echo", []byte("big"), wait)
	if err != nil {
		t.Fatal(err)
	}
	if e := assertError(t, msg, protocol.CodeInternal); !strings.Contains(e.Message, "max payload") {
		t.Fatalf("message %q", e.Message)
	}
	select {
	case err := <-respondErr:
		if !errors.Is(err, natsrpc.ErrPayloadTooLarge) {
			t.Fatalf("Respond returned %v", err)
		}
	case <-time.After(wait):
		t.Fatal("the handler's Respond did not return")
	}
}

// A long multi-line message is made a safe header value; the body keeps it whole.
func TestErrorReplyHeaderIsSafe(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	long := "first line\r\nsecond line " + strings.Repeat("é", 600)
	serve(t, nc, natsrpc.NewPool(natsrpc.PoolOptions{Workers: 1}, func(_ context.Context, r *natsrpc.Request) (any, error) {
		r.Error(protocol.Errorf(protocol.CodeInvalidRequest, "%s", long))
		return nil, nil
	}), natsrpc.Config{})
	msg, err := srv.Connect(t).Request("test.echo", []byte("x"), wait)
	if err != nil {
		t.Fatal(err)
	}
	if e := assertError(t, msg, protocol.CodeInvalidRequest); e.Message != long {
		t.Fatalf("body message changed: %q", e.Message)
	}
	h := msg.Header.Get(micro.ErrorHeader)
	if len(h) > natsrpc.MaxHeaderValue || !utf8.ValidString(h) || strings.ContainsAny(h, "\r\n") || !strings.HasPrefix(h, "first line  second line é") {
		t.Fatalf("header %q (%d bytes)", h, len(h))
	}
}

func TestHeaderValue(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain", "plain"},
		{"a\r\nb\nc", "a  b c"},
		{"", "error"},
		{" \r\n ", "error"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{strings.Repeat("a", 600), strings.Repeat("a", 512)},
		// 511 ASCII bytes then a 2-byte rune: the rune does not fit and is cut whole.
		{strings.Repeat("a", 511) + "éé", strings.Repeat("a", 511)},
		{strings.Repeat("a", 510) + "é", strings.Repeat("a", 510) + "é"},
	}
	for _, c := range cases {
		if got := natsrpc.HeaderValue(c.in); got != c.want {
			t.Errorf("HeaderValue(%.20q...) = %.20q... (%d bytes), want %d bytes", c.in, got, len(got), len(c.want))
		}
	}
}

func TestReplyError(t *testing.T) {
	hdr := func(code, desc string) nats.Header {
		return nats.Header{micro.ErrorCodeHeader: {code}, micro.ErrorHeader: {desc}}
	}
	cases := []struct {
		name string
		msg  *nats.Msg
		want *protocol.Error
	}{
		{"success", &nats.Msg{Data: []byte(`{"data":1}`)}, nil},
		{"success mentioning error", &nats.Msg{Data: []byte(`{"x":1,"error":{"code":"not_found"}}`)}, nil},
		{"empty", &nats.Msg{}, nil},
		{"body", &nats.Msg{Data: []byte(`{"error":{"code":"not_found","message":"m"}}`)}, &protocol.Error{Code: "not_found", Message: "m"}},
		{"body after whitespace", &nats.Msg{Data: []byte(" \n{\"error\":{\"code\":\"credential_failed\",\"message\":\"m\"}}")}, &protocol.Error{Code: "credential_failed", Message: "m"}},
		{"headers only", &nats.Msg{Header: hdr("unavailable", "busy")}, &protocol.Error{Code: "unavailable", Message: "busy"}},
		{"body wins over headers", &nats.Msg{Header: hdr("unavailable", "cut"), Data: []byte(`{"error":{"code":"unavailable","message":"whole"}}`)}, &protocol.Error{Code: "unavailable", Message: "whole"}},
		{"headers with a broken body", &nats.Msg{Header: hdr("internal", "d"), Data: []byte(`{"error":`)}, &protocol.Error{Code: "internal", Message: "d"}},
		{"error body without code", &nats.Msg{Data: []byte(`{"error":{"message":"m"}}`)}, nil},
	}
	for _, c := range cases {
		got := natsrpc.ReplyError(c.msg)
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestCallReportsUndecodableReplyWithoutPayload(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	serve(t, nc, natsrpc.NewPool(natsrpc.PoolOptions{Workers: 1}, func(_ context.Context, r *natsrpc.Request) (any, error) {
		return json.RawMessage(`{"n":"hunter2"}`), nil
	}), natsrpc.Config{})
	var reply struct{ N int }
	err := natsrpc.NewClient(srv.Connect(t), wait).Call(context.Background(), "test.echo", map[string]int{}, &reply)
	if !errors.Is(err, natsrpc.ErrBadReply) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("got %v", err)
	}
}

// A reply type that decodes itself (protocol.ResolveSetsReply) is handed the body as it came; its
// errors are ErrBadReply, without the payload, like encoding/json's.
func TestCallHandsTheBodyToAJSONDecoder(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	body := make(chan string, 1)
	serve(t, nc, natsrpc.NewPool(natsrpc.PoolOptions{Workers: 1}, func(_ context.Context, r *natsrpc.Request) (any, error) {
		return json.RawMessage(<-body), nil
	}), natsrpc.Config{})
	client := natsrpc.NewClient(srv.Connect(t), wait)

	body <- `{"contract":1,"configs":[],"sets":[{"client_id":"c","environment_id":"e","configs":{},"hosts":[{"host_id":"h","agent_id":"a","identity":{"statement":"e30=","key_id":"k","signature":"AAE="}}]}]}`
	reply, err := natsrpc.CallFor[protocol.ResolveSetsReply](context.Background(), client, "test.echo", map[string]int{})
	if err != nil || reply.Check() != nil || len(reply.Sets) != 1 || string(reply.Sets[0].Hosts[0].Identity.Statement) != "{}" {
		t.Fatalf("got %+v, %v", reply, err)
	}

	body <- `{"contract":1,"next_after":"hunter2","sets":{"hunter2":1}}`
	_, err = natsrpc.CallFor[protocol.ResolveSetsReply](context.Background(), client, "test.echo", map[string]int{})
	if !errors.Is(err, natsrpc.ErrBadReply) || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "sets must be an array") {
		t.Fatalf("got %v", err)
	}
}

// A refused reply subject gets no answer and never reaches the handler; allowed ones are answered.
func TestAllowReplyDropsRefusedReplySubjects(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	var handled atomic.Int32
	serve(t, nc, natsrpc.NewPool(natsrpc.PoolOptions{Workers: 1}, func(_ context.Context, r *natsrpc.Request) (any, error) {
		handled.Add(1)
		return json.RawMessage(`"ok"`), nil
	}), natsrpc.Config{AllowReply: func(_, reply string) bool { return strings.HasSuffix(reply, ".good") }})
	sub, send := replies(t, srv.Connect(t))
	send("bad", "x") // handled (dropped) by the subscription before the next one
	send("good", "x")
	if msg := next(t, sub); suffix(msg) != "good" {
		t.Fatalf("reply on %s", msg.Subject)
	}
	if n := handled.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if msg, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("unexpected reply on %s", msg.Subject)
	}
}

// Requests waiting while every batch slot is busy are answered together in the next batch.
func TestBatcherGrowsBatchesWithLoad(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	var mu sync.Mutex
	var sizes []int
	first, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	// The subscription receives requests in order; a dropped sentinel after the five proves they were
	// all queued.
	sentinel := make(chan struct{})
	allow := func(_, reply string) bool {
		if strings.HasSuffix(reply, ".sentinel") {
			close(sentinel)
			return false
		}
		return true
	}
	serve(t, nc, natsrpc.NewBatcher(natsrpc.BatchOptions{Workers: 8, Batch: 8, Queue: 100}, func(_ context.Context, reqs []*natsrpc.Request) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		once.Do(func() { close(first); <-release })
		for _, r := range reqs {
			_ = r.RespondJSON(map[string]int{"batch": len(reqs)})
		}
	}), natsrpc.Config{AllowReply: allow})
	sub, send := replies(t, srv.Connect(t))
	send("0", "x")
	<-first // the only slot is busy
	for i := range 5 {
		send(string(rune('a'+i)), "x")
	}
	send("sentinel", "x")
	<-sentinel
	close(release)
	for range 6 {
		next(t, sub)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != 5 {
		t.Fatalf("batch sizes %v, want [1 5]", sizes)
	}
}

func TestBatcherRefusesWhenQueueFullAndRecoversPanics(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	first, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	serve(t, nc, natsrpc.NewBatcher(natsrpc.BatchOptions{Workers: 1, Batch: 1, Queue: 1}, func(_ context.Context, reqs []*natsrpc.Request) {
		once.Do(func() { close(first); <-release })
		_ = reqs[0].RespondJSON("answered") // answered before the panic: not answered again
		panic("boom")
	}), natsrpc.Config{})
	sub, send := replies(t, srv.Connect(t))
	send("1", "x")
	<-first
	send("2", "x") // queued
	send("3", "x") // refused
	msg := next(t, sub)
	if suffix(msg) != "3" {
		t.Fatalf("first reply on %s, want the refused 3", msg.Subject)
	}
	// The refusal says when to come back: nothing answered yet, so half the request timeout (10 s),
	// jittered over [d, 2d).
	if e := assertError(t, msg, protocol.CodeUnavailable); e.RetryAfterMS < 5000 || e.RetryAfterMS >= 10000 {
		t.Fatalf("retry_after_ms %d, want in [5000, 10000)", e.RetryAfterMS)
	}
	close(release)
	for range 2 {
		if msg := next(t, sub); string(msg.Data) != `"answered"` {
			t.Fatalf("reply %s on %s", msg.Data, msg.Subject)
		}
	}
	if msg, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("a request was answered twice: %s %s", msg.Subject, msg.Data)
	}
}

// A panic before any answer is answered as internal for every request of the batch.
func TestBatcherAnswersABatchThatPanicked(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	serve(t, nc, natsrpc.NewBatcher(natsrpc.BatchOptions{Workers: 4, Batch: 4}, func(_ context.Context, reqs []*natsrpc.Request) {
		var m map[string]int
		m["nil map"] = 1
	}), natsrpc.Config{})
	msg, err := srv.Connect(t).Request("test.echo", []byte("x"), wait)
	if err != nil {
		t.Fatal(err)
	}
	assertError(t, msg, protocol.CodeInternal)
}

// Stop lets a request in hand finish and answers it; a request after Stop gets no responder.
func TestStopAnswersRequestsInHand(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	log, _ := testinfra.Logger(t)
	started, release := make(chan struct{}), make(chan struct{})
	s, err := natsrpc.NewServer(nc, natsrpc.Config{Service: micro.Config{Name: "testsvc", Version: "1.0.0"}}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Handle(natsrpc.Endpoint{Name: "echo", Subject: "test.echo"}, natsrpc.NewPool(natsrpc.PoolOptions{Workers: 1},
		func(ctx context.Context, r *natsrpc.Request) (any, error) {
			close(started)
			<-release
			return json.RawMessage(`"done"`), ctx.Err()
		})); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	client := srv.Connect(t)
	sub, send := replies(t, client)
	send("1", "x")
	<-started
	testinfra.StopReleasing(t, s.Stop, release)
	if msg := next(t, sub); string(msg.Data) != `"done"` {
		t.Fatalf("reply %s", msg.Data)
	}
	if _, err := client.Request("test.echo", []byte("x"), wait); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("after stop: %v", err)
	}
}

// FuzzReplyError reads arbitrary replies (body and micro error headers): nothing panics, an error
// always has a code, and a reply with an error code header is never read as a success.
func FuzzReplyError(f *testing.F) {
	f.Add([]byte(`{"host":{"host_id":"h","agent_id":"a"},"configs":{}}`), "", "")
	f.Add([]byte(`{"error":{"code":"not_found","message":"x"}}`), "not_found", "x")
	f.Add([]byte(`{"error":null}`), "invalid_request", "bad")
	f.Add([]byte(`{"error":{"code":7}}`), "", "")
	f.Add([]byte(``), "unavailable", "")
	f.Fuzz(func(t *testing.T, data []byte, code, desc string) {
		msg := &nats.Msg{Data: data, Header: nats.Header{}}
		if code != "" {
			msg.Header.Set(micro.ErrorCodeHeader, code)
			msg.Header.Set(micro.ErrorHeader, desc)
		}
		perr := natsrpc.ReplyError(msg)
		if perr != nil && perr.Code == "" {
			t.Fatal("error reply without a code")
		}
		if msg.Header.Get(micro.ErrorCodeHeader) != "" && perr == nil {
			t.Fatal("a reply with an error code header read as a success")
		}
	})
}
