package faults_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/configsync/configsync/libs/testinfra"
)

// snapshotQueries digest every table (and the version sequence) of the schema. api_tokens leaves out
// last_used_at, which every authenticated request may touch.
var snapshotQueries = map[string]string{
	"clients":                  `SELECT * FROM clients`,
	"environments":             `SELECT * FROM environments`,
	"hosts":                    `SELECT * FROM hosts`,
	"environment_configs":      `SELECT * FROM environment_configs`,
	"host_configs":             `SELECT * FROM host_configs`,
	"config_revisions":         `SELECT * FROM config_revisions`,
	"credentials":              `SELECT * FROM credentials`,
	"host_config_apply_status": `SELECT * FROM host_config_apply_status`,
	"api_tokens":               `SELECT id, name, token_hash, client_id, created_at, revoked_at FROM api_tokens`,
	"audit_events":             `SELECT * FROM audit_events`,
	"outbox":                   `SELECT * FROM outbox`,
	"config_version_seq":       `SELECT last_value, is_called FROM config_version_seq`,
}

// dbSnapshot is a digest per table.
type dbSnapshot map[string]string

// snapshot digests the database, leaving out the tables named in except.
func (s *stack) snapshot(except ...string) dbSnapshot {
	s.t.Helper()
	out := dbSnapshot{}
	for name, q := range snapshotQueries {
		if slices.Contains(except, name) {
			continue
		}
		var digest string
		sql := `SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) || ':' || count(*) FROM (` + q + `) x`
		if err := s.db.QueryRow(context.Background(), sql).Scan(&digest); err != nil {
			s.t.Fatalf("snapshot %s: %v", name, err)
		}
		out[name] = digest
	}
	return out
}

// diff names the tables whose digest differs.
func (a dbSnapshot) diff(b dbSnapshot) string {
	var changed []string
	for name, d := range a {
		if b[name] != d {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	return strings.Join(changed, ", ")
}

// settle waits until the relay has published every outbox row, so the outbox stops changing.
func (s *stack) settle() {
	s.t.Helper()
	testinfra.EventuallyNoError(s.t, 20*time.Second, func() error {
		n := s.count(`SELECT count(*) FROM outbox WHERE published_at IS NULL`)
		if n == 0 {
			return nil
		}
		return fmt.Errorf("%d unpublished", n)
	}, "the relay to publish every outbox row")
}
