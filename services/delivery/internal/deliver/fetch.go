package deliver

import (
	"context"
	"encoding/json"
	"fmt"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// Fetcher answers an agent's startup fetch.
type Fetcher struct {
	resolver Resolver
	injector Injector
	log      *zap.Logger
}

// NewFetcher returns a Fetcher resolving through resolver and injecting credentials through injector.
func NewFetcher(resolver Resolver, injector Injector, log *zap.Logger) *Fetcher {
	return &Fetcher{resolver: resolver, injector: injector, log: log}
}

// Fetch returns every effective config of the host of agentID. Deleted types appear in Versions only.
// When the collectors' credentials cannot be injected, collectors are left out of Configs and Versions
// and named in TypeErrors (never a partial collector list); the other types are still delivered.
// Errors wrap ErrNotFound (unknown agent), ErrForbidden, ErrInvalidRequest or ErrUnavailable.
func (f *Fetcher) Fetch(ctx context.Context, agentID string) (protocol.FetchReply, error) {
	res, err := f.resolver.Resolve(ctx, protocol.ResolveRequest{AgentID: agentID})
	if err != nil {
		return protocol.FetchReply{}, fmt.Errorf("resolve agent %s: %w", agentID, classifyRemote("resolver", err))
	}
	reply := protocol.FetchReply{
		Configs:  make(map[string]json.RawMessage, len(res.Configs)),
		Versions: make(map[string]int64, len(res.Configs)),
	}
	for typ, ec := range res.Configs {
		if isNull(ec.ConfigData) {
			reply.Versions[typ] = ec.Version
			continue
		}
		if typ == agentconfig.Collectors && needsInjection(ec.ConfigData) {
			continue // below
		}
		reply.Configs[typ] = ec.ConfigData
		reply.Versions[typ] = ec.Version
	}

	if ec, ok := res.Configs[agentconfig.Collectors]; ok && !isNull(ec.ConfigData) && needsInjection(ec.ConfigData) {
		out, err := injectAll(ctx, f.injector, []protocol.InjectItem{{
			Key:           "fetch",
			ClientID:      res.Host.ClientID,
			EnvironmentID: res.Host.EnvironmentID,
			Collectors:    ec.ConfigData,
		}})
		var typeErr *protocol.Error
		switch {
		case err != nil:
			f.log.Warn("fetch: credential service unavailable, collectors withheld",
				zap.String("agent_id", agentID), zap.Error(err))
			typeErr = protocol.Errorf(protocol.CodeUnavailable, "credential service unavailable")
		case out["fetch"].err != nil:
			typeErr = out["fetch"].err
			f.log.Warn("fetch: collector credentials failed, collectors withheld",
				zap.String("agent_id", agentID), zap.String("code", typeErr.Code), zap.String("reason", typeErr.Message))
		default:
			reply.Configs[agentconfig.Collectors] = out["fetch"].collectors
			reply.Versions[agentconfig.Collectors] = ec.Version
			if fields := out["fetch"].secretFields; len(fields) > 0 {
				reply.SecretFields = map[string][]string{agentconfig.Collectors: fields}
			}
		}
		if typeErr != nil {
			reply.TypeErrors = map[string]protocol.Error{agentconfig.Collectors: *typeErr}
		}
	}
	return reply, nil
}
