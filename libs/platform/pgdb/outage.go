package pgdb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what a postgres adapter runs on: sqlc's DBTX plus transactions (a *pgxpool.Pool).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Outage returns db reporting outages as unavailable: every error IsUnavailable tells, from db and
// from the transactions begun on it (queries, rows, commit), is wrapped so that errors.Is(err,
// unavailable) holds (the driver's error stays in the chain, for logs). A postgres adapter passes its
// domain's unavailable error, so the domain's edges classify outages without knowing the driver.
func Outage(db DB, unavailable error) *OutageDB {
	return &OutageDB{db: db, unavailable: unavailable}
}

// WrapOutage wraps err with unavailable when IsUnavailable(err), and returns it unchanged otherwise.
func WrapOutage(err, unavailable error) error {
	if IsUnavailable(err) {
		return fmt.Errorf("%w: %w", unavailable, err)
	}
	return err
}

// OutageDB is a DB whose outages are reported as its unavailable error. It satisfies sqlc's DBTX.
type OutageDB struct {
	db          DB
	unavailable error
}

func (d *OutageDB) wrap(err error) error { return WrapOutage(err, d.unavailable) }

// Exec runs sql.
func (d *OutageDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := d.db.Exec(ctx, sql, args...)
	return tag, d.wrap(err)
}

// Query runs sql; errors met while reading the rows are wrapped too.
func (d *OutageDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := d.db.Query(ctx, sql, args...)
	if err != nil {
		return rows, d.wrap(err)
	}
	return outageRows{Rows: rows, db: d}, nil
}

// QueryRow runs sql; Scan's error is wrapped.
func (d *OutageDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return outageRow{row: d.db.QueryRow(ctx, sql, args...), db: d}
}

// Begin begins a transaction with default options.
func (d *OutageDB) Begin(ctx context.Context) (pgx.Tx, error) { return d.BeginTx(ctx, pgx.TxOptions{}) }

// BeginTx begins a transaction whose outages are reported the same way.
func (d *OutageDB) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	tx, err := d.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, d.wrap(err)
	}
	return outageTx{Tx: tx, db: d}, nil
}

// The wrappers hold the OutageDB itself, not a method value of it, which would cost an allocation
// per query.
type outageRow struct {
	row pgx.Row
	db  *OutageDB
}

func (r outageRow) Scan(dest ...any) error { return r.db.wrap(r.row.Scan(dest...)) }

type outageRows struct {
	pgx.Rows
	db *OutageDB
}

func (r outageRows) Err() error             { return r.db.wrap(r.Rows.Err()) }
func (r outageRows) Scan(dest ...any) error { return r.db.wrap(r.Rows.Scan(dest...)) }

// outageTx is a pgx.Tx whose queries and commit report outages; the rest is the driver's.
type outageTx struct {
	pgx.Tx
	db *OutageDB
}

func (t outageTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := t.Tx.Exec(ctx, sql, args...)
	return tag, t.db.wrap(err)
}

func (t outageTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		return rows, t.db.wrap(err)
	}
	return outageRows{Rows: rows, db: t.db}, nil
}

func (t outageTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return outageRow{row: t.Tx.QueryRow(ctx, sql, args...), db: t.db}
}

func (t outageTx) Commit(ctx context.Context) error { return t.db.wrap(t.Tx.Commit(ctx)) }
