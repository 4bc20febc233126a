package pgdb

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err means PostgreSQL could not be reached or is not accepting work right
// now, so the same request may succeed if retried later: edges answer such errors "unavailable" (HTTP
// 503, protocol.CodeUnavailable) instead of "internal".
//
// It is true for any failure to connect (*pgconn.ConnectError, whatever its cause), the server-side
// SQLSTATEs of class 08 (connection_exception), 57P01 admin_shutdown, 57P02 crash_shutdown,
// 57P03 cannot_connect_now and 53300 too_many_connections, a connection lost under a query (net errors,
// io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, pgconn.ErrConnClosed) and a pgconn timeout (the server did
// not answer within the deadline). It is false for nil, for errors of the query itself (syntax,
// constraint violations, pgx.ErrNoRows, any other SQLSTATE) and for the caller's own context ending
// before the database was asked (context.Canceled; a bare context.DeadlineExceeded): a caller that gave
// up is not an outage.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	// Before the PgError case: a refused connection wraps the server's reason (for example 55000 when
	// the database does not allow connections, 28P01 for a bad password), which alone would read as a
	// query error.
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return unavailableState(pgErr.Code)
	}
	if pgconn.Timeout(err) {
		return true
	}
	// context.DeadlineExceeded is itself a net.Error; outside pgconn's I/O it is the caller's deadline.
	if errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) ||
		errors.Is(err, pgconn.ErrConnClosed)
}

// unavailableState reports whether a SQLSTATE says the server cannot take work now (rather than that the
// statement is wrong).
func unavailableState(code string) bool {
	switch code {
	case "57P01", // admin_shutdown (also pg_terminate_backend)
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now (starting up, shutting down, recovery)
		"53300": // too_many_connections
		return true
	}
	return len(code) == 5 && code[:2] == "08" // connection_exception
}
