// Package applystatus answers how far the current version of a config type has been applied: of the
// hosts that should run it (its targets), how many acknowledged it applied, how many failed (and with
// which errors), how many are still pending, and how many are offline and so cannot answer yet. The
// REST API, the web console's progress page and staged rollouts' per-stage counts all call Tally, so
// they agree; which host should run which version is agentconfig.Expected and which host is online is
// protocol.Online, never a rule of this package's own.
package applystatus

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// TopErrors is how many distinct error texts a Status lists.
const TopErrors = 5

// Ack statuses, as agents report them.
const (
	Applied = "applied"
	Failed  = "failed"
)

// Layer is one stored level of a config type: what agentconfig.Expected needs, and when this version
// was written (zero when there is no row).
type Layer struct {
	agentconfig.LayerState
	WrittenAt time.Time
}

// Ack is a host's last acknowledgement of one config type.
type Ack struct {
	Version   int64
	Status    string // Applied or Failed
	Error     string
	AppliedAt time.Time
}

// Host is what a tally needs of one active host for one config type.
type Host struct {
	ID                uuid.UUID
	LastHeartbeatAt   *time.Time // nil: never
	HeartbeatInterval time.Duration
	Environment       Layer
	Override          Layer
	Ack               *Ack // nil: never acknowledged this type
}

// Expected is what the host should hold for the type, by the one rule.
func (h Host) Expected() agentconfig.ExpectedState {
	return agentconfig.Expected(h.Environment.LayerState, h.Override.LayerState)
}

// writtenAt is when the host's expected version was written: by the layer that carries it.
func (h Host) writtenAt() time.Time {
	if h.Override.Version > h.Environment.Version {
		return h.Override.WrittenAt
	}
	return h.Environment.WrittenAt
}

// ErrorCount is one apply error text and how many targets report it.
type ErrorCount struct {
	Error string
	Hosts int
}

// Status is how the targets of one version stand. Targets = Applied + Failed + Pending + Offline:
// a target that answered counts by its answer even when it is offline now; one that did not answer
// is Pending while online and Offline otherwise (it cannot answer until it comes back, so it does not
// hold a rollout pending forever). Others are active hosts that should run another version of the
// type (a newer host override).
type Status struct {
	ConfigType string
	Version    int64
	// Present is false when Version is a deletion: the targets should drop the type.
	Present   bool
	WrittenAt time.Time

	Targets, Applied, Failed, Pending, Offline, Others int
	TopErrors                                          []ErrorCount
	// SlowestApply is the longest time from the write of Version to a target's applied ack (0 when
	// none applied yet); SlowestHost is that target.
	SlowestApply time.Duration
	SlowestHost  uuid.NullUUID
}

// Done reports whether every online target has answered.
func (s Status) Done() bool { return s.Pending == 0 }

// Tally counts hosts against version: hosts whose expected version is version are its targets.
// window is the deployment's online window; topErrors bounds TopErrors.
func Tally(hosts []Host, version int64, now time.Time, window time.Duration, topErrors int) Status {
	st := Status{Version: version}
	errs := map[string]int{}
	for _, h := range hosts {
		if h.Expected().Version != version {
			st.Others++
			continue
		}
		st.Targets++
		switch a := h.Ack; {
		case a != nil && a.Version >= version && a.Status == Applied:
			st.Applied++
			if took := max(a.AppliedAt.Sub(h.writtenAt()), 0); !st.SlowestHost.Valid || took > st.SlowestApply {
				st.SlowestApply, st.SlowestHost = took, uuid.NullUUID{UUID: h.ID, Valid: true}
			}
		case a != nil && a.Version >= version && a.Status == Failed:
			st.Failed++
			errs[a.Error]++
		case protocol.Online(now, h.LastHeartbeatAt, window, h.HeartbeatInterval):
			st.Pending++
		default:
			st.Offline++
		}
	}
	for text, n := range errs {
		st.TopErrors = append(st.TopErrors, ErrorCount{Error: text, Hosts: n})
	}
	slices.SortFunc(st.TopErrors, func(a, b ErrorCount) int {
		return cmp.Or(cmp.Compare(b.Hosts, a.Hosts), cmp.Compare(a.Error, b.Error))
	})
	if len(st.TopErrors) > topErrors {
		st.TopErrors = st.TopErrors[:topErrors]
	}
	return st
}

// Store reads what a tally needs.
type Store interface {
	// EnvironmentLayer is the environment level of a config type (Version 0 when there is no row).
	EnvironmentLayer(ctx context.Context, environmentID uuid.UUID, configType string) (Layer, error)
	// StatusHosts lists the active hosts of an environment (only: just that host, if active) with both
	// layers of configType and their last ack of it.
	StatusHosts(ctx context.Context, environmentID uuid.UUID, configType string, only uuid.NullUUID) ([]Host, error)
}

// Environments finds an environment the caller can see (auditing cross-tenant attempts).
type Environments interface {
	Environment(ctx context.Context, p tenancy.Principal, id uuid.UUID) (tenants.Environment, error)
}

// Hosts finds a host the caller can see (auditing cross-tenant attempts).
type Hosts interface {
	Get(ctx context.Context, p tenancy.Principal, id uuid.UUID) (hosts.Host, error)
}

// Service answers apply status for the API and the console.
type Service struct {
	store        Store
	environments Environments
	hosts        Hosts
	onlineWindow time.Duration
	now          func() time.Time
}

// NewService returns a Service deciding "online" with onlineWindow (config-api's online window).
func NewService(store Store, environments Environments, hosts Hosts, onlineWindow time.Duration) *Service {
	return &Service{store: store, environments: environments, hosts: hosts, onlineWindow: onlineWindow, now: time.Now}
}

// Environment is the status of an environment's current version of configType (a deletion included)
// over the environment's active hosts. An environment that never had the type is NotFound.
func (s *Service) Environment(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string) (Status, error) {
	if err := configs.CheckType(configType); err != nil {
		return Status{}, err
	}
	if _, err := s.environments.Environment(ctx, p, environmentID); err != nil {
		return Status{}, err
	}
	layer, err := s.store.EnvironmentLayer(ctx, environmentID, configType)
	if err != nil {
		return Status{}, fmt.Errorf("applystatus: environment layer: %w", err)
	}
	if layer.Version == 0 {
		return Status{}, fault.NotFoundf("environment %s has no %s config", environmentID, configType)
	}
	hs, err := s.store.StatusHosts(ctx, environmentID, configType, uuid.NullUUID{})
	if err != nil {
		return Status{}, fmt.Errorf("applystatus: hosts: %w", err)
	}
	st := Tally(hs, layer.Version, s.now(), s.onlineWindow, TopErrors)
	st.ConfigType, st.Present, st.WrittenAt = configType, layer.Present, layer.WrittenAt
	return st, nil
}

// Host is the status of one host's expected version of configType: a Status with at most one target
// (none when the host is revoked). A host for which neither level ever had the type is NotFound.
func (s *Service) Host(ctx context.Context, p tenancy.Principal, hostID uuid.UUID, configType string) (Status, error) {
	if err := configs.CheckType(configType); err != nil {
		return Status{}, err
	}
	h, err := s.hosts.Get(ctx, p, hostID)
	if err != nil {
		return Status{}, err
	}
	hs, err := s.store.StatusHosts(ctx, h.EnvironmentID, configType, uuid.NullUUID{UUID: hostID, Valid: true})
	if err != nil {
		return Status{}, fmt.Errorf("applystatus: host: %w", err)
	}
	if len(hs) == 0 { // revoked: no target, but the version it would run still answers
		layer, err := s.store.EnvironmentLayer(ctx, h.EnvironmentID, configType)
		if err != nil {
			return Status{}, fmt.Errorf("applystatus: environment layer: %w", err)
		}
		if layer.Version == 0 {
			return Status{}, fault.NotFoundf("host %s has no %s config", hostID, configType)
		}
		return Status{ConfigType: configType, Version: layer.Version, Present: layer.Present, WrittenAt: layer.WrittenAt}, nil
	}
	exp := hs[0].Expected()
	if exp.Version == 0 {
		return Status{}, fault.NotFoundf("host %s has no %s config", hostID, configType)
	}
	st := Tally(hs, exp.Version, s.now(), s.onlineWindow, TopErrors)
	st.ConfigType, st.Present, st.WrittenAt = configType, exp.Present, hs[0].writtenAt()
	return st, nil
}
