package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/platform/jsconsumer"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/platform/metrics/metricstest"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/platform/outbox"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 30 * time.Second

// listen serves m on a free local port for the test's lifetime and returns its scrape URL.
func listen(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	log, _ := testinfra.Logger(t)
	l := metrics.NewListener("127.0.0.1:0", m, log)
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return l.URL()
}

func TestListenerServesGoProcessAndBuildInfo(t *testing.T) {
	m := metrics.New()
	url := listen(t, m)
	before := metricstest.Get(t, url)
	if before.Has("configsync_build_info", map[string]string{"service": "resolver"}) {
		t.Fatal("build info before BuildInfo")
	}
	m.BuildInfo("resolver")
	m.BuildInfo("resolver") // twice (devstack modules share the registry): no panic
	m.BuildInfo("delivery")
	s := metricstest.Get(t, url)
	for _, svc := range []string{"resolver", "delivery"} {
		if got := s.Value("configsync_build_info", map[string]string{"service": svc, "version": metrics.Version()}); got != 1 {
			t.Fatalf("build_info{service=%s} = %v, want 1", svc, got)
		}
	}
	// The Go collector's goroutine gauge follows the process (500 more, well beyond what the test's
	// own connections and servers add or retire between two scrapes).
	g0 := s.Value("go_goroutines", nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 500 {
		wg.Go(func() { <-stop })
	}
	g1 := metricstest.Get(t, url).Value("go_goroutines", nil)
	close(stop)
	wg.Wait()
	if g1 < g0+400 {
		t.Fatalf("go_goroutines %v -> %v after starting 500", g0, g1)
	}
	if metricstest.Get(t, url).Value("process_start_time_seconds", nil) <= 0 {
		t.Fatal("no process collector")
	}
	// Only /metrics is served.
	resp, err := http.Get(url[:len(url)-len("/metrics")] + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/healthz on the metrics listener: %s", resp.Status)
	}
}

func TestRPCObserverCountsRequestsErrorsAndBatches(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	log, _ := testinfra.Logger(t)
	m := metrics.New()
	url := listen(t, m)
	errDomain := errors.New("not here")
	s, err := natsrpc.NewServer(nc, natsrpc.Config{
		Service:  micro.Config{Name: "test", Version: "0.0.1"},
		Observer: m.RPC(),
		MapError: func(_ string, err error) *protocol.Error {
			if errors.Is(err, errDomain) {
				return protocol.Errorf(protocol.CodeNotFound, "%s", err)
			}
			return nil
		},
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	pool := natsrpc.NewPool(natsrpc.PoolOptions{Workers: 2}, func(_ context.Context, r *natsrpc.Request) (any, error) {
		if string(r.Data) == `"missing"` {
			return nil, errDomain
		}
		return map[string]bool{"ok": true}, nil
	})
	if err := s.Handle(natsrpc.Endpoint{Name: "get", Subject: "test.get"}, pool); err != nil {
		t.Fatal(err)
	}
	batcher := natsrpc.NewBatcher(natsrpc.BatchOptions{Workers: 10, Batch: 10}, func(_ context.Context, reqs []*natsrpc.Request) {
		for _, r := range reqs {
			_ = r.RespondJSON(map[string]bool{"ok": true})
		}
	})
	if err := s.Handle(natsrpc.Endpoint{Name: "fetch", Subject: "test.fetch"}, batcher); err != nil {
		t.Fatal(err)
	}

	before := metricstest.Get(t, url)
	c := natsrpc.NewClient(srv.Connect(t), wait)
	ctx := context.Background()
	for range 3 {
		if err := c.Call(ctx, "test.get", "x", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Call(ctx, "test.get", "missing", nil); err == nil {
		t.Fatal("want not found")
	}
	for range 2 {
		if err := c.Call(ctx, "test.fetch", "x", nil); err != nil {
			t.Fatal(err)
		}
	}
	// The server records a request once its reply is published, so the client may see the reply a
	// moment before the metric moves: wait for the counts, then they must be exact.
	testinfra.EventuallyNoError(t, wait, func() error {
		after := metricstest.Get(t, url)
		delta := func(name string, l map[string]string) float64 { return after.Value(name, l) - before.Value(name, l) }
		for _, tc := range []struct {
			name string
			l    map[string]string
			want float64
		}{
			{"configsync_rpc_requests_total", map[string]string{"service": "test", "endpoint": "get", "code": "ok"}, 3},
			{"configsync_rpc_requests_total", map[string]string{"service": "test", "endpoint": "get", "code": protocol.CodeNotFound}, 1},
			{"configsync_rpc_requests_total", map[string]string{"service": "test", "endpoint": "fetch", "code": "ok"}, 2},
			{"configsync_rpc_request_duration_seconds", map[string]string{"service": "test", "endpoint": "get"}, 4},
			{"configsync_rpc_request_duration_seconds", map[string]string{"service": "test", "endpoint": "fetch"}, 2},
		} {
			if got := delta(tc.name, tc.l); got != tc.want {
				return fmt.Errorf("%s%v moved by %v, want %v", tc.name, tc.l, got, tc.want)
			}
		}
		if got := after.Sum("configsync_rpc_batch_size", map[string]string{"service": "test", "endpoint": "fetch"}) -
			before.Sum("configsync_rpc_batch_size", map[string]string{"service": "test", "endpoint": "fetch"}); got != 2 {
			return fmt.Errorf("batch sizes sum moved by %v, want 2 (two requests batched)", got)
		}
		return nil
	}, "the RPC metrics of 6 answered requests")
}

// A request whose reply subject the server refuses is counted as dropped.
func TestRPCObserverCountsDroppedRequests(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	log, _ := testinfra.Logger(t)
	m := metrics.New()
	s, err := natsrpc.NewServer(nc, natsrpc.Config{
		Service:    micro.Config{Name: "guarded", Version: "0.0.1"},
		Observer:   m.RPC(),
		AllowReply: func(_, reply string) bool { return !strings.HasPrefix(reply, "_INBOX_evil") },
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	pool := natsrpc.NewPool(natsrpc.PoolOptions{Workers: 1}, func(context.Context, *natsrpc.Request) (any, error) { return "ok", nil })
	if err := s.Handle(natsrpc.Endpoint{Name: "get", Subject: "guarded.get"}, pool); err != nil {
		t.Fatal(err)
	}
	dropped := map[string]string{"service": "guarded", "endpoint": "get", "code": "dropped"}
	url := listen(t, m)
	if err := nc.PublishRequest("guarded.get", "_INBOX_evil.x", []byte(`"x"`)); err != nil {
		t.Fatal(err)
	}
	metricstest.Eventually(t, "the refused request counted as dropped", func() bool {
		return metricstest.Get(t, url).Value("configsync_rpc_requests_total", dropped) == 1
	})
}

// jetStream starts a nats-server for the test and returns it with a JetStream client on it, once
// ensure created the streams the test uses.
func jetStream(t *testing.T, ctx context.Context, ensure func(context.Context, jetstream.JetStream) error) (*testinfra.NATSServer, jetstream.JetStream) {
	t.Helper()
	srv := testinfra.NATS(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	return srv, js
}

func TestConsumerObserverCountsOutcomesBatchesAndLag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, js := jetStream(t, ctx, func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TEST", Subjects: []string{"test.>"}})
		return err
	})
	m := metrics.New()
	url := listen(t, m)
	log, _ := testinfra.Logger(t)
	c := jsconsumer.New(js, jsconsumer.Config{
		Stream: "TEST", Consumer: jetstream.ConsumerConfig{Durable: "obs"}, Batch: 5, Observer: m.Consumers(),
	}, func(_ context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
		out := make([]jsconsumer.Outcome, len(msgs))
		for i, msg := range msgs {
			out[i] = jsconsumer.Ack
			if string(msg.Data()) == "bad" {
				out[i] = jsconsumer.Terminate("bad")
			}
		}
		return out
	}, log)
	before := metricstest.Get(t, url)
	for _, d := range []string{"a", "b", "bad", "c"} {
		if _, err := js.Publish(ctx, "test.x", []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	c.Start()
	defer func() { _ = c.Stop(context.Background()) }()
	var after metricstest.Scrape
	acked := map[string]string{"consumer": "obs", "outcome": "ack", "result": "ok"}
	metricstest.Eventually(t, "4 messages settled", func() bool {
		after = metricstest.Get(t, url)
		return after.Value("configsync_consumer_messages_total", acked) == 3
	})
	if got := after.Value("configsync_consumer_messages_total", map[string]string{"consumer": "obs", "outcome": "terminate"}) -
		before.Value("configsync_consumer_messages_total", map[string]string{"consumer": "obs", "outcome": "terminate"}); got != 1 {
		t.Fatalf("terminated moved by %v, want 1", got)
	}
	obs := map[string]string{"consumer": "obs"}
	if got := after.Sum("configsync_consumer_batch_size", obs); got != 4 {
		t.Fatalf("batch sizes sum to %v, want 4", got)
	}
	if got := after.Value("configsync_consumer_lag_seconds", obs); got != 4 {
		t.Fatalf("%v lags observed, want 4", got)
	}
	if after.Sum("configsync_consumer_lag_seconds", obs) <= 0 {
		t.Fatal("lags sum to 0: the JetStream timestamps were not read")
	}
	if after.Value("configsync_consumer_handle_duration_seconds", obs) < 1 {
		t.Fatal("no handler call timed")
	}
}

func TestOutboxObserverAndBacklog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	srv, js := jetStream(t, ctx, natsconn.EnsureStreams)
	pool := testinfra.Postgres(t)
	log, _ := testinfra.Logger(t)
	m := metrics.New()
	stat := func() metrics.PoolStat { return pool.Stat() }
	m.RegisterPool(pool, stat)
	m.RegisterPool(pool, stat) // a shared pool registered twice is collected once
	url := listen(t, m)
	r := outbox.NewRelay(pool, js, log, outbox.RelayOptions{})
	r.SetObserver(m.Outbox(r))

	before := metricstest.Get(t, url)
	if got := before.Value("configsync_outbox_pending", nil); got != 0 {
		t.Fatalf("pending %v on an empty outbox", got)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range 3 {
			if _, err := outbox.Insert(ctx, tx, protocol.ConfigChangedSubject, map[string]int{"i": i}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE outbox SET created_at = now() - interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	waiting := metricstest.Get(t, url)
	if got := waiting.Value("configsync_outbox_pending", nil); got != 3 {
		t.Fatalf("pending %v, want 3", got)
	}
	if got := waiting.Value("configsync_outbox_oldest_age_seconds", nil); got < 3600 {
		t.Fatalf("oldest age %v, want at least an hour", got)
	}
	if n, err := r.RelayOnce(ctx); err != nil || n != 3 {
		t.Fatalf("RelayOnce = %d, %v", n, err)
	}
	after := metricstest.Get(t, url)
	if got := after.Value("configsync_outbox_published_total", map[string]string{"result": "ok"}) -
		before.Value("configsync_outbox_published_total", map[string]string{"result": "ok"}); got != 3 {
		t.Fatalf("published ok moved by %v, want 3", got)
	}
	if after.Value("configsync_outbox_pending", nil) != 0 || after.Value("configsync_outbox_oldest_age_seconds", nil) != 0 {
		t.Fatal("backlog not cleared after relaying")
	}
	// The pool collector follows the pool's own statistics.
	if got := after.Value("configsync_db_pool_acquires_total", nil) - before.Value("configsync_db_pool_acquires_total", nil); got < 1 {
		t.Fatalf("pool acquires moved by %v", got)
	}
	if after.Value("configsync_db_pool_total_conns", nil) < 1 || len(after.Labels("configsync_db_pool_total_conns")) != 1 {
		t.Fatal("pool connections not collected once")
	}
	// A failed publish (JetStream gone) counts as an error.
	srv.Shutdown()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Insert(ctx, tx, protocol.ConfigChangedSubject, map[string]int{"i": 9})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 10*time.Second)
	defer cancelShort()
	if _, err := r.RelayOnce(short); err == nil {
		t.Fatal("RelayOnce succeeded without JetStream")
	}
	if got := metricstest.Get(t, url).Value("configsync_outbox_published_total", map[string]string{"result": "error"}); got < 1 {
		t.Fatalf("publish errors %v, want at least 1", got)
	}
}

func TestHTTPMiddlewareLabelsByRouteTemplate(t *testing.T) {
	m := metrics.New()
	url := listen(t, m)
	h := m.HTTP()
	r := mux.NewRouter()
	r.Use(h.Middleware("api"))
	r.HandleFunc("/v1/hosts/{id}", func(w http.ResponseWriter, req *http.Request) {
		if mux.Vars(req)["id"] == "missing" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"id": mux.Vars(req)["id"]})
	}).Methods(http.MethodGet)
	r.NotFoundHandler = h.Unmatched("api", http.NotFoundHandler())
	ts := httptest.NewServer(r)
	defer ts.Close()
	before := metricstest.Get(t, url)
	for _, p := range []string{"/v1/hosts/a", "/v1/hosts/b", "/v1/hosts/missing", "/nowhere/x"} {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	after := metricstest.Get(t, url)
	for _, tc := range []struct {
		l    map[string]string
		want float64
	}{
		{map[string]string{"service": "api", "route": "/v1/hosts/{id}", "method": "GET", "code": "200"}, 2},
		{map[string]string{"service": "api", "route": "/v1/hosts/{id}", "method": "GET", "code": "404"}, 1},
		{map[string]string{"service": "api", "route": "unmatched", "code": "404"}, 1},
	} {
		if got := after.Value("configsync_http_requests_total", tc.l) - before.Value("configsync_http_requests_total", tc.l); got != tc.want {
			t.Errorf("http requests %v moved by %v, want %v", tc.l, got, tc.want)
		}
	}
	if got := after.Value("configsync_http_request_duration_seconds", map[string]string{"route": "/v1/hosts/{id}"}); got != 3 {
		t.Errorf("%v durations for the route, want 3", got)
	}
	for _, l := range after.Labels("configsync_http_requests_total") {
		if l["route"] == "/v1/hosts/a" || l["route"] == "/nowhere/x" {
			t.Fatalf("a path became a label: %v", l)
		}
	}
}

// A nil *Metrics (an app without metrics.Module) hands out nil observers, so the libraries skip
// observing, and a middleware that only calls the handler.
func TestNilMetricsRecordNothing(t *testing.T) {
	var m *metrics.Metrics
	m.BuildInfo("x")
	m.RegisterPool("p", nil)
	m.RegisterStreams(nil, metrics.StreamTarget{Stream: "TEST"})
	if m.RPC() != nil || m.Consumers() != nil || m.Outbox(nil) != nil {
		t.Fatal("nil metrics handed out a non-nil observer")
	}
	var cfg natsrpc.Config
	cfg.Observer = m.RPC()
	if cfg.Observer != nil {
		t.Fatal("a nil observer became a non-nil natsrpc.Observer")
	}
	var called bool
	h := m.HTTP().Middleware("api")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if !called {
		t.Fatal("the middleware of nil metrics did not call the handler")
	}
}

// TestStreamCollectorReadsStreamsAndConsumers: published messages a durable has not consumed show as
// the stream's messages and bytes (against its MaxBytes) and the consumer's pending backlog; delivered
// ones as ack-pending until acknowledged. A stream that does not exist does not fail the scrape: its
// info_up is 0, and the other stream is read all the same.
func TestStreamCollectorReadsStreamsAndConsumers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	const maxBytes = 1 << 20
	_, js := jetStream(t, ctx, func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TEST", Subjects: []string{"test.>"}, MaxBytes: maxBytes, Discard: jetstream.DiscardOld})
		return err
	})
	cons, err := js.CreateOrUpdateConsumer(ctx, "TEST", jetstream.ConsumerConfig{Durable: "obs", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	m.RegisterStreams(js, metrics.StreamTarget{Stream: "TEST", Consumers: []string{"obs"}})
	// A second service of the process adds its own (and repeats one): each is read once.
	m.RegisterStreams(js, metrics.StreamTarget{Stream: "TEST", Consumers: []string{"obs"}},
		metrics.StreamTarget{Stream: "MISSING", Consumers: []string{"ghost"}})
	url := listen(t, m)

	const n = 7
	for i := range n {
		if _, err := js.Publish(ctx, "test.x", []byte(strings.Repeat("m", 100+i))); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, "TEST")
	if err != nil {
		t.Fatal(err)
	}
	stored := st.CachedInfo().State.Bytes
	if stored < n*100 {
		t.Fatalf("stream holds %d bytes for %d messages of 100+ bytes", stored, n)
	}
	expected := fmt.Sprintf(`
# HELP configsync_consumer_ack_pending_messages Messages the durable consumer delivered and that are not acknowledged yet.
# TYPE configsync_consumer_ack_pending_messages gauge
configsync_consumer_ack_pending_messages{consumer="obs"} 0
# HELP configsync_consumer_info_up 1 when the last scrape read the durable consumer's info from JetStream, else 0 (consumer or stream missing, no permission, timeout).
# TYPE configsync_consumer_info_up gauge
configsync_consumer_info_up{consumer="ghost"} 0
configsync_consumer_info_up{consumer="obs"} 1
# HELP configsync_consumer_pending_messages Messages of the stream the durable consumer has not delivered yet (its backlog).
# TYPE configsync_consumer_pending_messages gauge
configsync_consumer_pending_messages{consumer="obs"} %d
# HELP configsync_stream_bytes Bytes stored in the JetStream stream.
# TYPE configsync_stream_bytes gauge
configsync_stream_bytes{stream="TEST"} %d
# HELP configsync_stream_info_up 1 when the last scrape read the stream's info from JetStream, else 0 (stream missing, no permission, timeout).
# TYPE configsync_stream_info_up gauge
configsync_stream_info_up{stream="MISSING"} 0
configsync_stream_info_up{stream="TEST"} 1
# HELP configsync_stream_max_bytes The stream's MaxBytes limit (left out when unlimited): when bytes reach it, JetStream discards the oldest messages.
# TYPE configsync_stream_max_bytes gauge
configsync_stream_max_bytes{stream="TEST"} %d
# HELP configsync_stream_messages Messages stored in the JetStream stream.
# TYPE configsync_stream_messages gauge
configsync_stream_messages{stream="TEST"} %d
`, n, stored, maxBytes, n)
	families := []string{"configsync_stream_messages", "configsync_stream_bytes", "configsync_stream_max_bytes", "configsync_stream_info_up",
		"configsync_consumer_pending_messages", "configsync_consumer_ack_pending_messages", "configsync_consumer_info_up"}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(expected), families...); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(m.Registry, families...); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}

	// Three delivered, not yet acknowledged: they leave the backlog for ack-pending.
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var delivered []jetstream.Msg
	for msg := range batch.Messages() {
		delivered = append(delivered, msg)
	}
	if len(delivered) != 3 {
		t.Fatalf("fetched %d messages, want 3 (%v)", len(delivered), batch.Error())
	}
	obs := map[string]string{"consumer": "obs"}
	scrape := metricstest.Get(t, url)
	if p, a := scrape.Value("configsync_consumer_pending_messages", obs), scrape.Value("configsync_consumer_ack_pending_messages", obs); p != n-3 || a != 3 {
		t.Fatalf("after delivering 3: pending %v, ack pending %v; want %d and 3", p, a, n-3)
	}
	for _, msg := range delivered {
		if err := msg.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	scrape = metricstest.Get(t, url)
	if p, a := scrape.Value("configsync_consumer_pending_messages", obs), scrape.Value("configsync_consumer_ack_pending_messages", obs); p != n-3 || a != 0 {
		t.Fatalf("after acknowledging 3: pending %v, ack pending %v; want %d and 0", p, a, n-3)
	}
	// The stream keeps them (limits retention): the backlog is the consumer's, not the stream's size.
	if got := scrape.Value("configsync_stream_messages", map[string]string{"stream": "TEST"}); got != n {
		t.Fatalf("stream messages %v after consuming, want %d", got, n)
	}
	if scrape.Has("configsync_stream_messages", map[string]string{"stream": "MISSING"}) ||
		scrape.Has("configsync_consumer_pending_messages", map[string]string{"consumer": "ghost"}) {
		t.Fatal("values exported for a stream and consumer that do not exist")
	}
}

// TestStreamCollectorWithoutNATSKeepsTheScrapeShort: with the server gone, a scrape still answers,
// within the collector's timeout, with every info_up at 0.
func TestStreamCollectorWithoutNATSKeepsTheScrapeShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	srv, js := jetStream(t, ctx, func(ctx context.Context, js jetstream.JetStream) error {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TEST", Subjects: []string{"test.>"}, MaxBytes: 1 << 20}); err != nil {
			return err
		}
		_, err := js.CreateOrUpdateConsumer(ctx, "TEST", jetstream.ConsumerConfig{Durable: "obs", AckPolicy: jetstream.AckExplicitPolicy})
		return err
	})
	m := metrics.New()
	m.RegisterStreams(js, metrics.StreamTarget{Stream: "TEST", Consumers: []string{"obs"}})
	url := listen(t, m)
	if s := metricstest.Get(t, url); s.Value("configsync_stream_info_up", nil) != 1 || s.Value("configsync_consumer_info_up", nil) != 1 {
		t.Fatal("stream or consumer not read while the server runs")
	}
	srv.Shutdown()
	start := time.Now()
	s := metricstest.Get(t, url) // fails the test unless the scrape answers 200
	if took := time.Since(start); took > metrics.ScrapeTimeout+2*time.Second {
		t.Fatalf("a scrape without NATS took %v (timeout %v)", took, metrics.ScrapeTimeout)
	}
	if got := s.Value("configsync_stream_info_up", map[string]string{"stream": "TEST"}); got != 0 || !s.Has("configsync_stream_info_up", nil) {
		t.Fatalf("stream info_up %v without NATS, want 0", got)
	}
	if got := s.Value("configsync_consumer_info_up", map[string]string{"consumer": "obs"}); got != 0 || !s.Has("configsync_consumer_info_up", nil) {
		t.Fatalf("consumer info_up %v without NATS, want 0", got)
	}
	if s.Has("configsync_stream_messages", nil) || s.Has("configsync_consumer_pending_messages", nil) {
		t.Fatal("values exported without NATS")
	}
	if s.Value("go_goroutines", nil) <= 0 {
		t.Fatal("the rest of the registry is missing from the scrape")
	}
}
