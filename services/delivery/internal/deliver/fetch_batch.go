package deliver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
)

// FetchResult is the answer to one agent's fetch: a reply, or an error as Fetch returns it. Agents
// whose replies are identical (hosts of one environment without overrides, typically) share one
// Reply: it must not be modified.
type FetchResult struct {
	Reply *protocol.FetchReply
	// Identity is the agent's own signed identity statement (Reply, possibly shared, has none).
	Identity *protocol.Signed
	Err      error
}

// FetchBatch answers the fetches of many agents together, each exactly as Fetch would: one resolver
// request for all of them (resolve_agents) and one credential injection for each distinct collector
// list among them, instead of one of each per agent. Results are in the order of agentIDs (an agent
// listed twice gets the same result twice). An agent the resolver cannot answer on its own (its
// configs alone exceed the max payload) gets its own error; a failed request fails its agents.
func (f *Fetcher) FetchBatch(ctx context.Context, agentIDs []string) []FetchResult {
	ids := make([]string, 0, len(agentIDs))
	seen := make(map[string]bool, len(agentIDs))
	for _, id := range agentIDs {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	hosts, errs := f.resolveAgents(ctx, ids)

	// Hosts with the same configs get one reply; hosts sharing a collector list in one scope share
	// one inject item, so the list's credentials are decrypted once for all of them.
	replies := make(map[string]*protocol.FetchReply, len(hosts))
	identities := make(map[string]*protocol.Signed, len(hosts))
	groups := map[string]*protocol.FetchReply{}
	lists := map[string]*injectList{}
	var items []protocol.InjectItem
	for _, h := range hosts {
		identities[h.res.Host.AgentID] = h.res.Identity
		if r, ok := groups[h.group]; ok && h.group != "" {
			replies[h.res.Host.AgentID] = r
			continue
		}
		reply, collectors := fetchReply(h.res)
		reply.TrustedKeys = h.trustedKeys
		replies[h.res.Host.AgentID] = &reply
		if h.group != "" {
			groups[h.group] = &reply
		}
		if collectors == nil {
			continue
		}
		k := h.res.Host.ClientID + "\x00" + h.res.Host.EnvironmentID + "\x00" + string(collectors.ConfigData)
		l, ok := lists[k]
		if !ok {
			l = &injectList{key: strconv.Itoa(len(lists))}
			lists[k] = l
			items = append(items, protocol.InjectItem{Key: l.key, ClientID: h.res.Host.ClientID, EnvironmentID: h.res.Host.EnvironmentID, Collectors: collectors.ConfigData})
		}
		l.replies = append(l.replies, &reply)
		l.versions = append(l.versions, collectors.Version)
		l.agents = append(l.agents, h.res.Host.AgentID)
	}
	if len(items) > 0 {
		f.inject(ctx, items, lists, hosts)
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

// resolvedHost is one host of a batch with its effective configs. Hosts with the same non-empty group
// have identical configs in the same scope.
type resolvedHost struct {
	res   protocol.ResolveReply
	group string
	// trustedKeys is the resolver's signed trusted-key list, passed on to the agent untouched.
	trustedKeys *protocol.Signed
}

// injectList is one distinct collector list of a batch and the replies (of distinct configs) that
// carry it, with an agent of each.
type injectList struct {
	key      string
	replies  []*protocol.FetchReply
	versions []int64
	agents   []string
}

// inject injects the batch's distinct collector lists and completes the replies that carry them.
func (f *Fetcher) inject(ctx context.Context, items []protocol.InjectItem, lists map[string]*injectList, hosts []resolvedHost) {
	out, err := injectAll(ctx, f.injector, items)
	if err != nil {
		f.log.Warn("fetch: credential service unavailable, collectors withheld",
			zap.Int("agents", len(hosts)), zap.Strings("agent_ids_sample", agentSample(hosts, 10)), zap.Error(err))
	}
	for _, l := range lists {
		var typeErr *protocol.Error
		switch {
		case err != nil:
			typeErr = protocol.Errorf(protocol.CodeUnavailable, "credential service unavailable")
		case out[l.key].err != nil:
			typeErr = out[l.key].err
			f.log.Warn("fetch: collector credentials failed, collectors withheld",
				zap.Strings("agent_ids_sample", sample(l.agents, 10)), zap.String("code", typeErr.Code), zap.String("reason", typeErr.Message))
		}
		for i, reply := range l.replies {
			if typeErr != nil {
				withholdCollectors(reply, typeErr)
			} else {
				addCollectors(reply, l.versions[i], out[l.key])
			}
		}
	}
}

func agentSample(hosts []resolvedHost, n int) []string {
	ids := make([]string, 0, min(n, len(hosts)))
	for _, h := range hosts[:min(n, len(hosts))] {
		ids = append(ids, h.res.Host.AgentID)
	}
	return ids
}

// resolveAgents resolves ids (unique) in as few requests as the resolver allows. It returns the hosts
// found and, for every other agent, why it has none.
func (f *Fetcher) resolveAgents(ctx context.Context, ids []string) ([]resolvedHost, map[string]error) {
	errs := map[string]error{}
	var hosts []resolvedHost
	requests := 0
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), protocol.MaxResolveAgents)]
		ids = ids[len(chunk):]
		for len(chunk) > 0 {
			requests++
			reply, err := f.resolver.ResolveAgents(ctx, protocol.ResolveAgentsRequest{AgentIDs: chunk})
			if err == nil {
				var found []resolvedHost
				found, err = expand(reply, requests)
				hosts = append(hosts, found...)
			}
			if err != nil {
				err = fmt.Errorf("resolve %d agents: %w", len(chunk), classifyRemote("resolver", err))
				for _, id := range chunk {
					errs[id] = err
				}
				break
			}
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
	return hosts, errs
}

// expand turns a resolve_agents reply into hosts, grouping those with the same configs; request
// numbers the reply (indexes mean nothing across replies).
func expand(reply protocol.ResolveAgentsReply, request int) ([]resolvedHost, error) {
	hosts := make([]resolvedHost, len(reply.Hosts))
	var key []string
	for i, h := range reply.Hosts {
		res, err := reply.Resolved(i)
		if err != nil {
			// A reply that contradicts itself is the resolver's fault, like an internal error.
			return nil, protocol.Errorf(protocol.CodeInternal, "malformed resolve_agents reply: %s", err.Error())
		}
		key = key[:0]
		for typ, n := range h.Configs {
			key = append(key, typ+"="+strconv.Itoa(n))
		}
		slices.Sort(key)
		group := strconv.Itoa(request) + "\x00" + h.Host.ClientID + "\x00" + h.Host.EnvironmentID + "\x00" + strings.Join(key, ",")
		hosts[i] = resolvedHost{res: res, group: group, trustedKeys: reply.TrustedKeys}
	}
	return hosts, nil
}
