package delivery_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// Writes during a herd: agents fetch while the environment's config changes again and again, through
// two resolver replicas, each caching environment configs. Every online agent must end on the newest
// version (from its fetch, or from the push of a later change), and a fetch after the last write must
// give the newest version to every agent, whichever replica answers it.
func TestWritesDuringHerdEndOnNewest(t *testing.T) {
	const agents, writes = 240, 6
	s := newStack(t, agents)
	s.startResolver(t)
	s.startResolver(t) // a second replica with its own environment cache
	s.startCredential(t)
	s.startDelivery(t, testDeliveryConfig(t))
	labels := func(n int) string { return fmt.Sprintf(`{"static":{"env":"prod","rev":"%d"}}`, n) }
	v := s.putEnv(t, "labels", labels(0))

	type outcome struct {
		version int64
		data    json.RawMessage
	}
	fetched := make([]outcome, agents)
	var done atomic.Int64
	fetch := func(i int) error {
		h := s.hosts[i]
		data, _ := json.Marshal(protocol.FetchRequest{AgentID: h.agent})
		msg, err := testinfra.RequestAsAgent(s.nc, h.agent, protocol.FetchSubject(h.agent), data, 30*time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", h.agent, err)
		}
		var r protocol.FetchReply
		if err := json.Unmarshal(msg.Data, &r); err != nil || r.Error != nil {
			return fmt.Errorf("%s: reply %s", h.agent, msg.Data)
		}
		fetched[i] = outcome{r.Versions["labels"], r.Configs["labels"]}
		return nil
	}

	// The writer changes the config (and publishes its event, as the outbox relay does) each time
	// another share of the herd has been answered, so writes land while fetches are in flight.
	versions := map[int64]string{v: labels(0)}
	var writer sync.WaitGroup
	writer.Go(func() {
		for n := 1; n <= writes; n++ {
			testinfra.Eventually(t, 30*time.Second, func() bool { return done.Load() >= int64(n*agents/(writes+1)) }, "herd progress")
			v = s.putEnv(t, "labels", labels(n))
			versions[v] = labels(n)
			s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "labels", Version: v})
		}
	})
	var herd sync.WaitGroup
	errs := make(chan error, agents)
	for i := range agents {
		herd.Go(func() {
			defer done.Add(1)
			if err := fetch(i); err != nil {
				errs <- err
			}
		})
	}
	herd.Wait()
	writer.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s.eventsSettled(t)

	newest := v
	for i, h := range s.hosts {
		got := fetched[i]
		if want, ok := versions[got.version]; !ok || !testinfra.JSONEqual(got.data, []byte(want)) {
			t.Fatalf("%s fetched version %d with %s, which no write produced", h.agent, got.version, got.data)
		}
		if !h.online {
			continue // delivery pushes to online hosts only
		}
		final := got.version
		for _, c := range s.fleet.commands(h.agent, "labels") {
			final = max(final, c.Version)
		}
		if final != newest {
			t.Errorf("online %s ends on version %d (fetched %d), want the newest %d", h.agent, final, got.version, newest)
		}
	}
	// Every agent fetching now gets the newest, from either replica's cache.
	for i := range agents {
		if err := fetch(i); err != nil {
			t.Fatal(err)
		}
		if fetched[i].version != newest || !testinfra.JSONEqual(fetched[i].data, []byte(labels(writes))) {
			t.Fatalf("%s fetched %d (%s) after the last write, want %d", s.hosts[i].agent, fetched[i].version, fetched[i].data, newest)
		}
	}
}
