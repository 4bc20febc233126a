package natsapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
)

func batchPage(n int) protocol.ResolveBatchReply {
	reply := protocol.ResolveBatchReply{
		EnvironmentID: "0b9f7c2e-8d1a-4e8b-9a55-3c1f6f0e2a00", ClientID: "0b9f7c2e-8d1a-4e8b-9a55-3c1f6f0e2a01",
		ConfigType: "healthcheck",
		Environment: protocol.EffectiveConfig{ConfigType: "healthcheck", ConfigData: json.RawMessage(`{"interval_seconds":30}`),
			Version: 7, Source: "environment", EnvironmentVersion: 7},
		Hosts: []protocol.BatchHost{},
	}
	for i := range n {
		h := protocol.BatchHost{HostID: fmt.Sprintf("0b9f7c2e-8d1a-4e8b-9a55-%012d", i), AgentID: fmt.Sprintf("agent-%d", i)}
		if i%3 == 0 {
			h.Override = &protocol.EffectiveConfig{ConfigType: "healthcheck", ConfigData: json.RawMessage(fmt.Sprintf(`{"interval_seconds":30,"timeout_seconds":%d}`, i)),
				Version: int64(100 + i), Source: "merged", EnvironmentVersion: 7, HostVersion: int64(100 + i)}
		}
		reply.Hosts = append(reply.Hosts, h)
	}
	return reply
}

// Without a limit the encoding is exactly json.Marshal's, escapes included.
func TestEncodeBatchReplyMatchesJSON(t *testing.T) {
	for _, reply := range []protocol.ResolveBatchReply{
		batchPage(0),
		batchPage(7),
		func() protocol.ResolveBatchReply {
			r := batchPage(2)
			r.Hosts = append(r.Hosts, protocol.BatchHost{HostID: "h", AgentID: "a<b>&\"c\"\\\n\u00e9"},
				protocol.BatchHost{HostID: "h2", AgentID: "a", Override: &protocol.EffectiveConfig{ConfigType: "labels", Version: 3}})
			r.NextAfter = "h2"
			return r
		}(),
	} {
		got, err := encodeBatchReply(reply, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(reply)
		if string(got) != string(want) {
			t.Fatalf("encoded\n%s\nwant\n%s", got, want)
		}
	}
}

// A page never exceeds the byte budget: it is cut after the last host that fits, NextAfter moves
// back to it, and following the cursor delivers every host exactly once.
func TestEncodeBatchReplyByteBudget(t *testing.T) {
	full := batchPage(300)
	const limit = 4096
	var got []protocol.BatchHost
	pages := 0
	for rest := full.Hosts; ; pages++ {
		page := full
		page.Hosts = rest
		body, err := encodeBatchReply(page, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > limit {
			t.Fatalf("page of %d bytes exceeds %d", len(body), limit)
		}
		var decoded protocol.ResolveBatchReply
		if err := json.Unmarshal(body, &decoded); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(decoded.Environment.Version, full.Environment.Version) || decoded.ClientID != full.ClientID {
			t.Fatalf("page header %+v", decoded)
		}
		got = append(got, decoded.Hosts...)
		if decoded.NextAfter == "" {
			if len(decoded.Hosts) != len(rest) {
				t.Fatalf("last page has %d of %d hosts", len(decoded.Hosts), len(rest))
			}
			break
		}
		if decoded.NextAfter != decoded.Hosts[len(decoded.Hosts)-1].HostID {
			t.Fatalf("next_after %s is not the page's last host", decoded.NextAfter)
		}
		rest = rest[len(decoded.Hosts):]
	}
	if pages < 5 || len(got) != 300 {
		t.Fatalf("%d pages, %d hosts: the budget did not cut pages as expected", pages+1, len(got))
	}
	for i, h := range got {
		if h.HostID != full.Hosts[i].HostID || (h.Override == nil) != (full.Hosts[i].Override == nil) {
			t.Fatalf("host %d is %+v, want %+v", i, h, full.Hosts[i])
		}
	}
	// The resolver's own cursor is kept when everything fits.
	small := batchPage(2)
	small.NextAfter = small.Hosts[1].HostID
	body, err := encodeBatchReply(small, limit)
	if err != nil || !strings.Contains(string(body), `"next_after":"`+small.NextAfter+`"`) {
		t.Fatalf("%s %v", body, err)
	}
}

// A budget that cannot hold the environment config, or a first host that does not fit, fails instead
// of sending too much.
func TestEncodeBatchReplyTooLarge(t *testing.T) {
	if _, err := encodeBatchReply(batchPage(3), 100); !errors.Is(err, errReplyTooLarge) {
		t.Fatalf("tiny budget: %v", err)
	}
	big := batchPage(1)
	big.Hosts[0].Override.ConfigData = json.RawMessage(`{"x":"` + strings.Repeat("v", 8000) + `"}`)
	if _, err := encodeBatchReply(big, 4096); !errors.Is(err, errReplyTooLarge) {
		t.Fatalf("oversized first host: %v", err)
	}
}
