package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// countingJS counts PublishMsg calls per Nats-Msg-Id, to prove no row is ever worked on twice.
type countingJS struct {
	jetstream.JetStream
	calls atomic.Int64
	mu    sync.Mutex
	ids   map[string]int
}

func newCountingJS(js jetstream.JetStream) *countingJS {
	return &countingJS{JetStream: js, ids: map[string]int{}}
}

func (c *countingJS) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := c.JetStream.PublishMsg(ctx, msg, opts...)
	if err == nil {
		c.calls.Add(1)
		c.mu.Lock()
		c.ids[msg.Header.Get(jetstream.MsgIDHeader)]++
		c.mu.Unlock()
	}
	return ack, err
}

func (c *countingJS) duplicates() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var d []string
	for id, n := range c.ids {
		if n > 1 {
			d = append(d, fmt.Sprintf("%s x%d", id, n))
		}
	}
	return d
}

type env struct {
	pool *pgxpool.Pool
	nats *testinfra.NATSServer
	js   jetstream.JetStream
	log  *zap.Logger
	logs *observer.ObservedLogs
}

func setup(t *testing.T, natsOpts ...nats.Option) env { return setupB(t, natsOpts...) }

func setupB(t testing.TB, natsOpts ...nats.Option) env {
	t.Helper()
	srv := testinfra.NATS(t)
	js, err := jetstream.New(srv.Connect(t, natsOpts...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := natsconn.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	log, logs := testinfra.Logger(t)
	return env{pool: testinfra.Postgres(t), nats: srv, js: js, log: log, logs: logs}
}

func insert(t testing.TB, pool *pgxpool.Pool, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range n {
			id, err := Insert(ctx, tx, protocol.ConfigChangedSubject, map[string]int{"seq": i})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// wantStreamMsgs fails unless the events stream holds want messages.
func wantStreamMsgs(t *testing.T, js jetstream.JetStream, want int) {
	t.Helper()
	st, err := js.Stream(context.Background(), protocol.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(want) {
		t.Fatalf("stream holds %d messages, want %d", info.State.Msgs, want)
	}
}

// relayOnce runs one relay pass and fails unless it published want rows.
func relayOnce(t *testing.T, r *Relay, want int) {
	t.Helper()
	if n, err := r.RelayOnce(context.Background()); err != nil || n != want {
		t.Fatalf("RelayOnce = %d, %v; want %d", n, err, want)
	}
}

func unpublished(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE published_at IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitTimeout only keeps a broken test from hanging; nothing asserts on timing.
const waitTimeout = 60 * time.Second

func startRelay(t *testing.T, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestInsertValidates(t *testing.T) {
	t.Parallel()
	pool := testinfra.Postgres(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, subject := range []string{"", "configsync.events.", "configsync.events.>", "configsync.events.*.x",
		"configsync.cmd.a1", "configsync.events.a..b", "configsync.events.a b", "other.events.x"} {
		if _, err := Insert(ctx, tx, subject, map[string]string{}); !errors.Is(err, ErrInvalidSubject) {
			t.Errorf("subject %q: got %v, want ErrInvalidSubject", subject, err)
		}
	}
	if _, err := Insert(ctx, tx, protocol.ConfigChangedSubject, []byte("{not json")); err == nil {
		t.Error("invalid JSON bytes accepted")
	}
	big := make([]byte, MaxPayload+1)
	for i := range big {
		big[i] = ' '
	}
	big[0] = '1'
	if _, err := Insert(ctx, tx, protocol.ConfigChangedSubject, big); err == nil {
		t.Error("oversized payload accepted")
	}
	if _, err := Insert(ctx, tx, protocol.ConfigChangedSubject, func() {}); err == nil {
		t.Error("unmarshalable payload accepted")
	}
	ev := protocol.ConfigChanged{EventID: "e1", Scope: protocol.ScopeEnvironment, ConfigType: "intervals", Version: 7}
	id1, err := Insert(ctx, tx, protocol.ConfigChangedSubject, ev)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := Insert(ctx, tx, protocol.ConfigChangedSubject, json.RawMessage(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if id2 <= id1 {
		t.Fatalf("ids %d then %d", id1, id2)
	}
	var payload []byte
	if err := tx.QueryRow(ctx, "SELECT payload FROM outbox WHERE id = $1", id1).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var back protocol.ConfigChanged
	if err := json.Unmarshal(payload, &back); err != nil || back.Version != 7 || back.EventID != "e1" {
		t.Fatalf("stored payload %s (%v)", payload, err)
	}
}

func TestCommittedRowIsPublishedWithItsMsgID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := NewRelay(e.pool, e.js, e.log, RelayOptions{})
	ids := insert(t, e.pool, 3)

	relayOnce(t, r, 3)
	relayOnce(t, r, 0) // nothing left
	st, err := e.js.Stream(context.Background(), protocol.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		msg, err := st.GetMsg(context.Background(), uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if got := msg.Header.Get(jetstream.MsgIDHeader); got != MsgID(id) {
			t.Errorf("message %d has Nats-Msg-Id %q, want %q (published in id order)", i+1, got, MsgID(id))
		}
		if msg.Subject != protocol.ConfigChangedSubject || string(msg.Data) != fmt.Sprintf(`{"seq": %d}`, i) {
			t.Errorf("message %d = %s %s", i+1, msg.Subject, msg.Data)
		}
	}
	var notNull int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL AND attempts = 0").Scan(&notNull); err != nil {
		t.Fatal(err)
	}
	if notNull != 3 {
		t.Fatalf("%d rows marked published, want 3", notNull)
	}
}

func TestRolledBackTransactionPublishesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Insert(ctx, tx, protocol.ConfigChangedSubject, map[string]string{"x": "y"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := NewRelay(e.pool, e.js, e.log, RelayOptions{})
	relayOnce(t, r, 0)
	// A committed row afterwards is published alone: the rolled-back one never existed.
	insert(t, e.pool, 1)
	relayOnce(t, r, 1)
	wantStreamMsgs(t, e.js, 1)
}

// TestSkipLockedLeavesClaimedRowsAlone: rows another relay's transaction holds are skipped, not waited
// for and not published.
func TestSkipLockedLeavesClaimedRowsAlone(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	ids := insert(t, e.pool, 10)

	other, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, "SELECT id FROM outbox WHERE id <= $1 FOR UPDATE", ids[4]); err != nil {
		t.Fatal(err)
	}
	js := newCountingJS(e.js)
	r := NewRelay(e.pool, js, e.log, RelayOptions{})
	relayOnce(t, r, 5) // the unlocked rows
	js.mu.Lock()
	for _, id := range ids[:5] {
		if js.ids[MsgID(id)] != 0 {
			t.Errorf("locked row %d was published", id)
		}
	}
	js.mu.Unlock()
	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	relayOnce(t, r, 5)
	wantStreamMsgs(t, e.js, 10)
}

// TestTwoRelaysPublishEveryRowExactlyOnce runs two relays against the same table while writers commit
// rows; every row reaches the stream once and no row is published twice (not even as a duplicate that
// JetStream would drop).
func TestTwoRelaysPublishEveryRowExactlyOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const (
		before  = 300 // waiting when the relays start
		writers = 4
		perTx   = 5
		txs     = 20 // per writer, while the relays run
	)
	total := before + writers*perTx*txs
	insert(t, e.pool, before)

	js1, js2 := newCountingJS(e.js), newCountingJS(e.js)
	opts := RelayOptions{BatchSize: 16, PollInterval: 50 * time.Millisecond}
	startRelay(t, NewRelay(e.pool, js1, e.log.Named("r1"), opts))
	startRelay(t, NewRelay(e.pool, js2, e.log.Named("r2"), opts))

	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range txs {
				insert(t, e.pool, perTx)
			}
		})
	}
	wg.Wait()
	testinfra.Eventually(t, waitTimeout, func() bool { return unpublished(t, e.pool) == 0 }, "every row published")

	wantStreamMsgs(t, e.js, total)
	c1, c2 := js1.calls.Load(), js2.calls.Load()
	t.Logf("relay 1 published %d, relay 2 published %d", c1, c2)
	if c1+c2 != int64(total) {
		t.Fatalf("relays made %d successful publishes for %d rows: some row was worked on twice", c1+c2, total)
	}
	merged := map[string]int{}
	for _, js := range []*countingJS{js1, js2} {
		js.mu.Lock()
		for id, n := range js.ids {
			merged[id] += n
		}
		js.mu.Unlock()
	}
	for id, n := range merged {
		if n != 1 {
			t.Errorf("%s published %d times", id, n)
		}
	}
	if d := append(js1.duplicates(), js2.duplicates()...); len(d) > 0 {
		t.Fatalf("duplicates: %v", d)
	}
}

// TestNotifyWakesTheRelay: with a poll interval far beyond the test's timeout, only the NOTIFY sent by
// the committing transaction can get the second row published.
func TestNotifyWakesTheRelay(t *testing.T) {
	t.Parallel()
	e := setup(t)
	insert(t, e.pool, 1) // committed before LISTEN: found by Run's first pass
	startRelay(t, NewRelay(e.pool, e.js, e.log, RelayOptions{PollInterval: time.Hour}))
	testinfra.Eventually(t, waitTimeout, func() bool { return unpublished(t, e.pool) == 0 }, "the first row")

	insert(t, e.pool, 1)
	testinfra.Eventually(t, waitTimeout, func() bool { return unpublished(t, e.pool) == 0 }, "the notified row")
	wantStreamMsgs(t, e.js, 2)
}

// TestJetStreamOutage: while JetStream is unreachable rows stay unpublished with the failures
// recorded; once it is back the relay publishes them, each exactly once in the stream.
func TestJetStreamOutage(t *testing.T) {
	t.Parallel()
	e := setup(t, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	e.nats.Shutdown()
	ids := insert(t, e.pool, 3)

	r := NewRelay(e.pool, e.js, e.log, RelayOptions{
		PublishTimeout: 200 * time.Millisecond,
		MinBackoff:     10 * time.Millisecond,
		MaxBackoff:     50 * time.Millisecond,
		PollInterval:   time.Hour,
	})
	n, err := r.RelayOnce(context.Background())
	if err == nil || n != 0 {
		t.Fatalf("RelayOnce with JetStream down = %d, %v; want an error", n, err)
	}
	var attempts int
	var lastErr *string
	if err := e.pool.QueryRow(context.Background(), "SELECT attempts, last_error FROM outbox WHERE id = $1", ids[0]).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || lastErr == nil || *lastErr == "" {
		t.Fatalf("first row: attempts %d, last_error %v; want the failure recorded", attempts, lastErr)
	}

	startRelay(t, r)
	// The relay keeps retrying (with backoff) while JetStream is down.
	testinfra.Eventually(t, waitTimeout, func() bool {
		var a int
		if err := e.pool.QueryRow(context.Background(), "SELECT attempts FROM outbox WHERE id = $1", ids[0]).Scan(&a); err != nil {
			t.Fatal(err)
		}
		return a >= 3
	}, "retries")
	if got := unpublished(t, e.pool); got != 3 {
		t.Fatalf("%d rows unpublished during the outage, want 3", got)
	}

	e.nats.Restart(t)
	testinfra.Eventually(t, waitTimeout, func() bool { return unpublished(t, e.pool) == 0 }, "publish after recovery")
	wantStreamMsgs(t, e.js, 3)
	if e.logs.FilterMessage("outbox relay pass failed, backing off").Len() == 0 {
		t.Fatal("failures not logged")
	}
}

// TestRepublishIsDeduplicated: a row published but not marked (relay crashed before commit) is
// published again, and JetStream keeps one copy thanks to Nats-Msg-Id.
func TestRepublishIsDeduplicated(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	ids := insert(t, e.pool, 1)
	r := NewRelay(e.pool, e.js, e.log, RelayOptions{})
	relayOnce(t, r, 1)
	if _, err := e.pool.Exec(ctx, "UPDATE outbox SET published_at = NULL WHERE id = $1", ids[0]); err != nil {
		t.Fatal(err)
	}
	relayOnce(t, r, 1)
	wantStreamMsgs(t, e.js, 1)
	if e.logs.FilterMessage("outbox row was already in the stream").Len() != 1 {
		t.Fatal("duplicate not reported")
	}
}

// TestRelayStopsOnCancel: Run returns promptly and cleanly, its listener connection closed.
func TestRelayStopsOnCancel(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewRelay(e.pool, e.js, e.log, RelayOptions{PollInterval: time.Hour}).Run(ctx) }()
	insert(t, e.pool, 1)
	testinfra.Eventually(t, waitTimeout, func() bool { return unpublished(t, e.pool) == 0 }, "publish")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
}

func TestModule(t *testing.T) {
	e := setup(t)
	t.Setenv("OUTBOX_POLL_INTERVAL", "1h")
	app := fxtest.New(t,
		fx.Supply(e.log, e.pool),
		fx.Provide(func() jetstream.JetStream { return e.js }),
		Module,
	)
	app.RequireStart()
	insert(t, e.pool, 2)
	testinfra.Eventually(t, waitTimeout, func() bool { return unpublished(t, e.pool) == 0 }, "publish")
	app.RequireStop()
	wantStreamMsgs(t, e.js, 2)
}
