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

// agentIDTrigger returns the columns an UPDATE must set for hosts' agent id trigger to run, and the
// events it runs on, or ok false when there is no such trigger.
func agentIDTrigger(t *testing.T, pool *pgxpool.Pool) (columns []string, insert, update, ok bool) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT ARRAY(SELECT a.attname::text FROM unnest(tg.tgattr) AS k(attnum)
			JOIN pg_attribute a ON a.attrelid = tg.tgrelid AND a.attnum = k.attnum),
		(tg.tgtype & 4) <> 0, (tg.tgtype & 16) <> 0
		FROM pg_trigger tg WHERE tg.tgrelid = 'hosts'::regclass AND tg.tgname = 'hosts_agent_id_chars'`).Scan(&columns, &insert, &update)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, false, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return columns, insert, update, true
}

// TestAgentIDCheckIsValidAgentID: hosts.agent_id's rule (a trigger since migration 00018, run only when
// agent_id is written) accepts and refuses exactly the ids protocol.ValidAgentID does, on INSERT and on
// an UPDATE that sets agent_id, and no CHECK on agent_id is left for every other UPDATE to evaluate.
func TestAgentIDCheckIsValidAgentID(t *testing.T) {
	pool := testinfra.Postgres(t)
	ctx := context.Background()
	seed.Hosts(t, pool, 1)
	if checks := agentIDChecks(t, pool); len(checks) != 0 {
		t.Fatalf("agent_id checks = %v, want none (the rule is a trigger)", checks)
	}
	columns, insert, update, ok := agentIDTrigger(t, pool)
	if !ok || !insert || !update || len(columns) != 1 || columns[0] != "agent_id" {
		t.Fatalf("agent id trigger: found %v, insert %v, update %v of %v; want INSERT OR UPDATE OF agent_id", ok, insert, update, columns)
	}
	checkAgentIDs(t, pool, "hosts_agent_id_chars")

	// An UPDATE that sets agent_id runs the rule; one that does not (a heartbeat) writes the row.
	var hostID string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM hosts WHERE agent_id = 'agent-0'`).Scan(&hostID); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, `UPDATE hosts SET agent_id = 'agent.0' WHERE id = $1`, hostID)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "hosts_agent_id_chars" ||
		pgErr.TableName != "hosts" || pgErr.ColumnName != "agent_id" {
		t.Fatalf("UPDATE to agent id %q: %v, want a check violation of hosts_agent_id_chars", "agent.0", err)
	}
	if strings.Contains(pgErr.Message+pgErr.Detail, "agent.0") {
		t.Errorf("the refusal names the refused value: %q %q", pgErr.Message, pgErr.Detail)
	}
	if _, err := pool.Exec(ctx, `UPDATE hosts SET agent_id = 'agent-0b' WHERE id = $1`, hostID); err != nil {
		t.Fatalf("UPDATE to a valid agent id: %v", err)
	}
	tag, err := pool.Exec(ctx, `UPDATE hosts SET last_heartbeat_at = now(), config_hash = 'x' WHERE id = $1`, hostID)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("heartbeat-like UPDATE: %v (%d rows)", err, tag.RowsAffected())
	}
	// NOT NULL still reports a missing agent id as itself.
	_, err = pool.Exec(ctx, `UPDATE hosts SET agent_id = NULL WHERE id = $1`, hostID)
	if !errors.As(err, &pgErr) || pgErr.Code != "23502" {
		t.Fatalf("UPDATE to a NULL agent id: %v, want a not-null violation", err)
	}
}

// migrationSections returns the Up and Down sections of a migration file.
func migrationSections(t *testing.T, name string) (up, down string) {
	t.Helper()
	src, err := fs.ReadFile(migrations.FS, name)
	if err != nil {
		t.Fatal(err)
	}
	up, down, ok := strings.Cut(string(src), "-- +goose Down")
	if !ok {
		t.Fatalf("%s has no Down section", name)
	}
	return up, down
}

// TestAgentIDCheckMigrationDown: 00018's Down restores the CHECK of 00017 and 00017's Down the regex
// CHECK, each giving the same answers, on a table that holds hosts (the constraints are validated
// against them); each section runs again after itself, and Up applies again after Down.
func TestAgentIDCheckMigrationDown(t *testing.T) {
	pool := testinfra.Postgres(t)
	ctx := context.Background()
	seed.Hosts(t, pool, 50)
	up17, down17 := migrationSections(t, "00017_agent_id_check_without_regex.sql")
	up18, down18 := migrationSections(t, "00018_agent_id_rule_on_write.sql")
	exec := func(what, sql string) {
		t.Helper()
		for i := range 2 { // every section must be re-runnable
			if _, err := pool.Exec(ctx, sql); err != nil {
				t.Fatalf("%s (run %d): %v", what, i+1, err)
			}
		}
	}

	exec("00018 down", down18)
	if checks := agentIDChecks(t, pool); len(checks) != 1 || checks["hosts_agent_id_chars"] == "" || strings.Contains(checks["hosts_agent_id_chars"], "~") {
		t.Fatalf("after 00018 down, agent_id checks = %v, want hosts_agent_id_chars alone, without a regex", checks)
	}
	if _, _, _, ok := agentIDTrigger(t, pool); ok {
		t.Fatal("after 00018 down, the agent id trigger is still there")
	}
	checkAgentIDs(t, pool, "hosts_agent_id_chars")

	exec("00017 down", down17)
	if checks := agentIDChecks(t, pool); len(checks) != 1 || !strings.Contains(checks["hosts_agent_id_check"], "~") {
		t.Fatalf("after 00017 down, agent_id checks = %v, want the regex hosts_agent_id_check alone", checks)
	}
	checkAgentIDs(t, pool, "hosts_agent_id_check")

	exec("00017 up", up17)
	exec("00018 up", up18)
	if checks := agentIDChecks(t, pool); len(checks) != 0 {
		t.Fatalf("after up, agent_id checks = %v, want none", checks)
	}
	if _, _, _, ok := agentIDTrigger(t, pool); !ok {
		t.Fatal("after up, no agent id trigger")
	}
	checkAgentIDs(t, pool, "hosts_agent_id_chars")
}
