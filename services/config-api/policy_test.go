package configapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	configapi "github.com/configsync/configsync/services/config-api"
	"github.com/configsync/configsync/services/delivery"
)

// startDelivery runs the real delivery service on the harness's NATS, so a test can fetch as an agent
// does (resolver and credential services are already running).
func (h *harness) startDelivery() {
	h.t.Helper()
	js, err := jetstream.New(h.nc)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := natsconn.EnsureStreams(ctx, js); err != nil {
		h.t.Fatal(err)
	}
	var cfg delivery.Config
	if err := envconfig.LoadFrom(&cfg, func(string) (string, bool) { return "", false }); err != nil {
		h.t.Fatal(err)
	}
	log := zap.NewNop()
	svc := delivery.New(cfg, h.nc, js, log)
	if err := svc.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			h.t.Errorf("stop delivery: %v", err)
		}
	})
}

// fetch asks delivery for an agent's configs, as the agent does at startup.
func (h *harness) fetch(agentID string) protocol.FetchReply {
	h.t.Helper()
	data, _ := json.Marshal(protocol.FetchRequest{AgentID: agentID})
	msg, err := testinfra.RequestAsAgent(h.nc, agentID, protocol.FetchSubject(agentID), data, 15*time.Second)
	if err != nil {
		h.t.Fatalf("fetch %s: %v", agentID, err)
	}
	var reply protocol.FetchReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		h.t.Fatalf("fetch reply %s: %v", msg.Data, err)
	}
	return reply
}

// The API refuses what no agent should run: durations under the floor, sizes over the cap, inline
// secrets. Each is a 400 naming the path, at both levels, and the secret is never echoed.
func TestAPIRefusesFloorsCapsAndInlineSecrets(t *testing.T) {
	h, tn := newTenantHarness(t, "acme")
	env := "/api/v1/environments/" + tn.env.String() + "/agent-configs/"
	host := "/api/v1/hosts/" + tn.host.String() + "/agent-configs/"
	for _, tt := range []struct {
		path, typ string
		data      any
		want      string
	}{
		{env, "intervals", map[string]any{"heartbeat": "1ms"}, "heartbeat: must be a duration from 1s to 24h"},
		{host, "intervals", map[string]any{"metrics": "30s", "heartbeat": "100ms"}, "heartbeat: must be a duration from 1s"},
		{env, "collectors", []map[string]any{{"type": "tcp", "name": "t", "address": "db:5432", "interval": "10ms"}}, "collectors[0].interval: must be a duration from 1s"},
		{env, "labels", map[string]any{"dynamic": []map[string]any{{"name": "a", "source": "env", "env": "A", "interval": "1ms"}}}, "dynamic[0].interval"},
		{env, "change_detection", map[string]any{"interval": "500ms"}, "interval: must be a duration from 1s"},
		{env, "healthcheck", map[string]any{"interval_seconds": 86401}, "interval_seconds: must be an integer from 1 to 86400"},
		{env, "watch_files", map[string]any{"max_file_size": 1 << 30}, "max_file_size: must be an integer from 1 to 16777216"},
		{env, "collectors", []map[string]any{{"type": "postgres", "name": "db", "host": "db", "password": "hunter2-inline"}},
			"collectors[0].password: inline secrets are not accepted: store the value in a credential and reference it with credential_id"},
		{host, "collectors", []map[string]any{{"type": "tcp", "name": "t"}, {"type": "http", "name": "h", "url": "http://x", "username": "hunter2-inline"}},
			"collectors[1].username: inline secrets are not accepted"},
	} {
		path := tt.path + tt.typ
		r := h.do("PUT", path, tn.token, map[string]any{"config_data": tt.data})
		if r.status != 400 || r.errCode(t) != "invalid_config" || !strings.Contains(r.message(t), tt.want) || strings.Contains(string(r.body), "hunter2") {
			t.Errorf("PUT %s %v: %d %s, want 400 naming %q", path, tt.data, r.status, r.body, tt.want)
		}
	}
	if n := h.count(`SELECT count(*) FROM environment_configs`) + h.count(`SELECT count(*) FROM host_configs`); n != 0 {
		t.Fatalf("%d config rows written by refused PUTs", n)
	}
	// At the floor is fine.
	h.must(200, "PUT", env+"intervals", tn.token, map[string]any{"config_data": map[string]any{"heartbeat": "1s", "metrics": "24h"}})

	// Rolling back to a revision stored before the rules is refused by the same rules.
	h.exec(`INSERT INTO config_revisions (scope, client_id, environment_id, config_type, version, action, new_data)
		VALUES ('environment', $1, $2, 'intervals', 999999, 'put', '{"heartbeat":"1ms"}')`, tn.client, tn.env)
	r := h.do("POST", env+"intervals/rollback", tn.token, map[string]any{"revision": 999999})
	if r.status != 400 || !strings.Contains(r.message(t), "heartbeat: must be a duration from 1s") {
		t.Errorf("rollback to a 1ms heartbeat: %d %s", r.status, r.body)
	}
}

// Credentials bound to allowed targets through the REST API: create and rotate set them (canonical in
// every answer), malformed patterns are 400, and delivery injects the credential only into collectors
// aimed at an allowed target; the others come back to the agent as a collectors type error.
func TestCredentialAllowedTargetsThroughAPI(t *testing.T) {
	h := newHarness(t)
	h.startDelivery()
	tn := h.newTenant("acme")
	creds := credentialsPath(tn.client)
	const secret = "pl4nted-target-S3CRET"

	r := h.do("POST", creds, tn.token, map[string]any{"name": "bad", "secret": map[string]string{"password": secret}, "allowed_targets": []string{"db.internal"}})
	if r.status != 400 || !strings.Contains(r.message(t), "allowed_targets[0]") {
		t.Fatalf("malformed target: %d %s", r.status, r.body)
	}
	var meta protocol.CredentialMeta
	h.must(201, "POST", creds, tn.token, map[string]any{"name": "pg", "secret": map[string]string{"username": "mon", "password": secret},
		"allowed_targets": []string{"DB.internal:5432", "*.prod.example.com:*"}}).data(t, &meta)
	want := []string{"*.prod.example.com:*", "db.internal:5432"}
	if strings.Join(meta.AllowedTargets, ",") != strings.Join(want, ",") {
		t.Fatalf("created allowed_targets %q, want %q", meta.AllowedTargets, want)
	}
	var got protocol.CredentialMeta
	h.must(200, "GET", creds+"/"+meta.ID, tn.token, nil).data(t, &got)
	if strings.Join(got.AllowedTargets, ",") != strings.Join(want, ",") {
		t.Fatalf("GET allowed_targets %q", got.AllowedTargets)
	}

	put := func(host string) {
		h.must(200, "PUT", envConfigPath(tn.env, "collectors"), tn.token, map[string]any{"config_data": []map[string]any{
			{"type": "tcp", "name": "ssh", "address": "localhost:22"},
			{"type": "postgres", "name": "main", "host": host, "credential_id": meta.ID},
		}})
	}
	put("db.internal")
	reply := h.fetch(tn.agentID)
	if reply.TypeErrors != nil || !strings.Contains(string(reply.Configs["collectors"]), secret) {
		t.Fatalf("allowed target: type errors %+v, collectors delivered: %v", reply.TypeErrors, reply.Configs["collectors"] != nil)
	}

	put("attacker.example.org")
	reply = h.fetch(tn.agentID)
	e, ok := reply.TypeErrors["collectors"]
	if !ok || e.Code != protocol.CodeCredentialFailed || !strings.Contains(e.Message, "credential "+meta.ID+" is not allowed for the target of collectors[1] (attacker.example.org:5432)") {
		t.Fatalf("disallowed target: type errors %+v", reply.TypeErrors)
	}
	if _, ok := reply.Configs["collectors"]; ok || strings.Contains(string(mustJSON(reply)), secret) {
		t.Fatal("collectors delivered to a disallowed target")
	}

	// Rotating only the targets re-announces the referencing config, and the target is now allowed.
	outbox := h.count(`SELECT count(*) FROM outbox`)
	var rotated protocol.CredentialMeta
	h.must(200, "POST", creds+"/"+meta.ID+"/rotate", tn.token, map[string]any{"allowed_targets": []string{"attacker.example.org:5432"}}).data(t, &rotated)
	if strings.Join(rotated.AllowedTargets, ",") != "attacker.example.org:5432" {
		t.Fatalf("rotated allowed_targets %q", rotated.AllowedTargets)
	}
	if n := h.count(`SELECT count(*) FROM outbox`); n != outbox+1 {
		t.Fatalf("outbox rows %d after a targets rotation, want %d (one re-announce)", n, outbox+1)
	}
	if reply := h.fetch(tn.agentID); reply.TypeErrors != nil {
		t.Fatalf("after allowing the target: %+v", reply.TypeErrors)
	}
	// An empty list clears the targets.
	var cleared protocol.CredentialMeta
	h.must(200, "POST", creds+"/"+meta.ID+"/rotate", tn.token, map[string]any{"allowed_targets": []string{}}).data(t, &cleared)
	if cleared.AllowedTargets != nil || cleared.ID != meta.ID {
		t.Fatalf("cleared allowed_targets %q", cleared.AllowedTargets)
	}
	h.noLogContains(secret)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Collectors stored with inline secrets before the API refused them: delivery withholds them with a
// clear type error until `config-api migrate-inline-secrets` runs; the migration moves each secret into
// a credential (created through the credential service), rewrites the collectors to reference it as new
// versions with events, scrubs config_revisions, and a second run finds nothing to do.
func TestMigrateInlineSecrets(t *testing.T) {
	h := newHarness(t)
	h.startDelivery()
	tn := h.newTenant("acme")
	other := h.newTenant("globex")
	const envSecret, hostSecret = "pl4nted-env-S3CRET", "pl4nted-host-S3CRET"

	// Rows as an older config-api stored them, with their history.
	envData := `[{"type":"tcp","name":"ssh","address":"localhost:22"},
		{"type":"postgres","name":"main","host":"db.internal","port":5432,"username":"monitor","password":"` + envSecret + `"},
		{"type":"http","name":"api","url":"http://api.internal/health","password":"` + envSecret + `-http"}]`
	hostData := `[{"type":"mysql","name":"replica","host":"db2.internal","password":"` + hostSecret + `"}]`
	h.exec(`INSERT INTO environment_configs (environment_id, config_type, config_data, version) VALUES ($1, 'collectors', $2, nextval('config_version_seq'))`, tn.env, envData)
	h.exec(`INSERT INTO host_configs (host_id, config_type, config_data, version) VALUES ($1, 'collectors', $2, nextval('config_version_seq'))`, tn.host, hostData)
	h.exec(`INSERT INTO config_revisions (scope, client_id, environment_id, config_type, version, action, old_data, new_data)
		VALUES ('environment', $1, $2, 'collectors', 1, 'put', NULL, $3), ('environment', $1, $2, 'collectors', 2, 'put', $3, $3)`, tn.client, tn.env, envData)
	h.exec(`INSERT INTO config_revisions (scope, client_id, environment_id, host_id, config_type, version, action, new_data)
		VALUES ('host', $1, $2, $3, 'collectors', 3, 'put', $4)`, tn.client, tn.env, tn.host, hostData)
	// Another tenant's clean config and another type's history are left alone.
	h.must(200, "PUT", envConfigPath(other.env, "collectors"), other.token,
		map[string]any{"config_data": []map[string]any{{"type": "tcp", "name": "ssh", "address": "localhost:22"}}})
	h.exec(`INSERT INTO config_revisions (scope, client_id, environment_id, config_type, version, action, new_data)
		VALUES ('environment', $1, $2, 'labels', 4, 'put', '{"static":{"password":"not-a-collector"}}')`, tn.client, tn.env)

	// A run that stopped after creating the host's credential, before rewriting the host's config: the
	// next run finds the credential by name and rotates it to the secret the config holds.
	h.must(201, "POST", credentialsPath(tn.client), h.admin, map[string]any{
		"name": "inline host " + tn.host.String() + " mysql/replica", "environment_id": tn.env, "secret": map[string]string{"password": "stale"}})

	reply := h.fetch(tn.agentID)
	e, ok := reply.TypeErrors["collectors"]
	if !ok || e.Code != protocol.CodeCredentialFailed || !strings.Contains(e.Message, "(collectors[1].password, collectors[1].username, collectors[2].password, collectors[3].password)") ||
		!strings.Contains(e.Message, "config-api migrate-inline-secrets") || strings.Contains(e.Message, "S3CRET") {
		t.Fatalf("before the migration: type errors %+v", reply.TypeErrors)
	}
	if _, ok := reply.Configs["collectors"]; ok {
		t.Fatal("inline secrets delivered")
	}

	outbox := h.count(`SELECT count(*) FROM outbox`)
	var out bytes.Buffer
	log := zap.NewNop()
	sum, err := configapi.MigrateInlineSecrets(context.Background(), configapi.Config{RequestTimeout: 10 * time.Second}, h.pool, h.nc, log, &out)
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out.String())
	}
	if sum.Configs != 2 || sum.Collectors != 3 || sum.CredentialsCreated != 2 || sum.CredentialsReused != 1 || sum.RevisionsScrubbed != 5 || sum.Failed != 0 {
		t.Fatalf("summary %+v\n%s", sum, out.String())
	}
	for _, line := range []string{"2 collectors configs hold inline secrets (1 environments, 1 host overrides)",
		"[1/2] environment " + tn.env.String() + ": version", "[2/2] host " + tn.host.String() + ": version",
		"done: 2 configs rewritten, 3 collectors, 2 credentials created, 1 reused, 5 revisions scrubbed, 0 failed"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
	if strings.Contains(out.String(), "S3CRET") {
		t.Fatalf("output shows a secret:\n%s", out.String())
	}

	// The credentials exist, scoped to the environment, holding the fields the collectors held.
	var metas []protocol.CredentialMeta
	h.must(200, "GET", credentialsPath(tn.client), tn.token, nil).data(t, &metas)
	byName := map[string]protocol.CredentialMeta{}
	for _, m := range metas {
		byName[m.Name] = m
		if m.EnvironmentID != tn.env.String() {
			t.Errorf("credential %s scoped to %q", m.Name, m.EnvironmentID)
		}
	}
	pg := byName["inline environment "+tn.env.String()+" postgres/main"]
	if len(metas) != 3 || strings.Join(pg.Fields, ",") != "password,username" {
		t.Fatalf("credentials %+v", metas)
	}

	// The configs reference them, as new versions announced to agents; no secret is left anywhere.
	var envNow, hostNow string
	if err := h.pool.QueryRow(context.Background(), `SELECT config_data::text FROM environment_configs WHERE environment_id = $1 AND config_type = 'collectors'`, tn.env).Scan(&envNow); err != nil {
		t.Fatal(err)
	}
	if err := h.pool.QueryRow(context.Background(), `SELECT config_data::text FROM host_configs WHERE host_id = $1 AND config_type = 'collectors'`, tn.host).Scan(&hostNow); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(envNow, `"credential_id": "`+pg.ID+`"`) || strings.Contains(envNow, "password") || strings.Contains(envNow, "username") ||
		!strings.Contains(hostNow, `"credential_id"`) || strings.Contains(hostNow, "password") {
		t.Fatalf("configs after the migration:\n%s\n%s", envNow, hostNow)
	}
	if n := h.count(`SELECT count(*) FROM outbox`); n != outbox+2 {
		t.Errorf("outbox rows %d, want %d (one event per rewritten config)", n, outbox+2)
	}
	for _, table := range []string{"environment_configs", "host_configs"} {
		if n := h.count(`SELECT count(*) FROM ` + table + ` WHERE config_data::text LIKE '%S3CRET%'`); n != 0 {
			t.Errorf("%s: %d rows still hold a secret", table, n)
		}
	}
	if n := h.count(`SELECT count(*) FROM config_revisions WHERE old_data::text LIKE '%S3CRET%' OR new_data::text LIKE '%S3CRET%'`); n != 0 {
		t.Errorf("%d revisions still hold a secret", n)
	}
	if n := h.count(`SELECT count(*) FROM config_revisions WHERE new_data::text LIKE '%"password": "[REDACTED]"%'`); n < 3 {
		t.Errorf("%d revisions show a redacted password, want at least 3", n)
	}
	if n := h.count(`SELECT count(*) FROM config_revisions WHERE new_data::text LIKE '%not-a-collector%'`); n != 1 {
		t.Error("a labels revision was scrubbed")
	}

	// The scrubbed revisions are the three seeded and the two the migration wrote (their old data).
	if n := h.count(`SELECT count(*) FROM config_revisions WHERE actor = 'migrate-inline-secrets' AND old_data::text LIKE '%[REDACTED]%'`); n != 2 {
		t.Errorf("%d of the migration's own revisions redacted, want 2", n)
	}

	// Delivery now injects the secrets from the credentials.
	reply = h.fetch(tn.agentID)
	cols := string(reply.Configs["collectors"])
	if reply.TypeErrors != nil || !strings.Contains(cols, envSecret) || !strings.Contains(cols, hostSecret) || len(reply.SecretFields["collectors"]) != 4 {
		t.Fatalf("after the migration: type errors %+v, collectors %d bytes, secret fields %v", reply.TypeErrors, len(cols), reply.SecretFields)
	}

	// Idempotent: nothing left to do.
	out.Reset()
	sum, err = configapi.MigrateInlineSecrets(context.Background(), configapi.Config{RequestTimeout: 10 * time.Second}, h.pool, h.nc, log, &out)
	if err != nil || sum != (configapi.MigrationSummary{}) || !strings.Contains(out.String(), "0 collectors configs hold inline secrets") {
		t.Fatalf("second run: %+v, %v\n%s", sum, err, out.String())
	}
	h.noLogContains("S3CRET")
}
