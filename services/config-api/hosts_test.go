package configapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/protocol"
)

type hostJSON struct {
	ID              uuid.UUID         `json:"id"`
	AgentID         string            `json:"agent_id"`
	Hostname        string            `json:"hostname"`
	EnvironmentID   uuid.UUID         `json:"environment_id"`
	ClientID        uuid.UUID         `json:"client_id"`
	RevokedAt       *time.Time        `json:"revoked_at"`
	LastHeartbeatAt *time.Time        `json:"last_heartbeat_at"`
	Online          bool              `json:"online"`
	ConfigHash      *string           `json:"config_hash"`
	ConfigVersion   *int64            `json:"config_version"`
	ConfigVersions  map[string]int64  `json:"config_versions"`
	Labels          map[string]string `json:"labels"`
	ApplyStatus     map[string]struct {
		Version   int64     `json:"version"`
		Status    string    `json:"status"`
		Error     string    `json:"error"`
		AppliedAt time.Time `json:"applied_at"`
	} `json:"apply_status"`
}

func TestHostRegistrationListAndRevoke(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newTenant("acme")
	hostsPath := "/api/v1/environments/" + a.env.String() + "/hosts"

	// Generated agent id (a UUID), given agent id, and the invalid/duplicate cases.
	if _, err := uuid.Parse(a.agentID); err != nil {
		t.Fatalf("generated agent_id %q is not a UUID", a.agentID)
	}
	// A client token cannot choose an agent id (a global NATS identity); an admin may (importing hosts).
	if r := h.must(400, "POST", hostsPath, a.token, `{"hostname": "db-1", "agent_id": "agent_db-1"}`); !strings.Contains(r.message(t), "chosen by the server") {
		t.Fatalf("client-chosen agent_id: %s", r.body)
	}
	var reg idObj
	r := h.must(201, "POST", hostsPath, h.admin, `{"hostname": "db-1", "agent_id": "agent_db-1"}`)
	r.data(t, &reg)
	if reg.AgentID != "agent_db-1" || reg.EnvironmentID != a.env || reg.ClientID != a.client || reg.ID == uuid.Nil {
		t.Fatalf("registered %s", r.body)
	}
	h.must(400, "POST", hostsPath, h.admin, `{"hostname": "db-2", "agent_id": "bad.agent"}`)
	h.must(400, "POST", hostsPath, h.admin, `{"hostname": "db-2", "agent_id": "`+strings.Repeat("a", 129)+`"}`)
	h.must(400, "POST", hostsPath, a.token, `{"hostname": ""}`)
	h.must(400, "POST", hostsPath, a.token, `{"hostname": "db\u0000-2"}`) // not 500: PostgreSQL text cannot hold NUL
	h.must(409, "POST", hostsPath, a.token, `{"hostname": "db-1"}`)
	h.must(409, "POST", hostsPath, h.admin, `{"hostname": "db-9", "agent_id": "agent_db-1"}`)
	// Every registration is audited, refused ones are not: the tenant's first host (newTenant) and db-1.
	var detail map[string]any
	if err := h.pool.QueryRow(context.Background(), `SELECT detail FROM audit_events WHERE action = 'host_registered' AND object = $1`,
		"host:"+reg.ID.String()).Scan(&detail); err != nil {
		t.Fatalf("audit of db-1's registration: %v", err)
	}
	if detail["agent_id"] != "agent_db-1" || detail["environment_id"] != a.env.String() {
		t.Fatalf("audit detail %v", detail)
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'host_registered'`); n != 2 {
		t.Fatalf("%d host_registered audit rows, want 2", n)
	}

	// The agent reports: a recent heartbeat for db-1, an old one for web-1, and one apply result.
	h.exec(`UPDATE hosts SET last_heartbeat_at = now(), agent_version = '1.0.0', config_hash = 'abc',
		config_version = 5, config_versions = '{"collectors": 5, "intervals": 2}' WHERE id = $1`, reg.ID)
	h.exec(`UPDATE hosts SET last_heartbeat_at = now() - interval '10 minutes' WHERE id = $1`, a.host)
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
		VALUES ($1, 'collectors', 5, 'failed', 'dial tcp: connection refused', now()),
		       ($1, 'intervals', 2, 'applied', NULL, now())`, reg.ID)

	var page struct {
		Data      []hostJSON `json:"data"`
		NextAfter *uuid.UUID `json:"next_after"`
	}
	r = h.must(200, "GET", hostsPath, a.token, nil)
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.NextAfter != nil {
		t.Fatalf("list: %s", r.body)
	}
	byName := map[string]hostJSON{}
	for _, hj := range page.Data {
		byName[hj.Hostname] = hj
	}
	db := byName["db-1"]
	if !db.Online || db.ConfigHash == nil || *db.ConfigHash != "abc" || *db.ConfigVersion != 5 || db.ConfigVersions["collectors"] != 5 {
		t.Fatalf("db-1: %+v", db)
	}
	if st := db.ApplyStatus["collectors"]; st.Status != "failed" || st.Error != "dial tcp: connection refused" || st.Version != 5 {
		t.Fatalf("apply status: %+v", db.ApplyStatus)
	}
	if st := db.ApplyStatus["intervals"]; st.Status != "applied" || st.Error != "" || st.AppliedAt.IsZero() {
		t.Fatalf("apply status: %+v", db.ApplyStatus)
	}
	if web := byName["acme-web-1"]; web.Online || web.LastHeartbeatAt == nil {
		t.Fatalf("web-1 with an old heartbeat: %+v", web)
	}
	// Paging.
	r = h.must(200, "GET", hostsPath+"?limit=1", a.token, nil)
	if err := json.Unmarshal(r.body, &page); err != nil || len(page.Data) != 1 || page.NextAfter == nil {
		t.Fatalf("page 1: %s", r.body)
	}
	r = h.must(200, "GET", hostsPath+"?limit=1&after="+page.NextAfter.String(), a.token, nil)
	first := page.Data[0].ID
	page.Data, page.NextAfter = nil, nil
	if err := json.Unmarshal(r.body, &page); err != nil || len(page.Data) != 1 || page.NextAfter != nil || page.Data[0].ID == first {
		t.Fatalf("page 2: %s", r.body)
	}

	// One host with its apply status.
	var one hostJSON
	h.must(200, "GET", "/api/v1/hosts/"+reg.ID.String(), a.token, nil).data(t, &one)
	if one.ID != reg.ID || len(one.ApplyStatus) != 2 || one.AgentID != "agent_db-1" {
		t.Fatalf("host: %+v", one)
	}

	// Revoke: revoked_at set, kept on a second revoke; config writes to it are refused.
	var rev hostJSON
	h.must(200, "DELETE", "/api/v1/hosts/"+reg.ID.String(), a.token, nil).data(t, &rev)
	if rev.RevokedAt == nil || rev.Online {
		t.Fatalf("revoked: %+v", rev)
	}
	var again hostJSON
	h.must(200, "DELETE", "/api/v1/hosts/"+reg.ID.String(), a.token, nil).data(t, &again)
	if !again.RevokedAt.Equal(*rev.RevokedAt) {
		t.Fatal("second revoke moved revoked_at")
	}
	h.must(409, "PUT", hostConfigPath(reg.ID, "intervals"), a.token, `{"config_data": {"metrics": "1m"}}`)
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'host_revoked'`); n != 2 {
		t.Fatalf("%d host_revoked audit rows", n)
	}
}

// TestDrift: hosts whose reported hash or versions differ from what they should hold, with reasons.
// The expected hash models the agent's cache: collectors with credentials redacted.
func TestDrift(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newTenant("acme")
	var cred struct {
		ID string `json:"id"`
	}
	h.must(201, "POST", credentialsPath(a.client), a.token,
		`{"name": "mysql-main", "secret": {"username": "monitor", "password": "drift-secret-1"}}`).data(t, &cred)
	collectors := `[{"type": "mysql", "name": "primary", "host": "db1", "port": 3306, "credential_id": "` + cred.ID + `"}]`
	var wf, col configRow
	h.must(200, "PUT", envConfigPath(a.env, "watch_files"), a.token, `{"config_data": {"paths": ["/etc"]}}`).data(t, &wf)
	h.must(200, "PUT", envConfigPath(a.env, "collectors"), a.token, `{"config_data": `+collectors+`}`).data(t, &col)

	redacted, pointers, err := agentconfig.RedactForCache(col.ConfigData, map[string][]string{cred.ID: {"password", "username"}})
	if err != nil {
		t.Fatal(err)
	}
	expected := agentconfig.ConfigHash([]agentconfig.CacheEntry{
		{ConfigType: "collectors", ConfigData: redacted, Version: col.Version, Redacted: true, SecretFields: pointers},
		{ConfigType: "watch_files", ConfigData: wf.ConfigData, Version: wf.Version},
	})
	versions, _ := json.Marshal(map[string]int64{"collectors": col.Version, "watch_files": wf.Version})

	// web-1 is in sync; db-1 has the right versions but a wrong hash; old-1 lags on one type and
	// still holds a deleted type; new-1 never reported; refused-1 reports the right hash and versions
	// but acknowledged the current watch_files as failed (its local policy refused it).
	var db, old, fresh, refused idObj
	hostsPath := "/api/v1/environments/" + a.env.String() + "/hosts"
	h.must(201, "POST", hostsPath, a.token, `{"hostname": "db-1"}`).data(t, &db)
	h.must(201, "POST", hostsPath, a.token, `{"hostname": "old-1"}`).data(t, &old)
	h.must(201, "POST", hostsPath, a.token, `{"hostname": "new-1"}`).data(t, &fresh)
	h.must(201, "POST", hostsPath, a.token, `{"hostname": "refused-1"}`).data(t, &refused)
	const refusal = "watch_files: paths[0]: policy: read_paths: / is outside policy.read_paths"
	h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
		VALUES ($1, 'watch_files', $2, 'failed', $3, now()), ($1, 'collectors', $4, 'applied', NULL, now())`,
		refused.ID, wf.Version, refusal, col.Version)
	report := func(id uuid.UUID, hash string, versions []byte) {
		h.exec(`UPDATE hosts SET last_heartbeat_at = now(), config_hash = $2, config_versions = $3 WHERE id = $1`, id, hash, versions)
	}
	report(a.host, expected, versions)
	report(db.ID, strings.Repeat("0", 64), versions)
	stale, _ := json.Marshal(map[string]int64{"collectors": col.Version, "watch_files": wf.Version - 1, "tracing": 1})
	report(old.ID, expected, stale)
	report(refused.ID, expected, versions)

	var d struct {
		EnvironmentID uuid.UUID `json:"environment_id"`
		CheckedHosts  int       `json:"checked_hosts"`
		Hosts         []struct {
			HostID       uuid.UUID `json:"host_id"`
			Hostname     string    `json:"hostname"`
			Online       bool      `json:"online"`
			ExpectedHash string    `json:"expected_hash"`
			Reasons      []string  `json:"reasons"`
		} `json:"hosts"`
	}
	h.must(200, "GET", "/api/v1/environments/"+a.env.String()+"/drift", a.token, nil).data(t, &d)
	if d.CheckedHosts != 5 || len(d.Hosts) != 4 {
		t.Fatalf("drift: %+v", d)
	}
	reasons := map[string]string{}
	for _, hd := range d.Hosts {
		if hd.ExpectedHash != expected {
			t.Fatalf("%s: expected hash %s, want %s", hd.Hostname, hd.ExpectedHash, expected)
		}
		reasons[hd.Hostname] = strings.Join(hd.Reasons, "; ")
	}
	if _, ok := reasons["acme-web-1"]; ok {
		t.Fatalf("the in-sync host is reported: %v", reasons)
	}
	if r := reasons["db-1"]; !strings.Contains(r, "config_hash") || strings.Contains(r, "version") {
		t.Fatalf("db-1 reasons: %q", r)
	}
	if r := reasons["old-1"]; !strings.Contains(r, "watch_files") || !strings.Contains(r, "behind") || !strings.Contains(r, "tracing") || strings.Contains(r, "config_hash") {
		t.Fatalf("old-1 reasons: %q", r)
	}
	if r := reasons["new-1"]; !strings.Contains(r, "not reported") {
		t.Fatalf("new-1 reasons: %q", r)
	}
	if r, want := reasons["refused-1"], fmt.Sprintf("watch_files: version %d failed to apply: %s", wf.Version, refusal); r != want {
		t.Fatalf("refused-1 reasons: %q, want %q", r, want)
	}
	// Revoked hosts are not checked.
	h.must(200, "DELETE", "/api/v1/hosts/"+fresh.ID.String(), a.token, nil)
	h.must(200, "GET", "/api/v1/environments/"+a.env.String()+"/drift", a.token, nil).data(t, &d)
	if d.CheckedHosts != 4 || len(d.Hosts) != 3 {
		t.Fatalf("after revoke: %+v", d)
	}
	h.noLogContains("drift-secret-1")
}

// TestCredentials: metadata only in and out; the secret reaches the credential service and nothing else.
func TestCredentials(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newTenant("acme")
	base := credentialsPath(a.client)
	const secret = "s3cr3t-planted-value"

	var meta protocol.CredentialMeta
	r := h.must(201, "POST", base, a.token, `{"name": "mysql-main", "environment_id": "`+a.env.String()+`", "secret": {"password": "`+secret+`", "username": "monitor"}}`)
	r.data(t, &meta)
	if meta.Name != "mysql-main" || meta.ClientID != a.client.String() || meta.EnvironmentID != a.env.String() ||
		strings.Join(meta.Fields, ",") != "password,username" {
		t.Fatalf("created %s", r.body)
	}
	if strings.Contains(string(r.body), secret) {
		t.Fatal("the secret was returned")
	}
	h.must(409, "POST", base, a.token, `{"name": "mysql-main", "secret": {"password": "x"}}`)
	h.must(400, "POST", base, a.token, `{"name": "empty", "secret": {}}`)
	h.must(400, "POST", base, a.token, `{"name": "bad", "secret": {"password": 5}}`)
	h.must(404, "POST", base, a.token, `{"name": "ghost-env", "environment_id": "`+uuid.NewString()+`", "secret": {"password": "v"}}`)

	var list []protocol.CredentialMeta
	h.must(200, "GET", base, a.token, nil).data(t, &list)
	if len(list) != 1 || list[0].ID != meta.ID {
		t.Fatalf("list %+v", list)
	}
	var got protocol.CredentialMeta
	h.must(200, "GET", base+"/"+meta.ID, a.token, nil).data(t, &got)
	if got.ID != meta.ID {
		t.Fatalf("get %+v", got)
	}
	var rotated protocol.CredentialMeta
	h.must(200, "POST", base+"/"+meta.ID+"/rotate", a.token, nil).data(t, &rotated)
	if strings.Join(rotated.Fields, ",") != "password,username" {
		t.Fatalf("re-encrypted fields %v", rotated.Fields)
	}
	h.must(200, "POST", base+"/"+meta.ID+"/rotate", a.token, `{"secret": {"password": "rotated-planted-value"}}`).data(t, &rotated)
	if strings.Join(rotated.Fields, ",") != "password" {
		t.Fatalf("rotated fields %v", rotated.Fields)
	}
	// The credential service holds the new secret, encrypted: injecting it yields the plaintext.
	if got := h.inject(a, meta.ID); got != "rotated-planted-value" {
		t.Fatalf("injected password %q", got)
	}
	if n := h.count(`SELECT count(*) FROM credentials WHERE ciphertext LIKE '%planted%'`); n != 0 {
		t.Fatal("a secret is stored in clear")
	}
	h.must(400, "POST", base+"/"+meta.ID+"/rotate", a.token, `{"secret": {"password": "x"}, "name": "y"}`)
	h.must(204, "DELETE", base+"/"+meta.ID, a.token, nil)
	h.must(404, "GET", base+"/"+meta.ID, a.token, nil)
	h.must(404, "DELETE", base+"/"+meta.ID, a.token, nil)

	// The secret reached the credential service and nothing else: not the logs, not the audit trail,
	// not any table config-api writes.
	h.noLogContains(secret)
	h.noLogContains("rotated-planted-value")
	for _, q := range []string{
		`SELECT count(*) FROM audit_events WHERE detail::text LIKE '%' || $1 || '%'`,
		`SELECT count(*) FROM outbox WHERE payload::text LIKE '%' || $1 || '%'`,
	} {
		if n := h.count(q, secret); n != 0 {
			t.Fatalf("%s: secret found", q)
		}
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action LIKE 'credential_%'`); n != 4 {
		t.Fatalf("%d credential audit rows, want 4", n)
	}
}

// TestResolverDown: reads that need the resolver answer 503 when it is not there; writes never need it
// (delivery is asynchronous, through the outbox), so they still succeed.
func TestResolverDown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withoutResolver())
	a := h.newTenant("acme")
	h.must(200, "PUT", hostConfigPath(a.host, "intervals"), a.token, `{"config_data": {"metrics": "1m"}}`)
	r := h.must(503, "GET", hostConfigPath(a.host, "intervals"), a.token, nil)
	if r.errCode(t) != "unavailable" || strings.Contains(string(r.body), "nats") {
		t.Fatalf("resolver down: %s", r.body)
	}
	h.must(503, "GET", "/api/v1/environments/"+a.env.String()+"/drift", a.token, nil)
}

// Registration issues the agent its own NATS user, which can use only its own subjects; revoking the
// host revokes that user on the server.
func TestHostNATSCredentialsIssuedAndRevoked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withNATSIdentity(newAuthority(t)))
	a := h.newTenant("acme")
	var reg registeredJSON
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", h.admin, `{"hostname": "db-1", "agent_id": "agent-db-1"}`).data(t, &reg)
	if !isCredsFile(reg.NATSCredentials) {
		t.Fatalf("registration returned no creds file: %q", reg.NATSCredentials)
	}
	// Shown once: reading the host back never returns them.
	if r := h.must(200, "GET", "/api/v1/hosts/"+reg.ID.String(), a.token, ""); bytes.Contains(r.body, []byte("NKEY SEED")) {
		t.Fatalf("GET host returned the credentials: %s", r.body)
	}
	credsFile := writeCreds(t, t.TempDir(), "agent", natsauth.Creds{File: []byte(reg.NATSCredentials)})
	agent, closed := connectAgent(t, h.natsURL, reg.AgentID, credsFile)
	h.receivesOwnCommand(agent, reg.AgentID)

	h.must(200, "DELETE", "/api/v1/hosts/"+reg.ID.String(), a.token, "")
	h.revokedAgentShutOut(closed, credsFile)
}
