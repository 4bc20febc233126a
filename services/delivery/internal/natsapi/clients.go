package natsapi

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/platform/tracing"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// UpstreamClient implements deliver.Resolver over the resolver micro service and deliver.Injector
// over the credential micro service.
type UpstreamClient struct{ r *natsrpc.Client }

var (
	_ deliver.Resolver = (*UpstreamClient)(nil)
	_ deliver.Injector = (*UpstreamClient)(nil)
)

// NewUpstreamClient returns a client whose requests time out after timeout.
func NewUpstreamClient(nc *nats.Conn, timeout time.Duration) *UpstreamClient {
	return &UpstreamClient{natsrpc.NewClient(nc, timeout)}
}

// ResolveSets implements deliver.Resolver. A resolver of another contract has no responder on the
// subject (it names the contract): that is an error, which the fetcher reports as unavailable.
func (c *UpstreamClient) ResolveSets(ctx context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error) {
	return natsrpc.CallFor[protocol.ResolveSetsReply](ctx, c.r, protocol.ResolveSetsSubject, req)
}

// ResolvePush implements deliver.Resolver. As with ResolveSets, a resolver of another contract has no
// responder: an error, and the fan-out is redone.
func (c *UpstreamClient) ResolvePush(ctx context.Context, req protocol.ResolvePushRequest) (protocol.ResolveSetsReply, error) {
	return natsrpc.CallFor[protocol.ResolveSetsReply](ctx, c.r, protocol.ResolvePushSubject, req)
}

// Inject implements deliver.Injector.
func (c *UpstreamClient) Inject(ctx context.Context, req protocol.InjectRequest) (protocol.InjectReply, error) {
	return natsrpc.CallFor[protocol.InjectReply](ctx, c.r, protocol.CredentialInjectSubject, req)
}

// CommandPublisher implements deliver.CommandPublisher with core NATS publishes (best effort: an
// offline agent pulls its configs at startup).
type CommandPublisher struct{ nc *nats.Conn }

var _ deliver.CommandPublisher = (*CommandPublisher)(nil)

// NewCommandPublisher returns a publisher on nc.
func NewCommandPublisher(nc *nats.Conn) *CommandPublisher { return &CommandPublisher{nc: nc} }

// Publish implements deliver.CommandPublisher; nc copies command before returning. Untraced (always
// while tracing is off) it is a plain publish without headers.
func (p *CommandPublisher) Publish(ctx context.Context, agentID string, command []byte) error {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return p.nc.Publish(protocol.CommandSubject(agentID), command)
	}
	msg := &nats.Msg{Subject: protocol.CommandSubject(agentID), Data: command}
	tracing.Inject(ctx, msg)
	return p.nc.PublishMsg(msg)
}

// Flush implements deliver.CommandPublisher.
func (p *CommandPublisher) Flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	return p.nc.FlushWithContext(ctx)
}
