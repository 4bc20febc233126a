package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/configsync/configsync/libs/protocol"
)

// fakeResolver serves one environment: an environment-level effective config per type and per-host
// overrides, with hosts online or not.
type fakeResolver struct {
	mu       sync.Mutex
	env      protocol.HostRef // ClientID and EnvironmentID
	envCfg   map[string]protocol.EffectiveConfig
	hosts    []fakeHost // sorted by HostID
	pushReqs []protocol.ResolvePushRequest
	fail     error
	// failFrom, when > 0, makes push page requests fail from that one on (1: the first).
	failFrom int
	// contract, when set, is the contract its push replies claim.
	contract int
}

type fakeHost struct {
	id, agent string
	online    bool
	overrides map[string]protocol.EffectiveConfig
}

func (r *fakeResolver) effective(h fakeHost, typ string) protocol.EffectiveConfig {
	if o, ok := h.overrides[typ]; ok {
		return o
	}
	return r.envCfg[typ]
}

func (r *fakeResolver) Resolve(_ context.Context, req protocol.ResolveRequest) (protocol.ResolveReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return protocol.ResolveReply{}, r.fail
	}
	for _, h := range r.hosts {
		if h.agent != req.AgentID {
			continue
		}
		reply := protocol.ResolveReply{Host: protocol.HostRef{HostID: h.id, AgentID: h.agent, ClientID: r.env.ClientID, EnvironmentID: r.env.EnvironmentID},
			Configs: map[string]protocol.EffectiveConfig{}}
		types := map[string]bool{}
		for t := range r.envCfg {
			types[t] = true
		}
		for t := range h.overrides {
			types[t] = true
		}
		for t := range types {
			reply.Configs[t] = r.effective(h, t)
		}
		return reply, nil
	}
	return protocol.ResolveReply{}, protocol.Errorf(protocol.CodeNotFound, "unknown agent")
}

func (r *fakeResolver) ResolveSets(ctx context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error) {
	return resolveSets(ctx, r, req.AgentIDs, 0, nil)
}

// ResolvePush answers a push page as the resolver does: the hosts read (online, listed, after the
// cursor, up to the limit) whose environment layer is at the requested version, hosts without an
// override of the type in one set with the environment's config, hosts with identical overrides
// (same version, data and statement) in one set each.
func (r *fakeResolver) ResolvePush(_ context.Context, req protocol.ResolvePushRequest) (protocol.ResolveSetsReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pushReqs = append(r.pushReqs, req)
	if r.fail != nil {
		return protocol.ResolveSetsReply{}, r.fail
	}
	if r.failFrom > 0 && len(r.pushReqs) >= r.failFrom {
		return protocol.ResolveSetsReply{}, errors.New("nats: no responders available for request")
	}
	if req.Contract != protocol.ResolveSetsContract {
		return protocol.ResolveSetsReply{}, protocol.Errorf(protocol.CodeContractMismatch, "contract %d", req.Contract)
	}
	if req.EnvironmentID != r.env.EnvironmentID {
		return protocol.ResolveSetsReply{}, protocol.Errorf(protocol.CodeNotFound, "unknown environment")
	}
	reply := protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract, Configs: []protocol.EffectiveConfig{}, Sets: []protocol.ConfigSet{}}
	if r.contract != 0 {
		reply.Contract = r.contract
	}
	env, hasEnv := r.envCfg[req.ConfigType]
	envSet := -1
	byContent := map[string]int{}
	read := 0
	for _, h := range r.hosts {
		if h.id <= req.After || (req.OnlineSince != nil && !h.online) || (len(req.HostIDs) > 0 && !slices.Contains(req.HostIDs, h.id)) {
			continue
		}
		if req.Limit > 0 && read == req.Limit {
			reply.NextAfter = req.After
			break
		}
		read++
		req.After = h.id
		if req.EnvironmentVersion != 0 && env.Version != req.EnvironmentVersion {
			continue
		}
		host := protocol.SetHost{HostID: h.id, AgentID: h.agent}
		set := protocol.ConfigSet{ClientID: r.env.ClientID, EnvironmentID: r.env.EnvironmentID, Configs: map[string]int{}, Hosts: []protocol.SetHost{host}}
		o, own := h.overrides[req.ConfigType]
		if !own {
			if envSet >= 0 {
				reply.Sets[envSet].Hosts = append(reply.Sets[envSet].Hosts, host)
				continue
			}
			envSet = len(reply.Sets)
			if hasEnv {
				env.EnvironmentVersion = env.Version
				set.Configs[req.ConfigType] = len(reply.Configs)
				reply.Configs = append(reply.Configs, env)
			}
			reply.Sets = append(reply.Sets, set)
			continue
		}
		o.EnvironmentVersion, o.HostVersion = env.Version, o.Version
		k := strconv.FormatInt(o.Version, 10) + "\x00" + string(o.ConfigData)
		if o.Statement != nil {
			k += "\x00" + string(o.Statement.Statement)
		}
		if n, ok := byContent[k]; ok {
			reply.Sets[n].Hosts = append(reply.Sets[n].Hosts, host)
			continue
		}
		byContent[k] = len(reply.Sets)
		set.Configs[req.ConfigType] = len(reply.Configs)
		reply.Configs = append(reply.Configs, o)
		reply.Sets = append(reply.Sets, set)
	}
	return reply, nil
}

// fakeInjector replaces each collector's credential_id "<id>" with "password": "pw-<id>"; ids listed
// in bad fail the whole item.
type fakeInjector struct {
	mu       sync.Mutex
	bad      map[string]bool
	requests []protocol.InjectRequest
	fail     error
}

func (f *fakeInjector) Inject(_ context.Context, req protocol.InjectRequest) (protocol.InjectReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	if f.fail != nil {
		return protocol.InjectReply{}, f.fail
	}
	var reply protocol.InjectReply
	for _, it := range req.Items {
		var list []map[string]any
		if err := json.Unmarshal(it.Collectors, &list); err != nil {
			reply.Results = append(reply.Results, protocol.InjectResult{Key: it.Key, Error: protocol.Errorf(protocol.CodeCredentialFailed, "not a list")})
			continue
		}
		var fields []string
		var failed *protocol.Error
		for i, c := range list {
			id, ok := c["credential_id"].(string)
			if !ok {
				continue
			}
			if f.bad[id] {
				failed = protocol.Errorf(protocol.CodeCredentialFailed, "credential %s not found", id)
				break
			}
			delete(c, "credential_id")
			c["password"] = "pw-" + id
			fields = append(fields, fmt.Sprintf("/%d/password", i))
		}
		if failed != nil {
			reply.Results = append(reply.Results, protocol.InjectResult{Key: it.Key, Error: failed})
			continue
		}
		b, _ := json.Marshal(list)
		reply.Results = append(reply.Results, protocol.InjectResult{Key: it.Key, Collectors: b, SecretFields: fields})
	}
	return reply, nil
}

func (f *fakeInjector) items() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		n += len(r.Items)
	}
	return n
}

type published struct {
	agent string
	cmd   protocol.Command
}

type fakePublisher struct {
	mu      sync.Mutex
	sent    []published
	flushes int
	refuse  map[string]bool
}

func (p *fakePublisher) Publish(_ context.Context, agentID string, command []byte) error {
	if p.refuse[agentID] {
		return fmt.Errorf("connection closed")
	}
	var c protocol.Command
	if err := json.Unmarshal(command, &c); err != nil {
		return fmt.Errorf("fake publisher: command is not JSON: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = append(p.sent, published{agentID, c})
	return nil
}

func (p *fakePublisher) Flush(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushes++
	return nil
}

func (p *fakePublisher) byAgent() map[string][]protocol.Command {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]protocol.Command{}
	for _, s := range p.sent {
		out[s.agent] = append(out[s.agent], s.cmd)
	}
	return out
}

var fixedNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func cfg(typ string, version int64, data string) protocol.EffectiveConfig {
	return protocol.EffectiveConfig{ConfigType: typ, ConfigData: json.RawMessage(data), Version: version}
}

// newFleet returns a resolver with n hosts (host-00000 ...); every third one offline.
func newFleet(n int) *fakeResolver {
	r := &fakeResolver{env: protocol.HostRef{ClientID: "client-1", EnvironmentID: "env-1"}, envCfg: map[string]protocol.EffectiveConfig{}}
	for i := range n {
		r.hosts = append(r.hosts, fakeHost{id: fmt.Sprintf("host-%05d", i), agent: fmt.Sprintf("agent-%05d", i), online: i%3 != 2,
			overrides: map[string]protocol.EffectiveConfig{}})
	}
	return r
}

func containsSecret(b []byte) bool { return strings.Contains(string(b), "pw-") }
