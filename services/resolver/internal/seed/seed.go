// Package seed writes clients, environments, hosts and config rows the way config-api does (every
// config write and delete takes its version from config_version_seq; a delete leaves a tombstone), for
// the resolver's tests and benchmarks. The resolver itself never writes.
package seed

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DB writes fixtures into one test database; any failure fails the test.
type DB struct {
	tb   testing.TB
	pool *pgxpool.Pool
}

// New returns a DB writing through pool.
func New(tb testing.TB, pool *pgxpool.Pool) *DB { return &DB{tb: tb, pool: pool} }

func (d *DB) scalar(dst any, sql string, args ...any) {
	d.tb.Helper()
	if err := d.pool.QueryRow(context.Background(), sql, args...).Scan(dst); err != nil {
		d.tb.Fatalf("seed: %s: %v", sql, err)
	}
}

func (d *DB) exec(sql string, args ...any) {
	d.tb.Helper()
	if _, err := d.pool.Exec(context.Background(), sql, args...); err != nil {
		d.tb.Fatalf("seed: %s: %v", sql, err)
	}
}

// Environment creates a client and an environment of it; it returns the environment id.
func (d *DB) Environment(name string) string {
	d.tb.Helper()
	var clientID, envID string
	d.scalar(&clientID, `INSERT INTO clients (name) VALUES ($1) RETURNING id::text`, "client-"+name)
	d.scalar(&envID, `INSERT INTO environments (client_id, name) VALUES ($1, $2) RETURNING id::text`, clientID, name)
	return envID
}

// ClientOf returns the client id of an environment.
func (d *DB) ClientOf(envID string) string {
	d.tb.Helper()
	var clientID string
	d.scalar(&clientID, `SELECT client_id::text FROM environments WHERE id = $1`, envID)
	return clientID
}

// Host registers a host in envID; it returns the host id.
func (d *DB) Host(envID, hostname, agentID string) string {
	d.tb.Helper()
	var hostID string
	d.scalar(&hostID, `INSERT INTO hosts (client_id, environment_id, hostname, agent_id)
		SELECT client_id, id, $2, $3 FROM environments WHERE id = $1 RETURNING id::text`, envID, hostname, agentID)
	return hostID
}

// Hosts registers n hosts named <prefix>-<i> with agent ids <prefix>-<i> in one statement.
func (d *DB) Hosts(envID, prefix string, n int) {
	d.tb.Helper()
	d.exec(`INSERT INTO hosts (client_id, environment_id, hostname, agent_id)
		SELECT e.client_id, e.id, $2 || '-' || i, $2 || '-' || i FROM environments e, generate_series(1, $3::int) i
		WHERE e.id = $1`, envID, prefix, n)
}

// Revoke revokes a host.
func (d *DB) Revoke(hostID string) {
	d.tb.Helper()
	d.exec(`UPDATE hosts SET revoked_at = now() WHERE id = $1`, hostID)
}

// Heartbeat sets a host's last heartbeat time.
func (d *DB) Heartbeat(hostID string, at time.Time) {
	d.tb.Helper()
	d.exec(`UPDATE hosts SET last_heartbeat_at = $2 WHERE id = $1`, hostID, at)
}

// PutEnv writes an environment default and returns its version.
func (d *DB) PutEnv(envID, configType, data string) int64 {
	d.tb.Helper()
	return d.put("environment_configs", "environment_id", envID, configType, data)
}

// DeleteEnv turns an environment default into a tombstone and returns the tombstone's version.
func (d *DB) DeleteEnv(envID, configType string) int64 {
	d.tb.Helper()
	return d.delete("environment_configs", "environment_id", envID, configType)
}

// PutHost writes a host override and returns its version.
func (d *DB) PutHost(hostID, configType, data string) int64 {
	d.tb.Helper()
	return d.put("host_configs", "host_id", hostID, configType, data)
}

// DeleteHost turns a host override into a tombstone and returns the tombstone's version.
func (d *DB) DeleteHost(hostID, configType string) int64 {
	d.tb.Helper()
	return d.delete("host_configs", "host_id", hostID, configType)
}

// put upserts a config row of table (keyed by key = id and the type) and returns its version.
func (d *DB) put(table, key, id, configType, data string) int64 {
	d.tb.Helper()
	var v int64
	d.scalar(&v, `INSERT INTO `+table+` (`+key+`, config_type, config_data, version)
		VALUES ($1, $2, $3::jsonb, nextval('config_version_seq'))
		ON CONFLICT (`+key+`, config_type) DO UPDATE
		SET config_data = EXCLUDED.config_data, version = EXCLUDED.version, deleted_at = NULL, updated_at = now()
		RETURNING version`, id, configType, data)
	return v
}

// delete turns a config row of table into a tombstone and returns the tombstone's version.
func (d *DB) delete(table, key, id, configType string) int64 {
	d.tb.Helper()
	var v int64
	d.scalar(&v, `UPDATE `+table+`
		SET config_data = NULL, deleted_at = now(), version = nextval('config_version_seq'), updated_at = now()
		WHERE `+key+` = $1 AND config_type = $2 RETURNING version`, id, configType)
	return v
}

// OverrideEvery writes the same override of configType for every n-th host (by host id order) of
// envID in one statement; it returns how many it wrote.
func (d *DB) OverrideEvery(envID, configType, data string, n int) int64 {
	d.tb.Helper()
	tag, err := d.pool.Exec(context.Background(), `INSERT INTO host_configs (host_id, config_type, config_data, version)
		SELECT id, $2, $3::jsonb, nextval('config_version_seq') FROM (
			SELECT id, row_number() OVER (ORDER BY id) AS rn FROM hosts WHERE environment_id = $1) h
		WHERE h.rn % $4 = 0`, envID, configType, data, n)
	if err != nil {
		d.tb.Fatalf("seed: overrides: %v", err)
	}
	return tag.RowsAffected()
}

// Analyze refreshes planner statistics after bulk inserts.
func (d *DB) Analyze() {
	d.tb.Helper()
	d.exec(`ANALYZE hosts, host_configs, environment_configs`)
}
