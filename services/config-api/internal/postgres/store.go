// Package postgres is config-api's PostgreSQL adapter: it implements the domain ports (tokens,
// tenants, hosts, configs, audit) over the sqlc queries in db/queries/config-api, and keeps every
// transaction and row lock inside this package.
package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
)

// Store implements config-api's ports on a pgx pool. Every error of a database outage, from a query,
// a transaction or its commit, is reported wrapped in fault.ErrStoreUnavailable.
type Store struct {
	pool *pgdb.OutageDB
	q    *sqlcdb.Queries
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store {
	db := pgdb.Outage(pool, fault.ErrStoreUnavailable)
	return &Store{pool: db, q: sqlcdb.New(db)}
}

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx, q *sqlcdb.Queries) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx, s.q.WithTx(tx)); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// PostgreSQL error codes the adapter classifies.
const (
	uniqueViolation     = "23505"
	foreignKeyViolation = "23503"
	checkViolation      = "23514"
	deadlockDetected    = "40P01"
)

// retryable reports whether err is PostgreSQL aborting a transaction that can simply run again.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == deadlockDetected
}

// classify turns "no rows" and constraint violations into faults; what names them is the caller's
// message, never the SQL error (which stays in the cause, for logs).
func classify(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return &fault.Error{Kind: fault.NotFound, Message: what + " not found", Err: err}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case uniqueViolation:
			return &fault.Error{Kind: fault.Conflict, Message: what + " already exists", Err: err}
		case foreignKeyViolation:
			return &fault.Error{Kind: fault.NotFound, Message: what + " refers to a missing object", Err: err}
		case checkViolation:
			return &fault.Error{Kind: fault.Invalid, Message: what + " is invalid", Err: err}
		}
	}
	return err
}

// rowErr is the error of a failed read of one row: missing (the domain's "not found") when there is
// no row, else err wrapped with what.
func rowErr(err, missing error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return missing
	}
	return fmt.Errorf("postgres: %s: %w", what, err)
}

// oneOf turns the result of a read of one row into a domain value with from; what names the row in
// the fault classify makes of an error.
func oneOf[R, T any](row R, err error, what string, from func(R) T) (T, error) {
	if err != nil {
		var none T
		return none, classify(err, what)
	}
	return from(row), nil
}

// listOf turns the result of a list query into domain values with from; what names the query in the
// error. The list is never nil, so an empty result reads as [] wherever it is shown.
func listOf[R, T any](rows []R, err error, what string, from func(R) T) ([]T, error) {
	return listOfErr(rows, err, what, func(r R) (T, error) { return from(r), nil })
}

// listOfErr is listOf for a conversion that can fail (a row's stored JSON).
func listOfErr[R, T any](rows []R, err error, what string, from func(R) (T, error)) ([]T, error) {
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	out := make([]T, len(rows))
	for i, r := range rows {
		if out[i], err = from(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}
