package drift

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// fleet is an environment of hosts for the detector's ports: every host resolves to one of sets
// (host i to sets[i%len(sets)]); resolves counts ResolveSets calls, lists credential List calls.
type fleet struct {
	env      tenants.Environment
	hosts    []hosts.Host
	sets     []map[string]protocol.EffectiveConfig
	creds    []protocol.CredentialMeta
	resolves int
	lists    int
}

func (f *fleet) Environment(_ context.Context, _ tenancy.Principal, id uuid.UUID) (tenants.Environment, error) {
	return f.env, nil
}

func (f *fleet) Hosts(_ context.Context, _ uuid.UUID, after uuid.NullUUID, limit int) ([]hosts.Host, error) {
	start := 0
	if after.Valid {
		for i, h := range f.hosts {
			if h.ID == after.UUID {
				start = i + 1
			}
		}
	}
	return f.hosts[start:min(start+limit, len(f.hosts))], nil
}

func (f *fleet) ResolveSets(_ context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error) {
	f.resolves++
	reply := protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract}
	index := make([]int, len(f.sets))
	for i := range index {
		index[i] = -1
	}
	byAgent := make(map[string]int, len(f.hosts))
	for i, h := range f.hosts {
		byAgent[h.AgentID] = i
	}
	for _, a := range req.AgentIDs {
		i := byAgent[a]
		n := i % len(f.sets)
		if index[n] < 0 {
			index[n] = len(reply.Sets)
			set := protocol.ConfigSet{ClientID: f.env.ClientID.String(), EnvironmentID: f.env.ID.String(), Configs: map[string]int{}}
			for typ, ec := range f.sets[n] {
				set.Configs[typ] = len(reply.Configs)
				reply.Configs = append(reply.Configs, ec)
			}
			reply.Sets = append(reply.Sets, set)
		}
		s := &reply.Sets[index[n]]
		s.Hosts = append(s.Hosts, protocol.SetHost{HostID: f.hosts[i].ID.String(), AgentID: a})
	}
	return reply, nil
}

func (f *fleet) List(context.Context, protocol.CredentialListRequest) ([]protocol.CredentialMeta, error) {
	f.lists++
	return f.creds, nil
}

// newFleet returns n hosts over two sets: collectors with an injected credential, and labels at
// versions that differ between the sets. Every host reports the state of its set (in sync), except
// those whose index is in drifted, which report version 1 of labels.
func newFleet(t testing.TB, n int, drifted map[int]bool) *fleet {
	credID := uuid.NewString()
	collectors := json.RawMessage(fmt.Sprintf(`[{"type":"postgres","name":"pg","host":"db","port":5432,"credential_id":%q}]`, credID))
	f := &fleet{
		env:   tenants.Environment{ID: uuid.New(), ClientID: uuid.New(), Name: "prod"},
		creds: []protocol.CredentialMeta{{ID: credID, Fields: []string{"password", "username"}}},
		sets: []map[string]protocol.EffectiveConfig{
			{"collectors": {ConfigType: "collectors", ConfigData: collectors, Version: 3}, "labels": {ConfigType: "labels", ConfigData: json.RawMessage(`{"tier":"a"}`), Version: 2}},
			{"collectors": {ConfigType: "collectors", ConfigData: collectors, Version: 3}, "labels": {ConfigType: "labels", ConfigData: json.RawMessage(`{"tier":"b"}`), Version: 5}},
		},
	}
	// What the agent of each set reports: its cache entries' hash, collectors redacted.
	reported := make([]string, len(f.sets))
	for i, s := range f.sets {
		redacted, pointers, err := agentconfig.RedactForCache(s["collectors"].ConfigData, map[string][]string{credID: {"password", "username"}})
		if err != nil {
			t.Fatal(err)
		}
		reported[i] = agentconfig.ConfigHash([]agentconfig.CacheEntry{
			{ConfigType: "collectors", ConfigData: redacted, Version: 3, SecretFields: pointers, Redacted: true},
			{ConfigType: "labels", ConfigData: s["labels"].ConfigData, Version: s["labels"].Version},
		})
	}
	now := time.Now()
	for i := range n {
		hash := reported[i%2]
		versions := map[string]int64{"collectors": 3, "labels": f.sets[i%2]["labels"].Version}
		if drifted[i] {
			versions["labels"] = 1
			hash = "sha256:old"
		}
		f.hosts = append(f.hosts, hosts.Host{ID: uuid.New(), EnvironmentID: f.env.ID, AgentID: fmt.Sprintf("agent-%06d", i),
			Labels: selector.Labels{}, ConfigHash: &hash, ConfigVersions: versions, LastHeartbeatAt: &now})
	}
	return f
}

// The expected hash, versions and undeliverable reasons are computed once per resolved set and shared
// by its hosts: each host is still judged against its own set, and the verdicts are those of hosts
// judged one by one.
func TestDriftedJudgesEachHostAgainstItsOwnSet(t *testing.T) {
	drifted := map[int]bool{3: true, 600: true, 1201: true}
	f := newFleet(t, 1300, drifted)
	d := NewDetector(f, f, f, f, time.Minute)
	got, err := d.Drifted(context.Background(), tenancy.Principal{IsAdmin: true}, f.env.ID, selector.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	want := []uuid.UUID{f.hosts[3].ID, f.hosts[600].ID, f.hosts[1201].ID}
	if fmt.Sprint(got.HostIDs) != fmt.Sprint(want) || fmt.Sprint(got.Stale) != "[true true true]" {
		t.Fatalf("drifted %v stale %v, want %v all stale", got.HostIDs, got.Stale, want)
	}
	if f.resolves != 3 || f.lists != 1 {
		t.Fatalf("%d resolves and %d credential lists for 3 pages, want 3 and 1", f.resolves, f.lists)
	}

	// One host at a time (the console's page), the same verdicts and expected state.
	for _, i := range []int{2, 3, 600, 601} {
		one, err := d.Hosts(context.Background(), tenancy.Principal{IsAdmin: true}, f.env.ID, f.hosts[i:i+1])
		if err != nil {
			t.Fatal(err)
		}
		h := one[f.hosts[i].ID]
		if (len(h.Reasons) > 0) != drifted[i] {
			t.Fatalf("host %d alone: reasons %q, drifted %v", i, h.Reasons, drifted[i])
		}
		if h.ExpectedVersions["labels"] != f.sets[i%2]["labels"].Version {
			t.Fatalf("host %d alone: expected versions %v", i, h.ExpectedVersions)
		}
	}

	// A report lists the same hosts, each with its own set's expected labels version.
	report, err := d.Environment(context.Background(), tenancy.Principal{IsAdmin: true}, f.env.ID, selector.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if report.CheckedHosts != 1300 || len(report.Hosts) != 3 {
		t.Fatalf("checked %d, drifted %d", report.CheckedHosts, len(report.Hosts))
	}
	for k, h := range report.Hosts {
		if h.ExpectedVersions["labels"] != []int64{5, 2, 5}[k] || h.ExpectedHash == "" {
			t.Fatalf("drifted host %d: expected versions %v, hash %q", k, h.ExpectedVersions, h.ExpectedHash)
		}
	}
}

// BenchmarkDrifted is the fleet metrics' drift pass over 10,000 hosts of two config sets (collectors
// with an injected credential): the cost per host once the resolver has answered.
func BenchmarkDrifted(b *testing.B) {
	f := newFleet(b, 10000, map[int]bool{7: true})
	d := NewDetector(f, f, f, f, time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Drifted(context.Background(), tenancy.Principal{IsAdmin: true}, f.env.ID, selector.Selector{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(f.hosts)), "ns/host")
}
