package natsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// requester sends JSON requests to backend micro services and decodes their replies. A reply carrying
// an error (micro error headers, or a {"error": {...}} body) is returned as *protocol.Error.
type requester struct {
	nc      *nats.Conn
	timeout time.Duration
}

func (r requester) call(ctx context.Context, subject string, req, reply any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", subject, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	msg, err := r.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	if err := decodeReply(msg, reply); err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	return nil
}

// decodeReply decodes a service reply into reply, or returns its error (*protocol.Error).
func decodeReply(msg *nats.Msg, reply any) error {
	if perr := replyError(msg); perr != nil {
		return perr
	}
	if err := json.Unmarshal(msg.Data, reply); err != nil {
		return fmt.Errorf("decode reply: %s", jsonErrorKind(err))
	}
	return nil
}

// replyError extracts the error of an error reply, or returns nil.
func replyError(msg *nats.Msg) *protocol.Error {
	code := msg.Header.Get(micro.ErrorCodeHeader)
	trimmed := bytes.TrimLeft(msg.Data, " \t\r\n")
	if code == "" && !bytes.HasPrefix(trimmed, []byte(`{"error"`)) {
		return nil
	}
	var body struct {
		Error *protocol.Error `json:"error"`
	}
	if json.Unmarshal(msg.Data, &body) == nil && body.Error != nil && body.Error.Code != "" {
		return body.Error
	}
	if code == "" {
		return nil
	}
	return &protocol.Error{Code: code, Message: msg.Header.Get(micro.ErrorHeader)}
}

// ResolverClient implements deliver.Resolver over the resolver micro service.
type ResolverClient struct{ r requester }

var (
	_ deliver.Resolver       = (*ResolverClient)(nil)
	_ deliver.AgentsResolver = (*ResolverClient)(nil)
)

// NewResolverClient returns a client whose requests time out after timeout.
func NewResolverClient(nc *nats.Conn, timeout time.Duration) *ResolverClient {
	return &ResolverClient{requester{nc: nc, timeout: timeout}}
}

// Resolve implements deliver.Resolver.
func (c *ResolverClient) Resolve(ctx context.Context, req protocol.ResolveRequest) (protocol.ResolveReply, error) {
	var reply protocol.ResolveReply
	err := c.r.call(ctx, protocol.ResolveSubject, req, &reply)
	return reply, err
}

// ResolveAgents implements deliver.AgentsResolver. A resolver without the resolve_agents endpoint (an
// older version during a rolling upgrade) leaves the request without responders: that is reported as
// deliver.ErrBatchUnsupported, so the fetcher falls back to one resolve per agent.
func (c *ResolverClient) ResolveAgents(ctx context.Context, req protocol.ResolveAgentsRequest) (protocol.ResolveAgentsReply, error) {
	var reply protocol.ResolveAgentsReply
	err := c.r.call(ctx, protocol.ResolveAgentsSubject, req, &reply)
	if errors.Is(err, nats.ErrNoResponders) {
		return reply, fmt.Errorf("%w: %w", deliver.ErrBatchUnsupported, err)
	}
	return reply, err
}

// ResolveBatch implements deliver.Resolver.
func (c *ResolverClient) ResolveBatch(ctx context.Context, req protocol.ResolveBatchRequest) (protocol.ResolveBatchReply, error) {
	var reply protocol.ResolveBatchReply
	err := c.r.call(ctx, protocol.ResolveBatchSubject, req, &reply)
	return reply, err
}

// CredentialClient implements deliver.Injector over the credential micro service.
type CredentialClient struct{ r requester }

var _ deliver.Injector = (*CredentialClient)(nil)

// NewCredentialClient returns a client whose requests time out after timeout.
func NewCredentialClient(nc *nats.Conn, timeout time.Duration) *CredentialClient {
	return &CredentialClient{requester{nc: nc, timeout: timeout}}
}

// Inject implements deliver.Injector.
func (c *CredentialClient) Inject(ctx context.Context, req protocol.InjectRequest) (protocol.InjectReply, error) {
	var reply protocol.InjectReply
	err := c.r.call(ctx, protocol.CredentialInjectSubject, req, &reply)
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
