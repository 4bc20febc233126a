package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// fakeStore records writes; refuse marks agents whose rows the "database" refuses, fail makes every
// write fail as an outage would.
type fakeStore struct {
	mu      sync.Mutex
	hosts   map[string]uuid.UUID
	lookups [][]string
	applied [][]ApplyStatus
	beats   [][]HostHeartbeat
	refuse  map[string]bool
	revoked map[uuid.UUID]bool
	fail    error
}

func newFakeStore(agents ...string) *fakeStore {
	s := &fakeStore{hosts: map[string]uuid.UUID{}, refuse: map[string]bool{}}
	for _, a := range agents {
		s.hosts[a] = uuid.New()
	}
	return s
}

func (s *fakeStore) LookupHostIDs(_ context.Context, ids []string) (map[string]HostRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookups = append(s.lookups, slices.Clone(ids))
	if s.fail != nil {
		return nil, s.fail
	}
	out := map[string]HostRef{}
	for _, id := range ids {
		if h, ok := s.hosts[id]; ok {
			out[id] = HostRef{ID: h}
		}
	}
	return out, nil
}

func (s *fakeStore) UpsertApplyStatuses(_ context.Context, rows []ApplyStatus) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	for _, r := range rows {
		if s.refuse[r.AgentID] {
			return fmt.Errorf("fake: %w", ErrRejected)
		}
	}
	s.applied = append(s.applied, slices.Clone(rows))
	return nil
}

func (s *fakeStore) UpdateHeartbeats(_ context.Context, rows []HostHeartbeat) (HeartbeatWrite, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return HeartbeatWrite{}, s.fail
	}
	for _, r := range rows {
		if s.refuse[r.AgentID] {
			return HeartbeatWrite{}, fmt.Errorf("fake: %w", ErrRejected)
		}
	}
	out := HeartbeatWrite{Layers: map[uuid.UUID]*HostLayers{}}
	var written []HostHeartbeat
	for _, r := range rows {
		out.Layers[r.HostID] = &HostLayers{}
		if !s.revoked[r.HostID] {
			written = append(written, r)
		}
	}
	out.Written = len(written)
	s.beats = append(s.beats, written)
	return out, nil
}

func (s *fakeStore) InactiveHosts(_ context.Context, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	out := map[uuid.UUID]bool{}
	for _, id := range ids {
		if s.revoked[id] {
			out[id] = true
		}
	}
	return out, nil
}

func (s *fakeStore) HostReports(context.Context, []uuid.UUID) (map[uuid.UUID]HostReport, error) {
	return nil, nil
}

func (s *fakeStore) FailedApplies(context.Context, []uuid.UUID) (map[uuid.UUID]map[string]int64, error) {
	return nil, nil
}
func (s *fakeStore) UpsertRepairs(context.Context, []Repair) error    { return nil }
func (s *fakeStore) DeleteRepairs(context.Context, []RepairKey) error { return nil }

func newTestIngester(s *fakeStore) *Ingester {
	return NewIngester(s, NewHostDirectory(s, 100), nil, zap.NewNop())
}

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func ack(agent, typ string, version int64, status string, at time.Duration) Ack {
	return Ack{AgentID: agent, ConfigType: typ, Version: version, Status: status, AppliedAt: t0.Add(at), ReceivedAt: t0.Add(at),
		Seq: uint64(at/time.Millisecond) + 1}
}

func TestIngestAcksKeepsNewestPerKey(t *testing.T) {
	s := newFakeStore("a1", "a2")
	in := newTestIngester(s)
	acks := []Ack{
		ack("a1", "labels", 3, "applied", 0),
		ack("a1", "labels", 5, "failed", 1*time.Second),
		ack("a1", "labels", 4, "applied", 2*time.Second),
		ack("a1", "collectors", 2, "applied", 0),
		ack("a2", "labels", 7, "failed", 0),
		ack("a2", "labels", 7, "applied", time.Second), // same version, later: the retry that worked
		ack("ghost", "labels", 1, "applied", 0),
	}
	got := in.IngestAcks(context.Background(), acks)
	want := []Outcome{Done, Done, Done, Done, Done, Done, Drop}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes = %v, want %v", got, want)
	}
	if len(s.applied) != 1 {
		t.Fatalf("%d writes, want one batch", len(s.applied))
	}
	rows := map[string]ApplyStatus{}
	for _, r := range s.applied[0] {
		rows[r.AgentID+"/"+r.ConfigType] = r
	}
	if len(rows) != 3 {
		t.Fatalf("rows = %+v, want 3 distinct keys", s.applied[0])
	}
	if r := rows["a1/labels"]; r.Version != 5 || r.Status != "failed" {
		t.Errorf("a1/labels = %+v, want version 5 failed", r)
	}
	if r := rows["a2/labels"]; r.Version != 7 || r.Status != "applied" {
		t.Errorf("a2/labels = %+v, want version 7 applied", r)
	}
	if r := rows["a1/collectors"]; r.HostID != s.hosts["a1"] {
		t.Errorf("a1/collectors host = %v, want %v", r.HostID, s.hosts["a1"])
	}
	if !slices.IsSortedFunc(s.applied[0], func(a, b ApplyStatus) int {
		if c := slices.Compare(a.HostID[:], b.HostID[:]); c != 0 {
			return c
		}
		return compareStrings(a.ConfigType, b.ConfigType)
	}) {
		t.Errorf("rows not sorted by (host, type): %+v", s.applied[0])
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestIngestAcksStoreOutageRetriesAll(t *testing.T) {
	s := newFakeStore("a1")
	s.fail = errors.New("connection refused")
	in := newTestIngester(s)
	got := in.IngestAcks(context.Background(), []Ack{ack("a1", "labels", 1, "applied", 0), ack("a2", "labels", 1, "applied", 0)})
	if !slices.Equal(got, []Outcome{Retry, Retry}) {
		t.Fatalf("outcomes = %v, want all retry", got)
	}
	s.fail = nil
	got = in.IngestAcks(context.Background(), []Ack{ack("a1", "labels", 1, "applied", 0)})
	if !slices.Equal(got, []Outcome{Done}) {
		t.Fatalf("after recovery outcomes = %v", got)
	}
}

func TestIngestAcksRefusedRowDroppedOthersWritten(t *testing.T) {
	s := newFakeStore("a1", "a2", "a3")
	s.refuse["a2"] = true
	in := newTestIngester(s)
	got := in.IngestAcks(context.Background(), []Ack{
		ack("a1", "labels", 1, "applied", 0),
		ack("a2", "labels", 1, "applied", 0),
		ack("a2", "labels", 2, "applied", 0),
		ack("a3", "labels", 1, "applied", 0),
	})
	if !slices.Equal(got, []Outcome{Done, Drop, Drop, Done}) {
		t.Fatalf("outcomes = %v", got)
	}
	written := 0
	for _, b := range s.applied {
		written += len(b)
	}
	if written != 2 {
		t.Fatalf("%d rows written, want 2 (a1, a3)", written)
	}
	// The refused agent is forgotten so that a re-registered host is looked up again.
	if _, err := in.hosts.Lookup(context.Background(), []string{"a2"}); err != nil {
		t.Fatal(err)
	}
	if last := s.lookups[len(s.lookups)-1]; !slices.Equal(last, []string{"a2"}) {
		t.Fatalf("a2 was not looked up again: %v", s.lookups)
	}
}

func TestIngestHeartbeatsKeepsLatestPerHost(t *testing.T) {
	s := newFakeStore("a1", "a2")
	in := newTestIngester(s)
	beats := []Heartbeat{
		{AgentID: "a1", ReceivedAt: t0.Add(2 * time.Second), ConfigHash: "new"},
		{AgentID: "a1", ReceivedAt: t0, ConfigHash: "old"},
		{AgentID: "a2", ReceivedAt: t0, ConfigHash: "only"},
		{AgentID: "nobody", ReceivedAt: t0},
	}
	got := in.IngestHeartbeats(context.Background(), beats)
	if !slices.Equal(got, []Outcome{Done, Done, Done, Drop}) {
		t.Fatalf("outcomes = %v", got)
	}
	if len(s.beats) != 1 || len(s.beats[0]) != 2 {
		t.Fatalf("writes = %+v, want one batch of 2", s.beats)
	}
	for _, r := range s.beats[0] {
		if r.AgentID == "a1" && r.ConfigHash != "new" {
			t.Errorf("a1 kept %q, want the latest heartbeat", r.ConfigHash)
		}
	}
}

func TestHostDirectoryCachesAndEvicts(t *testing.T) {
	s := newFakeStore("a1", "a2", "a3")
	d := NewHostDirectory(s, 2)
	ctx := context.Background()
	got, err := d.Lookup(ctx, []string{"a1", "a2", "a1", "zz"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a1"] != s.hosts["a1"] {
		t.Fatalf("lookup = %v", got)
	}
	if !slices.Equal(s.lookups[0], []string{"a1", "a2", "zz"}) {
		t.Fatalf("store asked for %v", s.lookups[0])
	}
	if _, err := d.Lookup(ctx, []string{"a1", "a2"}); err != nil {
		t.Fatal(err)
	}
	if len(s.lookups) != 1 {
		t.Fatalf("cached agents looked up again: %v", s.lookups)
	}
	// a1 was used last; adding a3 evicts a2.
	if _, err := d.Lookup(ctx, []string{"a1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Lookup(ctx, []string{"a3"}); err != nil {
		t.Fatal(err)
	}
	if d.Len() != 2 {
		t.Fatalf("directory holds %d, want 2", d.Len())
	}
	if _, err := d.Lookup(ctx, []string{"a1", "a2"}); err != nil {
		t.Fatal(err)
	}
	if last := s.lookups[len(s.lookups)-1]; !slices.Equal(last, []string{"a2"}) {
		t.Fatalf("after eviction store asked for %v, want [a2]", last)
	}
	// Unknown agents are not remembered: registering one makes it visible at once.
	s.hosts["zz"] = uuid.New()
	got, err = d.Lookup(ctx, []string{"zz"})
	if err != nil || got["zz"] != s.hosts["zz"] {
		t.Fatalf("new host not found: %v %v", got, err)
	}
}
