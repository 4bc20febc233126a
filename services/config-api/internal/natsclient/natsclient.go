// Package natsclient calls the backend services config-api depends on over NATS request-reply: the
// resolver (effective configs) and the credential service (secret storage). Replies carrying a
// protocol error code become fault errors; secrets in requests are never logged.
package natsclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
)

// DefaultTimeout bounds one request when the caller's context has no earlier deadline.
const DefaultTimeout = 10 * time.Second

// requester sends requests with a per-request timeout.
type requester struct {
	nc      *nats.Conn
	timeout time.Duration
	service string
}

// errorReply is the body of an error reply: {"error":{"code","message"}}.
type errorReply struct {
	Error *protocol.Error `json:"error"`
}

// call sends req as JSON on subject and decodes the reply into out (which may be nil).
func (r requester) call(ctx context.Context, subject string, req, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("natsclient: encode %s request: %w", subject, err)
	}
	timeout := r.timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := r.nc.RequestWithContext(ctx, subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fault.ServiceUnavailable(r.service+" service is unavailable", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fault.ServiceUnavailable(r.service+" service did not answer in time", err)
	case err != nil:
		return fault.ServiceUnavailable(r.service+" service request failed", err)
	}
	if perr := replyError(msg); perr != nil {
		return r.mapError(perr)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return fmt.Errorf("natsclient: decode %s reply: %w", subject, err)
	}
	return nil
}

// replyError extracts a protocol error from a micro error reply (headers) or an error body.
func replyError(msg *nats.Msg) *protocol.Error {
	var body errorReply
	if len(msg.Data) > 0 && msg.Data[0] == '{' && json.Unmarshal(msg.Data, &body) == nil && body.Error != nil && body.Error.Code != "" {
		return body.Error
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &protocol.Error{Code: code, Message: msg.Header.Get(micro.ErrorHeader)}
	}
	return nil
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
	return &Resolver{r: requester{nc: nc, timeout: timeout, service: protocol.ResolverServiceName}}
}

// Resolve resolves one host's configs.
func (c *Resolver) Resolve(ctx context.Context, req protocol.ResolveRequest) (protocol.ResolveReply, error) {
	var reply protocol.ResolveReply
	err := c.r.call(ctx, protocol.ResolveSubject, req, &reply)
	return reply, err
}

// ResolveBatch resolves one config type for a page of an environment's hosts.
func (c *Resolver) ResolveBatch(ctx context.Context, req protocol.ResolveBatchRequest) (protocol.ResolveBatchReply, error) {
	var reply protocol.ResolveBatchReply
	err := c.r.call(ctx, protocol.ResolveBatchSubject, req, &reply)
	return reply, err
}

// Credentials is the credential service's client. It only ever returns metadata.
type Credentials struct{ r requester }

// NewCredentials returns a credential client on nc; timeout bounds each request (0: DefaultTimeout).
func NewCredentials(nc *nats.Conn, timeout time.Duration) *Credentials {
	return &Credentials{r: requester{nc: nc, timeout: timeout, service: protocol.CredentialServiceName}}
}

// Create stores a new credential.
func (c *Credentials) Create(ctx context.Context, req protocol.CredentialCreateRequest) (protocol.CredentialMeta, error) {
	var meta protocol.CredentialMeta
	err := c.r.call(ctx, protocol.CredentialCreateSubject, req, &meta)
	return meta, err
}

// Rotate replaces a credential's secret or re-encrypts it under the newest key.
func (c *Credentials) Rotate(ctx context.Context, req protocol.CredentialRotateRequest) (protocol.CredentialMeta, error) {
	var meta protocol.CredentialMeta
	err := c.r.call(ctx, protocol.CredentialRotateSubject, req, &meta)
	return meta, err
}

// Delete deletes a credential.
func (c *Credentials) Delete(ctx context.Context, ref protocol.CredentialRef) error {
	return c.r.call(ctx, protocol.CredentialDeleteSubject, ref, nil)
}

// Get returns one credential's metadata.
func (c *Credentials) Get(ctx context.Context, ref protocol.CredentialRef) (protocol.CredentialMeta, error) {
	var meta protocol.CredentialMeta
	err := c.r.call(ctx, protocol.CredentialGetSubject, ref, &meta)
	return meta, err
}

// List lists a client's credentials.
func (c *Credentials) List(ctx context.Context, req protocol.CredentialListRequest) ([]protocol.CredentialMeta, error) {
	var reply protocol.CredentialListReply
	if err := c.r.call(ctx, protocol.CredentialListSubject, req, &reply); err != nil {
		return nil, err
	}
	return reply.Credentials, nil
}
