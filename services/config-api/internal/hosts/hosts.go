// Package hosts registers hosts (one agent each) in an environment, lists them with the config state
// their agents report, and revokes them.
package hosts

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// Host is a registered host and the config state its agent last reported.
type Host struct {
	ID              uuid.UUID
	ClientID        uuid.UUID
	EnvironmentID   uuid.UUID
	Hostname        string
	AgentID         string
	CreatedAt       time.Time
	RevokedAt       *time.Time
	AgentVersion    *string
	ConfigHash      *string
	ConfigVersion   *int64
	ConfigVersions  map[string]int64
	LastHeartbeatAt *time.Time
	ApplyStatus     map[string]ApplyStatus

	// NATSPublicKey is the agent's NATS user key, when config-api issued its credentials.
	NATSPublicKey string
	// NATSCredentials is the agent's NATS creds file, set only in Register's result (shown once).
	NATSCredentials string
}

// ApplyStatus is the last apply result an agent acknowledged for one config type.
type ApplyStatus struct {
	Version   int64     `json:"version"`
	Status    string    `json:"status"`
	Error     string    `json:"error,omitempty"`
	AppliedAt time.Time `json:"applied_at"`
}

// Online reports whether the host sent a heartbeat within window before now.
func (h Host) Online(now time.Time, window time.Duration) bool {
	return h.RevokedAt == nil && h.LastHeartbeatAt != nil && now.Sub(*h.LastHeartbeatAt) <= window
}

// Store persists hosts. Missing hosts fail with fault.NotFound, a duplicate hostname or agent id with
// fault.Conflict.
type Store interface {
	CreateHost(ctx context.Context, h Host) (Host, error)
	Host(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) (Host, error)
	// Hosts returns up to limit hosts of an environment with an id greater than after, by id.
	Hosts(ctx context.Context, environmentID uuid.UUID, after uuid.NullUUID, limit int) ([]Host, error)
	RevokeHost(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) error
	// RevokedNATSKeys returns every revoked host's NATS user key with its revocation time.
	RevokedNATSKeys(ctx context.Context) (map[string]time.Time, error)
}

// Identity issues and revokes agents' own NATS users (see libs/natsauth). Without one, agents
// authenticate however the deployment's NATS says and Register returns no credentials.
type Identity interface {
	// Issue creates a NATS user for agentID: its creds file and public key.
	Issue(agentID string) (creds []byte, publicKey string, err error)
	// Revoke publishes the account's revocation list (user key -> revoked at).
	Revoke(ctx context.Context, revoked map[string]time.Time) error
}

// Environments finds an environment the caller can see (auditing cross-tenant attempts).
type Environments interface {
	Environment(ctx context.Context, p tenancy.Principal, id uuid.UUID) (tenants.Environment, error)
}

// Page limits.
const (
	DefaultPageSize = 500
	MaxPageSize     = 5000
)

// Page is one page of an environment's hosts. NextAfter is set when more hosts follow.
type Page struct {
	Hosts     []Host
	NextAfter *uuid.UUID
}

// Service is the host use cases.
type Service struct {
	store        Store
	environments Environments
	guard        *tenancy.Guard
	identity     Identity
}

// NewService returns a Service. identity may be nil (no per-agent NATS credentials).
func NewService(store Store, environments Environments, guard *tenancy.Guard, identity Identity) *Service {
	return &Service{store: store, environments: environments, guard: guard, identity: identity}
}

// Register adds a host to an environment. An empty agentID is generated (a UUID); a given one must be
// usable as a NATS subject token.
func (s *Service) Register(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, hostname, agentID string) (Host, error) {
	hostname = strings.TrimSpace(hostname)
	if hostname == "" || len(hostname) > 255 {
		return Host{}, fault.Invalidf("hostname must be 1 to 255 characters")
	}
	if agentID == "" {
		agentID = uuid.NewString()
	} else if !protocol.ValidAgentID(agentID) {
		return Host{}, fault.Invalidf("agent_id must be 1 to 128 letters, digits, '-' or '_'")
	}
	env, err := s.environments.Environment(ctx, p, environmentID)
	if err != nil {
		return Host{}, err
	}
	host := Host{
		ClientID:      env.ClientID,
		EnvironmentID: env.ID,
		Hostname:      hostname,
		AgentID:       agentID,
	}
	var creds []byte
	if s.identity != nil {
		creds, host.NATSPublicKey, err = s.identity.Issue(agentID)
		if err != nil {
			return Host{}, fmt.Errorf("hosts: issue NATS credentials: %w", err)
		}
	}
	h, err := s.store.CreateHost(ctx, host)
	if err != nil {
		return Host{}, fmt.Errorf("hosts: register: %w", err)
	}
	h.NATSPublicKey = host.NATSPublicKey
	h.NATSCredentials = string(creds)
	return h, nil
}

// List returns a page of an environment's hosts.
func (s *Service) List(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, after uuid.NullUUID, limit int) (Page, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	if limit > MaxPageSize {
		return Page{}, fault.Invalidf("limit must be at most %d", MaxPageSize)
	}
	if _, err := s.environments.Environment(ctx, p, environmentID); err != nil {
		return Page{}, err
	}
	hs, err := s.store.Hosts(ctx, environmentID, after, limit+1)
	if err != nil {
		return Page{}, fmt.Errorf("hosts: list: %w", err)
	}
	page := Page{Hosts: hs}
	if len(hs) > limit {
		page.Hosts = hs[:limit]
		next := hs[limit-1].ID
		page.NextAfter = &next
	}
	return page, nil
}

// Get returns one host the caller can see.
func (s *Service) Get(ctx context.Context, p tenancy.Principal, id uuid.UUID) (Host, error) {
	h, err := s.store.Host(ctx, p.Filter(), id)
	if fault.Is(err, fault.NotFound) {
		return Host{}, s.guard.Missing(ctx, p, tenancy.KindHost, id)
	}
	if err != nil {
		return Host{}, fmt.Errorf("hosts: get: %w", err)
	}
	return h, nil
}

// Revoke marks a host revoked: it keeps its history but gets no more configs. Revoking twice is a
// no-op that keeps the first revocation time.
func (s *Service) Revoke(ctx context.Context, p tenancy.Principal, id uuid.UUID) (Host, error) {
	err := s.store.RevokeHost(ctx, p.Filter(), id)
	if fault.Is(err, fault.NotFound) {
		return Host{}, s.guard.Missing(ctx, p, tenancy.KindHost, id)
	}
	if err != nil {
		return Host{}, fmt.Errorf("hosts: revoke: %w", err)
	}
	h, err := s.Get(ctx, p, id)
	if err != nil {
		return Host{}, err
	}
	s.guard.Record(ctx, p, tenancy.ActionHostRevoked, uuid.NullUUID{UUID: h.ClientID, Valid: true}, tenancy.KindHost, id, nil)
	if s.identity != nil {
		// The whole list is pushed every time, so a failed push is repaired by revoking again.
		revoked, err := s.store.RevokedNATSKeys(ctx)
		if err != nil {
			return Host{}, fmt.Errorf("hosts: revoke: list NATS keys: %w", err)
		}
		if err := s.identity.Revoke(ctx, revoked); err != nil {
			return Host{}, &fault.Error{Kind: fault.Unavailable, Err: err,
				Message: "host revoked, but its NATS credentials could not be revoked yet; revoke it again"}
		}
	}
	return h, nil
}
