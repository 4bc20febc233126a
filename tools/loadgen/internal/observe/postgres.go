package observe

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres reads the tables ack-ingest writes (hosts, host_config_apply_status). Read-only.
type Postgres struct {
	pool *pgxpool.Pool
}

// NewPostgres connects to the ConfigSync database at url (two connections at most: loadgen must not
// compete with the services for the database).
func NewPostgres(ctx context.Context, url string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("observe: database url: %w", err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("observe: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("observe: connect: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

// Name implements Observer.
func (p *Postgres) Name() string { return "postgres" }

// Close implements Observer.
func (p *Postgres) Close() { p.pool.Close() }

// Online implements Observer.
func (p *Postgres) Online(ctx context.Context, environmentID string, since time.Time) (int, error) {
	var n int
	err := p.pool.QueryRow(ctx,
		`SELECT count(*) FROM hosts WHERE environment_id = $1 AND last_heartbeat_at >= $2`,
		environmentID, since).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("observe: online hosts: %w", err)
	}
	return n, nil
}

// Acks implements Observer.
func (p *Postgres) Acks(ctx context.Context, environmentID, configType string, version int64) (AckProgress, error) {
	var out AckProgress
	var last *time.Time
	err := p.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE s.status = 'applied'),
       count(*) FILTER (WHERE s.status = 'failed'),
       max(s.updated_at)
FROM host_config_apply_status s
JOIN hosts h ON h.id = s.host_id
WHERE h.environment_id = $1 AND s.config_type = $2 AND s.version >= $3`,
		environmentID, configType, version).Scan(&out.Applied, &out.Failed, &last)
	if err != nil {
		return out, fmt.Errorf("observe: acks: %w", err)
	}
	if last != nil {
		out.Last = *last
	}
	return out, nil
}

// AckTimes implements Observer: updated_at is the time of ack-ingest's write transaction.
func (p *Postgres) AckTimes(ctx context.Context, environmentID, configType string, version int64) ([]time.Time, error) {
	rows, err := p.pool.Query(ctx, `
SELECT s.updated_at
FROM host_config_apply_status s
JOIN hosts h ON h.id = s.host_id
WHERE h.environment_id = $1 AND s.config_type = $2 AND s.version >= $3`,
		environmentID, configType, version)
	if err != nil {
		return nil, fmt.Errorf("observe: ack times: %w", err)
	}
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var t time.Time
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("observe: ack times: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// HeartbeatSeqSum implements Observer.
func (p *Postgres) HeartbeatSeqSum(ctx context.Context, environmentID string) (int64, error) {
	var n int64
	err := p.pool.QueryRow(ctx, `
SELECT coalesce(sum(substring(agent_version FROM '\+hb\.([0-9]+)$')::bigint), 0)::bigint
FROM hosts WHERE environment_id = $1`, environmentID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("observe: heartbeat sequence: %w", err)
	}
	return n, nil
}

// Analyze refreshes the planner statistics of the hosts table. Right after thousands of hosts are
// registered at once the table has none until autovacuum's next pass, and the resolver's host pages
// then run as scans of the whole environment (see README); a fleet that grew over time has them.
func (p *Postgres) Analyze(ctx context.Context) error {
	if _, err := p.pool.Exec(ctx, "ANALYZE hosts"); err != nil {
		return fmt.Errorf("observe: analyze hosts: %w", err)
	}
	return nil
}
