// Package natsclient calls the backend services config-api depends on over NATS request-reply
// (libs/platform/natsrpc clients): the resolver (effective configs) and the credential service (secret
// storage). Replies carrying a protocol error code become fault errors; secrets in requests are never
// logged.
package natsclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
)

// DefaultTimeout bounds one request when the caller's context has no earlier deadline.
const DefaultTimeout = natsrpc.DefaultTimeout

// requester sends requests with a per-request timeout and classifies their failures as faults.
type requester struct {
	client  *natsrpc.Client
	service string
}

func newRequester(nc *nats.Conn, timeout time.Duration, service string) requester {
	return requester{client: natsrpc.NewClient(nc, timeout), service: service}
}

// call sends req as JSON on subject and decodes the reply into out (which may be nil).
func (r requester) call(ctx context.Context, subject string, req, out any) error {
	return r.classify(r.client.Call(ctx, subject, req, out))
}

// request is call decoding the reply into a new R.
func request[R any](ctx context.Context, r requester, subject string, req any) (R, error) {
	reply, err := natsrpc.CallFor[R](ctx, r.client, subject, req)
	return reply, r.classify(err)
}

// classify turns a natsrpc call's error into a fault (nil: nil).
func (r requester) classify(err error) error {
	var perr *protocol.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &perr):
		return r.mapError(perr)
	case errors.Is(err, natsrpc.ErrBadReply):
		return fmt.Errorf("natsclient: %w", err)
	case errors.Is(err, nats.ErrNoResponders):
		return fault.ServiceUnavailable(r.service+" service is unavailable", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fault.ServiceUnavailable(r.service+" service did not answer in time", err)
	default:
		return fault.ServiceUnavailable(r.service+" service request failed", err)
	}
}

// mapError turns a service's error code into a fault. Messages of caller errors (invalid, not found,
// conflict) are written for the caller and passed on; others are replaced by a generic message.
func (r requester) mapError(e *protocol.Error) error {
	switch e.Code {
	case protocol.CodeInvalidRequest:
		return fault.Invalidf("%s", e.Message)
	case protocol.CodeNotFound:
		return fault.NotFoundf("%s", e.Message)
	case protocol.CodeConflict:
		return fault.Conflictf("%s", e.Message)
	case protocol.CodeForbidden:
		return fault.Forbiddenf("%s", e.Message)
	default:
		return fault.ServiceUnavailable(r.service+" service failed", e)
	}
}

// Resolver is the resolver service's client.
type Resolver struct{ r requester }

// NewResolver returns a resolver client on nc; timeout bounds each request (0: DefaultTimeout).
func NewResolver(nc *nats.Conn, timeout time.Duration) *Resolver {
	return &Resolver{r: newRequester(nc, timeout, protocol.ResolverServiceName)}
}

// Resolve resolves one host's configs.
func (c *Resolver) Resolve(ctx context.Context, req protocol.ResolveRequest) (protocol.ResolveReply, error) {
	return request[protocol.ResolveReply](ctx, c.r, protocol.ResolveSubject, req)
}

// ResolveSets resolves many hosts, by agent id, into their distinct config sets (the resolve_sets
// contract; a resolver of another contract has no responder on the subject: unavailable).
func (c *Resolver) ResolveSets(ctx context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error) {
	return request[protocol.ResolveSetsReply](ctx, c.r, protocol.ResolveSetsSubject, req)
}

// SignIdentities has the resolver sign and store the identity statements of the hosts of agentIDs
// that have none yet, so that their first fetches read them instead of signing them in the herd: it
// resolves the hosts once (resolve_sets signs every identity it does not find stored), following the
// replies' Remaining, and drops the configs. The resolver reads the hosts from its own database; it
// signs nothing a request gives it.
func (c *Resolver) SignIdentities(ctx context.Context, agentIDs []string) error {
	for len(agentIDs) > 0 {
		chunk := agentIDs[:min(len(agentIDs), protocol.MaxResolveAgents)]
		agentIDs = agentIDs[len(chunk):]
		for len(chunk) > 0 {
			reply, err := c.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: chunk})
			if err != nil {
				return err
			}
			if len(reply.Remaining) >= len(chunk) {
				return fmt.Errorf("resolve_sets answered none of %d hosts", len(chunk))
			}
			chunk = reply.Remaining
		}
	}
	return nil
}

// Credentials is the credential service's client. It only ever returns metadata.
type Credentials struct{ r requester }

// NewCredentials returns a credential client on nc; timeout bounds each request (0: DefaultTimeout).
func NewCredentials(nc *nats.Conn, timeout time.Duration) *Credentials {
	return &Credentials{r: newRequester(nc, timeout, protocol.CredentialServiceName)}
}

// Create stores a new credential.
func (c *Credentials) Create(ctx context.Context, req protocol.CredentialCreateRequest) (protocol.CredentialMeta, error) {
	return request[protocol.CredentialMeta](ctx, c.r, protocol.CredentialCreateSubject, req)
}

// Rotate replaces a credential's secret or re-encrypts it under the newest key.
func (c *Credentials) Rotate(ctx context.Context, req protocol.CredentialRotateRequest) (protocol.CredentialMeta, error) {
	return request[protocol.CredentialMeta](ctx, c.r, protocol.CredentialRotateSubject, req)
}

// Delete deletes a credential.
func (c *Credentials) Delete(ctx context.Context, ref protocol.CredentialRef) error {
	return c.r.call(ctx, protocol.CredentialDeleteSubject, ref, nil)
}

// Get returns one credential's metadata.
func (c *Credentials) Get(ctx context.Context, ref protocol.CredentialRef) (protocol.CredentialMeta, error) {
	return request[protocol.CredentialMeta](ctx, c.r, protocol.CredentialGetSubject, ref)
}

// List lists a client's credentials.
func (c *Credentials) List(ctx context.Context, req protocol.CredentialListRequest) ([]protocol.CredentialMeta, error) {
	reply, err := request[protocol.CredentialListReply](ctx, c.r, protocol.CredentialListSubject, req)
	return reply.Credentials, err
}
