package configapi_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/protocol"
)

// TestRegistrationHasIdentitiesSigned: registering hosts, one or a batch, asks the resolver to resolve
// exactly the new hosts once (resolve_sets, which signs and stores the identity statements it does not
// find), so that a new fleet's first herd signs none. The resolver reads the hosts itself: the request
// names agent ids only.
func TestRegistrationHasIdentitiesSigned(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newTenant("idsign")

	// A plain subscription sees every resolve_sets request beside the resolver's queue group.
	seen := make(chan protocol.ResolveSetsRequest, 64)
	sub, err := h.nc.Subscribe(protocol.ResolveSetsSubject, func(m *nats.Msg) {
		var req protocol.ResolveSetsRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("resolve_sets request %q: %v", m.Data, err)
			return
		}
		seen <- req
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	next := func(what string) protocol.ResolveSetsRequest {
		t.Helper()
		select {
		case req := <-seen:
			return req
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no resolve_sets request for the new hosts", what)
			return protocol.ResolveSetsRequest{}
		}
	}

	var one registeredJSON
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", h.admin,
		map[string]any{"hostname": "id-single", "agent_id": "agent-id-single"}).data(t, &one)
	if req := next("single registration"); !slices.Equal(req.AgentIDs, []string{"agent-id-single"}) || req.Contract != protocol.ResolveSetsContract {
		t.Fatalf("single registration asked for %v (contract %d), want [agent-id-single]", req.AgentIDs, req.Contract)
	}

	entries := make([]batchEntry, 3)
	want := make([]string, len(entries))
	for i := range entries {
		want[i] = fmt.Sprintf("agent-id-batch-%d", i)
		entries[i] = batchEntry{Hostname: fmt.Sprintf("id-batch-%d", i), AgentID: want[i]}
	}
	var got []registeredJSON
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts/batch", h.admin, batchBody(entries)).data(t, &got)
	if req := next("batch registration"); !slices.Equal(req.AgentIDs, want) {
		t.Fatalf("batch registration asked for %v, want %v", req.AgentIDs, want)
	}
	select {
	case req := <-seen:
		t.Fatalf("unexpected resolve_sets request %v", req.AgentIDs)
	case <-time.After(200 * time.Millisecond):
	}
}
