package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/backoff"
	"github.com/configsync/configsync/libs/platform/outbox/sqlcdb"
	"github.com/configsync/configsync/libs/platform/tracing"
	"github.com/configsync/configsync/libs/protocol"
)

// RelayOptions tunes a Relay. Zero values take the defaults noted on each field.
type RelayOptions struct {
	// PollInterval is the fallback poll period when no NOTIFY arrives (default 1s).
	PollInterval time.Duration `env:"OUTBOX_POLL_INTERVAL" default:"1s"`
	// BatchSize is the number of rows claimed per transaction (default 100).
	BatchSize int `env:"OUTBOX_BATCH_SIZE" default:"100"`
	// PublishTimeout bounds the wait for one PubAck (default 5s).
	PublishTimeout time.Duration `env:"OUTBOX_PUBLISH_TIMEOUT" default:"5s"`
	// MinBackoff and MaxBackoff bound the exponential backoff after a failed publish
	// (defaults 200ms and 30s).
	MinBackoff time.Duration `env:"OUTBOX_MIN_BACKOFF" default:"200ms"`
	MaxBackoff time.Duration `env:"OUTBOX_MAX_BACKOFF" default:"30s"`
	// Stream is the stream every message must land in (default CONFIGSYNC_EVENTS): JetStream rejects a
	// publish that another stream would capture.
	Stream string `env:"OUTBOX_STREAM"`
}

func (o RelayOptions) withDefaults() RelayOptions {
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 5 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 200 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(30*time.Second, o.MinBackoff)
	}
	if o.Stream == "" {
		o.Stream = protocol.EventsStream
	}
	return o
}

// finishTimeout bounds recording a pass's results (marks, failure, commit) once publishing is over,
// even when the caller's context was cancelled.
const finishTimeout = 10 * time.Second

// maxErrorLen caps last_error so a pathological error cannot bloat the row.
const maxErrorLen = 1000

// Relay publishes committed outbox rows to JetStream. Any number of relays (one per config-api replica)
// may run against the same database.
type Relay struct {
	pool *pgxpool.Pool
	js   jetstream.JetStream
	log  *zap.Logger
	opts RelayOptions
	obs  Observer
}

// Observer is told about every publish attempt of a Relay (libs/platform/metrics implements it). It
// must be safe for concurrent use and must not block.
type Observer interface {
	// Published is called per row JetStream accepted (duplicate when the stream already held it) or,
	// with err set, per failed publish.
	Published(duplicate bool, err error)
}

// SetObserver makes o the relay's observer; call it before Run.
func (r *Relay) SetObserver(o Observer) { r.obs = o }

// Backlog is how many rows wait to be published and how long the oldest has waited.
func (r *Relay) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	row, err := sqlcdb.New(r.pool).OutboxBacklog(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: backlog: %w", err)
	}
	return row.Pending, time.Duration(row.OldestAgeSeconds * float64(time.Second)), nil
}

// NewRelay returns a relay; it does nothing until Run or RelayOnce.
func NewRelay(pool *pgxpool.Pool, js jetstream.JetStream, log *zap.Logger, opts RelayOptions) *Relay {
	return &Relay{pool: pool, js: js, log: log.Named("outbox"), opts: opts.withDefaults()}
}

// Run relays until ctx is cancelled, then returns nil. It LISTENs on configsync_outbox (reconnecting as
// needed) and runs a pass on every notification, every PollInterval, and straight away while passes
// come back full. After a failed publish it backs off exponentially, ignoring notifications meanwhile.
func (r *Relay) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	listening := make(chan struct{})
	var once sync.Once
	ready := func() { once.Do(func() { close(listening) }) }

	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { r.listen(lctx, wake, ready) })

	// Start passing only once LISTEN is active (or failed): any row committed after that is notified,
	// any row committed before is found by the first pass.
	select {
	case <-listening:
	case <-ctx.Done():
		return nil
	}

	poll := time.NewTimer(0)
	defer poll.Stop()
	var wait time.Duration
	for {
		n, err := r.RelayOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			wait = min(max(wait*2, r.opts.MinBackoff), r.opts.MaxBackoff)
			r.log.Warn("outbox relay pass failed, backing off", zap.Error(err), zap.Int("published", n), zap.Duration("backoff", wait))
			if !backoff.Sleep(ctx, wait) {
				return nil
			}
			continue
		}
		if wait > 0 {
			r.log.Info("outbox relay recovered")
			wait = 0
		}
		if n >= r.opts.BatchSize {
			continue // a full batch: more rows are probably waiting
		}
		resetTimer(poll, r.opts.PollInterval)
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-poll.C:
		}
	}
}

// RelayOnce claims up to BatchSize unpublished rows, publishes them in id order and marks them
// published, all in one transaction. It stops at the first failed publish, recording attempts and
// last_error on that row (the rest stay for the next pass). It returns how many rows it published.
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("outbox: begin: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // no-op after a commit
	}()
	q := sqlcdb.New(tx)
	rows, err := q.ClaimOutbox(ctx, int32(r.opts.BatchSize))
	if err != nil {
		return 0, fmt.Errorf("outbox: claim: %w", err)
	}
	if len(rows) == 0 {
		return 0, nil
	}

	published := make([]int64, 0, len(rows))
	var pubErr error
	var failed sqlcdb.ClaimOutboxRow
	for _, row := range rows {
		if err := r.publish(ctx, row); err != nil {
			pubErr, failed = err, row
			break
		}
		published = append(published, row.ID)
	}

	// What JetStream accepted must be recorded even if ctx was cancelled meanwhile (shutdown);
	// otherwise those rows would be published again (and dropped only inside the duplicate window).
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if len(published) > 0 {
		if err := q.MarkOutboxPublished(fctx, published); err != nil {
			return 0, fmt.Errorf("outbox: mark published: %w", err)
		}
	}
	if pubErr != nil && ctx.Err() == nil {
		msg := pubErr.Error()
		if len(msg) > maxErrorLen {
			msg = msg[:maxErrorLen]
		}
		if err := q.RecordOutboxFailure(fctx, sqlcdb.RecordOutboxFailureParams{ID: failed.ID, LastError: &msg}); err != nil {
			return 0, fmt.Errorf("outbox: record failure: %w", err)
		}
	}
	if err := tx.Commit(fctx); err != nil {
		return 0, fmt.Errorf("outbox: commit: %w", err)
	}
	if pubErr != nil {
		if ctx.Err() != nil {
			return len(published), ctx.Err()
		}
		return len(published), fmt.Errorf("outbox: publish row %d (attempt %d): %w", failed.ID, failed.Attempts+1, pubErr)
	}
	r.log.Debug("outbox rows published", zap.Int("count", len(published)), zap.Int64("last_id", published[len(published)-1]))
	return len(published), nil
}

// tracer names the relay's spans: one per published row written under a trace.
var tracer = tracing.Tracer("github.com/configsync/configsync/libs/platform/outbox")

func (r *Relay) publish(ctx context.Context, row sqlcdb.ClaimOutboxRow) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.PublishTimeout)
	defer cancel()
	msg := &nats.Msg{Subject: row.Subject, Data: row.Payload, Header: nats.Header{}}
	if row.Traceparent != nil {
		var span trace.Span
		ctx, span = tracer.Start(tracing.FromTraceparent(ctx, *row.Traceparent), "outbox.publish",
			trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attribute.String("messaging.destination.name", row.Subject)))
		defer span.End()
		tracing.Inject(ctx, msg)
	}
	ack, err := r.js.PublishMsg(ctx, msg,
		jetstream.WithMsgID(MsgID(row.ID)),
		jetstream.WithExpectStream(r.opts.Stream),
	)
	if r.obs != nil {
		r.obs.Published(err == nil && ack.Duplicate, err)
	}
	if err != nil {
		return err
	}
	if ack.Duplicate {
		// Published before by a relay that did not get to commit: the stream kept the first copy.
		r.log.Info("outbox row was already in the stream", zap.Int64("id", row.ID), zap.String("subject", row.Subject))
	}
	return nil
}

// listen keeps a dedicated connection LISTENing on NotifyChannel and turns notifications into wake-ups.
// ready is called once the first LISTEN succeeded or failed.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}, ready func()) {
	wait := r.opts.MinBackoff
	for reconnect := false; ; reconnect = true {
		listened, err := r.listenOnce(ctx, wake, ready, reconnect)
		ready()
		if ctx.Err() != nil {
			return
		}
		if listened {
			wait = r.opts.MinBackoff
		}
		r.log.Warn("outbox listener lost, relying on polling until it reconnects", zap.Error(err), zap.Duration("retry_in", wait))
		if !backoff.Sleep(ctx, wait) {
			return
		}
		wait = min(wait*2, r.opts.MaxBackoff)
	}
}

func (r *Relay) listenOnce(ctx context.Context, wake chan<- struct{}, ready func(), reconnect bool) (bool, error) {
	// Its own connection, not one of the pool's: LISTEN holds the session for the relay's lifetime.
	conn, err := pgx.ConnectConfig(ctx, r.pool.Config().ConnConfig)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{NotifyChannel}.Sanitize()); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	ready()
	if reconnect {
		// Rows may have committed while no LISTEN was active. (At startup Run passes once LISTEN is up.)
		signal(wake)
	}
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return true, ctx.Err()
			}
			return true, fmt.Errorf("wait for notification: %w", err)
		}
		signal(wake)
	}
}

// signal wakes the relay loop; a pending wake-up already covers any number of notifications.
func signal(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}
