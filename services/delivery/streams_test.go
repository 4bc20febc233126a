package delivery_test

import (
	"testing"

	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/protocol"
)

// delivery exports the events stream it consumes and its durable's backlog, read from JetStream at
// each scrape: two events are stored in CONFIGSYNC_EVENTS (limits retention keeps them after the
// fan-out) and, once settled, none is pending on configsync-delivery-push.
func TestEventsStreamIsExported(t *testing.T) {
	s := newServedStack(t, 2)
	scrape := s.startMetered(t, testDeliveryConfig(t))
	events := map[string]string{"stream": protocol.EventsStream}
	push := map[string]string{"consumer": "configsync-delivery-push"}
	for range 2 {
		v := s.putEnv(t, "labels", `{"static":{"a":"b"}}`)
		s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "labels", Version: v})
	}
	s.eventsSettled(t)
	sc := scrape()
	for _, c := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"configsync_stream_info_up", events, 1},
		{"configsync_stream_messages", events, 2},
		{"configsync_stream_max_bytes", events, natsconn.StreamMaxBytes},
		{"configsync_consumer_info_up", push, 1},
		{"configsync_consumer_pending_messages", push, 0},
		{"configsync_consumer_ack_pending_messages", push, 0},
	} {
		if got := sc.Value(c.family, c.labels); got != c.want || !sc.Has(c.family, c.labels) {
			t.Errorf("%s%v = %v (exported: %v), want %v", c.family, c.labels, got, sc.Has(c.family, c.labels), c.want)
		}
	}
	if sc.Value("configsync_stream_bytes", events) <= 0 {
		t.Error("no bytes for two stored events")
	}
	for _, other := range []string{protocol.AcksStream, protocol.HeartbeatsStream} {
		if sc.Has("configsync_stream_info_up", map[string]string{"stream": other}) {
			t.Errorf("delivery exports %s, which it does not consume", other)
		}
	}
}
