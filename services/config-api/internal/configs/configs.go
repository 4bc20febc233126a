// Package configs is the heart of config-api: environment configs and host overrides, their
// validation against the type registry, versioned writes (every write and every delete takes a new
// version from one sequence and leaves a tombstone, so effective versions never go back), revision
// history and rollback, dry runs, and the effective config of a host as the resolver computes it.
package configs

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// Revision actions.
const (
	ActionPut      = "put"
	ActionDelete   = "delete"
	ActionRollback = "rollback"
)

// Record is one stored config row of either level. Data is nil for a tombstone.
type Record struct {
	ID            uuid.UUID
	Scope         string // protocol.ScopeEnvironment or protocol.ScopeHost
	EnvironmentID uuid.UUID
	HostID        uuid.UUID // zero for the environment scope
	ConfigType    string
	Data          json.RawMessage
	Version       int64
	DeletedAt     *time.Time
	UpdatedBy     string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Live reports whether the row holds a config (it is not a tombstone).
func (r *Record) Live() bool { return r != nil && r.DeletedAt == nil && r.Data != nil }

// Ref addresses the config of one type at one level: ID is the environment id or the host id.
type Ref struct {
	Scope      string
	ID         uuid.UUID
	ConfigType string
}

// Target is the environment or host a write addresses, as the repository locked it.
type Target struct {
	Scope         string
	ClientID      uuid.UUID
	EnvironmentID uuid.UUID
	HostID        uuid.UUID
	AgentID       string
	Revoked       bool
}

// Current is the state a write decides on, read under the write's locks.
type Current struct {
	Target Target
	Row    *Record // the addressed row, nil when the type was never written at this level
	Env    *Record // host scope only: the environment row of the same type, nil when none
	// ActiveRollout (environment scope only) is the running or paused staged rollout of the type, if
	// any: the environment's row of the type belongs to it until it ends.
	ActiveRollout uuid.NullUUID
}

// Effective returns the version a caller saw as ETag for this state and whether a config exists:
// for an environment its row, for a host the effective config (max of both levels, tombstones
// included, exactly as the resolver versions it).
func (c Current) Effective() (version int64, exists bool) {
	if c.Target.Scope == protocol.ScopeEnvironment {
		if c.Row == nil {
			return 0, false
		}
		return c.Row.Version, c.Row.Live()
	}
	if c.Row != nil {
		version = c.Row.Version
	}
	if c.Env != nil {
		version = max(version, c.Env.Version)
	}
	return version, c.Row.Live() || c.Env.Live()
}

// Write is what a write decided: the action recorded in history and the new data (nil: tombstone).
type Write struct {
	Action string
	Data   json.RawMessage
}

// Revision is one entry of a config's history.
type Revision struct {
	ID        int64
	Version   int64
	Action    string
	OldData   json.RawMessage
	NewData   json.RawMessage
	Actor     string
	CreatedAt time.Time
}

// AffectedHost is an active host of an environment with its override of one type (nil when none).
type AffectedHost struct {
	HostID   uuid.UUID
	Hostname string
	AgentID  string
	Override json.RawMessage
}

// ErrNoTarget is returned by Repository.Update when the environment or host does not exist for the
// caller's client filter.
var ErrNoTarget = errors.New("configs: target not found")

// Repository stores configs. Reads of a missing row fail with fault.NotFound.
type Repository interface {
	// Update locks the target of ref (restricted to filter) and its row, calls fn with them and stores
	// fn's Write in the same transaction: the row with a new version from config_version_seq, a
	// config_revisions entry by actor, and a ConfigChanged outbox event (see ChangeEvent).
	Update(ctx context.Context, filter uuid.NullUUID, ref Ref, actor string, fn func(Current) (Write, error)) (Record, error)
	EnvironmentConfig(ctx context.Context, environmentID uuid.UUID, configType string) (Record, error)
	// EnvironmentConfigs lists the live configs of an environment, by type.
	EnvironmentConfigs(ctx context.Context, environmentID uuid.UUID) ([]Record, error)
	// Revisions lists a config's history, newest first, at most limit entries.
	Revisions(ctx context.Context, ref Ref, limit int) ([]Revision, error)
	Revision(ctx context.Context, ref Ref, version int64) (Revision, error)
	// AffectedHosts returns up to limit active hosts of an environment (by hostname) with their
	// override of configType, and how many active hosts it has in all.
	AffectedHosts(ctx context.Context, environmentID uuid.UUID, configType string, limit int) ([]AffectedHost, int, error)
	// Reannounce stores again, in one transaction, the live configs refs selects (environment defaults
	// and overrides of active hosts): it locks their targets without deadlocking against Update, re-reads
	// each row under the locks and stores fn's Write for it as Update does (a new version from
	// config_version_seq, a config_revisions entry by actor, a ConfigChanged outbox event). fn returns
	// false to leave a row alone. It returns the rows written.
	Reannounce(ctx context.Context, refs CredentialRefs, actor string, fn func(Current) (Write, bool)) ([]Record, error)
	// CredentialUse finds, without locking, the live configs refs selects (environment defaults and
	// overrides of active hosts): the rows Reannounce would start from.
	CredentialUse(ctx context.Context, refs CredentialRefs) (CredentialUse, error)
}

// Resolver computes effective configs (the resolver service).
type Resolver interface {
	Resolve(ctx context.Context, req protocol.ResolveRequest) (protocol.ResolveReply, error)
}

// Environments finds an environment the caller can see (auditing cross-tenant attempts).
type Environments interface {
	Environment(ctx context.Context, p tenancy.Principal, id uuid.UUID) (tenants.Environment, error)
}

// Hosts finds a host the caller can see (auditing cross-tenant attempts).
type Hosts interface {
	Get(ctx context.Context, p tenancy.Principal, id uuid.UUID) (hosts.Host, error)
}

// ChangeEvent is the event announcing a committed write of rec on target.
func ChangeEvent(t Target, rec Record, actor string, at time.Time) protocol.ConfigChanged {
	ev := protocol.ConfigChanged{
		EventID:       uuid.NewString(),
		Scope:         t.Scope,
		ClientID:      t.ClientID.String(),
		EnvironmentID: t.EnvironmentID.String(),
		ConfigType:    rec.ConfigType,
		Version:       rec.Version,
		Deleted:       !rec.Live(),
		Actor:         actor,
		OccurredAt:    at.UTC(),
	}
	if t.Scope == protocol.ScopeHost {
		ev.HostID = t.HostID.String()
		ev.AgentID = t.AgentID
	}
	return ev
}

// Precondition is a parsed If-Match header. The zero value imposes nothing.
type Precondition struct {
	Any      bool    // If-Match: *
	Versions []int64 // If-Match: "3", "4"
}

// Set reports whether the request carried an If-Match.
func (c Precondition) Set() bool { return c.Any || len(c.Versions) > 0 }

// Check fails with a PreconditionFailed fault unless the config at version (exists: it is live)
// satisfies the If-Match.
func (c Precondition) Check(version int64, exists bool) error { return c.check(version, exists) }

func (c Precondition) check(version int64, exists bool) error {
	switch {
	case !c.Set():
		return nil
	case !exists:
		return fault.PreconditionFailedf("If-Match does not hold: the config does not exist")
	case c.Any || slices.Contains(c.Versions, version):
		return nil
	default:
		return fault.PreconditionFailedf("If-Match does not hold: the config is at version %d", version)
	}
}
