package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// OwnerOf returns the client an object belongs to, without any client filter (audit probe only).
func (s *Store) OwnerOf(ctx context.Context, kind tenancy.Kind, id uuid.UUID) (uuid.UUID, bool, error) {
	var (
		owner uuid.UUID
		err   error
	)
	switch kind {
	case tenancy.KindClient:
		owner, err = s.q.ClientOfClient(ctx, id)
	case tenancy.KindEnvironment:
		owner, err = s.q.ClientOfEnvironment(ctx, id)
	case tenancy.KindHost:
		owner, err = s.q.ClientOfHost(ctx, id)
	case tenancy.KindCredential:
		owner, err = s.q.ClientOfCredential(ctx, id)
	default:
		return uuid.Nil, false, nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, false, nil
	}
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("postgres: owner of %s: %w", kind, err)
	}
	return owner, true, nil
}

// RecordAudit stores an audit event.
func (s *Store) RecordAudit(ctx context.Context, ev tenancy.AuditEvent) error {
	var detail []byte
	if ev.Detail != nil {
		var err error
		if detail, err = json.Marshal(ev.Detail); err != nil {
			return fmt.Errorf("postgres: audit detail: %w", err)
		}
	}
	err := s.q.InsertAuditEvent(ctx, sqlcdb.InsertAuditEventParams{
		Actor:    ev.Actor,
		ClientID: ev.ClientID,
		Action:   ev.Action,
		Object:   ev.Object,
		Detail:   detail,
	})
	if err != nil {
		return fmt.Errorf("postgres: insert audit event: %w", err)
	}
	return nil
}

// CreateClient stores a client.
func (s *Store) CreateClient(ctx context.Context, name string) (tenants.Client, error) {
	row, err := s.q.CreateClient(ctx, name)
	return oneOf(row, err, "client "+quote(name), clientFromRow)
}

// Client returns a client within filter.
func (s *Store) Client(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) (tenants.Client, error) {
	row, err := s.q.GetClient(ctx, sqlcdb.GetClientParams{ID: id, ClientFilter: filter})
	return oneOf(row, err, "client", clientFromRow)
}

// ClientExists reports whether a client exists.
func (s *Store) ClientExists(ctx context.Context, id uuid.UUID) (bool, error) {
	_, found, err := s.OwnerOf(ctx, tenancy.KindClient, id)
	return found, err
}

// Clients lists the clients within filter.
func (s *Store) Clients(ctx context.Context, filter uuid.NullUUID) ([]tenants.Client, error) {
	rows, err := s.q.ListClients(ctx, filter)
	return listOf(rows, err, "list clients", clientFromRow)
}

func clientFromRow(r sqlcdb.Client) tenants.Client { return tenants.Client(r) }

// CreateEnvironment stores an environment.
func (s *Store) CreateEnvironment(ctx context.Context, clientID uuid.UUID, name string) (tenants.Environment, error) {
	row, err := s.q.CreateEnvironment(ctx, sqlcdb.CreateEnvironmentParams{ClientID: clientID, Name: name})
	return oneOf(row, err, "environment "+quote(name), environmentFromRow)
}

// Environment returns an environment within filter.
func (s *Store) Environment(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) (tenants.Environment, error) {
	row, err := s.q.GetEnvironment(ctx, sqlcdb.GetEnvironmentParams{ID: id, ClientFilter: filter})
	return oneOf(row, err, "environment", environmentFromRow)
}

// Environments lists a client's environments.
func (s *Store) Environments(ctx context.Context, clientID uuid.UUID) ([]tenants.Environment, error) {
	rows, err := s.q.ListEnvironments(ctx, clientID)
	return listOf(rows, err, "list environments", environmentFromRow)
}

func environmentFromRow(r sqlcdb.Environment) tenants.Environment { return tenants.Environment(r) }

func quote(s string) string { return fmt.Sprintf("%q", s) }
