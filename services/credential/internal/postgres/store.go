// Package postgres is the credential service's Store adapter over PostgreSQL, built on the sqlc queries
// in db/queries/credential (generated into sqlcdb). It owns the credentials table.
package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/services/credential/internal/credential"
	"github.com/configsync/configsync/services/credential/internal/postgres/sqlcdb"
)

// PostgreSQL error codes the store maps to domain errors.
const (
	uniqueViolation     = "23505"
	foreignKeyViolation = "23503"
)

// Store keeps credentials in PostgreSQL. Its outages are reported as credential.ErrStoreUnavailable.
type Store struct {
	pool *pgdb.OutageDB
	q    *sqlcdb.Queries
}

var _ credential.Store = (*Store)(nil)

// NewStore returns a Store over pool.
func NewStore(pool *pgxpool.Pool) *Store {
	db := pgdb.Outage(pool, credential.ErrStoreUnavailable)
	return &Store{pool: db, q: sqlcdb.New(db)}
}

// Create inserts r after checking, in the same transaction, that its environment belongs to its client.
func (s *Store) Create(ctx context.Context, r credential.Record) (credential.Record, error) {
	id, clientID, err := parseIDs(r.ID, r.ClientID)
	if err != nil {
		return credential.Record{}, err
	}
	env, err := nullID(r.EnvironmentID)
	if err != nil {
		return credential.Record{}, err
	}
	var row sqlcdb.Credential
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		if env.Valid {
			owner, err := q.EnvironmentClientID(ctx, env.UUID)
			if errors.Is(err, pgx.ErrNoRows) || err == nil && owner != clientID {
				return fmt.Errorf("%w: environment %s of client %s", credential.ErrNotFound, r.EnvironmentID, r.ClientID)
			}
			if err != nil {
				return fmt.Errorf("read environment: %w", err)
			}
		}
		row, err = q.InsertCredential(ctx, sqlcdb.InsertCredentialParams{
			ID:             id,
			ClientID:       clientID,
			EnvironmentID:  env,
			Name:           r.Name,
			Fields:         r.Fields,
			Ciphertext:     r.Ciphertext,
			KeyVersion:     r.KeyVersion,
			AllowedTargets: targetsParam(r.AllowedTargets),
		})
		return err
	})
	if err != nil {
		var pgErr *pgconn.PgError
		switch {
		case errors.Is(err, credential.ErrNotFound):
			return credential.Record{}, fmt.Errorf("postgres: %w", err)
		case errors.As(err, &pgErr) && pgErr.Code == uniqueViolation:
			return credential.Record{}, fmt.Errorf("postgres: %w: client already has a credential named %q", credential.ErrConflict, r.Name)
		case errors.As(err, &pgErr) && pgErr.Code == foreignKeyViolation:
			return credential.Record{}, fmt.Errorf("postgres: %w: client %s", credential.ErrNotFound, r.ClientID)
		}
		return credential.Record{}, fmt.Errorf("postgres: insert credential: %w", err)
	}
	return record(row), nil
}

// Get returns one credential of a client.
func (s *Store) Get(ctx context.Context, clientID, id string) (credential.Record, error) {
	return oneRow(clientID, id, "read credential", func(cid, cl uuid.UUID) (sqlcdb.Credential, error) {
		return s.q.CredentialByID(ctx, sqlcdb.CredentialByIDParams{ID: cid, ClientID: cl})
	})
}

// List returns a client's credentials in name order, optionally those of one environment.
func (s *Store) List(ctx context.Context, clientID, environmentID string) ([]credential.Record, error) {
	cl, err := uuid.Parse(clientID)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w: client_id", credential.ErrInvalidRequest)
	}
	env, err := nullID(environmentID)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.ListCredentials(ctx, sqlcdb.ListCredentialsParams{ClientID: cl, EnvironmentID: env})
	if err != nil {
		return nil, fmt.Errorf("postgres: list credentials: %w", err)
	}
	out := make([]credential.Record, len(rows))
	for i, row := range rows {
		out[i] = record(row)
	}
	return out, nil
}

// Update locks the row, applies fn and writes back its fields, ciphertext and key version.
func (s *Store) Update(ctx context.Context, clientID, id string, fn func(credential.Record) (credential.Record, error)) (credential.Record, error) {
	cid, cl, err := parseIDs(id, clientID)
	if err != nil {
		return credential.Record{}, err
	}
	var out sqlcdb.Credential
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		row, err := q.CredentialByIDForUpdate(ctx, sqlcdb.CredentialByIDForUpdateParams{ID: cid, ClientID: cl})
		if err != nil {
			return rowError("lock credential", id, err)
		}
		next, err := fn(record(row))
		if err != nil {
			return err
		}
		out, err = q.UpdateCredentialSecret(ctx, sqlcdb.UpdateCredentialSecretParams{
			ID:             cid,
			ClientID:       cl,
			Fields:         next.Fields,
			Ciphertext:     next.Ciphertext,
			KeyVersion:     next.KeyVersion,
			AllowedTargets: targetsParam(next.AllowedTargets),
		})
		if err != nil {
			return fmt.Errorf("postgres: update credential: %w", err)
		}
		return nil
	})
	if err != nil {
		return credential.Record{}, err
	}
	return record(out), nil
}

// Delete removes one credential of a client.
func (s *Store) Delete(ctx context.Context, clientID, id string) (credential.Record, error) {
	return oneRow(clientID, id, "delete credential", func(cid, cl uuid.UUID) (sqlcdb.Credential, error) {
		return s.q.DeleteCredential(ctx, sqlcdb.DeleteCredentialParams{ID: cid, ClientID: cl})
	})
}

// oneRow runs query, which reads or deletes the credential cid of the client cl, for the credential
// id of clientID; op names the query in errors.
func oneRow(clientID, id, op string, query func(cid, cl uuid.UUID) (sqlcdb.Credential, error)) (credential.Record, error) {
	cid, cl, err := parseIDs(id, clientID)
	if err != nil {
		return credential.Record{}, err
	}
	row, err := query(cid, cl)
	if err != nil {
		return credential.Record{}, rowError(op, id, err)
	}
	return record(row), nil
}

// SealedByIDs reads every credential among ids in one query.
func (s *Store) SealedByIDs(ctx context.Context, ids []string) (map[string]credential.Sealed, error) {
	uids := make([]uuid.UUID, 0, len(ids))
	for _, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil {
			continue // cannot exist
		}
		uids = append(uids, u)
	}
	rows, err := s.q.CredentialsByIDs(ctx, uids)
	if err != nil {
		return nil, fmt.Errorf("postgres: read credentials: %w", err)
	}
	out := make(map[string]credential.Sealed, len(rows))
	for _, row := range rows {
		s := credential.Sealed{ID: row.ID.String(), ClientID: row.ClientID.String(), Ciphertext: row.Ciphertext}
		if len(row.AllowedTargets) > 0 {
			s.AllowedTargets = row.AllowedTargets
		}
		if row.EnvironmentID.Valid {
			s.EnvironmentID = row.EnvironmentID.UUID.String()
		}
		out[s.ID] = s
	}
	return out, nil
}

func record(row sqlcdb.Credential) credential.Record {
	r := credential.Record{
		ID:         row.ID.String(),
		ClientID:   row.ClientID.String(),
		Name:       row.Name,
		Fields:     row.Fields,
		Ciphertext: row.Ciphertext,
		KeyVersion: row.KeyVersion,
		CreatedAt:  row.CreatedAt,
		UpdatedAt:  row.UpdatedAt,
	}
	if len(row.AllowedTargets) > 0 {
		r.AllowedTargets = row.AllowedTargets
	}
	if row.EnvironmentID.Valid {
		r.EnvironmentID = row.EnvironmentID.UUID.String()
	}
	return r
}

// targetsParam is never nil: the column is NOT NULL, and pgx sends a nil slice as NULL.
func targetsParam(targets []string) []string {
	if targets == nil {
		return []string{}
	}
	return targets
}

func rowError(op, id string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: %w: credential %s", credential.ErrNotFound, id)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

func parseIDs(id, clientID string) (uuid.UUID, uuid.UUID, error) {
	cid, err := uuid.Parse(id)
	if err != nil {
		return uuid.UUID{}, uuid.UUID{}, fmt.Errorf("postgres: %w: id", credential.ErrInvalidRequest)
	}
	cl, err := uuid.Parse(clientID)
	if err != nil {
		return uuid.UUID{}, uuid.UUID{}, fmt.Errorf("postgres: %w: client_id", credential.ErrInvalidRequest)
	}
	return cid, cl, nil
}

func nullID(s string) (uuid.NullUUID, error) {
	if s == "" {
		return uuid.NullUUID{}, nil
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return uuid.NullUUID{}, fmt.Errorf("postgres: %w: environment_id", credential.ErrInvalidRequest)
	}
	return uuid.NullUUID{UUID: u, Valid: true}, nil
}
