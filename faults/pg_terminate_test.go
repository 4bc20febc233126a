package faults_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/testinfra"
)

// TestPostgresConnectionsKilledUnderWriteLoad terminates every service connection to PostgreSQL
// (pg_terminate_backend, as a failover or an operator would) over and over while operators write
// configs through the API.
//
// Setup: everything in-process, each service with its own pool (application_name svc-<name>), so the
// killer hits config-api, the relay (pool and LISTEN connection), resolver, credential and ack-ingest
// and spares the test's own pool. Five writers PUT environment configs and a host override; a killer
// first terminates every service backend, then a random one every few milliseconds until the writers
// are done. Two fake agents stay online.
//
// Proves: every request gets an answer that is either a success with a version or a clean error
// envelope (no SQL, no driver text); nothing is half-written: config_revisions and the outbox hold
// exactly one row per committed version each, every acknowledged version is among them, and every
// config row equals its newest revision; and every service recovers without a restart: writes succeed
// again, the relay publishes every outbox row, the resolver answers, delivery pushes and ack-ingest
// stores the acks, the credential service stores a credential.
func TestPostgresConnectionsKilledUnderWriteLoad(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startBackend(nil, nil)
	api := s.startAPI()
	ten := api.newTenant("pg-kill")
	hosts := api.registerHosts(ten.EnvID, "pg", 2)
	fakes := newFakeAgents(t, s.nc, hosts)
	s.bringOnline(fakes, hosts)
	ops := api.as(ten.Token)

	type target struct{ path, configType string }
	env := "/api/v1/environments/" + ten.EnvID + "/agent-configs/"
	targets := []target{
		{env + "healthcheck", "healthcheck"}, {env + "intervals", "intervals"}, {env + "tracing", "tracing"},
		{env + "log_shipping", "log_shipping"}, {"/api/v1/hosts/" + hosts[0].ID + "/agent-configs/labels", "labels"},
	}
	body := func(configType string, i int) string {
		switch configType {
		case "healthcheck":
			return fmt.Sprintf(`{"config_data":{"interval_seconds":%d,"timeout_seconds":1}}`, i+1)
		case "intervals":
			return fmt.Sprintf(`{"config_data":{"metrics":"%ds"}}`, i+1)
		case "tracing":
			return fmt.Sprintf(`{"config_data":{"enabled":true,"sample_ratio":%g}}`, float64(i%100)/100)
		case "log_shipping":
			return fmt.Sprintf(`{"config_data":{"enabled":%t,"level":"info"}}`, i%2 == 0)
		default:
			return fmt.Sprintf(`{"config_data":{"static":{"n":"%d"}}}`, i)
		}
	}

	killed := atomic.Int64{}
	// kill terminates up to limit random service connections (all of them with limit 0).
	kill := func(limit int) {
		var n int64
		err := s.db.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM (
			SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE $1
			ORDER BY random() LIMIT NULLIF($2, 0)) victims`, svcAppPrefix+"%", limit).Scan(&n)
		if err != nil {
			t.Errorf("pg_terminate_backend: %v", err)
		}
		killed.Add(n)
	}
	kill(0) // the pools are warm: this pass alone kills connections every service holds

	const perWriter = 25
	var (
		mu        sync.Mutex
		acked     = map[int64]string{} // version -> config type, from 200 answers
		failures  = map[string]int{}   // "status code" -> count
		writersWG sync.WaitGroup
		stop      = make(chan struct{})
		killerWG  sync.WaitGroup
	)
	killerWG.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond): // pacing of the fault, not an assertion
				kill(1)
			}
		}
	})
	for _, tg := range targets {
		writersWG.Go(func() {
			for i := range perWriter {
				r := ops.send(http.MethodPut, tg.path, body(tg.configType, i))
				mu.Lock()
				switch {
				case r.err != nil:
					t.Errorf("PUT %s got no answer: %v", tg.configType, r.err)
				case r.status == http.StatusOK:
					var out struct {
						Data struct{ Version int64 } `json:"data"`
					}
					if json.Unmarshal(r.body, &out) != nil || out.Data.Version <= 0 {
						t.Errorf("PUT %s: 200 without a version: %s", tg.configType, r)
					}
					acked[out.Data.Version] = tg.configType
				case r.status >= 500 && r.errorCode() != "":
					failures[fmt.Sprintf("%d %s", r.status, r.errorCode())]++
					if leaks(r.body) {
						t.Errorf("PUT %s: the error leaks internals: %s", tg.configType, r)
					}
				default:
					t.Errorf("PUT %s: neither a success nor a clean error: %s", tg.configType, r)
				}
				mu.Unlock()
			}
		})
	}
	writersWG.Wait()
	close(stop)
	killerWG.Wait()
	t.Logf("%d service connections terminated; %d writes acknowledged; failed cleanly: %v", killed.Load(), len(acked), failures)

	// Writes succeed again without restarting anything.
	var final int64
	testinfra.EventuallyNoError(t, 20*time.Second, func() error {
		r := ops.send(http.MethodPut, env+"healthcheck", `{"config_data":{"interval_seconds":99,"timeout_seconds":9}}`)
		if r.status != http.StatusOK {
			return errors.New(r.String())
		}
		var out struct {
			Data struct{ Version int64 } `json:"data"`
		}
		_ = json.Unmarshal(r.body, &out)
		final = out.Data.Version
		acked[final] = "healthcheck"
		return nil
	}, "a write to succeed after the connection kills")

	// Nothing half-written: one revision and one outbox row per committed version, configs at their
	// newest revision.
	revisions := s.int64Set(`SELECT version FROM config_revisions`)
	events := s.int64Set(`SELECT (payload->>'version')::bigint FROM outbox`)
	if n := s.count(`SELECT count(*) FROM config_revisions`); n != int64(len(revisions)) {
		t.Errorf("config_revisions has %d rows for %d versions", n, len(revisions))
	}
	if n := s.count(`SELECT count(*) FROM outbox`); n != int64(len(events)) {
		t.Errorf("outbox has %d rows for %d versions", n, len(events))
	}
	for v := range revisions {
		if !events[v] {
			t.Errorf("version %d has a revision but no outbox event", v)
		}
	}
	for v := range events {
		if !revisions[v] {
			t.Errorf("version %d has an outbox event but no revision", v)
		}
	}
	for v, typ := range acked {
		if !revisions[v] {
			t.Errorf("PUT %s answered version %d, which was not committed", typ, v)
		}
	}
	if n := s.count(`WITH latest AS (
			SELECT DISTINCT ON (scope, environment_id, host_id, config_type) scope, environment_id, host_id, config_type, version, new_data
			FROM config_revisions ORDER BY scope, environment_id, host_id, config_type, version DESC)
		SELECT count(*) FROM (
			SELECT 'environment' AS scope, environment_id, NULL::uuid AS host_id, config_type, version, config_data FROM environment_configs
			UNION ALL
			SELECT 'host', h.environment_id, c.host_id, c.config_type, c.version, c.config_data FROM host_configs c JOIN hosts h ON h.id = c.host_id
		) c LEFT JOIN latest l ON l.scope = c.scope AND l.environment_id = c.environment_id
			AND l.host_id IS NOT DISTINCT FROM c.host_id AND l.config_type = c.config_type
		WHERE l.version IS DISTINCT FROM c.version OR l.new_data IS DISTINCT FROM c.config_data`); n != 0 {
		t.Errorf("%d config rows differ from their newest revision", n)
	}

	// Every service recovered on its own.
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		n := s.count(`SELECT count(*) FROM outbox WHERE published_at IS NULL`)
		if n == 0 {
			return nil
		}
		return fmt.Errorf("%d rows unpublished", n)
	}, "the relay to publish every outbox row")
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		var out struct {
			Data struct{ Version int64 } `json:"data"`
		}
		r := ops.send(http.MethodGet, "/api/v1/hosts/"+hosts[1].ID+"/agent-configs/healthcheck", nil)
		_ = json.Unmarshal(r.body, &out)
		if r.status == http.StatusOK && out.Data.Version == final {
			return nil
		}
		return errors.New(r.String())
	}, "the resolver to answer with the final version")
	waitReceived(t, 30*time.Second, fakes, "healthcheck", final)
	s.waitApplied(30*time.Second, hosts, "healthcheck", final)
	testinfra.EventuallyNoError(t, 20*time.Second, func() error {
		r := ops.send(http.MethodPost, "/api/v1/clients/"+ten.ClientID+"/credentials",
			fmt.Sprintf(`{"name":"after-kill-%d","secret":{"password":"pw"}}`, time.Now().UnixNano()))
		if r.status/100 == 2 {
			return nil
		}
		return errors.New(r.String())
	}, "the credential service to store a credential")
}

// leaks reports whether an error body carries database or driver internals.
func leaks(body []byte) bool {
	b := strings.ToLower(string(body))
	for _, w := range []string{"sqlstate", "terminating connection", "pgx", "pgconn", "57p01", "conn closed", "unexpected eof", "postgres"} {
		if strings.Contains(b, w) {
			return true
		}
	}
	return false
}

// int64Set runs a query returning one bigint column and collects the values.
func (s *stack) int64Set(sql string) map[int64]bool {
	s.t.Helper()
	rows, err := s.db.Query(context.Background(), sql)
	if err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			s.t.Fatal(err)
		}
		out[v] = true
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// count runs a query returning one bigint.
func (s *stack) count(sql string, args ...any) int64 {
	s.t.Helper()
	var n int64
	if err := s.db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
	return n
}
