package natsconn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/platform/health"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func jsFor(t *testing.T, srv *testinfra.NATSServer) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// ensuredJS is jsFor a new server with ConfigSync's streams ensured.
func ensuredJS(t *testing.T, ctx context.Context) jetstream.JetStream {
	t.Helper()
	js := jsFor(t, testinfra.NATS(t))
	if err := EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	return js
}

// stream is js's stream name, failing the test when it is missing.
func stream(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) jetstream.Stream {
	t.Helper()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// storedMsgs is how many messages st holds now.
func storedMsgs(t *testing.T, ctx context.Context, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestEnsureStreamsIsIdempotent(t *testing.T) {
	ctx := context.Background()
	js := jsFor(t, testinfra.NATS(t))
	for range 2 {
		if err := EnsureStreams(ctx, js); err != nil {
			t.Fatal(err)
		}
	}
	events := stream(t, ctx, js, protocol.EventsStream)
	ec := events.CachedInfo().Config
	if ec.Retention != jetstream.LimitsPolicy || ec.Storage != jetstream.FileStorage ||
		ec.Duplicates != 2*time.Minute || ec.Subjects[0] != protocol.EventsSubjects {
		t.Fatalf("events stream config %+v", ec)
	}
	acks := stream(t, ctx, js, protocol.AcksStream)
	if ac := acks.CachedInfo().Config; ac.Retention != jetstream.WorkQueuePolicy || ac.Subjects[0] != protocol.AckSubjectAll {
		t.Fatalf("acks stream config %+v", ac)
	}
	hb := stream(t, ctx, js, protocol.HeartbeatsStream)
	if hc := hb.CachedInfo().Config; hc.Retention != jetstream.WorkQueuePolicy || hc.MaxMsgsPerSubject > 0 || hc.Subjects[0] != protocol.HeartbeatSubjectAll {
		t.Fatalf("heartbeats stream config %+v", hc)
	}
	// On one replica heartbeats are persisted asynchronously; events and acks never are.
	for name, want := range map[string]jetstream.PersistModeType{protocol.EventsStream: jetstream.DefaultPersistMode,
		protocol.AcksStream: jetstream.DefaultPersistMode, protocol.HeartbeatsStream: jetstream.AsyncPersistMode} {
		if got := stream(t, ctx, js, name).CachedInfo().Config.PersistMode; got != want {
			t.Errorf("%s persist mode %v, want %v", name, got, want)
		}
	}
}

// A heartbeats stream created before it was persisted asynchronously keeps its mode (JetStream refuses to
// change it) and is still brought up to date otherwise.
func TestEnsureStreamsKeepsAnExistingPersistMode(t *testing.T) {
	ctx := context.Background()
	js := jsFor(t, testinfra.NATS(t))
	old := StreamConfigs(StreamOptions{})[2]
	old.PersistMode, old.MaxAge = jetstream.DefaultPersistMode, time.Hour
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := EnsureStreams(ctx, js); err != nil {
			t.Fatal(err)
		}
	}
	hc := stream(t, ctx, js, protocol.HeartbeatsStream).CachedInfo().Config
	if hc.PersistMode != jetstream.DefaultPersistMode || hc.MaxAge != 24*time.Hour {
		t.Fatalf("heartbeats stream: persist mode %v, max age %v; want the default mode kept and 24h", hc.PersistMode, hc.MaxAge)
	}
}

// planUpdate keeps a stream's persistence mode, but for the asynchronous heartbeats stream of one
// replica asked for more, which JetStream can only have created again.
func TestPlanUpdate(t *testing.T) {
	cfg := func(name string, replicas int, mode jetstream.PersistModeType) jetstream.StreamConfig {
		return jetstream.StreamConfig{Name: name, Replicas: replicas, PersistMode: mode, MaxAge: time.Hour}
	}
	retention := func(c jetstream.StreamConfig, r jetstream.RetentionPolicy) jetstream.StreamConfig {
		c.Retention = r
		return c
	}
	const async, sync = jetstream.AsyncPersistMode, jetstream.DefaultPersistMode
	hb, acks := protocol.HeartbeatsStream, protocol.AcksStream
	for _, c := range []struct {
		name       string
		have, want jetstream.StreamConfig
		mode       jetstream.PersistModeType
		recreate   bool
	}{
		{"same mode", cfg(hb, 1, async), cfg(hb, 1, async), async, false},
		{"an older synchronous heartbeats stream stays so", cfg(hb, 1, sync), cfg(hb, 1, async), sync, false},
		{"scaled down from a replicated one", cfg(hb, 3, sync), cfg(hb, 1, async), sync, false},
		{"async heartbeats asked for replicas", cfg(hb, 1, async), cfg(hb, 3, sync), sync, true},
		{"replicated again", cfg(hb, 3, sync), cfg(hb, 3, sync), sync, false},
		{"any other stream is never recreated", cfg(acks, 1, async), cfg(acks, 3, sync), async, false},
		{"keep-last heartbeats become a work queue", retention(cfg(hb, 1, sync), jetstream.LimitsPolicy), retention(cfg(hb, 1, async), jetstream.WorkQueuePolicy), async, true},
		{"acks never change retention in place", retention(cfg(acks, 1, sync), jetstream.LimitsPolicy), retention(cfg(acks, 1, sync), jetstream.WorkQueuePolicy), sync, false},
	} {
		update, recreate := planUpdate(c.have, c.want)
		if recreate != c.recreate || update.PersistMode != c.mode || update.Replicas != c.want.Replicas || update.Name != c.want.Name {
			t.Errorf("%s: update %+v, recreate %v; want mode %v, recreate %v", c.name, update, recreate, c.mode, c.recreate)
		}
	}
}

// An existing stream with an older configuration is brought up to date.
func TestEnsureStreamsUpdatesDrift(t *testing.T) {
	ctx := context.Background()
	js := jsFor(t, testinfra.NATS(t))
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: protocol.EventsStream, Subjects: []string{protocol.EventsSubjects}, Storage: jetstream.FileStorage,
		Duplicates: 10 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	st := stream(t, ctx, js, protocol.EventsStream)
	if d := st.CachedInfo().Config.Duplicates; d != EventsDuplicateWindow {
		t.Fatalf("duplicate window %v, want %v", d, EventsDuplicateWindow)
	}
}

// Acks and heartbeats are work queues: every message is kept until ack-ingest's durable acknowledges it
// (several heartbeats of one agent included), then removed.
func TestAcksAndHeartbeatsAreWorkQueues(t *testing.T) {
	ctx := context.Background()
	js := ensuredJS(t, ctx)
	for _, c := range []struct{ stream, subject string }{
		{protocol.AcksStream, protocol.AckSubject("a1")}, {protocol.HeartbeatsStream, protocol.HeartbeatSubject("a1")},
	} {
		for i := range 3 {
			if _, err := js.Publish(ctx, c.subject, []byte{byte('0' + i)}); err != nil {
				t.Fatal(err)
			}
		}
		st := stream(t, ctx, js, c.stream)
		if n := storedMsgs(t, ctx, st); n != 3 {
			t.Fatalf("%s holds %d messages of one agent, want all 3", c.stream, n)
		}
		cons, err := js.CreateOrUpdateConsumer(ctx, c.stream, jetstream.ConsumerConfig{Durable: "ack-ingest", AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for m := range msgs.Messages() {
			got = append(got, m.Data()...)
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if string(got) != "012" {
			t.Fatalf("%s delivered %q, want every message in order", c.stream, got)
		}
		if n := storedMsgs(t, ctx, st); n != 0 {
			t.Fatalf("%s: acknowledged messages still stored (%d): not a work queue", c.stream, n)
		}
	}
}

// The keep-last heartbeats stream of earlier releases (limits retention, one message per agent) is
// created again as a work queue: JetStream changes no stream to a work queue in place. What it held is
// lost (each agent sends its heartbeat again within its interval); a second EnsureStreams leaves the new
// stream alone.
func TestEnsureStreamsRecreatesTheKeepLastHeartbeatsStream(t *testing.T) {
	ctx := context.Background()
	js := jsFor(t, testinfra.NATS(t))
	old := StreamConfigs(StreamOptions{})[2]
	old.Retention, old.MaxMsgsPerSubject, old.Description = jetstream.LimitsPolicy, 1, "ConfigSync agent heartbeats, last one per agent"
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, protocol.HeartbeatSubject("a1"), []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	st := stream(t, ctx, js, protocol.HeartbeatsStream)
	hc := st.CachedInfo().Config
	if hc.Retention != jetstream.WorkQueuePolicy || hc.MaxMsgsPerSubject > 0 || hc.PersistMode != jetstream.AsyncPersistMode {
		t.Fatalf("heartbeats stream after the upgrade: retention %v, max per subject %d, persist mode %v", hc.Retention, hc.MaxMsgsPerSubject, hc.PersistMode)
	}
	if n := storedMsgs(t, ctx, st); n != 0 {
		t.Fatalf("the recreated stream holds %d messages", n)
	}
	if _, err := js.Publish(ctx, protocol.HeartbeatSubject("a1"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	if n := storedMsgs(t, ctx, stream(t, ctx, js, protocol.HeartbeatsStream)); n != 1 {
		t.Fatalf("a second EnsureStreams changed the upgraded stream: %d messages, want 1", n)
	}
}

func TestConnectRetriesUntilTheServerIsUp(t *testing.T) {
	srv := testinfra.NATS(t)
	url := srv.URL()
	srv.Shutdown()

	log, logs := testinfra.Logger(t)
	nc, err := Connect(Config{URL: url, Name: "test"}, log, nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatalf("Connect must not fail while the server is down: %v", err)
	}
	defer nc.Close()
	if err := Check(nc)(context.Background()); err == nil {
		t.Fatal("readiness passed while disconnected")
	}
	srv.Restart(t)
	for !nc.IsConnected() {
		time.Sleep(10 * time.Millisecond)
	}
	if err := Check(nc)(context.Background()); err != nil {
		t.Fatalf("readiness after connect: %v", err)
	}
	if err := Drain(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	if !nc.IsClosed() {
		t.Fatal("drained connection not closed")
	}
	if logs.FilterMessage("nats connected").Len() == 0 {
		t.Fatal("connect not logged")
	}
}

func TestConnectWithCredentialsNeverLeaksThem(t *testing.T) {
	srv := testinfra.NATS(t, testinfra.WithUsers([]*server.User{{Username: "svc", Password: "right-pass"}}))
	log, logs := testinfra.Logger(t)
	nc, err := Connect(Config{URL: srv.URL(), User: "svc", Password: "right-pass"}, log)
	if err != nil {
		t.Fatal(err)
	}
	for !nc.IsConnected() {
		time.Sleep(10 * time.Millisecond)
	}
	nc.Close()

	tokenSrv := testinfra.NATS(t, testinfra.WithServerOptions(func(o *server.Options) { o.Authorization = "tok-secret" }))
	nc, err = Connect(Config{URL: tokenSrv.URL(), Token: "tok-secret"}, log)
	if err != nil {
		t.Fatal(err)
	}
	for !nc.IsConnected() {
		time.Sleep(10 * time.Millisecond)
	}
	nc.Close()

	for _, e := range logs.All() {
		line := e.Message
		for _, v := range e.ContextMap() {
			if s, ok := v.(string); ok {
				line += " " + s
			}
		}
		if strings.Contains(line, "right-pass") || strings.Contains(line, "tok-secret") {
			t.Fatalf("credential logged: %q", line)
		}
	}
}

func TestModule(t *testing.T) {
	srv := testinfra.NATS(t)
	t.Setenv("NATS_URL", srv.URL())
	log, _ := testinfra.Logger(t)
	var got struct {
		fx.In
		Conn   *nats.Conn
		JS     jetstream.JetStream
		Checks []health.Check `group:"readiness"`
	}
	app := fxtest.New(t, fx.Supply(log), Module, fx.Populate(&got))
	app.RequireStart()
	ctx := context.Background()
	for _, name := range []string{protocol.EventsStream, protocol.AcksStream, protocol.HeartbeatsStream} {
		if _, err := got.JS.Stream(ctx, name); err != nil {
			t.Fatalf("stream %s not ensured at start: %v", name, err)
		}
	}
	if len(got.Checks) != 1 || got.Checks[0].Name != "nats" || got.Checks[0].Func(ctx) != nil {
		t.Fatalf("readiness checks %+v", got.Checks)
	}
	app.RequireStop()
	if !got.Conn.IsClosed() {
		t.Fatal("connection not drained and closed at stop")
	}
}

// Services starting together on a new server all ensure the streams at once: the streams are created,
// and none is updated (an update while others create consumers is what trips a data race inside
// nats-server under -race; CreateOrUpdateStream would update a stream another caller just created).
func TestEnsureStreamsConcurrentlyOnANewServerNeverUpdates(t *testing.T) {
	ctx := context.Background()
	srv := testinfra.NATS(t)
	watcher := srv.Connect(t)
	updates, err := watcher.SubscribeSync("$JS.EVENT.ADVISORY.STREAM.UPDATED.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	const callers = 8
	jss := make([]jetstream.JetStream, callers)
	for i := range jss {
		jss[i] = jsFor(t, srv)
	}
	errs := make(chan error, callers)
	start := make(chan struct{})
	for _, js := range jss {
		go func() {
			<-start
			errs <- EnsureStreams(ctx, js)
		}()
	}
	close(start)
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{protocol.EventsStream, protocol.AcksStream, protocol.HeartbeatsStream} {
		if _, err := jss[0].Stream(ctx, name); err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	if msg, err := updates.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a stream was updated: %s %s", msg.Subject, msg.Data)
	}
}

// Every stream is bounded (the account refuses one without MaxBytes), and a stream created before the
// limits existed gets them.
func TestStreamsAreBounded(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range StreamConfigs(StreamOptions{}) {
		if cfg.MaxBytes != StreamMaxBytes || cfg.MaxMsgSize != StreamMaxMsgSize || cfg.Discard != jetstream.DiscardOld {
			t.Fatalf("stream %s: max bytes %d, max msg size %d, discard %v", cfg.Name, cfg.MaxBytes, cfg.MaxMsgSize, cfg.Discard)
		}
	}
	js := jsFor(t, testinfra.NATS(t))
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: protocol.AcksStream, Subjects: []string{protocol.AckSubjectAll}, Storage: jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardOld, MaxAge: 24 * time.Hour,
		Description: "ConfigSync agent config-apply acks, consumed once by ack-ingest",
	}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	st := stream(t, ctx, js, protocol.AcksStream)
	if c := st.CachedInfo().Config; c.MaxBytes != StreamMaxBytes || c.MaxMsgSize != StreamMaxMsgSize {
		t.Fatalf("acks stream not updated to the limits: %+v", c)
	}
	// A message over the size limit is refused by the stream.
	if _, err := js.Publish(ctx, protocol.AckSubject("agent-a"), make([]byte, StreamMaxMsgSize+1)); err == nil {
		t.Fatal("the acks stream stored a message over StreamMaxMsgSize")
	}
}

// With NATS_MANAGE_STREAMS=false the Module leaves the streams alone (the user may not manage them), and
// the connection uses NATS_INBOX_PREFIX for its requests.
func TestModuleWithoutStreamManagement(t *testing.T) {
	srv := testinfra.NATS(t)
	t.Setenv("NATS_URL", srv.URL())
	t.Setenv("NATS_MANAGE_STREAMS", "false")
	t.Setenv("NATS_INBOX_PREFIX", "_INBOX_delivery")
	log, _ := testinfra.Logger(t)
	var got struct {
		fx.In
		Conn *nats.Conn
		JS   jetstream.JetStream
	}
	app := fxtest.New(t, fx.Supply(log), Module, fx.Populate(&got))
	app.RequireStart()
	defer app.RequireStop()
	if _, err := got.JS.Stream(context.Background(), protocol.EventsStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream created without stream management: %v", err)
	}
	if inbox := got.Conn.NewInbox(); !strings.HasPrefix(inbox, "_INBOX_delivery.") {
		t.Fatalf("inbox %q", inbox)
	}
}

func TestTLSOptionsNeedCertAndKeyTogether(t *testing.T) {
	if _, err := TLSOptions("", "client.pem", ""); err == nil {
		t.Fatal("a client certificate without its key was accepted")
	}
	if opts, err := TLSOptions("", "", ""); err != nil || len(opts) != 0 {
		t.Fatalf("no TLS: %d options, %v", len(opts), err)
	}
}

// NATS_TLS_CA turns TLS on: the connection verifies the server against that CA.
func TestConnectWithTLS(t *testing.T) {
	srv := testinfra.NATS(t, testinfra.WithTLS())
	log, _ := testinfra.Logger(t)
	nc, err := Connect(Config{URL: srv.URL(), TLSCA: srv.CAFile()}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Fatalf("not a TLS connection: %v", err)
	}
}
