package configapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/outbox"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// TestWriteReachesJetStream: the event a write queues is what the relay publishes on
// configsync.events.config.changed, once, with the outbox id as Nats-Msg-Id.
func TestWriteReachesJetStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newTenant("acme")
	var row configRow
	h.must(200, "PUT", hostConfigPath(a.host, "healthcheck"), a.token,
		`{"config_data": {"interval_seconds": 30}}`).data(t, &row)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(h.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := natsconn.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	log, _ := testinfra.Logger(t)
	n, err := outbox.NewRelay(h.pool, js, log, outbox.RelayOptions{}).RelayOnce(ctx)
	if err != nil || n != 1 {
		t.Fatalf("relayed %d, %v; want 1", n, err)
	}
	stream, err := js.Stream(ctx, protocol.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, protocol.ConfigChangedSubject)
	if err != nil {
		t.Fatal(err)
	}
	var ev protocol.ConfigChanged
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Scope != protocol.ScopeHost || ev.AgentID != a.agentID || ev.Version != row.Version || ev.ConfigType != "healthcheck" {
		t.Fatalf("published %+v", ev)
	}
	if msg.Header.Get(jetstream.MsgIDHeader) == "" {
		t.Fatal("published without a Nats-Msg-Id")
	}
}
