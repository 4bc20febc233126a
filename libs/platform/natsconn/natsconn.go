// Package natsconn connects ConfigSync services to NATS and declares the JetStream streams they share.
package natsconn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
)

// Config is the NATS connection configuration. At most one of CredsFile, User/Password and Token is
// normally set. Secrets here are never logged.
type Config struct {
	URL       string `env:"NATS_URL" default:"nats://127.0.0.1:4222"`
	Name      string `env:"NATS_NAME"`
	CredsFile string `env:"NATS_CREDS"`
	User      string `env:"NATS_USER"`
	Password  string `env:"NATS_PASSWORD"`
	Token     string `env:"NATS_TOKEN"`
	// StreamReplicas is the replica count EnsureStreams asks for (3 on a production JetStream cluster).
	StreamReplicas int `env:"NATS_STREAM_REPLICAS" default:"1"`
	// ManageStreams: the Module creates or updates ConfigSync's streams at start. Only config-api's NATS
	// user may (libs/natsauth); delivery and ack-ingest set it false and their consumers wait for the
	// streams to exist.
	ManageStreams bool `env:"NATS_MANAGE_STREAMS" default:"true"`
	// InboxPrefix is the reply-inbox prefix, natsauth.ServiceInboxPrefix(service) ("_INBOX_<service>"):
	// a service user may subscribe only its own inboxes. Empty: nats.go's "_INBOX".
	InboxPrefix string `env:"NATS_INBOX_PREFIX"`
	// TLS: TLSCA is the CA file the server's certificate is verified against (it turns TLS on; a
	// tls:// URL does too, with the system roots). TLSCert/TLSKey are an optional client certificate,
	// for servers that verify clients.
	TLSCA   string `env:"NATS_TLS_CA"`
	TLSCert string `env:"NATS_TLS_CERT"`
	TLSKey  string `env:"NATS_TLS_KEY"`
}

// Connect opens a connection that never gives up: the first connect is retried in the background
// (RetryOnFailedConnect) and every later disconnect reconnects forever with jitter. Connection events
// are logged; message payloads never are. Extra options are applied last.
func Connect(cfg Config, log *zap.Logger, extra ...nats.Option) (*nats.Conn, error) {
	log = log.Named("nats")
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// The same jitter with TLS as without: a handful of service connections need no wider spread,
		// and nats.go's 5 s TLS default would keep the services away longer than their agents after a
		// NATS restart.
		nats.ReconnectJitter(500*time.Millisecond, 500*time.Millisecond),
		nats.DrainTimeout(10 * time.Second),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info("nats connected", zap.String("server", nc.ConnectedUrlRedacted()))
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("nats disconnected", zap.Error(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", zap.String("server", nc.ConnectedUrlRedacted()))
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Debug("nats reconnect attempt failed", zap.Error(err))
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			log.Info("nats connection closed")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			fields := []zap.Field{zap.Error(err)}
			if sub != nil {
				fields = append(fields, zap.String("subject", sub.Subject))
			}
			log.Error("nats async error", fields...)
		}),
	}
	switch {
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(cfg.InboxPrefix))
	}
	tlsOpts, err := TLSOptions(cfg.TLSCA, cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, err
	}
	opts = append(opts, tlsOpts...)
	opts = append(opts, extra...)
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		// The URL may embed user:password; say which setting is wrong without echoing it.
		return nil, fmt.Errorf("natsconn: connect (NATS_URL, credentials): %w", redactErr(err, cfg))
	}
	return nc, nil
}

// TLSOptions are the nats.go options for a CA file and an optional client certificate (both files or
// neither). An empty ca adds nothing.
func TLSOptions(ca, cert, key string) ([]nats.Option, error) {
	if (cert == "") != (key == "") {
		return nil, errors.New("natsconn: NATS_TLS_CERT and NATS_TLS_KEY go together (a client certificate and its key)")
	}
	var opts []nats.Option
	if ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	if cert != "" {
		opts = append(opts, nats.ClientCert(cert, key))
	}
	return opts, nil
}

// redactErr keeps secrets from cfg out of an error text.
func redactErr(err error, cfg Config) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, s := range []string{cfg.Password, cfg.Token} {
		if s != "" && strings.Contains(msg, s) {
			return errors.New("connect failed (error text withheld: it contained a credential)")
		}
	}
	return err
}

// StreamOptions tunes EnsureStreamsWith.
type StreamOptions struct {
	// Replicas per stream; 0 means 1.
	Replicas int
}

// EventsMaxAge bounds the CONFIGSYNC_EVENTS stream: consumers (delivery) are expected to keep up within
// minutes; a week covers long outages without growing forever.
const EventsMaxAge = 7 * 24 * time.Hour

// EventsDuplicateWindow is how long JetStream remembers a Nats-Msg-Id ("outbox-<id>"), so that a row
// republished after a relay crash between PubAck and commit is dropped as a duplicate.
const EventsDuplicateWindow = 2 * time.Minute

// Stream size limits. The ConfigSync account requires every stream to declare MaxBytes and bounds the
// total (libs/natsauth AccountJetStreamLimits: 12 GiB of disk, 2 GiB per stream), so the three streams
// at three replicas fit in it.
const (
	// StreamMaxBytes bounds each stream. Events: about a million config changes (an event is well under
	// 1 KiB); acks: a long ack-ingest outage of a 100k fleet; heartbeats (a few hundred bytes each): about
	// two million, some ten minutes of a 100k fleet beating every 30 s.
	// All three discard their oldest messages when full (DiscardOld), so new changes, acks and
	// heartbeats keep flowing; the oldest are the ones already consumed or superseded.
	StreamMaxBytes = 1 << 30
	// StreamMaxMsgSize bounds one message: ack-ingest refuses acks and heartbeats over 64 KiB anyway,
	// and events are far smaller, so a larger message is junk the stream should not store.
	StreamMaxMsgSize = 64 << 10
)

// StreamConfigs returns the configurations of ConfigSync's JetStream streams:
//
//   - CONFIGSYNC_EVENTS (configsync.events.>): file storage, limits retention, 2 minute dedup window,
//     so several consumers (every delivery replica group, future auditors) may read the same events.
//   - CONFIGSYNC_ACKS (configsync.agent.*.config.ack): work-queue retention. ack-ingest is the one
//     consumer (a shared durable pull consumer); a work queue deletes each ack once it is processed,
//     so the stream holds only the backlog and never needs a size limit tuned to fleet size. A second
//     consumer of acks would need a limits stream instead (a work queue refuses overlapping consumers).
//   - CONFIGSYNC_HEARTBEATS (configsync.agent.*.heartbeat): a work queue like the acks, consumed by
//     ack-ingest's one durable; ack-ingest keeps each host's latest heartbeat of a batch (a batch of an
//     outage's backlog holds several of a host). On a single replica it is created with asynchronous
//     persistence (see heartbeatsPersistMode).
//
// The heartbeats stream once kept only the last message per subject (MaxMsgsPerSubject 1). Then every
// heartbeat stored removes its agent's previous one, and JetStream takes the durable consumer's lock for
// each removal (and terminates, with an advisory, a removed message already delivered): at 40,000
// heartbeats/s over 100,000 agents the consumer was starved of that lock and handed ack-ingest about
// 1,000 messages a second while 99,000 waited, until the burst ended. A work queue removes a message only
// when it is acknowledged, at the pace of the consumer (the acks stream's shape, unaffected at the same
// rates). What it gives up: after an ack-ingest outage every heartbeat of the outage is replayed, not
// only each agent's last, up to StreamMaxBytes (DiscardOld keeps the newest).
func StreamConfigs(opts StreamOptions) []jetstream.StreamConfig {
	replicas := max(opts.Replicas, 1)
	return []jetstream.StreamConfig{
		{
			Name:        protocol.EventsStream,
			Description: "ConfigSync config-change events, written through the transactional outbox",
			Subjects:    []string{protocol.EventsSubjects},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardOld,
			MaxAge:      EventsMaxAge,
			Duplicates:  EventsDuplicateWindow,
			MaxBytes:    StreamMaxBytes,
			MaxMsgSize:  StreamMaxMsgSize,
			Replicas:    replicas,
		},
		{
			Name:        protocol.AcksStream,
			Description: "ConfigSync agent config-apply acks, consumed once by ack-ingest",
			Subjects:    []string{protocol.AckSubjectAll},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardOld,
			MaxAge:      24 * time.Hour,
			MaxBytes:    StreamMaxBytes,
			MaxMsgSize:  StreamMaxMsgSize,
			Replicas:    replicas,
		},
		{
			Name:        protocol.HeartbeatsStream,
			Description: "ConfigSync agent heartbeats, consumed once by ack-ingest",
			Subjects:    []string{protocol.HeartbeatSubjectAll},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardOld,
			PersistMode: heartbeatsPersistMode(replicas),
			MaxAge:      24 * time.Hour,
			MaxBytes:    StreamMaxBytes,
			MaxMsgSize:  StreamMaxMsgSize,
			Replicas:    replicas,
		},
	}
}

// heartbeatsPersistMode is the heartbeats stream's persistence. A single-replica file stream writes each
// message to its file as it is stored (one write system call per heartbeat); asynchronously persisted,
// its writes are gathered and flushed by the server in the background, as a replicated stream's always
// are (and JetStream refuses the asynchronous mode on replicated streams, so there it stays the default).
// Storing a heartbeat then costs about a third less CPU (BenchmarkStreamStore: 15-18 → 9-12 µs). What a
// crash of the server (not a clean stop, which flushes) can lose is the last few milliseconds of
// heartbeats, which every agent sends again within its interval; nothing orders heartbeats by stream
// sequence (a host's last_heartbeat_at never moves backwards by time). Acks stay synchronous: the ack
// sent last wins by its stream sequence, which a lost tail would hand out again.
func heartbeatsPersistMode(replicas int) jetstream.PersistModeType {
	if replicas == 1 {
		return jetstream.AsyncPersistMode
	}
	return jetstream.DefaultPersistMode
}

// EnsureStreams creates ConfigSync's JetStream streams, or updates them to the current configuration.
// It is idempotent, so every service replica calls it at start.
func EnsureStreams(ctx context.Context, js jetstream.JetStream) error {
	return EnsureStreamsWith(ctx, js, StreamOptions{})
}

// EnsureStreamsWith is EnsureStreams with options (replica count).
func EnsureStreamsWith(ctx context.Context, js jetstream.JetStream, opts StreamOptions) error {
	for _, cfg := range StreamConfigs(opts) {
		if err := ensureStream(ctx, js, cfg); err != nil {
			return fmt.Errorf("natsconn: ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// ensureStream creates cfg's stream, or updates it when its configuration differs. Every replica of
// every service runs this at start, so it never updates a stream whose configuration already matches:
// a needless update rewrites the stream's configuration while other services create their consumers
// (with -race an embedded nats-server v2.15.2 reports a data race inside itself then). For the same
// reason it does not use CreateOrUpdateStream, which tries an update first: two services starting
// together on a new server would have the second one update the stream the first just created.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// Creating is idempotent for an identical configuration; a service that lost the race to
		// create it with another one finds it below.
		if _, err = js.CreateStream(ctx, cfg); !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		s, err = js.Stream(ctx, cfg.Name)
	}
	if err != nil {
		return err
	}
	have := s.CachedInfo().Config
	if streamMatches(have, cfg) {
		return nil
	}
	update, recreate := planUpdate(have, cfg)
	if recreate {
		// Only the heartbeats stream gets here (see planUpdate); another replica may be recreating it
		// too, so a stream already gone or already created again is fine.
		if err := js.DeleteStream(ctx, cfg.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		return nil
	}
	_, err = js.UpdateStream(ctx, update)
	return err
}

// planUpdate returns the configuration to update a stream that does not match want to, or recreate
// when JetStream cannot change the stream in place and it may be deleted and created again. Only the
// heartbeats stream ever is: what that loses is the heartbeats ack-ingest has not written yet, each sent
// again by its agent within its interval. It is recreated when its retention changes (the keep-last
// limits stream of earlier releases becomes a work queue; JetStream changes no stream to or from a work
// queue) and when the asynchronously persisted stream of a single-replica deployment is asked for more
// replicas (an asynchronous stream cannot be replicated). Otherwise JetStream never changes a stream's
// persistence mode, so the update keeps the one the stream has; no other stream is ever created
// asynchronous.
func planUpdate(have, want jetstream.StreamConfig) (update jetstream.StreamConfig, recreate bool) {
	if want.Name == protocol.HeartbeatsStream && (have.Retention != want.Retention ||
		have.PersistMode == jetstream.AsyncPersistMode && max(want.Replicas, 1) > 1) {
		return want, true
	}
	want.PersistMode = have.PersistMode
	return want, false
}

// streamMatches reports whether the server's stream configuration has every setting want asks for
// (settings want leaves at zero take the server's defaults and are not compared). The persistence mode
// is not compared: JetStream fixes it when the stream is created (see planUpdate).
func streamMatches(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description &&
		slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention &&
		have.Storage == want.Storage &&
		have.Discard == want.Discard &&
		have.MaxAge == want.MaxAge &&
		have.MaxBytes == want.MaxBytes &&
		have.MaxMsgSize == want.MaxMsgSize &&
		have.Replicas == max(want.Replicas, 1) &&
		(want.Duplicates == 0 || have.Duplicates == want.Duplicates) &&
		(want.MaxMsgsPerSubject == 0 || have.MaxMsgsPerSubject == want.MaxMsgsPerSubject)
}

// Check returns the "nats" readiness check: the connection must be established (not reconnecting).
func Check(nc *nats.Conn) func(context.Context) error {
	return func(context.Context) error {
		if s := nc.Status(); s != nats.CONNECTED {
			return fmt.Errorf("connection %s", s)
		}
		return nil
	}
}

// Drain drains nc (in-flight messages are processed, subscriptions flushed) and waits until it is closed
// or ctx is done, in which case the connection is closed outright.
func Drain(ctx context.Context, nc *nats.Conn) error {
	if nc.IsClosed() {
		return nil
	}
	if err := nc.Drain(); err != nil {
		nc.Close()
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil
		}
		return fmt.Errorf("natsconn: drain: %w", err)
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !nc.IsClosed() {
		select {
		case <-ctx.Done():
			nc.Close()
			return fmt.Errorf("natsconn: drain: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
