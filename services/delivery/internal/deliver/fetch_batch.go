package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// FetchResult is the answer to one agent's fetch: a reply, or an error as Fetch returns it. The agents
// of one config set share one Reply: it must not be modified.
type FetchResult struct {
	Reply *protocol.FetchReply
	// Identity is the agent's own signed identity statement (Reply, possibly shared, has none).
	Identity *protocol.Signed
	Err      error
}

// FetchBatch answers the fetches of many agents together, each exactly as Fetch would: one resolver
// request (resolve_sets) for all of them and one credential injection for each distinct collector
// list among them, instead of one of each per agent. The resolver answers with the distinct config
// sets and the agents holding each, so one reply is built per set and every agent of the set gets it;
// a collectors config is injected once however many sets carry it. Results are in the order of agentIDs
// (an agent listed twice gets the same result twice). An agent the resolver cannot answer on its own
// (its configs alone exceed the max payload) gets its own error; a failed request fails its agents.
func (f *Fetcher) FetchBatch(ctx context.Context, agentIDs []string) []FetchResult {
	ids := make([]string, 0, len(agentIDs))
	seen := make(map[string]bool, len(agentIDs))
	for _, id := range agentIDs {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	resolved, errs := f.resolveSets(ctx, ids)

	replies := make(map[string]*protocol.FetchReply, len(ids))
	identities := make(map[string]*protocol.Signed, len(ids))
	lists := map[string]*injectList{}
	var items []protocol.InjectItem
	for r, res := range resolved {
		for _, set := range res.Sets {
			reply, collectors := setReply(res.Configs, set)
			// Statements pass through untouched: delivery carries them, it never makes one.
			reply.TrustedKeys = res.TrustedKeys
			for _, h := range set.Hosts {
				replies[h.AgentID] = reply
				identities[h.AgentID] = h.Identity
			}
			if collectors < 0 {
				continue
			}
			// Configs are distinct within a reply: its index names the collector list (and its scope).
			k := strconv.Itoa(r) + "/" + strconv.Itoa(collectors)
			l, ok := lists[k]
			if !ok {
				l = &injectList{key: k}
				lists[k] = l
				items = append(items, protocol.InjectItem{Key: k, ClientID: set.ClientID, EnvironmentID: set.EnvironmentID,
					Collectors: res.Configs[collectors].ConfigData})
			}
			l.replies = append(l.replies, reply)
			l.version = res.Configs[collectors].Version
			for _, h := range set.Hosts[:min(len(set.Hosts), 10-min(10, len(l.agents)))] {
				l.agents = append(l.agents, h.AgentID)
			}
		}
	}
	if len(items) > 0 {
		f.inject(ctx, items, lists, len(replies))
	}

	out := make([]FetchResult, len(agentIDs))
	for i, id := range agentIDs {
		if r, ok := replies[id]; ok {
			out[i] = FetchResult{Reply: r, Identity: identities[id]}
			continue
		}
		err := errs[id]
		if err == nil {
			err = fmt.Errorf("resolve agent %s: %w", id, classifyRemote("resolver", errors.New("no answer for the agent")))
		}
		out[i] = FetchResult{Err: err}
	}
	return out
}

// setReply builds the fetch reply of one config set. A collectors config that references credentials is
// left out and its index returned, to be injected first; -1 when there is none.
func setReply(configs []protocol.EffectiveConfig, set protocol.ConfigSet) (*protocol.FetchReply, int) {
	reply := &protocol.FetchReply{
		Configs:  make(map[string]json.RawMessage, len(set.Configs)),
		Versions: make(map[string]int64, len(set.Configs)),
	}
	collectors := -1
	for typ, n := range set.Configs {
		ec := configs[n]
		if ec.Statement != nil {
			// Statements pass through untouched: delivery carries them, it never makes one
			// (withholdCollectors drops the statement of collectors it cannot deliver).
			if reply.Statements == nil {
				reply.Statements = make(map[string]protocol.Signed, len(set.Configs))
			}
			reply.Statements[typ] = *ec.Statement
		}
		if agentconfig.IsNull(ec.ConfigData) {
			reply.Versions[typ] = ec.Version
			continue
		}
		if typ == agentconfig.Collectors && needsInjection(ec.ConfigData) {
			collectors = n
			continue
		}
		reply.Configs[typ] = ec.ConfigData
		reply.Versions[typ] = ec.Version
	}
	return reply, collectors
}

// injectList is one distinct collector list of a batch, the replies (of distinct sets) that carry it,
// and a sample of their agents for the log.
type injectList struct {
	key     string
	version int64
	replies []*protocol.FetchReply
	agents  []string
}

// inject injects the batch's distinct collector lists and completes the replies that carry them.
func (f *Fetcher) inject(ctx context.Context, items []protocol.InjectItem, lists map[string]*injectList, agents int) {
	out, err := injectAll(ctx, f.injector, items)
	if err != nil {
		var sample []string
		for _, l := range lists {
			sample = append(sample, l.agents...)
		}
		f.log.Warn("fetch: credential service unavailable, collectors withheld",
			zap.Int("agents", agents), zap.Strings("agent_ids_sample", sample[:min(len(sample), 10)]), zap.Error(err))
	}
	for _, l := range lists {
		var typeErr *protocol.Error
		switch {
		case err != nil:
			typeErr = protocol.Errorf(protocol.CodeUnavailable, "credential service unavailable")
		case out[l.key].err != nil:
			typeErr = out[l.key].err
			f.log.Warn("fetch: collector credentials failed, collectors withheld",
				zap.Strings("agent_ids_sample", l.agents), zap.String("code", typeErr.Code), zap.String("reason", typeErr.Message))
		}
		for _, reply := range l.replies {
			if typeErr != nil {
				withholdCollectors(reply, typeErr)
			} else {
				addCollectors(reply, l.version, out[l.key])
			}
		}
	}
}

// resolveSets resolves ids (unique) in as few requests as the resolver allows. It returns the replies
// (each checked against the contract) and, for every agent none of them answers, why.
func (f *Fetcher) resolveSets(ctx context.Context, ids []string) ([]protocol.ResolveSetsReply, map[string]error) {
	errs := map[string]error{}
	var replies []protocol.ResolveSetsReply
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), protocol.MaxResolveAgents)]
		ids = ids[len(chunk):]
		for len(chunk) > 0 {
			reply, err := f.resolver.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: chunk})
			if err == nil {
				if cerr := reply.Check(); cerr != nil {
					// Another contract (a rolling upgrade) or a reply that contradicts itself: never
					// guess at its meaning; the agents retry.
					err = protocol.Errorf(protocol.CodeContractMismatch, "unusable resolve_sets reply: %s", cerr.Error())
				}
			}
			if err != nil {
				err = fmt.Errorf("resolve %d agents: %w", len(chunk), classifyRemote("resolver", err))
				for _, id := range chunk {
					errs[id] = err
				}
				break
			}
			replies = append(replies, reply)
			for _, id := range reply.Missing {
				errs[id] = fmt.Errorf("resolve agent %s: %w", id, classifyRemote("resolver", protocol.Errorf(protocol.CodeNotFound, "unknown agent")))
			}
			for _, a := range reply.Failed {
				errs[a.AgentID] = fmt.Errorf("resolve agent %s: %w", a.AgentID, classifyRemote("resolver", &a.Error))
			}
			if len(reply.Remaining) >= len(chunk) {
				// No progress: the resolver answers nothing of this chunk.
				err := fmt.Errorf("resolve %d agents: %w", len(reply.Remaining), classifyRemote("resolver", errors.New("no agent answered")))
				for _, id := range reply.Remaining {
					errs[id] = err
				}
				break
			}
			chunk = reply.Remaining
		}
	}
	return replies, errs
}
