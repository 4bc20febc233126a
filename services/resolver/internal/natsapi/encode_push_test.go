package natsapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
)

// pushPage is a resolve_push page of n hosts as the resolver builds it: the environment's set (hosts
// without a row of their own) and, for every third host, a set of its own with its merged config.
func pushPage(n int) protocol.ResolveSetsReply {
	if n == 0 {
		return protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract, Configs: []protocol.EffectiveConfig{}, Sets: []protocol.ConfigSet{}}
	}
	reply := protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract,
		Configs: []protocol.EffectiveConfig{{ConfigType: "healthcheck", ConfigData: json.RawMessage(`{"interval_seconds":30}`),
			Version: 7, Source: "environment", EnvironmentVersion: 7}},
		Sets: []protocol.ConfigSet{{ClientID: "0b9f7c2e-8d1a-4e8b-9a55-3c1f6f0e2a01", EnvironmentID: "0b9f7c2e-8d1a-4e8b-9a55-3c1f6f0e2a00",
			Configs: map[string]int{"healthcheck": 0}, Hosts: []protocol.SetHost{}}},
	}
	for i := range n {
		h := protocol.SetHost{HostID: fmt.Sprintf("0b9f7c2e-8d1a-4e8b-9a55-%012d", i), AgentID: fmt.Sprintf("agent-%d", i)}
		if i%3 != 0 {
			reply.Sets[0].Hosts = append(reply.Sets[0].Hosts, h)
			continue
		}
		reply.Sets = append(reply.Sets, protocol.ConfigSet{ClientID: reply.Sets[0].ClientID, EnvironmentID: reply.Sets[0].EnvironmentID,
			Configs: map[string]int{"healthcheck": len(reply.Configs)}, Hosts: []protocol.SetHost{h}})
		reply.Configs = append(reply.Configs, protocol.EffectiveConfig{ConfigType: "healthcheck",
			ConfigData: json.RawMessage(fmt.Sprintf(`{"interval_seconds":30,"timeout_seconds":%d}`, i)),
			Version:    int64(100 + i), Source: "merged", EnvironmentVersion: 7, HostVersion: int64(100 + i)})
	}
	return reply
}

// pushedVersions is the config version each host of a page gets, by host id.
func pushedVersions(t *testing.T, reply protocol.ResolveSetsReply) map[string]int64 {
	t.Helper()
	if err := reply.Check(); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, set := range reply.Sets {
		for _, h := range set.Hosts {
			if _, dup := out[h.HostID]; dup {
				t.Fatalf("host %s in two sets", h.HostID)
			}
			out[h.HostID] = reply.Configs[set.Configs["healthcheck"]].Version
		}
	}
	return out
}

// Without a limit, or within it, the encoding is exactly json.Marshal's, escapes and cursor included.
func TestEncodePushReplyMatchesJSON(t *testing.T) {
	odd := pushPage(2)
	odd.Sets[0].Hosts = append(odd.Sets[0].Hosts, protocol.SetHost{HostID: "h", AgentID: "a<b>&\"c\"\\\n\u00e9"})
	odd.NextAfter = "h"
	for _, reply := range []protocol.ResolveSetsReply{pushPage(0), pushPage(7), odd} {
		for _, limit := range []int{0, 1 << 20} {
			got, err := encodePushReply(reply, limit)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(reply)
			if string(got) != string(want) {
				t.Fatalf("encoded\n%s\nwant\n%s", got, want)
			}
		}
	}
}

// A page never exceeds the byte budget: it is cut after the longest prefix of its hosts (in id order)
// that fits, NextAfter moves back to its last host, and following the cursor delivers every host
// exactly once with its own config.
func TestEncodePushReplyByteBudget(t *testing.T) {
	full := pushPage(300)
	want := pushedVersions(t, full)
	const limit = 4096
	got := map[string]int64{}
	after := ""
	pages := 0
	for ; pages < 1000; pages++ {
		// The resolver's next page: the hosts after the cursor, its cursor at the last of them.
		body, err := encodePushReply(prefixReply(full, hostsAfter(full, after)), limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > limit {
			t.Fatalf("page of %d bytes exceeds %d", len(body), limit)
		}
		decoded := mustDecode(t, body)
		versions := pushedVersions(t, decoded)
		for id, v := range versions {
			if _, dup := got[id]; dup {
				t.Fatalf("host %s sent twice", id)
			}
			if id <= after {
				t.Fatalf("host %s is not after the cursor %s", id, after)
			}
			got[id] = v
		}
		if decoded.NextAfter == "" {
			break
		}
		if len(versions) == 0 || decoded.NextAfter != slices.Max(slices.Collect(maps.Keys(versions))) {
			t.Fatalf("next_after %s is not the page's last host", decoded.NextAfter)
		}
		after = decoded.NextAfter
	}
	if pages < 5 || len(got) != 300 {
		t.Fatalf("%d pages, %d hosts: the budget did not cut pages as expected", pages+1, len(got))
	}
	for id, v := range want {
		if got[id] != v {
			t.Fatalf("host %s got version %d, want %d", id, got[id], v)
		}
	}
}

// hostsAfter is the hosts of a page after the cursor, in id order.
func hostsAfter(reply protocol.ResolveSetsReply, after string) []protocol.SetHost {
	var hosts []protocol.SetHost
	for _, set := range reply.Sets {
		for _, h := range set.Hosts {
			if h.HostID > after {
				hosts = append(hosts, h)
			}
		}
	}
	slices.SortFunc(hosts, func(a, b protocol.SetHost) int { return strings.Compare(a.HostID, b.HostID) })
	return hosts
}

// A first host whose config alone exceeds the budget can never be pushed: it is reported failed and
// the cursor moves past it, so the next page goes on with the others.
func TestEncodePushReplyTooLarge(t *testing.T) {
	big := pushPage(4)
	big.Configs[1].ConfigData = json.RawMessage(`{"x":"` + strings.Repeat("v", 8000) + `"}`) // host 0's own config
	body, err := encodePushReply(big, 4096)
	if err != nil {
		t.Fatal(err)
	}
	decoded := mustDecode(t, body)
	if len(decoded.Failed) != 1 || decoded.Failed[0].AgentID != "agent-0" || decoded.Failed[0].Error.Code != protocol.CodeInternal ||
		decoded.NextAfter != big.Sets[1].Hosts[0].HostID || len(pushedVersions(t, decoded)) != 0 {
		t.Fatalf("oversized first host: %s", body)
	}
	// The next page (the hosts after it) fits whole.
	rest := prefixReply(big, hostsAfter(big, decoded.NextAfter))
	rest.NextAfter = ""
	body, err = encodePushReply(rest, 4096)
	if err != nil || len(pushedVersions(t, mustDecode(t, body))) != 3 {
		t.Fatalf("page after the oversized host: %s %v", body, err)
	}
}

func mustDecode(t *testing.T, body []byte) protocol.ResolveSetsReply {
	t.Helper()
	var r protocol.ResolveSetsReply
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r
}
