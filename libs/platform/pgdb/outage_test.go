package pgdb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/configsync/configsync/libs/testinfra"
)

var errDomainUnavailable = errors.New("store unavailable")

// With nothing listening, every way of reaching PostgreSQL through Outage reports the domain's error,
// with the driver's error still in the chain.
func TestOutageWrapsEveryPathWhenNothingListens(t *testing.T) {
	t.Parallel()
	db := Outage(testinfra.UnreachablePostgres(t), errDomainUnavailable)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	_, execErr := db.Exec(ctx, "SELECT 1")
	_, queryErr := db.Query(ctx, "SELECT 1")
	rowErr := db.QueryRow(ctx, "SELECT 1").Scan(&n)
	_, beginErr := db.BeginTx(ctx, pgx.TxOptions{})
	funcErr := pgx.BeginFunc(ctx, db, func(pgx.Tx) error { return nil })
	for name, err := range map[string]error{"exec": execErr, "query": queryErr, "query row": rowErr, "begin": beginErr, "begin func": funcErr} {
		if !errors.Is(err, errDomainUnavailable) || !IsUnavailable(err) {
			t.Errorf("%s: %v, want the domain's unavailable error around the driver's", name, err)
		}
	}
}

// Query errors, no rows and a caller's cancellation pass through unchanged; a connection lost inside a
// transaction is an outage for the queries and the commit.
func TestOutageLeavesOtherErrorsAlone(t *testing.T) {
	t.Parallel()
	url := testinfra.PostgresEmptyURL(t)
	db := Outage(testinfra.OpenPool(t, url), errDomainUnavailable)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := db.Exec(ctx, "SELEC 1"); err == nil || errors.Is(err, errDomainUnavailable) {
		t.Fatalf("syntax error: %v", err)
	}
	var n int
	if err := db.QueryRow(ctx, "SELECT 1 WHERE false").Scan(&n); !errors.Is(err, pgx.ErrNoRows) || errors.Is(err, errDomainUnavailable) {
		t.Fatalf("no rows: %v", err)
	}
	rows, err := db.Query(ctx, "SELECT 1/0")
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
		rows.Close()
	}
	if err == nil || errors.Is(err, errDomainUnavailable) {
		t.Fatalf("division by zero: %v", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := db.Exec(cctx, "SELECT 1"); !errors.Is(err, context.Canceled) || errors.Is(err, errDomainUnavailable) {
		t.Fatalf("canceled: %v", err)
	}

	tx, err := db.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	terminate(t, ctx, tx, connect(t, url))
	if _, err := tx.Exec(ctx, "SELECT 1"); !errors.Is(err, errDomainUnavailable) {
		t.Fatalf("query on a terminated connection: %v", err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, errDomainUnavailable) {
		t.Fatalf("commit on a terminated connection: %v", err)
	}
}
