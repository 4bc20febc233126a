// Package fleet is the operator's read model of an environment's hosts: how many are online, offline,
// never seen, failing an apply or revoked; the hosts that most need attention; a filtered, paged host
// search. It answers from a few aggregate queries, whatever the size of the environment, and decides
// "online" by the same window as hosts.Host.Online. How far a config type has been applied is
// applystatus.
package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// Host states a search filters by.
const (
	StateAll     = ""
	StateOnline  = "online"
	StateOffline = "offline" // active, no heartbeat within the online window (or never)
	StateFailed  = "failed"  // active, the last apply of some type failed
	// StateDrifted: active and listed by the environment's last drift report (package drift, the API's
	// rule), as Stats.Drifted counts them, so the overview's count and the filtered list agree.
	StateDrifted = "drifted"
	StateRevoked = "revoked"
)

// States lists the states a search accepts.
var States = []string{StateAll, StateOnline, StateOffline, StateFailed, StateDrifted, StateRevoked}

// Limits.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
	WorstHosts      = 10
)

// Counts are an environment's hosts by state. Online+Offline = Active; NeverSeen is part of Offline.
// Stats is nil until the environment's fleet stats were first computed.
type Counts struct {
	Active, Online, Offline, NeverSeen, Failed, Revoked int
	Stats                                               *Stats
}

// Stats are the figures of an environment that need every host's expected configs, so they are not
// computed per page: config-api's fleet metrics lease holder runs the drift report (package drift, the
// API's rule) over every environment once per period and stores the result (internal/fleetmetrics), and
// At says when.
type Stats struct {
	At time.Time
	// Online is the number of online hosts when the stats were computed.
	Online int
	// Drifted: active hosts the drift report listed as drifted.
	Drifted int
	// Stale: the drifted hosts with some type reported behind the expected version, or not at all.
	Stale int
}

// Offender is a host that needs attention.
type Offender struct {
	HostID          uuid.UUID
	Hostname        string
	LastHeartbeatAt *time.Time
	FailedTypes     int
}

// Summary is one environment at a glance.
type Summary struct {
	Environment tenants.Environment
	ClientName  string // set by Overview
	Counts      Counts
	Worst       []Offender
}

// Search selects a page of hosts, by hostname.
type Search struct {
	Hostname string // substring, case-insensitive
	State    string
	// Labels keeps the hosts whose inventory labels match (the zero Selector: every host), as the API's
	// ?selector= does.
	Labels selector.Selector
	// After pages: the last hostname and id of the previous page.
	AfterHostname string
	AfterID       uuid.NullUUID
	Limit         int
}

// Page is one page of a search; Next is set when more hosts follow.
type Page struct {
	Hosts []hosts.Host
	Next  *Cursor
}

// Cursor continues a search after a host.
type Cursor struct {
	Hostname string
	ID       uuid.UUID
}

// Store runs the read queries. onlineWindow is the deployment's online window: a host is online by
// protocol.Online at the database's clock.
type Store interface {
	HostCounts(ctx context.Context, environmentID uuid.UUID, onlineWindow time.Duration) (Counts, error)
	WorstHosts(ctx context.Context, environmentID uuid.UUID, onlineWindow time.Duration, limit int) ([]Offender, error)
	SearchHosts(ctx context.Context, environmentID uuid.UUID, s Search, onlineWindow time.Duration) ([]hosts.Host, error)
	// FleetSummaries counts the hosts of every environment within filter (not Valid: all), by client
	// name then environment name; Worst is left empty.
	FleetSummaries(ctx context.Context, filter uuid.NullUUID, onlineWindow time.Duration) ([]Summary, error)
	// VisibleEnvironments lists every environment within filter with its client's name.
	VisibleEnvironments(ctx context.Context, filter uuid.NullUUID) ([]EnvironmentRef, error)
	// DriftComputedAt is when the environment's drifted hosts were last stored (nil: never).
	DriftComputedAt(ctx context.Context, environmentID uuid.UUID) (*time.Time, error)
	// FleetWorstHosts returns at most perEnv offenders of every environment within filter, by environment.
	FleetWorstHosts(ctx context.Context, filter uuid.NullUUID, onlineWindow time.Duration, perEnv int) (map[uuid.UUID][]Offender, error)
}

// Environments finds an environment the caller can see (auditing cross-tenant attempts).
type Environments interface {
	Environment(ctx context.Context, p tenancy.Principal, id uuid.UUID) (tenants.Environment, error)
}

// Service is the fleet read use cases.
type Service struct {
	store        Store
	environments Environments
	onlineWindow time.Duration
}

// NewService returns a Service; onlineWindow is config-api's online window.
func NewService(store Store, environments Environments, onlineWindow time.Duration) *Service {
	return &Service{store: store, environments: environments, onlineWindow: onlineWindow}
}

// OnlineWindow is the window the service decides "online" by.
func (s *Service) OnlineWindow() time.Duration { return s.onlineWindow }

// Summary counts an environment's hosts by state and names the worst offenders.
func (s *Service) Summary(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID) (Summary, error) {
	env, err := s.environments.Environment(ctx, p, environmentID)
	if err != nil {
		return Summary{}, err
	}
	counts, err := s.store.HostCounts(ctx, env.ID, s.onlineWindow)
	if err != nil {
		return Summary{}, fmt.Errorf("fleet: summary: %w", err)
	}
	worst, err := s.store.WorstHosts(ctx, env.ID, s.onlineWindow, WorstHosts)
	if err != nil {
		return Summary{}, fmt.Errorf("fleet: worst hosts: %w", err)
	}
	return Summary{Environment: env, Counts: counts, Worst: worst}, nil
}

// EnvironmentRef is an environment with its client's name.
type EnvironmentRef struct {
	ID, ClientID     uuid.UUID
	Name, ClientName string
}

// Environments lists every environment the caller can see, by client name then name, in one query.
func (s *Service) Environments(ctx context.Context, p tenancy.Principal) ([]EnvironmentRef, error) {
	envs, err := s.store.VisibleEnvironments(ctx, p.Filter())
	if err != nil {
		return nil, fmt.Errorf("fleet: environments: %w", err)
	}
	return envs, nil
}

// Overview summarises every environment the caller can see (an admin: all; a client-scoped caller: its
// client's), in two queries whatever their number.
func (s *Service) Overview(ctx context.Context, p tenancy.Principal) ([]Summary, error) {
	sums, err := s.store.FleetSummaries(ctx, p.Filter(), s.onlineWindow)
	if err != nil {
		return nil, fmt.Errorf("fleet: overview: %w", err)
	}
	worst, err := s.store.FleetWorstHosts(ctx, p.Filter(), s.onlineWindow, WorstHosts)
	if err != nil {
		return nil, fmt.Errorf("fleet: overview worst hosts: %w", err)
	}
	for i := range sums {
		sums[i].Worst = worst[sums[i].Environment.ID]
	}
	return sums, nil
}

// Search returns a page of an environment's hosts matching q, by hostname.
func (s *Service) Search(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, q Search) (Page, error) {
	if q.Limit <= 0 {
		q.Limit = DefaultPageSize
	}
	if q.Limit > MaxPageSize {
		return Page{}, fault.Invalidf("limit must be at most %d", MaxPageSize)
	}
	if !validState(q.State) {
		return Page{}, fault.Invalidf("status must be one of %s", strings.Join(States[1:], ", "))
	}
	if len(q.Hostname) > 255 || strings.ContainsRune(q.Hostname, 0) {
		return Page{}, fault.Invalidf("hostname filter must be at most 255 characters")
	}
	if _, err := s.environments.Environment(ctx, p, environmentID); err != nil {
		return Page{}, err
	}
	limit := q.Limit
	q.Limit = limit + 1
	hs, err := s.store.SearchHosts(ctx, environmentID, q, s.onlineWindow)
	if err != nil {
		return Page{}, fmt.Errorf("fleet: search hosts: %w", err)
	}
	page := Page{Hosts: hs}
	if len(hs) > limit {
		page.Hosts = hs[:limit]
		last := hs[limit-1]
		page.Next = &Cursor{Hostname: last.Hostname, ID: last.ID}
	}
	return page, nil
}

// DriftComputedAt is when the drifted hosts of an environment the caller can see were last computed
// (nil: not yet): the "as of" of the drifted filter.
func (s *Service) DriftComputedAt(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID) (*time.Time, error) {
	if _, err := s.environments.Environment(ctx, p, environmentID); err != nil {
		return nil, err
	}
	at, err := s.store.DriftComputedAt(ctx, environmentID)
	if err != nil {
		return nil, fmt.Errorf("fleet: drift computed at: %w", err)
	}
	return at, nil
}

func validState(st string) bool {
	for _, s := range States {
		if s == st {
			return true
		}
	}
	return false
}
