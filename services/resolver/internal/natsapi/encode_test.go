package natsapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
)

// agentsReply has hosts hosts sharing one config and each with one config of its own of about
// dataBytes bytes.
func agentsReply(hosts int, dataBytes int) protocol.ResolveAgentsReply {
	data := json.RawMessage(`{"static":{"k":"` + strings.Repeat("v", dataBytes) + `"}}`)
	reply := protocol.ResolveAgentsReply{Missing: []string{"gone-1", "gone-2"},
		Configs: []protocol.EffectiveConfig{{ConfigType: "healthcheck", ConfigData: json.RawMessage(`{"interval_seconds":60}`), Version: 1}}}
	for i := range hosts {
		reply.Configs = append(reply.Configs, protocol.EffectiveConfig{ConfigType: "labels", ConfigData: data, Version: int64(7 + i), Source: "merged"})
		reply.Hosts = append(reply.Hosts, protocol.AgentConfigs{
			Host:    protocol.HostRef{HostID: fmt.Sprintf("h-%d", i), AgentID: fmt.Sprintf("agent-%d", i), ClientID: "c", EnvironmentID: "e"},
			Configs: map[string]int{"healthcheck": 0, "labels": len(reply.Configs) - 1},
		})
	}
	return reply
}

// A reply that fits is encoded whole; one that does not is cut between hosts, within the limit, and
// the hosts left out are named in remaining, so asking for them again completes the answer.
func TestEncodeAgentsReply(t *testing.T) {
	full := agentsReply(50, 1000)
	b, err := encodeAgentsReply(full, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got protocol.ResolveAgentsReply
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %.200s", err, b)
	}
	if !reflect.DeepEqual(normalized(t, got), normalized(t, full)) {
		t.Fatalf("unlimited encoding changed the reply")
	}

	const limit = 20 << 10
	b, err = encodeAgentsReply(full, limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > limit {
		t.Fatalf("encoded %d bytes, limit %d", len(b), limit)
	}
	got = protocol.ResolveAgentsReply{}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Hosts) == 0 || len(got.Hosts)+len(got.Remaining) != 50 || len(got.Missing) != 2 {
		t.Fatalf("%d hosts + %d remaining, %d missing", len(got.Hosts), len(got.Remaining), len(got.Missing))
	}
	for i, id := range got.Remaining {
		if want := full.Hosts[len(got.Hosts)+i].Host.AgentID; id != want {
			t.Fatalf("remaining[%d] = %s, want %s", i, id, want)
		}
	}
	// Only the configs of the hosts sent are sent, and every host resolves to what it had.
	if len(got.Configs) != len(got.Hosts)+1 {
		t.Fatalf("%d configs for %d hosts, want %d", len(got.Configs), len(got.Hosts), len(got.Hosts)+1)
	}
	for i := range got.Hosts {
		g, err := got.Resolved(i)
		if err != nil {
			t.Fatal(err)
		}
		w, _ := full.Resolved(i)
		if !reflect.DeepEqual(normalized(t, g), normalized(t, w)) {
			t.Fatalf("host %d: %+v, want %+v", i, g, w)
		}
	}

	// A first host over the limit even alone fails on its own; the others are left for the next request.
	b, err = encodeAgentsReply(agentsReply(3, 30<<10), limit)
	if err != nil {
		t.Fatal(err)
	}
	var tooLarge protocol.ResolveAgentsReply
	if err := json.Unmarshal(b, &tooLarge); err != nil {
		t.Fatal(err)
	}
	if len(tooLarge.Hosts) != 0 || len(tooLarge.Failed) != 1 || tooLarge.Failed[0].AgentID != "agent-0" ||
		tooLarge.Failed[0].Error.Code != protocol.CodeInternal || !reflect.DeepEqual(tooLarge.Remaining, []string{"agent-1", "agent-2"}) {
		t.Fatalf("a single host over the limit: %s", b)
	}
	b, err = encodeAgentsReply(protocol.ResolveAgentsReply{Missing: []string{"x"}}, limit)
	if err != nil || string(b) != `{"configs":[],"hosts":[],"missing":["x"]}` {
		t.Fatalf("no hosts: %s, %v", b, err)
	}
}

func normalized(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
