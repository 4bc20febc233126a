// Package tenants manages clients (tenants) and their environments.
package tenants

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// Client is a tenant.
type Client struct {
	ID        uuid.UUID
	Name      string
	CreatedAt time.Time
}

// Environment groups a client's hosts that share config defaults.
type Environment struct {
	ID        uuid.UUID
	ClientID  uuid.UUID
	Name      string
	CreatedAt time.Time
}

// Store persists clients and environments. filter restricts lookups to one client (not Valid: all).
// Missing objects fail with fault.NotFound, duplicate names with fault.Conflict.
type Store interface {
	CreateClient(ctx context.Context, name string) (Client, error)
	Client(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) (Client, error)
	Clients(ctx context.Context, filter uuid.NullUUID) ([]Client, error)
	CreateEnvironment(ctx context.Context, clientID uuid.UUID, name string) (Environment, error)
	Environment(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) (Environment, error)
	Environments(ctx context.Context, clientID uuid.UUID) ([]Environment, error)
}

// Service is the client and environment use cases.
type Service struct {
	store Store
	guard *tenancy.Guard
}

// NewService returns a Service.
func NewService(store Store, guard *tenancy.Guard) *Service {
	return &Service{store: store, guard: guard}
}

// CreateClient creates a client. Admin only.
func (s *Service) CreateClient(ctx context.Context, p tenancy.Principal, name string) (Client, error) {
	if err := p.RequireAdmin(); err != nil {
		return Client{}, err
	}
	name, err := ValidName(name)
	if err != nil {
		return Client{}, err
	}
	c, err := s.store.CreateClient(ctx, name)
	if err != nil {
		return Client{}, fmt.Errorf("tenants: create client: %w", err)
	}
	return c, nil
}

// Clients lists the clients the caller can see (all for an admin, its own otherwise).
func (s *Service) Clients(ctx context.Context, p tenancy.Principal) ([]Client, error) {
	cs, err := s.store.Clients(ctx, p.Filter())
	if err != nil {
		return nil, fmt.Errorf("tenants: list clients: %w", err)
	}
	return cs, nil
}

// Client returns one client the caller can see.
func (s *Service) Client(ctx context.Context, p tenancy.Principal, id uuid.UUID) (Client, error) {
	return tenancy.Visible(ctx, s.guard, p, tenancy.KindClient, id, "tenants: get client", s.store.Client)
}

// CreateEnvironment creates an environment of a client the caller can see.
func (s *Service) CreateEnvironment(ctx context.Context, p tenancy.Principal, clientID uuid.UUID, name string) (Environment, error) {
	name, err := ValidName(name)
	if err != nil {
		return Environment{}, err
	}
	if _, err := s.Client(ctx, p, clientID); err != nil {
		return Environment{}, err
	}
	e, err := s.store.CreateEnvironment(ctx, clientID, name)
	if err != nil {
		return Environment{}, fmt.Errorf("tenants: create environment: %w", err)
	}
	return e, nil
}

// Environments lists a client's environments.
func (s *Service) Environments(ctx context.Context, p tenancy.Principal, clientID uuid.UUID) ([]Environment, error) {
	if _, err := s.Client(ctx, p, clientID); err != nil {
		return nil, err
	}
	es, err := s.store.Environments(ctx, clientID)
	if err != nil {
		return nil, fmt.Errorf("tenants: list environments: %w", err)
	}
	return es, nil
}

// Environment returns one environment the caller can see.
func (s *Service) Environment(ctx context.Context, p tenancy.Principal, id uuid.UUID) (Environment, error) {
	return tenancy.Visible(ctx, s.guard, p, tenancy.KindEnvironment, id, "tenants: get environment", s.store.Environment)
}

// ValidName trims a client or environment name and checks its length.
func ValidName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return "", fault.Invalidf("name must be 1 to 200 characters")
	}
	return name, nil
}
