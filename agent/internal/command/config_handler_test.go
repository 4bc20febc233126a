package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/libs/protocol"
)

type acks struct {
	mu   sync.Mutex
	list []protocol.Ack
}

func (a *acks) PublishAck(_ context.Context, x protocol.Ack) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.list = append(a.list, x)
	return nil
}

func (a *acks) last(t *testing.T) protocol.Ack {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.list) == 0 {
		t.Fatal("no ack published")
	}
	return a.list[len(a.list)-1]
}

type fixture struct {
	h     *ConfigHandler
	cache *configcache.Cache
	acks  *acks
	logs  *bytes.Buffer
}

func newFixture(t *testing.T, defaults map[string]json.RawMessage) fixture {
	t.Helper()
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := configcache.Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a := &acks{}
	h := NewConfigHandler(Options{AgentID: "agent-1", Cache: c, Acks: a, Log: log,
		LocalDefault: func(t string) json.RawMessage { return defaults[t] }})
	return fixture{h: h, cache: c, acks: a, logs: logs}
}

func cmd(typ string, version int64, payload string) protocol.Command {
	return protocol.Command{CommandID: "c", Type: protocol.CommandConfigUpdate, ConfigType: typ, Version: version,
		Payload: json.RawMessage(payload)}
}

func TestHandleFlow(t *testing.T) {
	f := newFixture(t, nil)
	var got []string
	f.h.RegisterCallback("labels", func(_ context.Context, typ string, data json.RawMessage, v int64) error {
		got = append(got, string(data))
		return nil
	})
	ack, ok := f.h.Handle(context.Background(), cmd("labels", 3, `{"static":{"env":"prod"}}`))
	if !ok || ack.Status != protocol.AckApplied || ack.Version != 3 || ack.AgentID != "agent-1" || ack.ConfigType != "labels" {
		t.Fatalf("ack = %+v", ack)
	}
	if len(got) != 1 || got[0] != `{"static":{"env":"prod"}}` {
		t.Fatalf("callback got %v", got)
	}
	if e, _ := f.cache.Get("labels"); e.Version != 3 {
		t.Fatalf("not cached: %+v", e)
	}
	if f.acks.last(t) != ack {
		t.Fatal("returned ack not published")
	}
}

func TestEmptyTypeRejected(t *testing.T) {
	f := newFixture(t, nil)
	if _, ok := f.h.Handle(context.Background(), cmd("", 1, `{}`)); ok {
		t.Fatal("empty config_type handled")
	}
	if len(f.acks.list) != 0 || len(f.cache.Entries()) != 0 {
		t.Fatal("empty config_type had effects")
	}
}

func TestCallbackFailureStillCached(t *testing.T) {
	f := newFixture(t, nil)
	f.h.RegisterCallback("collectors", func(context.Context, string, json.RawMessage, int64) error {
		return errors.New("dial tcp: connection refused")
	})
	ack, _ := f.h.Handle(context.Background(), cmd("collectors", 5, `[{"type":"tcp","name":"x","address":"h:1"}]`))
	if ack.Status != protocol.AckFailed || ack.Error != "dial tcp: connection refused" || ack.Version != 5 {
		t.Fatalf("ack = %+v", ack)
	}
	if e, ok := f.cache.Get("collectors"); !ok || e.Version != 5 {
		t.Fatal("failed apply not cached")
	}
}

func TestNoCallbackStillCached(t *testing.T) {
	f := newFixture(t, nil)
	ack, _ := f.h.Handle(context.Background(), cmd("healthcheck", 2, `{"interval_seconds":60}`))
	if ack.Status != protocol.AckApplied {
		t.Fatalf("ack = %+v", ack)
	}
	if _, ok := f.cache.Get("healthcheck"); !ok {
		t.Fatal("not cached")
	}
}

func TestStalePushIgnored(t *testing.T) {
	f := newFixture(t, nil)
	calls := 0
	f.h.RegisterCallback("intervals", func(context.Context, string, json.RawMessage, int64) error {
		calls++
		return nil
	})
	f.h.Handle(context.Background(), cmd("intervals", 9, `{"metrics":"10s"}`))
	ack, _ := f.h.Handle(context.Background(), cmd("intervals", 7, `{"metrics":"99s"}`))
	if ack.Status != protocol.AckApplied || ack.Version != 9 {
		t.Fatalf("stale ack = %+v, want applied at the current version 9", ack)
	}
	if calls != 1 {
		t.Fatalf("stale push reached the callback (%d calls)", calls)
	}
	if e, _ := f.cache.Get("intervals"); !strings.Contains(string(e.Data), "10s") {
		t.Fatalf("stale push changed the cache: %s", e.Data)
	}
}

func TestNullPayloadFallsBackToLocalDefault(t *testing.T) {
	f := newFixture(t, map[string]json.RawMessage{"tracing": json.RawMessage(`{"enabled":false}`)})
	var got []string
	f.h.RegisterCallback("tracing", func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		got = append(got, string(data))
		return nil
	})
	f.h.Handle(context.Background(), cmd("tracing", 4, `{"enabled":true,"sample_ratio":0.5}`))
	ack, _ := f.h.Handle(context.Background(), cmd("tracing", 6, `null`))
	if ack.Status != protocol.AckApplied || ack.Version != 6 {
		t.Fatalf("ack = %+v", ack)
	}
	if _, ok := f.cache.Get("tracing"); ok {
		t.Fatal("deleted type still cached")
	}
	if len(got) != 2 || got[1] != `{"enabled":false}` {
		t.Fatalf("callback got %v, want the local default last", got)
	}
	// A type without a local default reloads built-in defaults (nil).
	f.h.RegisterCallback("labels", func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		got = append(got, "labels:"+string(data))
		return nil
	})
	f.h.Handle(context.Background(), cmd("labels", 7, `{"static":{}}`))
	f.h.Handle(context.Background(), protocol.Command{Type: protocol.CommandConfigUpdate, ConfigType: "labels", Version: 8})
	if got[len(got)-1] != "labels:" {
		t.Fatalf("deleted labels applied %q", got[len(got)-1])
	}
}

func TestInvalidPayloadRejected(t *testing.T) {
	f := newFixture(t, nil)
	ack, _ := f.h.Handle(context.Background(), cmd("intervals", 3, `{"metrcs":"10s"}`))
	if ack.Status != protocol.AckFailed || !strings.Contains(ack.Error, "metrcs") {
		t.Fatalf("ack = %+v", ack)
	}
	if _, ok := f.cache.Get("intervals"); ok {
		t.Fatal("invalid config cached")
	}
	ack, _ = f.h.Handle(context.Background(), cmd("bogus", 3, `{}`))
	if ack.Status != protocol.AckFailed {
		t.Fatalf("unknown type ack = %+v", ack)
	}
}

func TestSecretsNeverLoggedOrWritten(t *testing.T) {
	f := newFixture(t, nil)
	f.h.RegisterCallback("collectors", func(context.Context, string, json.RawMessage, int64) error {
		return errors.New("authentication failed")
	})
	c := cmd("collectors", 2, `[{"type":"postgres","name":"db","host":"h","password":"hunter2-secret"}]`)
	c.SecretFields = []string{"/0/password"}
	f.h.Handle(context.Background(), c)
	if strings.Contains(f.logs.String(), "hunter2") {
		t.Fatalf("secret logged: %s", f.logs.String())
	}
	b, err := os.ReadFile(f.cache.Path())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("hunter2")) {
		t.Fatal("secret written to the cache")
	}
	if strings.Contains(f.acks.last(t).Error, "hunter2") {
		t.Fatal("secret in ack")
	}
}

func TestHandleMessageDecodes(t *testing.T) {
	f := newFixture(t, nil)
	f.h.HandleMessage(context.Background(), []byte(`{"command_id":"x","type":"config_update","config_type":"healthcheck","version":1,"payload":{"interval_seconds":5}}`))
	f.h.HandleMessage(context.Background(), []byte(`{"type":"reboot"}`))
	f.h.HandleMessage(context.Background(), []byte(`garbage`))
	if len(f.acks.list) != 1 {
		t.Fatalf("acks = %+v", f.acks.list)
	}
}

// A redelivered push of the version already applied is acknowledged again but not applied twice; a
// version whose apply failed is retried.
func TestRedeliveredVersionAppliedOnce(t *testing.T) {
	f := newFixture(t, nil)
	calls, fail := 0, true
	f.h.RegisterCallback("intervals", func(context.Context, string, json.RawMessage, int64) error {
		calls++
		if fail {
			return errors.New("scheduler busy")
		}
		return nil
	})
	ctx := context.Background()
	if ack, _ := f.h.Handle(ctx, cmd("intervals", 4, `{"metrics":"10s"}`)); ack.Status != protocol.AckFailed {
		t.Fatalf("first apply: %+v", ack)
	}
	fail = false
	if ack, _ := f.h.Handle(ctx, cmd("intervals", 4, `{"metrics":"10s"}`)); ack.Status != protocol.AckApplied || calls != 2 {
		t.Fatalf("a failed version was not retried: %+v after %d calls", ack, calls)
	}
	ack, _ := f.h.Handle(ctx, cmd("intervals", 4, `{"metrics":"10s"}`))
	if ack.Status != protocol.AckApplied || ack.Version != 4 || calls != 2 {
		t.Fatalf("redelivery: ack %+v, %d callback calls (want 2)", ack, calls)
	}
	if n := len(f.acks.list); n != 3 {
		t.Fatalf("%d acks, want one per delivery", n)
	}
}

// After a reconnect the newest ack of each type is published again (one in flight may have been lost).
func TestRepublishAcks(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.h.Handle(ctx, cmd("intervals", 4, `{"metrics":"10s"}`))
	f.h.Handle(ctx, cmd("intervals", 6, `{"metrics":"20s"}`))
	f.h.Handle(ctx, cmd("healthcheck", 5, `{"interval_seconds":60}`))
	f.acks.list = nil
	f.h.RepublishAcks()
	got := map[string]int64{}
	for _, a := range f.acks.list {
		if a.Status != protocol.AckApplied {
			t.Fatalf("republished %+v", a)
		}
		got[a.ConfigType] = a.Version
	}
	if len(f.acks.list) != 2 || got["intervals"] != 6 || got["healthcheck"] != 5 {
		t.Fatalf("republished %+v, want the newest ack per type", f.acks.list)
	}
}

// TestCheckRefusesBeforeCaching: a config Options.Check refuses is acknowledged failed with the
// check's error, never cached and never handed to the callback; the running config stays.
func TestCheckRefusesBeforeCaching(t *testing.T) {
	logs := &bytes.Buffer{}
	c, err := configcache.Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a := &acks{}
	refusal := errors.New("labels: dynamic[0].command: policy: commands: sh is not listed in policy.commands")
	h := NewConfigHandler(Options{AgentID: "agent-1", Cache: c, Acks: a, Log: slog.New(slog.NewJSONHandler(logs, nil)),
		Check: func(typ string, data json.RawMessage) error {
			if strings.Contains(string(data), "command") {
				return refusal
			}
			return nil
		}})
	var applied []string
	h.RegisterCallback("labels", func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		applied = append(applied, string(data))
		return nil
	})
	if ack, _ := h.Handle(context.Background(), cmd("labels", 1, `{"static":{"env":"prod"}}`)); ack.Status != protocol.AckApplied {
		t.Fatalf("allowed config: %+v", ack)
	}
	ack, _ := h.Handle(context.Background(), cmd("labels", 2, `{"dynamic":[{"name":"x","source":"command","command":["sh"]}]}`))
	if ack.Status != protocol.AckFailed || ack.Version != 2 || ack.Error != refusal.Error() {
		t.Fatalf("refused config ack %+v", ack)
	}
	if e, _ := c.Get("labels"); e.Version != 1 || c.ConfigVersion() != 1 {
		t.Fatalf("refused config cached: %+v", e)
	}
	if len(applied) != 1 {
		t.Fatalf("callback ran %d times, want once (the allowed config)", len(applied))
	}
	// Redelivered, it is refused again (a failed ack is no reason to skip it).
	if ack, _ := h.Handle(context.Background(), cmd("labels", 2, `{"dynamic":[{"name":"x","source":"command","command":["sh"]}]}`)); ack.Status != protocol.AckFailed {
		t.Fatalf("redelivered refused config: %+v", ack)
	}
	if !strings.Contains(logs.String(), "refused by the local policy") {
		t.Fatalf("refusal not logged: %s", logs.String())
	}
}
