package natsapi

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// ResolverClient implements deliver.Resolver over the resolver micro service.
type ResolverClient struct{ r *natsrpc.Client }

var (
	_ deliver.Resolver     = (*ResolverClient)(nil)
	_ deliver.SetsResolver = (*ResolverClient)(nil)
)

// NewResolverClient returns a client whose requests time out after timeout.
func NewResolverClient(nc *nats.Conn, timeout time.Duration) *ResolverClient {
	return &ResolverClient{natsrpc.NewClient(nc, timeout)}
}

// Resolve implements deliver.Resolver.
func (c *ResolverClient) Resolve(ctx context.Context, req protocol.ResolveRequest) (protocol.ResolveReply, error) {
	var reply protocol.ResolveReply
	err := c.r.Call(ctx, protocol.ResolveSubject, req, &reply)
	return reply, err
}

// ResolveSets implements deliver.SetsResolver. A resolver of another contract has no responder on the
// subject (it names the contract): that is an error, which the fetcher reports as unavailable.
func (c *ResolverClient) ResolveSets(ctx context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error) {
	var reply protocol.ResolveSetsReply
	err := c.r.Call(ctx, protocol.ResolveSetsSubject, req, &reply)
	return reply, err
}

// ResolveBatch implements deliver.Resolver.
func (c *ResolverClient) ResolveBatch(ctx context.Context, req protocol.ResolveBatchRequest) (protocol.ResolveBatchReply, error) {
	var reply protocol.ResolveBatchReply
	err := c.r.Call(ctx, protocol.ResolveBatchSubject, req, &reply)
	return reply, err
}

// CredentialClient implements deliver.Injector over the credential micro service.
type CredentialClient struct{ r *natsrpc.Client }

var _ deliver.Injector = (*CredentialClient)(nil)

// NewCredentialClient returns a client whose requests time out after timeout.
func NewCredentialClient(nc *nats.Conn, timeout time.Duration) *CredentialClient {
	return &CredentialClient{natsrpc.NewClient(nc, timeout)}
}

// Inject implements deliver.Injector.
func (c *CredentialClient) Inject(ctx context.Context, req protocol.InjectRequest) (protocol.InjectReply, error) {
	var reply protocol.InjectReply
	err := c.r.Call(ctx, protocol.CredentialInjectSubject, req, &reply)
	return reply, err
}

// CommandPublisher implements deliver.CommandPublisher with core NATS publishes (best effort: an
// offline agent pulls its configs at startup).
type CommandPublisher struct{ nc *nats.Conn }

var _ deliver.CommandPublisher = (*CommandPublisher)(nil)

// NewCommandPublisher returns a publisher on nc.
func NewCommandPublisher(nc *nats.Conn) *CommandPublisher { return &CommandPublisher{nc: nc} }

// Publish implements deliver.CommandPublisher; nc copies command before returning.
func (p *CommandPublisher) Publish(agentID string, command []byte) error {
	return p.nc.Publish(protocol.CommandSubject(agentID), command)
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
