package configapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
)

// rotationFixture is what the credential re-announce tests rotate and delete credentials under:
//
//   - tenant a: credential cred, referenced by a's environment collectors config and by a collectors
//     override of a.host; credential other, referenced by the override of a second host; a "staging"
//     environment whose collectors reference no credential; a revoked host whose override references cred.
//   - tenant b: its environment collectors and host override reference cred's id too (another client's
//     configs must never be touched).
type rotationFixture struct {
	h           *harness
	a, b        tenant
	cred, other uuid.UUID
	host2       uuid.UUID // a's host whose override references other
	revoked     uuid.UUID // a's revoked host whose override references cred
	staging     uuid.UUID // a's environment whose collectors reference nothing
}

// configKey names one config row of the fixture.
type configKey struct {
	scope string    // protocol.ScopeEnvironment or protocol.ScopeHost
	id    uuid.UUID // environment or host id
}

// storedConfig is a collectors row as stored.
type storedConfig struct {
	version int64
	data    string
}

func mysqlCollectors(name string, credID uuid.UUID) map[string]any {
	return map[string]any{"config_data": []map[string]any{{
		"type": "mysql", "name": name, "host": "db.internal", "port": 3306, "credential_id": credID.String(),
	}}}
}

func newRotationFixture(t *testing.T) *rotationFixture {
	t.Helper()
	h := newHarness(t)
	f := &rotationFixture{h: h, a: h.newTenant("acme"), b: h.newTenant("globex")}
	f.cred = f.createCredential(f.a, "mysql-main", "s3cret-1")
	f.other = f.createCredential(f.a, "mysql-replica", "replica-1")

	var e, host2, revoked idObj
	h.must(201, "POST", "/api/v1/clients/"+f.a.client.String()+"/environments", f.a.token, map[string]any{"name": "staging"}).data(t, &e)
	f.staging = e.ID
	h.must(201, "POST", "/api/v1/environments/"+f.a.env.String()+"/hosts", f.a.token, map[string]any{"hostname": "acme-db-2"}).data(t, &host2)
	f.host2 = host2.ID
	h.must(201, "POST", "/api/v1/environments/"+f.a.env.String()+"/hosts", f.a.token, map[string]any{"hostname": "acme-old-1"}).data(t, &revoked)
	f.revoked = revoked.ID

	h.must(200, "PUT", envConfigPath(f.a.env, "collectors"), f.a.token, mysqlCollectors("main", f.cred))
	h.must(200, "PUT", hostConfigPath(f.a.host, "collectors"), f.a.token, mysqlCollectors("main", f.cred))
	h.must(200, "PUT", hostConfigPath(f.host2, "collectors"), f.a.token, mysqlCollectors("replica", f.other))
	h.must(200, "PUT", hostConfigPath(f.revoked, "collectors"), f.a.token, mysqlCollectors("main", f.cred))
	h.must(200, "DELETE", "/api/v1/hosts/"+f.revoked.String(), f.a.token, nil)
	h.must(200, "PUT", envConfigPath(f.staging, "collectors"), f.a.token, map[string]any{"config_data": []map[string]any{{
		"type": "http", "name": "health", "url": "http://localhost:8080/healthz",
	}}})
	h.must(200, "PUT", envConfigPath(f.b.env, "collectors"), f.b.token, mysqlCollectors("main", f.cred))
	h.must(200, "PUT", hostConfigPath(f.b.host, "collectors"), f.b.token, mysqlCollectors("main", f.cred))
	return f
}

func (f *rotationFixture) createCredential(tn tenant, name, password string) uuid.UUID {
	f.h.t.Helper()
	var c idObj
	f.h.must(201, "POST", credentialsPath(tn.client), tn.token, map[string]any{
		"name": name, "secret": map[string]string{"username": "monitor", "password": password},
	}).data(f.h.t, &c)
	return c.ID
}

func (f *rotationFixture) credPath(id uuid.UUID) string {
	return credentialsPath(f.a.client) + "/" + id.String()
}

// collectors returns every collectors row (tombstones included) of both tenants.
func (f *rotationFixture) collectors() map[configKey]storedConfig {
	f.h.t.Helper()
	rows, err := f.h.pool.Query(f.h.t.Context(), `
		SELECT 'environment', environment_id, version, coalesce(config_data::text, '') FROM environment_configs WHERE config_type = 'collectors'
		UNION ALL
		SELECT 'host', host_id, version, coalesce(config_data::text, '') FROM host_configs WHERE config_type = 'collectors'`)
	if err != nil {
		f.h.t.Fatal(err)
	}
	defer rows.Close()
	out := map[configKey]storedConfig{}
	for rows.Next() {
		var k configKey
		var c storedConfig
		if err := rows.Scan(&k.scope, &k.id, &c.version, &c.data); err != nil {
			f.h.t.Fatal(err)
		}
		out[k] = c
	}
	if err := rows.Err(); err != nil {
		f.h.t.Fatal(err)
	}
	return out
}

func (f *rotationFixture) maxVersion() int64 {
	f.h.t.Helper()
	var v int64
	if err := f.h.pool.QueryRow(f.h.t.Context(), `SELECT greatest(
		(SELECT coalesce(max(version), 0) FROM environment_configs),
		(SELECT coalesce(max(version), 0) FROM host_configs))`).Scan(&v); err != nil {
		f.h.t.Fatal(err)
	}
	return v
}

func (f *rotationFixture) lastOutboxID() int64 {
	f.h.t.Helper()
	return int64(f.h.count(`SELECT coalesce(max(id), 0)::int FROM outbox`))
}

// eventsSince returns the ConfigChanged events queued after outbox row id.
func (f *rotationFixture) eventsSince(id int64) []protocol.ConfigChanged {
	f.h.t.Helper()
	rows, err := f.h.pool.Query(f.h.t.Context(), `SELECT subject, payload FROM outbox WHERE id > $1 ORDER BY id`, id)
	if err != nil {
		f.h.t.Fatal(err)
	}
	defer rows.Close()
	var out []protocol.ConfigChanged
	for rows.Next() {
		var subject string
		var payload []byte
		if err := rows.Scan(&subject, &payload); err != nil {
			f.h.t.Fatal(err)
		}
		if subject != protocol.ConfigChangedSubject {
			f.h.t.Fatalf("outbox subject %q", subject)
		}
		var ev protocol.ConfigChanged
		if err := json.Unmarshal(payload, &ev); err != nil {
			f.h.t.Fatal(err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		f.h.t.Fatal(err)
	}
	return out
}

// revision is one config_revisions row.
type revision struct {
	scope, action, actor string
	version              int64
	oldData, newData     string
}

func (f *rotationFixture) revisionsSince(id int64) []revision {
	f.h.t.Helper()
	rows, err := f.h.pool.Query(f.h.t.Context(), `
		SELECT scope, action, actor, version, coalesce(old_data::text, ''), coalesce(new_data::text, '')
		FROM config_revisions WHERE id > $1 ORDER BY id`, id)
	if err != nil {
		f.h.t.Fatal(err)
	}
	defer rows.Close()
	var out []revision
	for rows.Next() {
		var r revision
		if err := rows.Scan(&r.scope, &r.action, &r.actor, &r.version, &r.oldData, &r.newData); err != nil {
			f.h.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		f.h.t.Fatal(err)
	}
	return out
}

func (f *rotationFixture) lastRevisionID() int64 {
	f.h.t.Helper()
	return int64(f.h.count(`SELECT coalesce(max(id), 0)::int FROM config_revisions`))
}

// checkReannounced asserts that exactly a's environment collectors and a.host's override were given new
// versions (newer than every version before) with unchanged data, each with one 'put' revision by actor
// and one ConfigChanged event, and that every other collectors row is untouched.
func (f *rotationFixture) checkReannounced(before, after map[configKey]storedConfig, maxBefore, outboxBefore, revBefore int64, actor string) {
	t := f.h.t
	t.Helper()
	envKey := configKey{protocol.ScopeEnvironment, f.a.env}
	hostKey := configKey{protocol.ScopeHost, f.a.host}
	for k, b := range before {
		a := after[k]
		if a.data != b.data {
			t.Fatalf("%s %s: data changed from %s to %s", k.scope, k.id, b.data, a.data)
		}
		switch k {
		case envKey, hostKey:
			if a.version <= maxBefore {
				t.Fatalf("%s %s: version %d, want one newer than every earlier version (%d)", k.scope, k.id, a.version, maxBefore)
			}
		default:
			if a.version != b.version {
				t.Fatalf("%s %s: version moved from %d to %d although it does not reference the credential", k.scope, k.id, b.version, a.version)
			}
		}
	}
	if len(after) != len(before) {
		t.Fatalf("%d collectors rows, want %d", len(after), len(before))
	}

	events := f.eventsSince(outboxBefore)
	if len(events) != 2 {
		t.Fatalf("%d events queued, want 2 (environment and host override): %+v", len(events), events)
	}
	seen := map[string]bool{}
	for _, ev := range events {
		seen[ev.Scope] = true
		if ev.ConfigType != "collectors" || ev.Deleted || ev.ClientID != f.a.client.String() ||
			ev.EnvironmentID != f.a.env.String() || ev.Actor != actor || ev.EventID == "" {
			t.Fatalf("event %+v", ev)
		}
		switch ev.Scope {
		case protocol.ScopeEnvironment:
			if ev.Version != after[envKey].version || ev.HostID != "" {
				t.Fatalf("environment event %+v, row version %d", ev, after[envKey].version)
			}
		case protocol.ScopeHost:
			if ev.Version != after[hostKey].version || ev.HostID != f.a.host.String() || ev.AgentID != f.a.agentID {
				t.Fatalf("host event %+v, row version %d", ev, after[hostKey].version)
			}
		}
	}
	if !seen[protocol.ScopeEnvironment] || !seen[protocol.ScopeHost] {
		t.Fatalf("events %+v, want one per scope", events)
	}

	revs := f.revisionsSince(revBefore)
	if len(revs) != 2 {
		t.Fatalf("%d revisions, want 2: %+v", len(revs), revs)
	}
	for _, r := range revs {
		key := envKey
		if r.scope == protocol.ScopeHost {
			key = hostKey
		}
		if r.action != "put" || r.actor != actor || r.version != after[key].version ||
			r.oldData != before[key].data || r.newData != before[key].data {
			t.Fatalf("revision %+v", r)
		}
	}
}

// TestCredentialRotationReannouncesReferencingConfigs: a new secret re-announces every live collectors
// config of the client that references the credential (environment default and host override) with a new
// version and the same data, in one transaction, one revision and one event each; the effective config
// shows the new version; configs that do not reference it, a revoked host's override and another
// client's configs are untouched; the credential service injects the new secret.
func TestCredentialRotationReannouncesReferencingConfigs(t *testing.T) {
	t.Parallel()
	f := newRotationFixture(t)
	h := f.h
	var eff effective
	h.must(200, "GET", hostConfigPath(f.a.host, "collectors"), f.a.token, nil).data(t, &eff)
	effBefore := eff.Version

	before, maxBefore, outboxBefore, revBefore := f.collectors(), f.maxVersion(), f.lastOutboxID(), f.lastRevisionID()
	var meta struct {
		ID     uuid.UUID `json:"id"`
		Fields []string  `json:"fields"`
	}
	h.must(200, "POST", f.credPath(f.cred)+"/rotate", f.a.token,
		map[string]any{"secret": map[string]string{"username": "monitor", "password": "s3cret-2"}}).data(t, &meta)
	if meta.ID != f.cred {
		t.Fatalf("rotate answered %+v", meta)
	}
	after := f.collectors()
	f.checkReannounced(before, after, maxBefore, outboxBefore, revBefore, "acme-ops (credential rotation "+f.cred.String()+")")

	// The effective config (max of both levels) now has the newest version.
	envKey, hostKey := configKey{protocol.ScopeEnvironment, f.a.env}, configKey{protocol.ScopeHost, f.a.host}
	r := h.must(200, "GET", hostConfigPath(f.a.host, "collectors"), f.a.token, nil)
	r.data(t, &eff)
	if want := max(after[envKey].version, after[hostKey].version); eff.Version != want || eff.Version <= effBefore {
		t.Fatalf("effective version %d (was %d), want %d", eff.Version, effBefore, want)
	}
	if r.header.Get("ETag") != fmt.Sprintf("%q", fmt.Sprint(eff.Version)) {
		t.Fatalf("ETag %q for version %d", r.header.Get("ETag"), eff.Version)
	}
	if pw := h.inject(f.a, f.cred.String()); pw != "s3cret-2" {
		t.Fatal("the credential service does not inject the new secret")
	}

	var detail string
	if err := h.pool.QueryRow(t.Context(), `SELECT detail->>'reannounced_configs' FROM audit_events
		WHERE action = 'credential_rotated' ORDER BY id DESC LIMIT 1`).Scan(&detail); err != nil || detail != "2" {
		t.Fatalf("audit detail reannounced_configs = %q (%v), want 2", detail, err)
	}
	h.noLogContains("s3cret-2")
}

// TestCredentialReencryptionReannouncesNothing: a rotate without a new secret only re-encrypts under the
// newest key; agents would receive the same plaintext, so no config is re-versioned.
func TestCredentialReencryptionReannouncesNothing(t *testing.T) {
	t.Parallel()
	f := newRotationFixture(t)
	before, outboxBefore, revBefore := f.collectors(), f.lastOutboxID(), f.lastRevisionID()
	f.h.must(200, "POST", f.credPath(f.cred)+"/rotate", f.a.token, nil)
	f.h.must(200, "POST", f.credPath(f.cred)+"/rotate", f.a.token, `{"secret": {}}`)
	f.checkUntouched(before, outboxBefore, revBefore)
	if pw := f.h.inject(f.a, f.cred.String()); pw != "s3cret-1" {
		t.Fatal("re-encryption changed the secret")
	}
}

// TestCredentialDeletionReannounces: a forced delete of a credential that configs reference deletes it and
// re-announces the configs that reference it (their pushes then fail, all-or-nothing), audited as forced;
// deleting it again answers 404 but re-announces once more (a retry after a failed re-announce is safe,
// with or without force: a credential that is gone is not in use).
func TestCredentialDeletionReannounces(t *testing.T) {
	t.Parallel()
	f := newRotationFixture(t)
	actor := "acme-ops (credential deletion " + f.cred.String() + ")"

	before, maxBefore, outboxBefore, revBefore := f.collectors(), f.maxVersion(), f.lastOutboxID(), f.lastRevisionID()
	f.h.must(204, "DELETE", f.credPath(f.cred)+"?force=true", f.a.token, nil)
	after := f.collectors()
	f.checkReannounced(before, after, maxBefore, outboxBefore, revBefore, actor)
	var reannounced, forced string
	if err := f.h.pool.QueryRow(t.Context(), `SELECT detail->>'reannounced_configs', detail->>'forced' FROM audit_events
		WHERE action = 'credential_deleted' ORDER BY id DESC LIMIT 1`).Scan(&reannounced, &forced); err != nil ||
		reannounced != "2" || forced != "true" {
		t.Fatalf("audit detail reannounced_configs = %q, forced = %q (%v); want 2, true", reannounced, forced, err)
	}
	f.h.must(404, "GET", f.credPath(f.cred), f.a.token, nil)

	for _, query := range []string{"?force=true", ""} {
		before, maxBefore, outboxBefore, revBefore = after, f.maxVersion(), f.lastOutboxID(), f.lastRevisionID()
		if code := f.h.must(404, "DELETE", f.credPath(f.cred)+query, f.a.token, nil).errCode(t); code != "not_found" {
			t.Fatalf("second delete%s: code %q", query, code)
		}
		after = f.collectors()
		f.checkReannounced(before, after, maxBefore, outboxBefore, revBefore, actor)
	}
}

// TestCredentialRotationRetryAfterFailedReannounce: when the re-announce fails after the credential
// service rotated the secret, the API says so (503 agents_not_updated) and writes nothing; rotating again
// with the same secret keeps the secret and re-announces.
func TestCredentialRotationRetryAfterFailedReannounce(t *testing.T) {
	t.Parallel()
	f := newRotationFixture(t)
	h := f.h
	// Fail the re-announce's write of the host override (after the environment row was written, so the
	// transaction must roll that back too).
	h.exec(`CREATE FUNCTION fail_reannounce() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected failure'; END; $$`)
	h.exec(`CREATE TRIGGER fail_reannounce BEFORE UPDATE ON host_configs FOR EACH ROW
		WHEN (NEW.updated_by LIKE '%(credential rotation %') EXECUTE FUNCTION fail_reannounce()`)

	before, outboxBefore, revBefore := f.collectors(), f.lastOutboxID(), f.lastRevisionID()
	secret := map[string]any{"secret": map[string]string{"username": "monitor", "password": "s3cret-2"}}
	r := h.must(503, "POST", f.credPath(f.cred)+"/rotate", f.a.token, secret)
	if code := r.errCode(t); code != "agents_not_updated" {
		t.Fatalf("code %q", code)
	}
	if msg := r.message(t); !strings.Contains(msg, "secret was rotated") || !strings.Contains(msg, "not yet updated") {
		t.Fatalf("message %q", msg)
	}
	if strings.Contains(string(r.body), "injected failure") || strings.Contains(string(r.body), "s3cret") {
		t.Fatalf("error body leaks: %s", r.body)
	}
	if pw := h.inject(f.a, f.cred.String()); pw != "s3cret-2" {
		t.Fatal("the secret was not rotated")
	}
	f.checkUntouched(before, outboxBefore, revBefore)

	h.exec(`DROP TRIGGER fail_reannounce ON host_configs`)
	maxBefore := f.maxVersion()
	h.must(200, "POST", f.credPath(f.cred)+"/rotate", f.a.token, secret)
	f.checkReannounced(before, f.collectors(), maxBefore, outboxBefore, revBefore, "acme-ops (credential rotation "+f.cred.String()+")")
	if pw := h.inject(f.a, f.cred.String()); pw != "s3cret-2" {
		t.Fatal("the retried rotation changed the secret")
	}
	h.noLogContains("s3cret-2")
}

// TestCredentialRotationConcurrentWrites: rotations run concurrently with environment and host writes of
// the configs they re-announce; the locks they take never deadlock, so every request succeeds, and every
// version stays unique.
func TestCredentialRotationConcurrentWrites(t *testing.T) {
	t.Parallel()
	f := newRotationFixture(t)
	const rounds = 5
	requests := []struct {
		method, path string
		body         any
	}{
		{"POST", f.credPath(f.cred) + "/rotate", `{"secret": {"password": "concurrent"}}`},
		{"PUT", envConfigPath(f.a.env, "collectors"), mysqlCollectors("main", f.cred)},
		{"PUT", hostConfigPath(f.a.host, "collectors"), mysqlCollectors("main", f.cred)},
		{"PUT", hostConfigPath(f.host2, "collectors"), mysqlCollectors("main", f.cred)},
	}
	failures := make(chan string, rounds*len(requests))
	var wg sync.WaitGroup
	for _, rq := range requests {
		wg.Go(func() {
			for range rounds {
				// send, not do: this is not the test's goroutine.
				r, err := f.h.send(rq.method, rq.path, f.a.token, rq.body)
				if err != nil || r.status != http.StatusOK {
					failures <- fmt.Sprintf("%s %s: %d %v %s", rq.method, rq.path, r.status, err, r.body)
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for msg := range failures {
		t.Error(msg)
	}
	if dup := f.h.count(`SELECT count(*) FROM (SELECT version FROM config_revisions GROUP BY version HAVING count(*) > 1) d`); dup != 0 {
		t.Fatalf("%d versions were given out twice", dup)
	}
}

// TestCredentialIDMustBeCanonical: a collectors config may reference a credential only by its lowercase
// UUID, the spelling the API returns and the one a re-announce matches exactly; another spelling would be
// injected but never re-announced on rotation, so it is refused with the field named.
func TestCredentialIDMustBeCanonical(t *testing.T) {
	t.Parallel()
	f := newRotationFixture(t)
	before, outboxBefore, revBefore := f.collectors(), f.lastOutboxID(), f.lastRevisionID()
	for _, spelling := range []string{strings.ToUpper(f.cred.String()), "{" + f.cred.String() + "}", strings.ReplaceAll(f.cred.String(), "-", "")} {
		body := map[string]any{"config_data": []map[string]any{
			{"type": "tcp", "name": "ssh", "address": "localhost:22"},
			{"type": "mysql", "name": "main", "host": "db.internal", "port": 3306, "credential_id": spelling},
		}}
		for _, path := range configPaths(f.a, "collectors") {
			r := f.h.must(400, "PUT", path, f.a.token, body)
			if code := r.errCode(t); code != "invalid_config" {
				t.Fatalf("PUT %s: code %q", path, code)
			}
			if msg := r.message(t); !strings.Contains(msg, "collectors[1].credential_id") || !strings.Contains(msg, "lowercase UUID") ||
				strings.Contains(msg, spelling) {
				t.Fatalf("PUT %s: message %q", path, msg)
			}
		}
	}
	f.checkUntouched(before, outboxBefore, revBefore)
}
