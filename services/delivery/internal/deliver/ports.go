// Package deliver is the delivery use cases: answering an agent's startup fetch with every effective
// config of its host (credentials injected), and fanning a config-change event out as config_update
// commands to the online agents it affects (for an environment event, those whose environment layer is
// at the event's version). Both read the resolver's one contract, distinct config sets each with its
// agents (ResolveSets for fetches, ResolvePush for pages of a fan-out), and build one answer per set:
// delivery never groups hosts itself. It talks to the resolver, the credential service and the agents
// only through the ports below.
package deliver

import (
	"context"
	"errors"

	"github.com/configsync/configsync/libs/protocol"
)

// Resolver computes hosts' effective configs (the resolver service) in its resolve_sets contract: the
// distinct config sets of the hosts asked for, each with the agents that hold it, so delivery builds
// one answer per set and never groups hosts itself. ResolveSets answers a batch of agents' fetches;
// ResolvePush a page of an environment's hosts for one config type (a config-change fan-out). Replies
// are of the contract's version (protocol.ResolveSetsReply.Check).
type Resolver interface {
	ResolveSets(ctx context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error)
	ResolvePush(ctx context.Context, req protocol.ResolvePushRequest) (protocol.ResolveSetsReply, error)
}

// Injector inlines credential secrets into collector lists (the credential service). Each item of a
// request succeeds or fails on its own.
type Injector interface {
	Inject(ctx context.Context, req protocol.InjectRequest) (protocol.InjectReply, error)
}

// CommandPublisher sends encoded commands to agents, best effort.
type CommandPublisher interface {
	// Publish queues command for agentID; it may return before the command is on the wire. The
	// message carries ctx's trace context, if any, to the agent.
	Publish(ctx context.Context, agentID string, command []byte) error
	// Flush waits until everything published so far has reached the message server.
	Flush(ctx context.Context) error
}

// Errors of the use cases; the NATS edge maps them to protocol error codes. Errors answered by a
// remote service with a code arrive as *protocol.Error and are mapped through these.
var (
	// ErrInvalidRequest: the request or event cannot be understood.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrForbidden: the caller may not ask for this.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: the agent (host) or environment does not exist.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable: a service delivery depends on failed or did not answer in time; retry later.
	ErrUnavailable = errors.New("unavailable")
)

// classifyRemote maps an error from a port to one of the errors above (wrapping the original).
func classifyRemote(service string, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		switch pe.Code {
		case protocol.CodeNotFound:
			return &remoteError{service: service, kind: ErrNotFound, err: err}
		case protocol.CodeInvalidRequest:
			return &remoteError{service: service, kind: ErrInvalidRequest, err: err}
		case protocol.CodeForbidden:
			return &remoteError{service: service, kind: ErrForbidden, err: err}
		}
	}
	return &remoteError{service: service, kind: ErrUnavailable, err: err}
}

type remoteError struct {
	service string
	kind    error
	err     error
}

func (e *remoteError) Error() string   { return e.service + ": " + e.err.Error() }
func (e *remoteError) Unwrap() []error { return []error{e.kind, e.err} }

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
