package configsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/configsync/configsync/agent/internal/command"
	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/libs/protocol"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openCache(t *testing.T, dir string) *configcache.Cache {
	t.Helper()
	c, err := configcache.Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const pgCollectors = `[{"type":"postgres","name":"db","host":"h","password":"pw"}]`

func TestResolverChain(t *testing.T) {
	dir := t.TempDir()
	c := openCache(t, dir)
	must(t, c.Put("collectors", json.RawMessage(pgCollectors), 5, []string{"/0/password"}))
	must(t, c.Put("labels", json.RawMessage(`{"static":{"from":"cache"}}`), 2, nil))
	// Restart: the collectors entry is now only known redacted.
	c = openCache(t, dir)
	local := map[string]json.RawMessage{
		"collectors": json.RawMessage(`[{"type":"tcp","name":"local","address":"l:1"}]`),
		"labels":     json.RawMessage(`{"static":{"from":"local"}}`),
	}
	r := Resolver{Cache: c, Local: local}

	// Backend unreachable: cache, but not the redacted collectors.
	got := r.Resolve("labels", nil)
	if got.Source != SourceCache || got.Version != 2 {
		t.Fatalf("labels = %+v", got)
	}
	got = r.Resolve("collectors", nil)
	if got.Source != SourceLocal || string(got.Data) != string(local["collectors"]) {
		t.Fatalf("redacted collectors not skipped: %+v", got)
	}
	got = r.Resolve("tracing", nil)
	if got.Source != SourceLocal || got.Data != nil {
		t.Fatalf("tracing = %+v", got)
	}

	// Backend answered: NATS wins.
	reply := &protocol.FetchReply{
		Configs:      map[string]json.RawMessage{"collectors": json.RawMessage(pgCollectors)},
		Versions:     map[string]int64{"collectors": 6},
		SecretFields: map[string][]string{"collectors": {"/0/password"}},
	}
	if got = r.Resolve("collectors", reply); got.Source != SourceNATS || got.Version != 6 {
		t.Fatalf("collectors = %+v", got)
	}
	// A type the backend does not have is not taken from the cache.
	if got = r.Resolve("labels", reply); got.Source != SourceLocal {
		t.Fatalf("labels with reply = %+v", got)
	}
	// A type the backend could not deliver falls back to the cache.
	reply.TypeErrors = map[string]protocol.Error{"labels": {Code: protocol.CodeCredentialFailed}}
	if got = r.Resolve("labels", reply); got.Source != SourceCache {
		t.Fatalf("labels with type error = %+v", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type fakeFetcher struct {
	fails atomic.Int32 // fail this many more times
	reply *protocol.FetchReply
	calls atomic.Int32
}

func (f *fakeFetcher) Fetch(context.Context) (*protocol.FetchReply, error) {
	f.calls.Add(1)
	if f.fails.Add(-1) >= 0 {
		return nil, errors.New("nats: no responders available for request")
	}
	return f.reply, nil
}

type recorder struct {
	mu      sync.Mutex
	applied []string
	data    map[string]string
	acks    []protocol.Ack
}

func (r *recorder) PublishAck(_ context.Context, a protocol.Ack) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks = append(r.acks, a)
	return nil
}

func newSyncer(t *testing.T, c *configcache.Cache, f Fetcher, local map[string]json.RawMessage) (*Syncer, *recorder) {
	rec := &recorder{data: map[string]string{}}
	h := command.NewConfigHandler(command.Options{AgentID: "a1", Cache: c, Acks: rec, Log: quiet(),
		LocalDefault: func(t string) json.RawMessage { return local[t] }})
	for _, typ := range StartupOrder {
		h.RegisterCallback(typ, func(_ context.Context, typ string, data json.RawMessage, _ int64) error {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			rec.applied = append(rec.applied, typ)
			rec.data[typ] = string(data)
			return nil
		})
	}
	return &Syncer{Handler: h, Cache: c, Fetcher: f, Local: local, Log: quiet(), FetchTimeout: time.Second}, rec
}

func TestStartupFromBackend(t *testing.T) {
	c := openCache(t, t.TempDir())
	must(t, c.Put("healthcheck", json.RawMessage(`{"interval_seconds":9}`), 1, nil)) // gone from the backend
	f := &fakeFetcher{reply: &protocol.FetchReply{
		Configs: map[string]json.RawMessage{
			"collectors": json.RawMessage(pgCollectors),
			"intervals":  json.RawMessage(`{"metrics":"10s"}`),
		},
		Versions:     map[string]int64{"collectors": 4, "intervals": 3, "tracing": 8},
		SecretFields: map[string][]string{"collectors": {"/0/password"}},
	}}
	s, rec := newSyncer(t, c, f, nil)
	if !s.Startup(context.Background()) {
		t.Fatal("startup fetch reported failure")
	}
	// Order: the four the scheduler needs first.
	want := []string{"labels", "intervals", "collectors", "change_detection"}
	for i, typ := range want {
		if rec.applied[i] != typ {
			t.Fatalf("startup order %v", rec.applied)
		}
	}
	if len(rec.applied) != 10 {
		t.Fatalf("applied %d types", len(rec.applied))
	}
	if rec.data["collectors"] != pgCollectors {
		t.Fatalf("collectors applied %s", rec.data["collectors"])
	}
	if got := c.ConfigVersions(); len(got) != 2 || got["collectors"] != 4 || got["intervals"] != 3 {
		t.Fatalf("cache after populate = %v", got)
	}
	if c.Version("tracing") != 8 {
		t.Fatal("deletion version not remembered")
	}
	if len(rec.acks) != 3 { // collectors, intervals, tracing (deleted); not the cleaned-up healthcheck
		t.Fatalf("acks %+v", rec.acks)
	}
	for _, a := range rec.acks {
		if a.Version != f.reply.Versions[a.ConfigType] || a.Status != protocol.AckApplied {
			t.Fatalf("ack %+v", a)
		}
	}
}

func TestStartupBackendUnreachableUsesCacheThenRecovers(t *testing.T) {
	dir := t.TempDir()
	c := openCache(t, dir)
	must(t, c.Put("labels", json.RawMessage(`{"static":{"from":"cache"}}`), 2, nil))
	must(t, c.Put("collectors", json.RawMessage(pgCollectors), 5, []string{"/0/password"}))
	c = openCache(t, dir) // restart
	local := map[string]json.RawMessage{"collectors": json.RawMessage(`[]`)}
	f := &fakeFetcher{reply: &protocol.FetchReply{
		Configs:      map[string]json.RawMessage{"labels": json.RawMessage(`{"static":{"from":"nats"}}`), "collectors": json.RawMessage(pgCollectors)},
		Versions:     map[string]int64{"labels": 3, "collectors": 5},
		SecretFields: map[string][]string{"collectors": {"/0/password"}},
	}}
	f.fails.Store(3)
	s, rec := newSyncer(t, c, f, local)
	if s.Startup(context.Background()) {
		t.Fatal("fetch should have failed")
	}
	if rec.data["labels"] != `{"static":{"from":"cache"}}` {
		t.Fatalf("labels from %s", rec.data["labels"])
	}
	if rec.data["collectors"] != `[]` {
		t.Fatalf("redacted collectors applied: %s", rec.data["collectors"])
	}
	s.RetryDelay = func(int) time.Duration { return time.Millisecond }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { s.Background(ctx, true, nil); close(done) }()
	// The background fetch retries until it succeeds, then re-applies what changed.
	for {
		rec.mu.Lock()
		l := rec.data["labels"]
		col := rec.data["collectors"]
		rec.mu.Unlock()
		if l == `{"static":{"from":"nats"}}` && col == pgCollectors {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if f.calls.Load() != 4 {
		t.Fatalf("fetch calls = %d", f.calls.Load())
	}
}

func TestStartupKeepsNewerPush(t *testing.T) {
	c := openCache(t, t.TempDir())
	must(t, c.Put("labels", json.RawMessage(`{"static":{"v":"pushed"}}`), 9, nil))
	f := &fakeFetcher{reply: &protocol.FetchReply{
		Configs:  map[string]json.RawMessage{"labels": json.RawMessage(`{"static":{"v":"old"}}`)},
		Versions: map[string]int64{"labels": 7},
	}}
	s, rec := newSyncer(t, c, f, nil)
	s.Startup(context.Background())
	if rec.data["labels"] != `{"static":{"v":"pushed"}}` {
		t.Fatalf("older fetch won: %s", rec.data["labels"])
	}
}

// TestCheckRefusesFetchedConfigs: a fetched config Syncer.Check refuses is not cached and is acked
// failed at its version; at startup the type runs what the cache held (or the local default), and a
// later re-fetch leaves the running config alone.
func TestCheckRefusesFetchedConfigs(t *testing.T) {
	c := openCache(t, t.TempDir())
	must(t, c.Put("labels", json.RawMessage(`{"static":{"from":"cache"}}`), 2, nil))
	refused := errors.New("labels: dynamic[0].env: policy: env: environment variable HOME is not listed in policy.env")
	bad := json.RawMessage(`{"dynamic":[{"name":"h","source":"env","env":"HOME"}]}`)
	f := &fakeFetcher{reply: &protocol.FetchReply{
		Configs:  map[string]json.RawMessage{"labels": bad, "intervals": json.RawMessage(`{"metrics":"30s"}`)},
		Versions: map[string]int64{"labels": 7, "intervals": 4},
	}}
	local := map[string]json.RawMessage{"log_shipping": json.RawMessage(`{"enabled":true}`)}
	s, rec := newSyncer(t, c, f, local)
	s.Check = func(typ string, data json.RawMessage) error {
		if string(data) == string(bad) {
			return refused
		}
		return nil
	}
	if !s.Startup(context.Background()) {
		t.Fatal("startup fetch failed")
	}
	rec.mu.Lock()
	if rec.data["labels"] != `{"static":{"from":"cache"}}` || rec.data["intervals"] != `{"metrics":"30s"}` {
		t.Fatalf("applied %v", rec.data)
	}
	var labelsAck protocol.Ack
	for _, a := range rec.acks {
		if a.ConfigType == "labels" {
			labelsAck = a
		}
	}
	rec.mu.Unlock()
	if labelsAck.Status != protocol.AckFailed || labelsAck.Version != 7 || labelsAck.Error != refused.Error() {
		t.Fatalf("labels ack %+v", labelsAck)
	}
	if e, _ := c.Get("labels"); e.Version != 2 {
		t.Fatalf("refused config cached: %+v", e)
	}

	// A re-fetch with the same refusal: acked failed again, nothing re-applied, cache untouched.
	rec.mu.Lock()
	rec.applied, rec.acks = nil, nil
	rec.mu.Unlock()
	s.Resync(context.Background(), f.reply)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.applied) != 0 || len(rec.acks) != 1 || rec.acks[0].Status != protocol.AckFailed || rec.acks[0].Version != 7 {
		t.Fatalf("resync applied %v, acked %+v", rec.applied, rec.acks)
	}
	if e, _ := c.Get("labels"); e.Version != 2 {
		t.Fatalf("refused config cached on resync: %+v", e)
	}
}

// busyFetcher refuses the first fetches as a delivery with a full queue does (unavailable with
// retry_after_ms), then answers; it records when each fetch came.
type busyFetcher struct {
	mu         sync.Mutex
	refusals   int
	retryAfter int64
	reply      *protocol.FetchReply
	at         []time.Time
}

func (f *busyFetcher) Fetch(context.Context) (*protocol.FetchReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, time.Now())
	if len(f.at) <= f.refusals {
		// As transport.Client.Fetch returns an error reply.
		return nil, fmt.Errorf("config fetch: backend error: %w",
			&protocol.Error{Code: protocol.CodeUnavailable, Message: "delivery is busy, retry later", RetryAfterMS: f.retryAfter})
	}
	return f.reply, nil
}

// A backend's retry_after_ms is waited before the next fetch — the one after a failed startup fetch
// too — in place of the agent's own backoff (here an hour, which the test would never see end).
func TestBackgroundHonoursServerRetryAfter(t *testing.T) {
	c := openCache(t, t.TempDir())
	f := &busyFetcher{refusals: 2, retryAfter: 150, reply: &protocol.FetchReply{
		Configs: map[string]json.RawMessage{"labels": json.RawMessage(`{"static":{"from":"nats"}}`)}, Versions: map[string]int64{"labels": 3}}}
	s, rec := newSyncer(t, c, f, nil)
	if s.Startup(context.Background()) {
		t.Fatal("the startup fetch should have been refused")
	}
	s.RetryDelay = func(int) time.Duration { return time.Hour }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { s.Background(ctx, true, nil); close(done) }()
	for {
		rec.mu.Lock()
		l := rec.data["labels"]
		rec.mu.Unlock()
		if l == `{"static":{"from":"nats"}}` {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.at) != 3 {
		t.Fatalf("%d fetches, want 3 (two refused, one answered)", len(f.at))
	}
	for i := 1; i < len(f.at); i++ {
		if gap := f.at[i].Sub(f.at[i-1]); gap < 150*time.Millisecond {
			t.Errorf("fetch %d came %v after a refusal that asked for 150ms", i+1, gap)
		}
	}
}

// withholdingFetcher answers every fetch, but the first `withhold` replies leave collectors out as
// delivery does while the credential service is away (type error "unavailable").
type withholdingFetcher struct {
	withhold int32
	code     string
	calls    atomic.Int32
}

func (f *withholdingFetcher) Fetch(context.Context) (*protocol.FetchReply, error) {
	reply := &protocol.FetchReply{
		Configs:  map[string]json.RawMessage{"labels": json.RawMessage(`{"static":{"from":"nats"}}`)},
		Versions: map[string]int64{"labels": 3},
	}
	if f.calls.Add(1) <= f.withhold {
		reply.TypeErrors = map[string]protocol.Error{"collectors": {Code: f.code, Message: "credential service unavailable, collectors withheld"}}
		return reply, nil
	}
	reply.Configs["collectors"] = json.RawMessage(pgCollectors)
	reply.Versions["collectors"] = 5
	reply.SecretFields = map[string][]string{"collectors": {"/0/password"}}
	return reply, nil
}

// A type the backend left out with a transient error is fetched again with backoff, after a startup
// fetch too, until it arrives; what the reply did deliver is applied at once and not re-applied.
func TestBackgroundRefetchesTypesLeftOut(t *testing.T) {
	c := openCache(t, t.TempDir())
	f := &withholdingFetcher{withhold: 2, code: protocol.CodeUnavailable}
	s, rec := newSyncer(t, c, f, map[string]json.RawMessage{"collectors": json.RawMessage(`[]`)})
	if !s.Startup(context.Background()) {
		t.Fatal("startup fetch failed")
	}
	rec.mu.Lock()
	if rec.data["labels"] != `{"static":{"from":"nats"}}` || rec.data["collectors"] != `[]` {
		t.Fatalf("startup applied %v", rec.data)
	}
	rec.mu.Unlock()
	var delays []int
	s.RetryDelay = func(attempt int) time.Duration { delays = append(delays, attempt); return time.Millisecond }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { s.Background(ctx, false, nil); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec.mu.Lock()
		col := rec.data["collectors"]
		rec.mu.Unlock()
		if col == pgCollectors {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("collectors never re-fetched: %s after %d fetches", col, f.calls.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if n := f.calls.Load(); n != 3 {
		t.Fatalf("fetch calls = %d, want 3 (startup, one more withheld, then served)", n)
	}
	if fmt.Sprint(delays) != "[0]" {
		t.Fatalf("backoff attempts %v, want [0]", delays)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	labels := 0
	for _, typ := range rec.applied {
		if typ == "labels" {
			labels++
		}
	}
	if labels != 1 {
		t.Fatalf("labels applied %d times, want once: %v", labels, rec.applied)
	}
	var acked bool
	for _, a := range rec.acks {
		acked = acked || (a.ConfigType == "collectors" && a.Version == 5 && a.Status == protocol.AckApplied)
	}
	if !acked {
		t.Fatalf("collectors v5 not acked: %+v", rec.acks)
	}
}

// A type left out for a reason a retry cannot fix (the credential does not exist) is not re-fetched
// in a loop: the next push or reconnect brings it.
func TestPermanentTypeErrorIsNotRetried(t *testing.T) {
	c := openCache(t, t.TempDir())
	f := &withholdingFetcher{withhold: 100, code: protocol.CodeCredentialFailed}
	s, _ := newSyncer(t, c, f, nil)
	if !s.Startup(context.Background()) {
		t.Fatal("startup fetch failed")
	}
	if len(s.undelivered) != 0 {
		t.Fatalf("undelivered = %v", s.undelivered)
	}
	// The same reply with a transient code: now it is.
	f.code = protocol.CodeUnavailable
	f.withhold = 2
	s.Resync(context.Background(), mustFetch(t, f))
	if fmt.Sprint(s.undelivered) != "[collectors]" {
		t.Fatalf("undelivered = %v, want [collectors]", s.undelivered)
	}
}

func mustFetch(t *testing.T, f Fetcher) *protocol.FetchReply {
	t.Helper()
	r, err := f.Fetch(context.Background())
	must(t, err)
	return r
}
