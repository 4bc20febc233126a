package faults_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/testinfra"
)

// TestDeliveryKilledMidFanOut kills the delivery process (SIGKILL) while it fans an environment-wide
// change out, and starts a new one.
//
// Setup: delivery runs as the real binary, because the durability claim is about a process that dies
// holding an unacknowledged JetStream message. It pushes one host per page, and the resolver (in
// process, with config-api, credential, ack-ingest and the relay) holds the third page query, so the
// kill lands after exactly two of six fake agents were pushed. The resolver is released once the
// process is dead; its answer goes nowhere.
//
// Proves: the event is redelivered to the new process after the ack wait and the fan-out completes
// (every agent gets the change, every ack lands); agents pushed twice get the same command_id both
// times, so they can tell the repeat.
func TestDeliveryKilledMidFanOut(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	gate := newPageGate()
	s.startResolver(gate)
	s.startCredential(nil)
	s.startAckIngest()
	s.startRelay()
	api := s.startAPI()

	proc := newProcess(t, "delivery", binary(t, "delivery"), nil, append(s.serviceEnv(natsauth.DeliveryService),
		"HTTP_ADDR="+testinfra.FreeAddr(t), "LOG_FORMAT=json", "LOG_LEVEL=info",
		"CONFIGSYNC_PUSH_PAGE_SIZE=1", "CONFIGSYNC_PUSH_ACK_WAIT=2s", "CONFIGSYNC_PUSH_RETRY_DELAY=200ms",
		"CONFIGSYNC_UPSTREAM_TIMEOUT=2s",
	))
	proc.start(t)
	proc.waitLogged(t, 30*time.Second, "event consumer started")

	ten := api.newTenant("delivery-kill")
	hosts := api.registerHosts(ten.EnvID, "app", 6)
	fakes := newFakeAgents(t, s.nc, hosts)
	s.bringOnline(fakes, hosts)

	const typ = "watch_files"
	gate.arm(2)
	v := api.putEnv(ten.EnvID, typ, `{"paths":["/etc","/opt"],"exclude_patterns":["*.swp"]}`)
	var pushed []string
	testinfra.EventuallyNoError(t, 20*time.Second, func() error {
		pushed = pushed[:0]
		for _, a := range fakes {
			if a.count(typ, v) > 0 {
				pushed = append(pushed, a.id)
			}
		}
		if gate.holding() > 0 && len(pushed) == 2 {
			return nil
		}
		return fmt.Errorf("%d page queries held, pushed %v", gate.holding(), pushed)
	}, "two hosts pushed and the third page held")
	proc.kill(t)
	gate.open()
	if n := proc.logged("push done"); n != 0 {
		t.Fatalf("the killed delivery finished the fan-out (%d \"push done\"): the kill was not mid-fan-out", n)
	}

	proc.start(t)
	waitReceived(t, 60*time.Second, fakes, typ, v)
	s.waitApplied(30*time.Second, hosts, typ, v)
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		if proc.logged("push done") > 0 {
			return nil
		}
		return errors.New("no \"push done\" yet")
	}, "the new delivery process to finish the fan-out")
	testinfra.EventuallyNoError(t, 20*time.Second, func() error {
		return s.consumerIdle("CONFIGSYNC_EVENTS", "configsync-delivery-push")
	}, "delivery's event consumer to settle")
	t.Logf("pushed before the kill: %v", pushed)
	for _, a := range fakes {
		cmds := a.received(typ)
		t.Logf("agent %s received %s versions %v", a.id, typ, versionsOf(cmds))
		for _, c := range cmds[1:] {
			if c.Version == cmds[0].Version && c.CommandID != cmds[0].CommandID {
				t.Errorf("agent %s got v%d twice with different command ids %q and %q", a.id, c.Version, cmds[0].CommandID, c.CommandID)
			}
		}
	}
}
