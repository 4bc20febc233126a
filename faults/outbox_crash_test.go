package faults_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/platform/outbox"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// TestConfigAPICrashAfterCommitBeforeRelay kills the config-api process (SIGKILL) after a config write
// committed and before its outbox relay published the event, restarts it, and then replays the other
// crash window of the relay: after JetStream accepted the event, before the row was marked published.
//
// Setup: config-api runs as the real binary (its relay inside, as outbox.Module composes it), because
// what matters is what survives a process death: the committed transaction. Its first run is started
// with OUTBOX_STREAM naming a stream that does not exist, so JetStream refuses every publish (the
// relay records the attempts) and the kill is guaranteed to land before the event was published, with
// no race against the relay. Resolver, credential, delivery and ack-ingest run in-process; three fake
// agents receive the pushes.
//
// Proves: after the restart the event is published exactly once (one message in CONFIGSYNC_EVENTS,
// with Nats-Msg-Id outbox-<id>) and fanned out once; a second publish of the same row (the relay
// crashed between PubAck and marking it) is dropped by JetStream's Msg-Id deduplication, so the stream
// and the agents still see it once.
func TestConfigAPICrashAfterCommitBeforeRelay(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startResolver(nil)
	s.startCredential(nil)
	s.startDelivery(nil)
	s.startAckIngest()

	bin := binary(t, "config-api")
	addr := testinfra.FreeAddr(t)
	env := append(s.serviceEnv(natsauth.ConfigAPIService),
		"DATABASE_URL="+s.dbURL, "DATABASE_MIGRATE=false", "HTTP_ADDR="+addr,
		"LOG_FORMAT=json", "LOG_LEVEL=info",
		"OUTBOX_POLL_INTERVAL=100ms", "OUTBOX_MIN_BACKOFF=50ms", "OUTBOX_MAX_BACKOFF=200ms",
	)
	parked := newProcess(t, "config-api (relay refused)", bin, nil, append(env[:len(env):len(env)], "OUTBOX_STREAM=CONFIGSYNC_PARKED"))
	normal := newProcess(t, "config-api", bin, nil, env)

	parked.start(t)
	waitHTTP(t, "http://"+addr+"/healthz")
	api := newAPIClient(t, "http://"+addr, s.adminToken())
	ten := api.newTenant("outbox-crash")
	hosts := api.registerHosts(ten.EnvID, "db", 3)
	fakes := newFakeAgents(t, s.nc, hosts)
	s.bringOnline(fakes, hosts)

	const typ = "healthcheck"
	v := api.putEnv(ten.EnvID, typ, `{"interval_seconds":15,"timeout_seconds":3}`)
	var id int64
	testinfra.EventuallyNoError(t, 20*time.Second, func() error {
		row := s.outboxRow(v)
		id = row.id
		if row.found && row.attempts > 0 && row.published == nil {
			return nil
		}
		return fmt.Errorf("%+v", row)
	}, "the relay to try and fail to publish the committed event")
	if n := s.eventsInStream(); n != 0 {
		t.Fatalf("CONFIGSYNC_EVENTS holds %d messages before the crash, want 0", n)
	}
	parked.kill(t)

	normal.start(t)
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		row := s.outboxRow(v)
		if row.published != nil {
			return nil
		}
		return fmt.Errorf("%+v", row)
	}, "the restarted relay to publish the event")
	if n := s.eventsInStream(); n != 1 {
		t.Fatalf("CONFIGSYNC_EVENTS holds %d messages after the restart, want 1", n)
	}
	msg, err := s.js.Stream(context.Background(), protocol.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := msg.GetLastMsgForSubject(context.Background(), protocol.ConfigChangedSubject)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stored.Header.Get("Nats-Msg-Id"), outbox.MsgID(id); got != want {
		t.Errorf("stored event has Nats-Msg-Id %q, want %q", got, want)
	}
	waitReceived(t, 30*time.Second, fakes, typ, v)
	s.waitApplied(30*time.Second, hosts, typ, v)

	// The other crash window: JetStream took the event, the relay died before marking the row. The row
	// is unpublished again; the next process's first pass publishes it a second time.
	s.dbExec(`UPDATE outbox SET published_at = NULL WHERE id = $1`, id)
	normal.kill(t)
	normal.start(t)
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		row := s.outboxRow(v)
		if row.published != nil && normal.logged("outbox row was already in the stream") > 0 {
			return nil
		}
		return fmt.Errorf("%+v", row)
	}, "the relay to publish the row again and see the duplicate")
	if n := s.eventsInStream(); n != 1 {
		t.Errorf("CONFIGSYNC_EVENTS holds %d messages after the duplicate publish, want 1 (Msg-Id dedup)", n)
	}
	testinfra.EventuallyNoError(t, 20*time.Second, func() error {
		return s.consumerIdle(protocol.EventsStream, "configsync-delivery-push")
	}, "delivery's event consumer to settle")
	for _, a := range fakes {
		if n := a.count(typ, v); n != 1 {
			t.Errorf("agent %s received %s v%d %d times, want 1", a.id, typ, v, n)
		}
	}
	// The API kept serving across both crashes.
	if r := api.send(http.MethodGet, "/api/v1/environments/"+ten.EnvID+"/agent-configs/"+typ, nil); r.status != http.StatusOK {
		t.Errorf("GET after the restarts: %s", r)
	}
}

// outboxRowState is the relay's bookkeeping of one outbox row.
type outboxRowState struct {
	found     bool
	id        int64
	attempts  int
	lastError *string
	published *time.Time
}

// outboxRow returns the outbox row of the config change that produced version.
func (s *stack) outboxRow(version int64) outboxRowState {
	s.t.Helper()
	var r outboxRowState
	err := s.db.QueryRow(context.Background(), `SELECT id, attempts, last_error, published_at FROM outbox
		WHERE payload->>'version' = $1`, strconv.FormatInt(version, 10)).Scan(&r.id, &r.attempts, &r.lastError, &r.published)
	if err == nil {
		r.found = true
	}
	return r
}

// eventsInStream is the number of messages in CONFIGSYNC_EVENTS.
func (s *stack) eventsInStream() uint64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, protocol.EventsStream)
	if err != nil {
		s.t.Fatalf("events stream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		s.t.Fatalf("events stream info: %v", err)
	}
	return info.State.Msgs
}

// waitHTTP waits until url answers 200.
func waitHTTP(t testing.TB, url string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		return errors.New(resp.Status)
	}, url+" to answer 200")
}
