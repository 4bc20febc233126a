package natsapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// setsReply has one set per group of groupSize hosts, each set with one shared config and one config of
// its own of about dataBytes bytes.
func setsReply(sets, groupSize, dataBytes int) protocol.ResolveSetsReply {
	data := json.RawMessage(`{"static":{"k":"` + strings.Repeat("v", dataBytes) + `"}}`)
	reply := protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract, Missing: []string{"gone-1", "gone-2"},
		Configs: []protocol.EffectiveConfig{{ConfigType: "healthcheck", ConfigData: json.RawMessage(`{"interval_seconds":60}`), Version: 1}}}
	for i := range sets {
		reply.Configs = append(reply.Configs, protocol.EffectiveConfig{ConfigType: "labels", ConfigData: data, Version: int64(7 + i), Source: "merged"})
		set := protocol.ConfigSet{ClientID: "c", EnvironmentID: "e", Configs: map[string]int{"healthcheck": 0, "labels": len(reply.Configs) - 1}}
		for k := range groupSize {
			set.Hosts = append(set.Hosts, protocol.SetHost{HostID: fmt.Sprintf("h-%d-%d", i, k), AgentID: fmt.Sprintf("agent-%d-%d", i, k)})
		}
		reply.Sets = append(reply.Sets, set)
	}
	return reply
}

// agentsOf lists the agents of a reply's sets in order.
func agentsOf(r protocol.ResolveSetsReply) []string {
	var out []string
	for _, s := range r.Sets {
		for _, h := range s.Hosts {
			out = append(out, h.AgentID)
		}
	}
	return out
}

// A reply that fits is encoded whole; one that does not is cut between hosts (inside a set too),
// within the limit, and the hosts left out are named in remaining, so asking for them again completes
// the answer.
func TestEncodeSetsReply(t *testing.T) {
	full := setsReply(50, 3, 1000)
	if got := encodeDecode(t, full, 0); !reflect.DeepEqual(testinfra.JSONValue(t, got), testinfra.JSONValue(t, full)) {
		t.Fatalf("unlimited encoding changed the reply")
	}

	for _, limit := range []int{20 << 10, 20<<10 + 40, 20<<10 + 80} {
		got := encodeDecode(t, full, limit)
		if err := got.Check(); err != nil {
			t.Fatalf("cut reply: %v", err)
		}
		sent, all := agentsOf(got), agentsOf(full)
		if len(sent) == 0 || !reflect.DeepEqual(append(sent, got.Remaining...), all) || len(got.Missing) != 2 {
			t.Fatalf("limit %d: sent %v + remaining %v, want %d agents in order", limit, sent, got.Remaining, len(all))
		}
		// Only the configs of the sets sent are sent, and every host of a sent set has what it had.
		if len(got.Configs) != len(got.Sets)+1 {
			t.Fatalf("%d configs for %d sets, want %d", len(got.Configs), len(got.Sets), len(got.Sets)+1)
		}
		for i, set := range got.Sets {
			for typ, n := range set.Configs {
				if !reflect.DeepEqual(testinfra.JSONValue(t, got.Configs[n]), testinfra.JSONValue(t, full.Configs[full.Sets[i].Configs[typ]])) {
					t.Fatalf("set %d %s differs", i, typ)
				}
			}
		}
	}

	// A first host over the limit even alone fails on its own; the others are left for the next request.
	tooLarge := encodeDecode(t, setsReply(2, 2, 30<<10), 20<<10)
	if len(tooLarge.Sets) != 0 || len(tooLarge.Failed) != 1 || tooLarge.Failed[0].AgentID != "agent-0-0" ||
		tooLarge.Failed[0].Error.Code != protocol.CodeInternal || !reflect.DeepEqual(tooLarge.Remaining, []string{"agent-0-1", "agent-1-0", "agent-1-1"}) {
		t.Fatalf("a single host over the limit: %+v", tooLarge)
	}
	b, err := encodeSetsReply(protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract, Missing: []string{"x"}}, 20<<10)
	if err != nil || string(b) != `{"contract":1,"configs":[],"sets":[],"missing":["x"]}` {
		t.Fatalf("no hosts: %s, %v", b, err)
	}
}

// Signing's statements survive the encoding, a cut reply included: each config's statement, each
// host's identity and the trusted-key list.
func TestEncodeSetsReplyCarriesStatements(t *testing.T) {
	full := setsReply(50, 3, 1000)
	for i := range full.Configs {
		full.Configs[i].Statement = &protocol.Signed{Statement: []byte(fmt.Sprintf(`{"n":%d}`, i)), KeyID: "k1", Signature: []byte{byte(i)}}
	}
	for i := range full.Sets {
		for k := range full.Sets[i].Hosts {
			h := &full.Sets[i].Hosts[k]
			h.Identity = &protocol.Signed{Statement: []byte(`{"agent_id":"` + h.AgentID + `"}`), KeyID: "k1", Signature: []byte("id")}
		}
	}
	full.TrustedKeys = &protocol.Signed{Statement: []byte(`{"kind":"trusted_keys"}`), KeyID: "k1", Signature: []byte("tk")}
	if got := encodeDecode(t, full, 0); !reflect.DeepEqual(testinfra.JSONValue(t, got), testinfra.JSONValue(t, full)) {
		t.Fatalf("unlimited encoding changed the signed reply")
	}
	got := encodeDecode(t, full, 20<<10)
	if len(got.Remaining) == 0 || !reflect.DeepEqual(got.TrustedKeys, full.TrustedKeys) {
		t.Fatalf("cut reply: %d remaining, trusted keys %+v", len(got.Remaining), got.TrustedKeys)
	}
	for i, set := range got.Sets {
		if !reflect.DeepEqual(testinfra.JSONValue(t, set.Hosts), testinfra.JSONValue(t, full.Sets[i].Hosts[:len(set.Hosts)])) {
			t.Fatalf("set %d: hosts or identities differ", i)
		}
		for typ, n := range set.Configs {
			if !reflect.DeepEqual(got.Configs[n].Statement, full.Configs[full.Sets[i].Configs[typ]].Statement) {
				t.Fatalf("set %d %s: statement differs", i, typ)
			}
		}
	}
}

// encodeDecode encodes reply with encodeSetsReply within limit (0: no limit), checks that the limit
// is kept and decodes what was encoded.
func encodeDecode(t *testing.T, reply protocol.ResolveSetsReply, limit int) protocol.ResolveSetsReply {
	t.Helper()
	b, err := encodeSetsReply(reply, limit)
	if err != nil {
		t.Fatal(err)
	}
	if limit > 0 && len(b) > limit {
		t.Fatalf("encoded %d bytes, limit %d", len(b), limit)
	}
	var got protocol.ResolveSetsReply
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %.200s", err, b)
	}
	return got
}

// A host is encoded by hand (with its identity statement too): byte for byte what json.Marshal writes,
// for ids and key ids that need escaping and for empty or missing statement bytes alike.
func TestAppendSetHostIsJSONMarshal(t *testing.T) {
	id := &protocol.Signed{Statement: []byte(`{"kind":"identity","agent_id":"a-1"}`), KeyID: "k-2026", Signature: []byte{0, 1, 2, 0xfe, 0xff}}
	for _, h := range []protocol.SetHost{
		{HostID: "0b7e6f0c-6a38-4f7e-9d0a-3f1c2b4a5d6e", AgentID: "agent-1"},
		{HostID: "0b7e6f0c-6a38-4f7e-9d0a-3f1c2b4a5d6e", AgentID: "agent-1", Identity: id},
		{HostID: "h", AgentID: "a", Identity: &protocol.Signed{}},
		{HostID: "h", AgentID: "a", Identity: &protocol.Signed{Statement: []byte{}, KeyID: "k", Signature: []byte{}}},
		{HostID: "h", AgentID: "a", Identity: &protocol.Signed{Statement: []byte("x"), KeyID: `k"<&>\`, Signature: []byte("yz")}},
		{HostID: "h<1>", AgentID: "a", Identity: id},
		{HostID: "h", AgentID: "a\u00e9", Identity: id},
	} {
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendSetHost([]byte("prefix"), h)
		if err != nil || string(got) != "prefix"+string(want) {
			t.Fatalf("appendSetHost(%+v) = %s, %v; want prefix%s", h, got, err, want)
		}
	}
}

// TestSetSizeIsTheEncodedSize checks that a set's buffer is sized to its encoding when nothing needs
// escaping (it is then allocated once); a host that needs escaping is encoded by json.Marshal and only
// makes the estimate short (the buffer grows), never the encoding different.
func TestSetSizeIsTheEncodedSize(t *testing.T) {
	id := &protocol.Signed{Statement: []byte(`{"kind":"identity","agent_id":"a-1"}`), KeyID: "k-2026", Signature: make([]byte, 64)}
	hosts := []protocol.SetHost{
		{HostID: "0b7e6f0c-6a38-4f7e-9d0a-3f1c2b4a5d6e", AgentID: "agent-1"},
		{HostID: "0b7e6f0c-6a38-4f7e-9d0a-3f1c2b4a5d6f", AgentID: "agent-2", Identity: id},
		{HostID: "h", AgentID: "a", Identity: &protocol.Signed{}},
		{HostID: "h", AgentID: "a", Identity: &protocol.Signed{Statement: []byte{}, KeyID: "k", Signature: []byte{}}},
		{HostID: "h", AgentID: "a", Identity: &protocol.Signed{Statement: []byte("x"), KeyID: "k", Signature: []byte("yz")}},
	}
	for _, tc := range []struct {
		name    string
		configs map[string]int
		hosts   []protocol.SetHost
	}{
		{"no hosts", map[string]int{}, nil},
		{"one config", map[string]int{"labels": 0}, hosts[:1]},
		{"every kind of host", map[string]int{"labels": 3, "collectors": 12, "healthcheck": 0}, hosts},
		{"herd batch", map[string]int{"labels": 1}, slices.Repeat(hosts[1:2], 64)},
	} {
		set := protocol.ConfigSet{ClientID: "5f0c1c1e-0000-4000-8000-000000000001", EnvironmentID: "e", Configs: tc.configs, Hosts: tc.hosts}
		buf, err := appendSetHead(nil, set)
		if err != nil {
			t.Fatal(err)
		}
		for k, h := range set.Hosts {
			if k > 0 {
				buf = append(buf, ',')
			}
			if buf, err = appendSetHost(buf, h); err != nil {
				t.Fatal(err)
			}
		}
		buf = append(buf, `]}`...)
		// The estimate allows 20 digits per config index and a comma per entry.
		slack := 21*len(set.Configs) + len(set.Hosts)
		if got := setSize(set); got < len(buf) || got > len(buf)+slack {
			t.Errorf("%s: setSize = %d, encoding is %d bytes (allowed slack %d)", tc.name, got, len(buf), slack)
		}
	}
	escaped := protocol.ConfigSet{ClientID: "c", EnvironmentID: "e", Configs: map[string]int{"labels": 0},
		Hosts: []protocol.SetHost{{HostID: "h<1>", AgentID: "a", Identity: id}}}
	got, err := encodeSetsReply(protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract,
		Configs: []protocol.EffectiveConfig{{ConfigType: "labels", ConfigData: json.RawMessage(`{}`), Version: 1}},
		Sets:    []protocol.ConfigSet{escaped}}, 0)
	if err != nil || !strings.Contains(string(got), `"host_id":"h\u003c1\u003e"`) {
		t.Fatalf("escaped host: %s, %v", got, err)
	}
}

// BenchmarkEncodeSetsReplySigned encodes the reply to a batch of 64 fetches of one environment with
// signing on (every host carries its identity statement), as delivery asks for a herd.
func BenchmarkEncodeSetsReplySigned(b *testing.B) {
	sig := make([]byte, 64)
	reply := protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract, Configs: []protocol.EffectiveConfig{},
		TrustedKeys: &protocol.Signed{Statement: []byte(`{"kind":"trusted_keys"}`), KeyID: "k-2026", Signature: sig}}
	set := protocol.ConfigSet{ClientID: "5f0c1c1e-0000-4000-8000-000000000001", EnvironmentID: "5f0c1c1e-0000-4000-8000-000000000002",
		Configs: map[string]int{}}
	for i, t := range []string{"collectors", "intervals", "labels", "healthcheck"} {
		set.Configs[t] = i
		reply.Configs = append(reply.Configs, protocol.EffectiveConfig{ConfigType: t, ConfigData: json.RawMessage(`{"static":{"env":"prod"}}`),
			Version: int64(100 + i), Source: "environment",
			Statement: &protocol.Signed{Statement: []byte(`{"kind":"config","config_type":"` + t + `"}`), KeyID: "k-2026", Signature: sig}})
	}
	for i := range 64 {
		agent := fmt.Sprintf("lg-20261202t114455-6948-%06d", i)
		set.Hosts = append(set.Hosts, protocol.SetHost{HostID: fmt.Sprintf("5f0c1c1e-0000-4000-8000-%012d", i), AgentID: agent,
			Identity: &protocol.Signed{Statement: []byte(`{"kind":"identity","agent_id":"` + agent + `","environment_id":"5f0c1c1e-0000-4000-8000-000000000002"}`),
				KeyID: "k-2026", Signature: sig}})
	}
	reply.Sets = []protocol.ConfigSet{set}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeSetsReply(reply, defaultMaxPayload); err != nil {
			b.Fatal(err)
		}
	}
}
