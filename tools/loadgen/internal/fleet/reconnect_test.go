package fleet

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// TestAcksLostAtABreakAreRepublishedAfterTheReconnect: acks published while nobody could receive them
// (as an ack in flight when a connection breaks is lost) reach the backend once the fleet's connection
// reconnects: every agent sends its newest ack of each type again, as the real agent does. Nothing else
// would bring them back: the agents hold the version, so anti-entropy sees nothing to repair, and a
// staged rollout's gate would wait for the missing ack for good.
func TestAcksLostAtABreakAreRepublishedAfterTheReconnect(t *testing.T) {
	url := startNATS(t)
	commander, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(commander.Close)
	ids := agentIDs(6, "rc")
	f, err := New(Config{URL: url, Conns: 2}, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Subscribe(); err != nil {
		t.Fatal(err)
	}
	// Two versions, each handled before the next is sent: the newest ack (6) is the one to come back.
	for i, version := range []int64{5, 6} {
		for _, id := range ids {
			sendCommand(t, commander, id, protocol.Command{CommandID: "c", Type: protocol.CommandConfigUpdate,
				ConfigType: "labels", Version: version, Payload: json.RawMessage(`{"static":{"ring":"all"}}`)})
		}
		want := int64((i + 1) * len(ids))
		testinfra.Eventually(t, waitTimeout, func() bool { return f.Stats().AcksSent >= want }, "every agent acked the command")
	}
	if err := f.conns[0].Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.conns[1].Flush(); err != nil {
		t.Fatal(err)
	}

	// Only now does anyone listen for acks: the ones sent so far are lost.
	backend := newFakeBackend(t, url)
	if err := f.conns[0].ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	if err := f.conns[1].ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	testinfra.Eventually(t, waitTimeout, backend.count(func() int {
		for _, id := range ids {
			if len(backend.acks[id]) == 0 {
				return 0
			}
		}
		return 1
	}), "every agent's ack came back after the reconnect")

	backend.mu.Lock()
	defer backend.mu.Unlock()
	for _, id := range ids {
		for _, a := range backend.acks[id] {
			if a.ConfigType != "labels" || a.Version != 6 || a.Status != protocol.AckApplied {
				t.Errorf("%s republished %+v, want its newest ack: labels 6 applied", id, a)
			}
		}
	}
	if len(backend.bad) > 0 {
		t.Errorf("malformed messages: %v", backend.bad)
	}
	if s := f.Stats(); s.Reconnects < 2 || s.AcksRepublished < int64(len(ids)) {
		t.Errorf("stats: %d reconnects, %d acks republished (want >= 2, >= %d)", s.Reconnects, s.AcksRepublished, len(ids))
	}
}
