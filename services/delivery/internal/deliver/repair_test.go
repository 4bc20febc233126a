package deliver

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestRepairSendsOnlyTheMissingTypes(t *testing.T) {
	r := newFleet(3)
	r.envCfg["healthcheck"] = cfg("healthcheck", 3, `{"interval_seconds":60}`)
	r.envCfg["labels"] = cfg("labels", 7, `null`) // deleted
	r.envCfg["collectors"] = cfg("collectors", 4, `[{"type":"mysql","name":"db","credential_id":"c1"}]`)
	r.hosts[2].overrides["collectors"] = cfg("collectors", 9, `[{"type":"mysql","name":"db","credential_id":"broken"}]`)
	pub := &fakePublisher{}
	rep := NewRepairer(NewFetcher(r, &fakeInjector{bad: map[string]bool{"broken": true}}, zap.NewNop()), pub, zap.NewNop())

	err := rep.Repair(context.Background(), protocol.RepairRequest{Hosts: []protocol.RepairHost{
		{AgentID: "agent-00000", Types: map[string]protocol.RepairState{"healthcheck": {Expected: 3, Attempt: 1}}},
		{AgentID: "agent-00001", Types: map[string]protocol.RepairState{"labels": {Expected: 7, Reported: 2, Attempt: 1}, "collectors": {Expected: 4, Attempt: 2}}},
		{AgentID: "agent-00002", Types: map[string]protocol.RepairState{"collectors": {Expected: 9, Attempt: 1}}}, // credential fails
		{AgentID: "ghost", Types: map[string]protocol.RepairState{"healthcheck": {Expected: 3, Attempt: 1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := pub.byAgent()
	if c := got["agent-00000"]; len(c) != 1 || c[0].ConfigType != "healthcheck" || c[0].Version != 3 || !testinfra.JSONEqual(c[0].Payload, []byte(`{"interval_seconds":60}`)) {
		t.Fatalf("agent-00000 got %+v, want healthcheck v3 only", c)
	}
	byType := map[string]protocol.Command{}
	for _, c := range got["agent-00001"] {
		byType[c.ConfigType] = c
	}
	if len(byType) != 2 || byType["labels"].Version != 7 || string(byType["labels"].Payload) != "null" {
		t.Fatalf("agent-00001 got %+v, want the deletion of labels at v7 and collectors", got["agent-00001"])
	}
	if c := byType["collectors"]; c.Version != 4 || !containsSecret(c.Payload) || len(c.SecretFields) != 1 {
		t.Fatalf("collectors repair = %+v, want injected secrets with their pointers", c)
	}
	if c := got["agent-00002"]; len(c) != 0 {
		t.Fatalf("agent-00002 got %+v although its collectors cannot be delivered whole", c)
	}
	if st := rep.Stats(); st.Published != 3 || st.Withheld != 1 || st.Failed != 1 || st.Hosts != 4 {
		t.Fatalf("stats = %+v", st)
	}
	// A repair carries the id a push of the same version carries: the same content, the same id.
	if byType["collectors"].CommandID != commandID("agent-00001", "collectors", 4) {
		t.Fatal("the repair's command id differs from the push's")
	}

	// Written again since ack-ingest looked: left to that write's own push.
	pub2 := &fakePublisher{}
	rep2 := NewRepairer(NewFetcher(r, &fakeInjector{}, zap.NewNop()), pub2, zap.NewNop())
	if err := rep2.Repair(context.Background(), protocol.RepairRequest{Hosts: []protocol.RepairHost{
		{AgentID: "agent-00000", Types: map[string]protocol.RepairState{"healthcheck": {Expected: 2, Attempt: 1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	if n := len(pub2.byAgent()["agent-00000"]); n != 0 {
		t.Fatalf("a superseded version was repaired with the newer one (%d commands)", n)
	}
}

func TestRepairRefusesEmptyRequests(t *testing.T) {
	rep := NewRepairer(NewFetcher(newFleet(1), &fakeInjector{}, zap.NewNop()), &fakePublisher{}, zap.NewNop())
	if err := rep.Repair(context.Background(), protocol.RepairRequest{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("err = %v, want ErrInvalidRequest", err)
	}
}
