// Package transport is the agent's NATS connection: it connects with the agent's own credentials and
// inbox prefix, reconnects forever with backoff and jitter, and carries the agent's messages (config
// fetch, acks, heartbeats, observations, self logs, commands).
package transport

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Options describe how to reach NATS.
type Options struct {
	AgentID   string
	URL       string
	CredsFile string
	User      string
	Password  string
	Token     string
	// TLS verifies the servers (and presents a client certificate) when set.
	TLS TLS
	Log *slog.Logger
	// OnReconnect runs after every reconnect, and after a first connect that had to be retried (the
	// agent re-fetches its configs: pushes sent while it was away are gone).
	OnReconnect func()
	Extra       []nats.Option
}

// TLS is the agent's TLS to NATS. CAFile is the CA that signed the servers' certificates (empty: the
// system roots); CertFile and KeyFile are an optional client certificate (both or neither); ServerName
// overrides the name verified in the server certificate (default: the URL's host).
type TLS struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// Enabled reports whether any TLS setting is given.
func (t TLS) Enabled() bool { return t != TLS{} }

// options are the nats.go options for t.
func (t TLS) options() ([]nats.Option, error) {
	if !t.Enabled() {
		return nil, nil
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("transport: nats.tls cert_file and key_file go together")
	}
	// Secure first: RootCAs and ClientCert edit the tls.Config it sets.
	opts := []nats.Option{nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName})}
	if t.CAFile != "" {
		opts = append(opts, nats.RootCAs(t.CAFile))
	}
	if t.CertFile != "" {
		opts = append(opts, nats.ClientCert(t.CertFile, t.KeyFile))
	}
	return opts, nil
}

// Reconnect backoff bounds.
const (
	reconnectBase = 250 * time.Millisecond
	reconnectMax  = 30 * time.Second
)

// ReconnectDelay is the wait before reconnect attempt n: exponential from 250 ms up to 30 s, with full
// jitter in [d/2, d) so a fleet that lost the server does not come back in lockstep.
func ReconnectDelay(attempts int) time.Duration {
	d := reconnectMax
	if attempts < 8 {
		d = min(reconnectMax, reconnectBase<<max(attempts, 0))
	}
	return d/2 + rand.N(d/2+1)
}

// Client wraps the connection.
type Client struct {
	nc      *nats.Conn
	agentID string
	log     *slog.Logger
}

// Connect dials NATS. It does not fail when the server is down: the connection keeps retrying in the
// background (the agent must run without its backend), and subscriptions made meanwhile are sent once
// it connects.
func Connect(o Options) (*Client, error) {
	if !protocol.ValidAgentID(o.AgentID) {
		return nil, fmt.Errorf("transport: invalid agent id %q", o.AgentID)
	}
	log := o.Log
	var retried atomic.Bool
	opts := []nats.Option{
		nats.Name("configsync-agent/" + o.AgentID),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		// Two authentication errors in a row must not close the connection for good: a JWT renewed a
		// moment after the old one expired is picked up at the next attempt (credsrenew).
		nats.IgnoreAuthErrorAbort(),
		nats.CustomReconnectDelay(ReconnectDelay),
		nats.CustomInboxPrefix(protocol.InboxPrefix(o.AgentID)),
		nats.PingInterval(20 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
			if o.OnReconnect != nil {
				o.OnReconnect()
			}
		}),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info("nats connected", "server", nc.ConnectedUrlRedacted())
			// With RetryOnFailedConnect an agent started while NATS was down connects here, not in
			// ReconnectHandler; its background fetch may be far into its backoff, so ask for one now.
			// When the first attempt succeeded, the startup fetch follows anyway: no second fetch.
			if retried.Load() && o.OnReconnect != nil {
				o.OnReconnect()
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { log.Debug("nats connection closed") }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("nats async error", "subject", subject, "error", err)
		}),
	}
	switch {
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	}
	tlsOpts, err := o.TLS.options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, tlsOpts...)
	opts = append(opts, o.Extra...)
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("transport: connect: %w", err)
	}
	// Connect returns connected when its first attempt succeeded; otherwise it keeps retrying and the
	// ConnectHandler runs later, after this is set.
	retried.Store(!nc.IsConnected())
	return &Client{nc: nc, agentID: o.AgentID, log: log}, nil
}

// Conn exposes the underlying connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Connected reports whether the connection is up.
func (c *Client) Connected() bool { return c.nc.IsConnected() }

// Fetch asks the backend for every config of this agent.
func (c *Client) Fetch(ctx context.Context) (*protocol.FetchReply, error) {
	req, _ := json.Marshal(protocol.FetchRequest{AgentID: c.agentID})
	msg, err := c.nc.RequestMsgWithContext(ctx, traced(ctx, &nats.Msg{Subject: protocol.FetchSubject(c.agentID), Data: req}))
	if err != nil {
		return nil, fmt.Errorf("config fetch: %w", err)
	}
	var reply protocol.FetchReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return nil, fmt.Errorf("config fetch: decode reply: %w", err)
	}
	if reply.Error != nil {
		return nil, fmt.Errorf("config fetch: backend error: %w", reply.Error)
	}
	return &reply, nil
}

func (c *Client) publishJSON(subject string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", subject, err)
	}
	return c.nc.Publish(subject, data)
}

// PublishAck sends an apply acknowledgement, carrying ctx's trace context (the apply span's) to
// ack-ingest.
func (c *Client) PublishAck(ctx context.Context, a protocol.Ack) error {
	data, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode ack: %w", err)
	}
	return c.nc.PublishMsg(traced(ctx, &nats.Msg{Subject: protocol.AckSubject(c.agentID), Data: data}))
}

// PublishHeartbeat sends a heartbeat.
func (c *Client) PublishHeartbeat(hb protocol.Heartbeat) error {
	return c.publishJSON(protocol.HeartbeatSubject(c.agentID), hb)
}

// Observe publishes an observation of the given kind (metrics, changes, files, health, ...).
func (c *Client) Observe(kind string, v any) error {
	return c.publishJSON(protocol.ObservationSubject(c.agentID, kind), v)
}

// Publish sends raw bytes (the self-log shipper).
func (c *Client) Publish(subject string, data []byte) error { return c.nc.Publish(subject, data) }

// SubscribeCommands delivers every message on the agent's command subject to fn, one at a time, with
// its headers (TraceContext reads them). nats.go re-subscribes after reconnects by itself.
func (c *Client) SubscribeCommands(fn func(data []byte, h nats.Header)) (*nats.Subscription, error) {
	sub, err := c.nc.Subscribe(protocol.CommandSubject(c.agentID), func(m *nats.Msg) { fn(m.Data, m.Header) })
	if err != nil {
		return nil, fmt.Errorf("subscribe commands: %w", err)
	}
	// A burst of pushes must not be dropped as a slow consumer while a callback runs.
	_ = sub.SetPendingLimits(10_000, 64<<20)
	return sub, nil
}

// Close drains the connection (pending publishes such as the last acks are flushed), bounded by ctx.
func (c *Client) Close(ctx context.Context) {
	closed := make(chan struct{})
	c.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := c.nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		c.nc.Close()
		return
	}
	select {
	case <-closed:
	case <-ctx.Done():
		c.nc.Close()
	}
}

// traceContext is W3C trace context only, in NATS headers (protocol.HeaderCarrier keeps the keys'
// case).
var traceContext = propagation.TraceContext{}

// traced adds ctx's span context to msg's headers when ctx carries one (never while tracing is off).
func traced(ctx context.Context, msg *nats.Msg) *nats.Msg {
	if trace.SpanContextFromContext(ctx).IsValid() {
		msg.Header = nats.Header{}
		traceContext.Inject(ctx, protocol.HeaderCarrier(msg.Header))
	}
	return msg
}

// TraceContext returns ctx with the trace context a backend message carried, so the agent's span
// continues the backend's trace. The header is untrusted input: the propagator accepts only a
// well-formed traceparent and ignores anything else. Whether the agent records its span is still its
// own sampler's decision (nothing while its tracing config is off).
func TraceContext(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return traceContext.Extract(ctx, protocol.HeaderCarrier(h))
}
