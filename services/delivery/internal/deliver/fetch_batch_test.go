package deliver

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
)

// agentsResolver is fakeResolver counting its resolve_sets requests. fail answers every batch with
// that error; maxHosts cuts replies after that many hosts, listing the rest in Remaining; tooLarge
// agents are answered as the resolver answers a host whose configs alone exceed the max payload;
// contract, when set, is the contract its replies claim.
type agentsResolver struct {
	*fakeResolver
	mu       sync.Mutex
	batches  [][]string
	fail     error
	maxHosts int
	tooLarge map[string]bool
	contract int
}

func (a *agentsResolver) ResolveSets(ctx context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error) {
	a.mu.Lock()
	a.batches = append(a.batches, slices.Clone(req.AgentIDs))
	fail, maxHosts, tooLarge, contract := a.fail, a.maxHosts, a.tooLarge, a.contract
	a.mu.Unlock()
	if fail != nil {
		return protocol.ResolveSetsReply{}, fail
	}
	if req.Contract != protocol.ResolveSetsContract {
		return protocol.ResolveSetsReply{}, protocol.Errorf(protocol.CodeContractMismatch, "contract %d", req.Contract)
	}
	reply, err := resolveSets(ctx, a.fakeResolver, req.AgentIDs, maxHosts, tooLarge)
	if contract != 0 {
		reply.Contract = contract
	}
	return reply, err
}

// resolveSets answers a resolve_sets request from r as the resolver does: equal configs once per
// reply, hosts of the environment without overrides in one set, every other host in a set of its own.
func resolveSets(ctx context.Context, r *fakeResolver, ids []string, maxHosts int, tooLarge map[string]bool) (protocol.ResolveSetsReply, error) {
	reply := protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract, Configs: []protocol.EffectiveConfig{}, Sets: []protocol.ConfigSet{}}
	index := map[string]int{}
	envSet := -1
	hosts := 0
	for i, id := range ids {
		if maxHosts > 0 && hosts == maxHosts {
			reply.Remaining = ids[i:]
			break
		}
		if tooLarge[id] {
			reply.Failed = append(reply.Failed, protocol.AgentError{AgentID: id,
				Error: *protocol.Errorf(protocol.CodeInternal, "a single host's config exceeds the NATS max payload")})
			continue
		}
		res, err := r.Resolve(ctx, protocol.ResolveRequest{AgentID: id})
		var perr *protocol.Error
		if errors.As(err, &perr) && perr.Code == protocol.CodeNotFound {
			reply.Missing = append(reply.Missing, id)
			continue
		}
		if err != nil {
			return protocol.ResolveSetsReply{}, err
		}
		hosts++
		host := protocol.SetHost{HostID: res.Host.HostID, AgentID: res.Host.AgentID}
		shared := len(r.host(id).overrides) == 0
		if shared && envSet >= 0 {
			reply.Sets[envSet].Hosts = append(reply.Sets[envSet].Hosts, host)
			continue
		}
		set := protocol.ConfigSet{ClientID: res.Host.ClientID, EnvironmentID: res.Host.EnvironmentID, Configs: map[string]int{}, Hosts: []protocol.SetHost{host}}
		for typ, ec := range res.Configs {
			k := typ + "\x00" + strconv.FormatInt(ec.Version, 10) + "\x00" + string(ec.ConfigData)
			n, ok := index[k]
			if !ok {
				n = len(reply.Configs)
				index[k] = n
				reply.Configs = append(reply.Configs, ec)
			}
			set.Configs[typ] = n
		}
		if shared {
			envSet = len(reply.Sets)
		}
		reply.Sets = append(reply.Sets, set)
	}
	return reply, nil
}

// batchFleet has 40 hosts sharing the environment's configs, two with a collectors override (one
// with a credential that fails).
func batchFleet() (*agentsResolver, *fakeInjector) {
	r := newFleet(40)
	r.envCfg["healthcheck"] = cfg("healthcheck", 3, `{"interval_seconds":60}`)
	r.envCfg["labels"] = cfg("labels", 7, `null`)
	r.envCfg["collectors"] = cfg("collectors", 4, `[{"type":"mysql","name":"db","credential_id":"c1"},{"type":"http","name":"web","url":"http://x"}]`)
	r.hosts[5].overrides["collectors"] = cfg("collectors", 9, `[{"type":"redis","name":"cache","credential_id":"c2"}]`)
	r.hosts[6].overrides["collectors"] = cfg("collectors", 10, `[{"type":"mysql","name":"db","credential_id":"broken"}]`)
	return &agentsResolver{fakeResolver: r}, &fakeInjector{bad: map[string]bool{"broken": true}}
}

func batchAgents(r *agentsResolver, extra ...string) []string {
	var ids []string
	for _, h := range r.hosts {
		ids = append(ids, h.agent)
	}
	return append(ids, extra...)
}

// Each agent of a batch gets exactly what Fetch gives it, from one resolver request and one inject
// request with one item per distinct collector list.
func TestFetchBatchIsFetchForEachAgent(t *testing.T) {
	r, inj := batchFleet()
	f := NewFetcher(r, inj, zap.NewNop())
	ids := batchAgents(r, "nobody", "agent-00003") // an unknown agent, a duplicate
	results := f.FetchBatch(context.Background(), ids)

	if len(r.batches) != 1 {
		t.Fatalf("%d batch resolves, want 1", len(r.batches))
	}
	if len(inj.requests) != 1 || len(inj.requests[0].Items) != 3 {
		t.Fatalf("inject requests %+v, want one with 3 items (environment, override, broken)", inj.requests)
	}
	if len(results) != len(ids) {
		t.Fatalf("%d results for %d agents", len(results), len(ids))
	}
	single := NewFetcher(&agentsResolver{fakeResolver: r.fakeResolver}, &fakeInjector{bad: inj.bad}, zap.NewNop())
	for i, id := range ids {
		want, wantErr := single.Fetch(context.Background(), id)
		got := results[i]
		if wantErr != nil {
			if got.Err == nil || errors.Is(got.Err, ErrNotFound) != errors.Is(wantErr, ErrNotFound) {
				t.Errorf("%s: err %v, want %v", id, got.Err, wantErr)
			}
			continue
		}
		if got.Err != nil || !reflect.DeepEqual(*got.Reply, want) {
			t.Errorf("%s:\n batch  %+v, %v\n single %+v", id, got.Reply, got.Err, want)
		}
	}
	if results[6].Reply.TypeErrors["collectors"].Code != protocol.CodeCredentialFailed {
		t.Errorf("broken credential: %+v", results[6].Reply)
	}
	// The agents of one set share one reply (encoded once by the caller).
	if results[0].Reply != results[1].Reply || results[0].Reply == results[5].Reply {
		t.Error("replies are not shared exactly by the agents of one set")
	}
}

// A reply of another contract (a resolver upgraded or downgraded mid-rollout) is never read: every
// agent of the batch fails as unavailable, which the agents retry.
func TestFetchBatchRefusesAnotherContract(t *testing.T) {
	r, inj := batchFleet()
	r.contract = protocol.ResolveSetsContract + 1
	for _, res := range NewFetcher(r, inj, zap.NewNop()).FetchBatch(context.Background(), batchAgents(r)) {
		if !errors.Is(res.Err, ErrUnavailable) || res.Reply != nil {
			t.Fatalf("reply %+v, err %v, want ErrUnavailable", res.Reply, res.Err)
		}
	}
	if len(inj.requests) != 0 {
		t.Errorf("%d inject requests for a reply that was refused", len(inj.requests))
	}
}

func TestFetchBatchFailures(t *testing.T) {
	ctx := context.Background()
	t.Run("resolver unavailable", func(t *testing.T) {
		r, inj := batchFleet()
		r.fail = errors.New("nats: timeout")
		for _, res := range NewFetcher(r, inj, zap.NewNop()).FetchBatch(ctx, batchAgents(r)) {
			if !errors.Is(res.Err, ErrUnavailable) {
				t.Fatalf("err %v, want ErrUnavailable", res.Err)
			}
		}
		if len(r.batches) != 1 {
			t.Fatalf("%d batch requests after a timeout, want 1: the batch is not retried agent by agent", len(r.batches))
		}
	})
	// A whole request failing (an internal error, or no resolver answering) fails its agents as
	// unavailable: the agents retry.
	for name, fail := range map[string]error{
		"internal error": protocol.Errorf(protocol.CodeInternal, "malformed"),
		"no responders":  fmt.Errorf("request: %w", errors.New("nats: no responders available for request")),
	} {
		t.Run(name+" fails the batch as unavailable", func(t *testing.T) {
			r, inj := batchFleet()
			r.fail = fail
			for _, res := range NewFetcher(r, inj, zap.NewNop()).FetchBatch(ctx, batchAgents(r)) {
				if !errors.Is(res.Err, ErrUnavailable) {
					t.Fatalf("err %v, want ErrUnavailable", res.Err)
				}
			}
		})
	}
	// An agent the resolver cannot answer on its own gets its own error; the others are answered.
	t.Run("one host too large", func(t *testing.T) {
		r, inj := batchFleet()
		r.tooLarge = map[string]bool{"agent-00007": true}
		ids := batchAgents(r, "nobody")
		results := NewFetcher(r, inj, zap.NewNop()).FetchBatch(ctx, ids)
		if len(r.batches) != 1 {
			t.Fatalf("%d batch requests, want 1", len(r.batches))
		}
		for i, res := range results {
			switch ids[i] {
			case "nobody":
				if !errors.Is(res.Err, ErrNotFound) {
					t.Fatalf("unknown agent: %v", res.Err)
				}
			case "agent-00007":
				if !errors.Is(res.Err, ErrUnavailable) {
					t.Fatalf("too large: %v, want ErrUnavailable", res.Err)
				}
			default:
				if res.Err != nil || res.Reply.Versions["healthcheck"] != 3 {
					t.Fatalf("%s: %+v, %v", ids[i], res.Reply, res.Err)
				}
			}
		}
	})
	t.Run("credential service down", func(t *testing.T) {
		r, _ := batchFleet()
		results := NewFetcher(r, &fakeInjector{fail: errors.New("timeout")}, zap.NewNop()).FetchBatch(ctx, batchAgents(r))
		for _, res := range results {
			if res.Err != nil || res.Reply.TypeErrors["collectors"].Code != protocol.CodeUnavailable || res.Reply.Versions["healthcheck"] != 3 {
				t.Fatalf("%+v, %v", res.Reply, res.Err)
			}
		}
	})
}

// A reply cut to fit the max payload is completed by asking again for the remaining agents.
func TestFetchBatchFollowsRemaining(t *testing.T) {
	r, inj := batchFleet()
	r.maxHosts = 15
	ids := batchAgents(r)
	results := NewFetcher(r, inj, zap.NewNop()).FetchBatch(context.Background(), ids)
	if len(r.batches) != 3 {
		t.Fatalf("%d batch requests %v, want 3", len(r.batches), r.batches)
	}
	for i, res := range results {
		if res.Err != nil || res.Reply.Versions["healthcheck"] != 3 {
			t.Fatalf("%s: %+v, %v", ids[i], res.Reply, res.Err)
		}
	}
}

// host returns the fake host of agent (zero when none).
func (r *fakeResolver) host(agent string) fakeHost {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.hosts {
		if h.agent == agent {
			return h
		}
	}
	return fakeHost{}
}

// signedResolver is agentsResolver with signing on: every distinct config carries a statement naming
// its type and version, every host an identity naming its agent, the reply a trusted-key list.
type signedResolver struct {
	*agentsResolver
	trusted *protocol.Signed
}

func (s *signedResolver) ResolveSets(ctx context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error) {
	reply, err := s.agentsResolver.ResolveSets(ctx, req)
	if err != nil {
		return reply, err
	}
	for i := range reply.Configs {
		ec := &reply.Configs[i]
		ec.Statement = &protocol.Signed{Statement: []byte(ec.ConfigType + "@" + strconv.FormatInt(ec.Version, 10)), KeyID: "k1", Signature: []byte{byte(i)}}
	}
	for i := range reply.Sets {
		for j := range reply.Sets[i].Hosts {
			h := &reply.Sets[i].Hosts[j]
			h.Identity = &protocol.Signed{Statement: []byte("identity:" + h.AgentID), KeyID: "k1", Signature: []byte("id")}
		}
	}
	reply.TrustedKeys = s.trusted
	return reply, nil
}

// Delivery carries the resolver's statements untouched into every agent's fetch reply: the statement
// of each config of its set it delivers (none for a collectors config withheld), its own
// identity (never another agent's, though agents of one set share a reply), and the trusted-key list.
func TestFetchBatchPassesStatementsThrough(t *testing.T) {
	r, inj := batchFleet()
	trusted := &protocol.Signed{Statement: []byte(`{"kind":"trusted_keys"}`), KeyID: "k1", Signature: []byte("tk")}
	f := NewFetcher(&signedResolver{agentsResolver: r, trusted: trusted}, inj, zap.NewNop())
	ids := batchAgents(r)
	results := f.FetchBatch(context.Background(), ids)
	for i, id := range ids {
		res := results[i]
		if res.Err != nil {
			t.Fatalf("%s: %v", id, res.Err)
		}
		if res.Identity == nil || string(res.Identity.Statement) != "identity:"+id {
			t.Errorf("%s: identity %+v", id, res.Identity)
		}
		if !reflect.DeepEqual(res.Reply.TrustedKeys, trusted) {
			t.Errorf("%s: trusted keys %+v", id, res.Reply.TrustedKeys)
		}
		types := map[string]bool{}
		for typ := range res.Reply.Versions {
			types[typ] = true
		}
		if len(types) == 0 || len(res.Reply.Statements) != len(types) {
			t.Errorf("%s: statements %v for types %v", id, res.Reply.Statements, types)
		}
		for typ := range types {
			st, ok := res.Reply.Statements[typ]
			if !ok || !strings.HasPrefix(string(st.Statement), typ+"@") {
				t.Errorf("%s: statement of %s = %q", id, typ, st.Statement)
				continue
			}
			if v, ok := res.Reply.Versions[typ]; ok && string(st.Statement) != typ+"@"+strconv.FormatInt(v, 10) {
				t.Errorf("%s: statement %q for %s at version %d", id, st.Statement, typ, v)
			}
		}
	}
	if results[6].Reply.TypeErrors["collectors"].Code != protocol.CodeCredentialFailed {
		t.Fatalf("broken credential: %+v", results[6].Reply)
	}
	if st, ok := results[6].Reply.Statements["collectors"]; ok {
		t.Errorf("withheld collectors carry a statement %q", st.Statement)
	}
	// Single fetches get the same, identity included.
	one, err := f.Fetch(context.Background(), ids[3])
	if err != nil || one.Identity == nil || string(one.Identity.Statement) != "identity:"+ids[3] || one.Statements["healthcheck"].KeyID != "k1" {
		t.Fatalf("fetch %s: %+v, %v", ids[3], one, err)
	}
}
