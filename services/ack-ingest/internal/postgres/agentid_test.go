package postgres

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/db/migrations"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/ack-ingest/internal/seed"
)

// agentIDCases are the ids both sides must agree on: edges of the length rule, every kind of allowed
// character, and characters a regex-free rule could let through by mistake (non-ASCII letters and
// digits, NATS subject tokens, whitespace, quotes, translate's own syntax).
func agentIDCases() []string {
	cases := []string{
		"a", "Z", "0", "_", "-", "agent-0", "web_01-prod", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz",
		"0123456789", "--__--", strings.Repeat("x", 127), strings.Repeat("x", 128), strings.Repeat("Az09_-", 21) + "xy",
		"", strings.Repeat("x", 129), strings.Repeat("Az09_-", 22),
		"agent.1", "agent*", "agent>", ">", "*", ".", "a b", " a", "a\t", "a\n", "a/b", "a\\b", "a'b", `a"b`, "a%", "a$",
		"a,b", "a:b", "a+b", "a=b", "é", "agenté", "Ünïcode", "ß", "İ", "ａ", "١٢٣", "𝔞", "日本", "a\u00a0", "a\u200b",
		strings.Repeat("é", 64), strings.Repeat("x", 127) + "é",
	}
	// Random strings over an alphabet that mixes allowed and refused characters, of lengths around the
	// bounds.
	alphabet := []rune("aZ09_-.*> é\u00e9\u0301ß日")
	r := rand.New(rand.NewPCG(19, 17))
	for range 200 {
		n := r.IntN(8)
		if r.IntN(4) == 0 {
			n = 125 + r.IntN(6)
		}
		var b strings.Builder
		for range n {
			if r.IntN(3) == 0 {
				b.WriteRune(alphabet[r.IntN(len(alphabet))])
			} else {
				b.WriteRune(alphabet[r.IntN(6)])
			}
		}
		cases = append(cases, b.String())
	}
	return cases
}

// checkAgentIDs inserts a host for each case and compares what the database accepts with
// protocol.ValidAgentID; a refusal must be the agent_id CHECK named constraint. The hosts go to the
// client and environment of the seeded hosts.
func checkAgentIDs(t *testing.T, pool *pgxpool.Pool, constraint string) {
	t.Helper()
	ctx := context.Background()
	var clientID, envID string
	if err := pool.QueryRow(ctx, `SELECT client_id::text, environment_id::text FROM hosts LIMIT 1`).Scan(&clientID, &envID); err != nil {
		t.Fatal(err)
	}
	accepted, refused := 0, 0
	for i, id := range agentIDCases() {
		_, err := pool.Exec(ctx, `INSERT INTO hosts (client_id, environment_id, hostname, agent_id) VALUES ($1, $2, 'h-' || $3::int, $4)
			ON CONFLICT (agent_id) DO NOTHING`, clientID, envID, i, id)
		want := protocol.ValidAgentID(id)
		if err == nil {
			accepted++
			if !want {
				t.Errorf("agent id %q (%d bytes): the database accepted it, ValidAgentID refuses it", id, len(id))
			}
			continue
		}
		refused++
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != constraint {
			t.Errorf("agent id %q: %v, want a violation of %s", id, err, constraint)
		}
		if want {
			t.Errorf("agent id %q (%d bytes): the database refused it, ValidAgentID accepts it", id, len(id))
		}
	}
	if accepted < 20 || refused < 40 {
		t.Fatalf("cases are lopsided: %d accepted, %d refused", accepted, refused)
	}
}

// agentIDChecks returns the CHECK constraints of hosts that mention agent_id, by name.
func agentIDChecks(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = 'hosts'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%agent_id%'`)
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string]string{}
	var name, def string
	if _, err := pgx.ForEachRow(rows, []any{&name, &def}, func() error { checks[name] = def; return nil }); err != nil {
		t.Fatal(err)
	}
	return checks
}

// TestAgentIDCheckIsValidAgentID: the hosts.agent_id CHECK without a regex (migration 00017) accepts
// and refuses exactly the ids protocol.ValidAgentID does, and is the only CHECK on agent_id.
func TestAgentIDCheckIsValidAgentID(t *testing.T) {
	pool := testinfra.Postgres(t)
	seed.Hosts(t, pool, 1)
	checks := agentIDChecks(t, pool)
	if len(checks) != 1 || checks["hosts_agent_id_chars"] == "" || strings.Contains(checks["hosts_agent_id_chars"], "~") {
		t.Fatalf("agent_id checks = %v, want hosts_agent_id_chars alone, without a regex", checks)
	}
	checkAgentIDs(t, pool, "hosts_agent_id_chars")
}

// TestAgentIDCheckMigrationDown: 00017's Down restores the regex CHECK, which gives the same answers, on
// a table that holds hosts (the constraint is validated against them), and Up applies again after it.
func TestAgentIDCheckMigrationDown(t *testing.T) {
	pool := testinfra.Postgres(t)
	ctx := context.Background()
	seed.Hosts(t, pool, 50)
	src, err := fs.ReadFile(migrations.FS, "00017_agent_id_check_without_regex.sql")
	if err != nil {
		t.Fatal(err)
	}
	up, down, ok := strings.Cut(string(src), "-- +goose Down")
	if !ok {
		t.Fatal("00017 has no Down section")
	}
	if _, err := pool.Exec(ctx, down); err != nil {
		t.Fatalf("down: %v", err)
	}
	checks := agentIDChecks(t, pool)
	if len(checks) != 1 || !strings.Contains(checks["hosts_agent_id_check"], "~") {
		t.Fatalf("after down, agent_id checks = %v, want the regex hosts_agent_id_check alone", checks)
	}
	if _, err := pool.Exec(ctx, down); err != nil {
		t.Fatalf("down again (it must be re-runnable): %v", err)
	}
	checkAgentIDs(t, pool, "hosts_agent_id_check")
	if _, err := pool.Exec(ctx, up); err != nil {
		t.Fatalf("up: %v", err)
	}
	if _, err := pool.Exec(ctx, up); err != nil {
		t.Fatalf("up again (it must be re-runnable): %v", err)
	}
	if checks := agentIDChecks(t, pool); len(checks) != 1 || checks["hosts_agent_id_chars"] == "" {
		t.Fatalf("after up, agent_id checks = %v", checks)
	}
}
