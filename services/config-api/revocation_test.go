package configapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	configapi "github.com/configsync/configsync/services/config-api"
)

// maxPayload is the NATS servers' max_payload (deploy/nats/nats-server.conf, and the embedded server's
// default): an account JWT must fit in it to be pushed.
const maxPayload = 1 << 20

// serverAccount returns the account JWT the NATS server holds and its revocation list.
func (h *harness) serverAccount(authority *natsauth.Authority) (string, jwt.RevocationList) {
	h.t.Helper()
	sys := h.systemConn()
	defer sys.Close()
	token, err := natsauth.LookupAccount(sys, authority.AccountPublicKey(), 10*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(token)
	if err != nil {
		h.t.Fatalf("server account JWT: %v", err)
	}
	return token, ac.Revocations
}

// systemConn connects as the NATS system user (operator mode: withNATSIdentity); the caller closes it.
func (h *harness) systemConn() *nats.Conn {
	h.t.Helper()
	sys, err := nats.Connect(h.natsURL, nats.UserCredentials(filepath.Join(h.natsDir, "system.creds")), nats.NoReconnect())
	if err != nil {
		h.t.Fatalf("system connection: %v", err)
	}
	return sys
}

// insertLiveHosts registers n hosts of tn's environment directly in the database, each with a fresh
// NATS user key whose JWT expires at expires (as config-api records an issued one), and returns their
// ids and keys. It is what n registrations leave behind, without signing n JWTs nobody uses.
func (h *harness) insertLiveHosts(tn tenant, prefix string, n int, expires time.Time) ([]uuid.UUID, []string) {
	h.t.Helper()
	names, agents, keys := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		kp, err := nkeys.CreateUser()
		if err != nil {
			h.t.Fatal(err)
		}
		keys[i], _ = kp.PublicKey()
		names[i], agents[i] = fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("%s-%d", prefix, i)
	}
	rows, err := h.pool.Query(context.Background(), `
		INSERT INTO hosts (client_id, environment_id, hostname, agent_id, nats_public_key, nats_expires_at)
		SELECT $1, $2, b.h, b.a, b.k, $6
		FROM unnest($3::text[], $4::text[], $5::text[]) AS b(h, a, k)
		RETURNING id, nats_public_key`, tn.client, tn.env, names, agents, keys, expires)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	byKey := map[string]uuid.UUID{}
	for rows.Next() {
		var id uuid.UUID
		var key string
		if err := rows.Scan(&id, &key); err != nil {
			h.t.Fatal(err)
		}
		byKey[key] = id
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	ids := make([]uuid.UUID, n)
	for i, k := range keys {
		ids[i] = byKey[k]
	}
	return ids, keys
}

// revokeBatches revokes ids through the batch route, 1000 at a time.
func (h *harness) revokeBatches(tn tenant, ids []uuid.UUID) {
	h.t.Helper()
	for i := 0; i < len(ids); i += 1000 {
		batch := ids[i:min(i+1000, len(ids))]
		var out struct {
			Revoked int `json:"revoked"`
		}
		h.must(200, "POST", "/api/v1/environments/"+tn.env.String()+"/hosts/revoke", tn.token, map[string]any{"host_ids": batch}).data(h.t, &out)
		if out.Revoked != len(batch) {
			h.t.Fatalf("batch revoked %d of %d hosts", out.Revoked, len(batch))
		}
	}
}

// TestRevocationsPruneAtScale: with a JWT lifetime of seconds, 22,500 revocations in batches of 1000
// over several lifetimes keep the account JWT the servers hold under max_payload, because a revocation
// leaves the list once every JWT it refuses has expired; and after all of them, one more revocation
// still disconnects its agent and keeps it out.
func TestRevocationsPruneAtScale(t *testing.T) {
	t.Parallel()
	authority := newAuthority(t)
	// Long enough that a round (4,500 hosts, five batch revocations) ends before its JWTs expire on a
	// loaded machine, short enough that several lifetimes pass in the test.
	const lifetime = 30 * time.Second
	h := newHarness(t, withNATSIdentity(authority), withAPIConfig(func(c *configapi.Config) {
		c.AgentCredsLifetime = lifetime
		c.RevocationPruneGrace = 500 * time.Millisecond
		c.RevocationReconcile = time.Hour // only the revocations push
		c.MaxPendingRevocationsPerClient = 10000
		c.MaxPendingRevocations = 10000
	}))
	a := h.newTenant("acme")
	pending := func() int {
		return h.count(`SELECT count(*) FROM nats_revocations WHERE prune_after IS NULL OR prune_after >= now() - interval '500 milliseconds'`)
	}

	const rounds, perRound = 5, 4500
	var firstKeys, lastKeys []string
	var lastExpires time.Time
	total, largest := 0, 0
	for r := range rounds {
		// Wait (polling) until this round fits under the cap: earlier revocations are pruned once the
		// JWTs they refuse have expired.
		testinfra.Eventually(t, time.Minute, func() bool { return pending()+perRound <= 10000 }, "earlier revocations to become prunable")
		expires := time.Now().Add(lifetime).Truncate(time.Second)
		ids, keys := h.insertLiveHosts(a, fmt.Sprintf("r%d", r), perRound, expires)
		h.revokeBatches(a, ids)
		total += perRound
		token, list := h.serverAccount(authority)
		t.Logf("round %d: %d revocations so far, %d in the account, account JWT %d bytes", r, total, len(list), len(token))
		if len(token) >= maxPayload {
			t.Fatalf("account JWT is %d bytes, over max_payload", len(token))
		}
		largest = max(largest, len(token))
		// Every key of the round is listed while its JWTs are valid (once they expire it may be pruned).
		for _, k := range keys {
			if _, ok := list[k]; !ok && time.Now().Before(expires) {
				t.Fatalf("round %d: a revoked key with a valid JWT is missing from the server's list", r)
			}
		}
		if r == 0 {
			firstKeys = keys
		}
		lastKeys, lastExpires = keys, expires
	}
	_, list := h.serverAccount(authority)
	for _, k := range firstKeys {
		if _, ok := list[k]; ok {
			t.Fatal("a revocation whose JWTs have all expired was never pruned from the account")
		}
	}
	for _, k := range lastKeys {
		if _, ok := list[k]; !ok && time.Now().Before(lastExpires) {
			t.Fatal("a recent revocation is missing from the account")
		}
	}
	t.Logf("%d revocations in %d rounds; largest account JWT %d bytes (max_payload %d)", total, rounds, largest, maxPayload)

	// One more, for a real agent: it is disconnected as revoked and refused afterwards.
	var reg registeredJSON
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", a.token, `{"hostname": "last"}`).data(t, &reg)
	credsFile := writeCreds(t, t.TempDir(), "last", natsauth.Creds{File: []byte(reg.NATSCredentials)})
	agent, closed := connectAgent(t, h.natsURL, reg.AgentID, credsFile)
	h.revokeBatches(a, []uuid.UUID{reg.ID})
	h.revokedAgentShutOut(closed, credsFile)
	// Refused by the revocation, not by expiry: its JWT is still valid.
	uc, err := jwt.DecodeUserClaims(must(jwt.ParseDecoratedJWT([]byte(reg.NATSCredentials))))
	if err != nil {
		t.Fatal(err)
	}
	if !time.Now().Before(time.Unix(uc.Expires, 0)) {
		t.Fatalf("the agent's JWT expired before the check (%v, disconnect reason %v); the machine is too slow for this lifetime",
			time.Unix(uc.Expires, 0), agent.LastError())
	}
	token, _ := h.serverAccount(authority)
	t.Logf("final account JWT %d bytes", len(token))
}

// TestRevocationCapPerClient: one client cannot fill the account's revocation list: past its cap a
// batch is refused whole (409 revocation_limit, nothing revoked), while another client still revokes.
func TestRevocationCapPerClient(t *testing.T) {
	t.Parallel()
	authority := newAuthority(t)
	h := newHarness(t, withNATSIdentity(authority), withAPIConfig(func(c *configapi.Config) {
		c.MaxPendingRevocationsPerClient = 5
		c.MaxPendingRevocations = 100
	}))
	a, b := h.newTenant("acme"), h.newTenant("bravo")
	exp := time.Now().Add(time.Hour)
	aIDs, _ := h.insertLiveHosts(a, "a", 8, exp)
	bIDs, bKeys := h.insertLiveHosts(b, "b", 3, exp)
	// Ten revocations of keys without expiry from long before the cap existed: they stay in the list
	// (never prunable) but do not count against the client's cap, which counts one lifetime back.
	for i := range 10 {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		h.exec(`INSERT INTO nats_revocations (public_key, client_id, revoked_at, revoke_before) VALUES ($1, $2, now() - interval '2000 hours' - $3 * interval '1 second', now() - interval '2000 hours')`, pub, a.client, i)
	}

	h.revokeBatches(a, aIDs[:4])
	r := h.must(409, "POST", "/api/v1/environments/"+a.env.String()+"/hosts/revoke", a.token, map[string]any{"host_ids": aIDs[4:6]})
	if r.errCode(t) != "revocation_limit" {
		t.Fatalf("over the cap: %s", r.body)
	}
	if n := h.count(`SELECT count(*) FROM hosts WHERE id = ANY($1) AND revoked_at IS NOT NULL`, aIDs[4:6]); n != 0 {
		t.Fatalf("a refused batch revoked %d hosts", n)
	}
	// Up to the cap is fine, and revoking an already revoked host adds nothing.
	h.revokeBatches(a, aIDs[3:5])
	h.revokeBatches(b, bIDs)
	_, list := h.serverAccount(authority)
	if len(list) != 18 {
		t.Fatalf("server lists %d revocations, want 8 and the 10 old ones", len(list))
	}
	for _, k := range bKeys {
		if _, ok := list[k]; !ok {
			t.Fatal("the other client's revocation is missing")
		}
	}

	// The batch route: another client's hosts or environment are not found, nothing revoked; bad bodies.
	audits := h.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access'`)
	r = h.must(404, "POST", "/api/v1/environments/"+a.env.String()+"/hosts/revoke", a.token, map[string]any{"host_ids": []uuid.UUID{aIDs[7], bIDs[0]}})
	if !strings.Contains(r.message(t), "host_ids[1]") {
		t.Fatalf("foreign host in a batch: %s", r.body)
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access'`); n != audits+1 {
		t.Fatalf("a foreign host in a batch revocation wrote %d cross_tenant_access events, want 1", n-audits)
	}
	h.must(404, "POST", "/api/v1/environments/"+b.env.String()+"/hosts/revoke", a.token, map[string]any{"host_ids": []uuid.UUID{bIDs[0]}})
	h.must(400, "POST", "/api/v1/environments/"+a.env.String()+"/hosts/revoke", a.token, map[string]any{"host_ids": []uuid.UUID{aIDs[7], aIDs[7]}})
	h.must(400, "POST", "/api/v1/environments/"+a.env.String()+"/hosts/revoke", a.token, map[string]any{"host_ids": []uuid.UUID{}})
	if n := h.count(`SELECT count(*) FROM hosts WHERE id = $1 AND revoked_at IS NOT NULL`, aIDs[7]); n != 0 {
		t.Fatal("a refused batch revoked a host")
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'hosts_revoked'`); n != 3 {
		t.Fatalf("%d hosts_revoked audit events, want 3", n)
	}
}

// TestRevocationPushesSerializeAndReconcile: revocations racing on two config-api replicas all reach
// the server (each push reads the list under the advisory lock), and an account overwritten behind
// config-api's back is repaired by the reconciler without anyone revoking again.
func TestRevocationPushesSerializeAndReconcile(t *testing.T) {
	t.Parallel()
	authority := newAuthority(t)
	h := newHarness(t, withNATSIdentity(authority), withAPIConfig(func(c *configapi.Config) {
		c.RevocationReconcile = 200 * time.Millisecond
	}))
	second := *h
	second.srv = h.replica()
	a := h.newTenant("acme")
	ids, keys := h.insertLiveHosts(a, "race", 40, time.Now().Add(time.Hour))

	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			on := h
			if i%2 == 1 {
				on = &second
			}
			if r, err := on.send("DELETE", "/api/v1/hosts/"+id.String(), a.token, nil); err != nil || r.status != 200 {
				t.Errorf("revoke %d: %d %v %s", i, r.status, err, r.body)
			}
		}()
	}
	wg.Wait()
	_, list := h.serverAccount(authority)
	for _, k := range keys {
		if _, ok := list[k]; !ok {
			t.Fatal("a revocation raced out of the server's list")
		}
	}

	// Someone pushes an account without revocations (a stale signer): the reconciler restores them.
	sys := h.systemConn()
	defer sys.Close()
	if err := authority.AccountAdmin().Revoke(sys, nil); err != nil {
		t.Fatal(err)
	}
	testinfra.Eventually(t, time.Minute, func() bool {
		_, list := h.serverAccount(authority)
		return len(list) == len(keys)
	}, "the reconciler to restore the revocations")
}

// TestAgentCredentialsRenewal: an agent renews its own expiring JWT over NATS (same key, the seed never
// travels) and connects with it; a revoked host's agent, another agent's key and a foreign reply inbox
// get nothing; a host whose credentials were issued before JWTs expired keeps its revocation forever;
// and re-issuing a host's credentials (re-enrolment) revokes the old key.
func TestAgentCredentialsRenewal(t *testing.T) {
	t.Parallel()
	authority := newAuthority(t)
	const lifetime = time.Hour
	h, a := newTenantHarness(t, "acme", withNATSIdentity(authority), withAPIConfig(func(c *configapi.Config) { c.AgentCredsLifetime = lifetime }))
	var reg, other registeredJSON
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", a.token, `{"hostname": "renewer"}`).data(t, &reg)
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", a.token, `{"hostname": "other"}`).data(t, &other)
	issued, err := jwt.ParseDecoratedJWT([]byte(reg.NATSCredentials))
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(issued)
	if err != nil {
		t.Fatal(err)
	}
	if uc.Expires == 0 || time.Until(time.Unix(uc.Expires, 0)) > lifetime+time.Minute || time.Until(time.Unix(uc.Expires, 0)) < lifetime-time.Minute {
		t.Fatalf("issued JWT expires at %d, want about one lifetime from now", uc.Expires)
	}
	dir := t.TempDir()
	agent, _ := connectAgent(t, h.natsURL, reg.AgentID, writeCreds(t, dir, "renewer", natsauth.Creds{File: []byte(reg.NATSCredentials)}))

	ask := func(nc *nats.Conn, agentID string, req protocol.CredsRenewRequest) protocol.CredsRenewReply {
		t.Helper()
		data, _ := json.Marshal(req)
		msg, err := nc.Request(protocol.CredsRenewSubject(agentID), data, 10*time.Second)
		if err != nil {
			t.Fatalf("renew request: %v", err)
		}
		var reply protocol.CredsRenewReply
		if err := json.Unmarshal(msg.Data, &reply); err != nil {
			t.Fatalf("renew reply %s: %v", msg.Data, err)
		}
		return reply
	}
	// Fresh credentials are not renewable yet (an agent renews with a third of the lifetime left).
	if r := ask(agent, reg.AgentID, protocol.CredsRenewRequest{AgentID: reg.AgentID, PublicKey: uc.Subject}); r.Error == nil {
		t.Fatal("credentials issued a moment ago were renewed")
	}
	h.exec(`UPDATE hosts SET nats_expires_at = now() + interval '15 minutes' WHERE id = $1`, reg.ID)
	reply := ask(agent, reg.AgentID, protocol.CredsRenewRequest{AgentID: reg.AgentID, PublicKey: uc.Subject})
	if reply.Error != nil || reply.JWT == "" {
		t.Fatalf("renewal refused: %+v", reply.Error)
	}
	// Asking again at once gets nothing: the renewal just recorded is a whole lifetime away.
	if r := ask(agent, reg.AgentID, protocol.CredsRenewRequest{AgentID: reg.AgentID, PublicKey: uc.Subject}); r.Error == nil {
		t.Fatal("an agent renewed twice in a row")
	}
	renewed, err := jwt.DecodeUserClaims(reply.JWT)
	if err != nil || renewed.Subject != uc.Subject || renewed.Name != reg.AgentID || renewed.Expires != reply.ExpiresAt.Unix() {
		t.Fatalf("renewed JWT: %+v, %v", renewed, err)
	}
	if got := h.count(`SELECT count(*) FROM hosts WHERE id = $1 AND nats_expires_at = to_timestamp($2)`, reg.ID, renewed.Expires); got != 1 {
		t.Fatal("the renewed expiry was not recorded")
	}
	// Operators see it on the host (to spot agents whose credentials expired while they were off).
	var shown struct {
		ExpireAt *time.Time `json:"nats_credentials_expire_at"`
	}
	h.must(200, "GET", "/api/v1/hosts/"+reg.ID.String(), a.token, nil).data(t, &shown)
	if shown.ExpireAt == nil || shown.ExpireAt.Unix() != renewed.Expires {
		t.Fatalf("host view nats_credentials_expire_at = %v, want %d", shown.ExpireAt, renewed.Expires)
	}
	// The renewed JWT with the agent's own seed connects as the agent.
	seed, err := jwt.ParseDecoratedNKey([]byte(reg.NATSCredentials))
	if err != nil {
		t.Fatal(err)
	}
	seedBytes, _ := seed.Seed()
	file, err := jwt.FormatUserConfig(reply.JWT, seedBytes)
	if err != nil {
		t.Fatal(err)
	}
	connectAgent(t, h.natsURL, reg.AgentID, writeCreds(t, dir, "renewed", natsauth.Creds{File: file}))

	// Credentials issued before JWTs expired (no recorded expiry) renew at once, into an expiring JWT;
	// the key stays marked, so its revocation will never be pruned.
	h.exec(`UPDATE hosts SET nats_expires_at = NULL, nats_unexpiring = true WHERE id = $1`, reg.ID)
	if r := ask(agent, reg.AgentID, protocol.CredsRenewRequest{AgentID: reg.AgentID, PublicKey: uc.Subject}); r.Error != nil || r.ExpiresAt.IsZero() {
		t.Fatalf("renewing credentials without expiry: %+v", r.Error)
	}
	if n := h.count(`SELECT count(*) FROM hosts WHERE id = $1 AND nats_unexpiring AND nats_expires_at IS NOT NULL`, reg.ID); n != 1 {
		t.Fatal("a renewed key without expiry lost its mark or its new expiry")
	}

	// Another host's key, or a mismatched payload agent id: refused (other's credentials are renewable).
	h.exec(`UPDATE hosts SET nats_expires_at = now() + interval '15 minutes' WHERE id = $1`, other.ID)
	otherJWT, _ := jwt.ParseDecoratedJWT([]byte(other.NATSCredentials))
	otherClaims, _ := jwt.DecodeUserClaims(otherJWT)
	if r := ask(agent, reg.AgentID, protocol.CredsRenewRequest{AgentID: reg.AgentID, PublicKey: otherClaims.Subject}); r.Error == nil || r.Error.Code != protocol.CodeNotFound {
		t.Fatalf("renewing another host's key: %+v", r)
	}
	if r := ask(agent, reg.AgentID, protocol.CredsRenewRequest{AgentID: other.AgentID, PublicKey: uc.Subject}); r.Error == nil {
		t.Fatal("a payload agent id other than the subject's was renewed")
	}
	// A reply subject outside the agent's own inbox gets no answer (services may send there).
	if _, err := h.nc.Request(protocol.CredsRenewSubject(reg.AgentID), []byte(`{}`), 500*time.Millisecond); !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("answer to a foreign inbox: %v", err)
	}

	// Re-issue (re-enrolment): a new key; the old one is revoked and disconnected.
	var reissued registeredJSON
	h.must(200, "POST", "/api/v1/hosts/"+reg.ID.String()+"/credentials", a.token, nil).data(t, &reissued)
	newJWT, _ := jwt.ParseDecoratedJWT([]byte(reissued.NATSCredentials))
	newClaims, _ := jwt.DecodeUserClaims(newJWT)
	if newClaims == nil || newClaims.Subject == uc.Subject || newClaims.Expires == 0 {
		t.Fatal("re-issue did not give a new expiring key")
	}
	testinfra.Eventually(t, time.Minute, func() bool { return h.connectRefused(filepath.Join(dir, "renewed.creds")) },
		"the old key to be refused")
	connectAgent(t, h.natsURL, reg.AgentID, writeCreds(t, dir, "reissued", natsauth.Creds{File: []byte(reissued.NATSCredentials)}))

	// Revoked: the renewal is refused.
	h.must(200, "DELETE", "/api/v1/hosts/"+other.ID.String(), a.token, nil)
	if n := h.count(`SELECT count(*) FROM nats_revocations WHERE public_key = $1 AND prune_after IS NOT NULL`, otherClaims.Subject); n != 1 {
		t.Fatal("an expiring key's revocation has no prune time")
	}
	otherFile := writeCreds(t, dir, "other", natsauth.Creds{File: []byte(other.NATSCredentials)})
	if !h.connectRefused(otherFile) {
		t.Fatal("a revoked agent connected")
	}

	// A key issued before JWTs expired (nats_unexpiring): its revocation is never pruned.
	legacyIDs, legacyKeys := h.insertLiveHosts(a, "legacy", 1, time.Now().Add(-time.Hour))
	h.exec(`UPDATE hosts SET nats_unexpiring = true, nats_expires_at = NULL WHERE id = $1`, legacyIDs[0])
	h.must(200, "DELETE", "/api/v1/hosts/"+legacyIDs[0].String(), a.token, nil)
	if n := h.count(`SELECT count(*) FROM nats_revocations WHERE public_key = $1 AND prune_after IS NULL`, legacyKeys[0]); n != 1 {
		t.Fatal("a revocation of a key without expiry is prunable")
	}
	_, list := h.serverAccount(authority)
	if _, ok := list[legacyKeys[0]]; !ok {
		t.Fatal("the legacy key is not revoked")
	}
}
