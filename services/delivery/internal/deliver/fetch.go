package deliver

import (
	"context"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// Fetcher answers agents' startup fetches.
type Fetcher struct {
	resolver Resolver
	injector Injector
	log      *zap.Logger
}

// NewFetcher returns a Fetcher resolving batches of agents through resolver and injecting credentials
// through injector.
func NewFetcher(resolver Resolver, injector Injector, log *zap.Logger) *Fetcher {
	return &Fetcher{resolver: resolver, injector: injector, log: log}
}

// Fetch returns every effective config of the host of agentID. Deleted types appear in Versions only.
// When the collectors' credentials cannot be injected, collectors are left out of Configs and Versions
// and named in TypeErrors (never a partial collector list); the other types are still delivered.
// Errors wrap ErrNotFound (unknown agent), ErrForbidden, ErrInvalidRequest or ErrUnavailable. It is
// FetchBatch for one agent.
func (f *Fetcher) Fetch(ctx context.Context, agentID string) (protocol.FetchReply, error) {
	res := f.FetchBatch(ctx, []string{agentID})[0]
	if res.Err != nil {
		return protocol.FetchReply{}, res.Err
	}
	reply := *res.Reply
	reply.Identity = res.Identity
	return reply, nil
}

// addCollectors adds injected collectors to a fetch reply.
func addCollectors(reply *protocol.FetchReply, version int64, in injected) {
	reply.Configs[agentconfig.Collectors] = in.collectors
	reply.Versions[agentconfig.Collectors] = version
	if len(in.secretFields) > 0 {
		reply.SecretFields = map[string][]string{agentconfig.Collectors: in.secretFields}
	}
}

// withholdCollectors names collectors in a fetch reply's TypeErrors: they could not be delivered whole.
func withholdCollectors(reply *protocol.FetchReply, e *protocol.Error) {
	reply.TypeErrors = map[string]protocol.Error{agentconfig.Collectors: *e}
	delete(reply.Statements, agentconfig.Collectors)
}
