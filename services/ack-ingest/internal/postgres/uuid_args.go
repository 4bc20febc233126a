package postgres

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/configsync/configsync/services/ack-ingest/internal/postgres/sqlcdb"
)

// uuidArgs is the sqlc queries' connection with google/uuid arguments passed to pgx as pgtype.UUID.
// pgx encodes a uuid.UUID through its driver.Valuer: formatted as a string, which the uuid codec then
// fails to take (an fmt.Errorf per id) before parsing it back; pgtype.UUID is copied as 16 bytes. Every
// batch statement here carries one id per row (a heartbeat batch 1,000), and the CPU profile of a
// 20,000-agent heartbeat run put 40% of ack-ingest's heartbeat CPU in that encoding.
type uuidArgs struct {
	db sqlcdb.DBTX
}

func (u uuidArgs) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return u.db.Exec(ctx, sql, binaryUUIDs(args)...)
}

func (u uuidArgs) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return u.db.Query(ctx, sql, binaryUUIDs(args)...)
}

func (u uuidArgs) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return u.db.QueryRow(ctx, sql, binaryUUIDs(args)...)
}

// binaryUUIDs replaces the uuid.UUID and []uuid.UUID arguments of args (in place) by their pgtype
// forms, which hold the same ids.
func binaryUUIDs(args []any) []any {
	for i, a := range args {
		switch v := a.(type) {
		case uuid.UUID:
			args[i] = pgtype.UUID{Bytes: v, Valid: true}
		case []uuid.UUID:
			ids := make([]pgtype.UUID, len(v))
			for j, id := range v {
				ids[j] = pgtype.UUID{Bytes: id, Valid: true}
			}
			args[i] = ids
		}
	}
	return args
}
