package delivery_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// A repair request from anti-entropy, handled by the running service, moves
// configsync_delivery_repair_received_total{unit} and configsync_delivery_repair_commands_total{result}
// by exactly what it held and what became of it: two hosts repaired (one type published on each, one
// type withheld for a credential the host may not use) and three agents that are not registered (failed);
// every result moves by a different amount, so a count exported under the wrong label shows.
func TestRepairRequestIsExported(t *testing.T) {
	s := newServedStack(t, 2)
	scrape := s.startMetered(t, testDeliveryConfig(t))
	foreign := s.createCredential(t, s.otherClient(t), "theirs", map[string]string{"password": "foreign-pw-planted"})
	hc := s.putEnv(t, "healthcheck", `{"interval_seconds":30,"timeout_seconds":3}`)
	broken := s.hosts[1]
	col := s.putHost(t, broken, "collectors", fmt.Sprintf(`[{"type":"mysql","name":"stolen","host":"db","port":3306,"credential_id":%q}]`, foreign))

	received, commands := "configsync_delivery_repair_received_total", "configsync_delivery_repair_commands_total"
	published := "configsync_delivery_commands_published_total"
	type series struct {
		family, label, value string
		want                 float64
	}
	wants := []series{
		{received, "unit", "requests", 1}, {received, "unit", "hosts", 5},
		{commands, "result", "published", 2}, {commands, "result", "withheld", 1}, {commands, "result", "failed", 3},
		{published, "result", "ok", 2}, {published, "result", "error", 0},
	}
	before := scrape()
	for _, w := range wants {
		if !before.Has(w.family, map[string]string{w.label: w.value}) {
			t.Fatalf("%s{%s=%q} not exported before any repair", w.family, w.label, w.value)
		}
	}

	req := protocol.RepairRequest{Hosts: []protocol.RepairHost{
		{AgentID: s.hosts[0].agent, Types: map[string]protocol.RepairState{"healthcheck": {Expected: hc, Attempt: 1}}},
		{AgentID: broken.agent, Types: map[string]protocol.RepairState{"healthcheck": {Expected: hc, Attempt: 1}, "collectors": {Expected: col, Attempt: 2}}},
	}}
	for i := range 3 {
		req.Hosts = append(req.Hosts, protocol.RepairHost{AgentID: fmt.Sprintf("agent-unregistered-%d", i),
			Types: map[string]protocol.RepairState{"healthcheck": {Expected: hc, Attempt: 1}}})
	}
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.nc.Publish(protocol.RepairSubject, data); err != nil {
		t.Fatal(err)
	}
	testinfra.EventuallyNoError(t, 30*time.Second, testinfra.Explain(func() (bool, string) {
		now := scrape()
		ok, got := true, ""
		for _, w := range wants {
			l := map[string]string{w.label: w.value}
			d := now.Value(w.family, l) - before.Value(w.family, l)
			got += fmt.Sprintf(" %s{%s} %+v", w.family, w.value, d)
			ok = ok && d == w.want
		}
		return ok, got
	}), "the repair counted")
	s.fleet.drain(t)
	for _, h := range s.hosts {
		if c := s.fleet.commands(h.agent, "healthcheck"); len(c) != 1 || c[0].Version != hc {
			t.Fatalf("%s received healthcheck %+v, want v%d once", h.agent, c, hc)
		}
	}
	if c := s.fleet.commands(broken.agent, "collectors"); len(c) != 0 {
		t.Fatalf("%s received collectors it may not have: %+v", broken.agent, c)
	}
}
