package configapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/natsauth"
)

// batchEntry is one entry of a batch registration body.
type batchEntry struct {
	Hostname string `json:"hostname"`
	AgentID  string `json:"agent_id,omitempty"`
}

func batchBody(entries []batchEntry) map[string]any { return map[string]any{"hosts": entries} }

// registeredJSON is a registered host as the registration answers it: with its NATS creds file, shown
// only this once.
type registeredJSON struct {
	hostJSON
	NATSCredentials string `json:"nats_credentials"`
}

// TestHostBatchRegistration: a batch registers every host in request order, in one go; any invalid
// entry, duplicate or collision with an existing host registers none, and the error names the entry.
func TestHostBatchRegistration(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme")
	batchPath := "/api/v1/environments/" + a.env.String() + "/hosts/batch"
	hostsIn := func(env uuid.UUID) int {
		return h.count(`SELECT count(*) FROM hosts WHERE environment_id = $1`, env)
	}

	// 250 hosts; every fifth without an agent_id (generated), hostnames padded with spaces (trimmed).
	entries := make([]batchEntry, 250)
	for i := range entries {
		entries[i] = batchEntry{Hostname: fmt.Sprintf(" node-%03d ", i), AgentID: fmt.Sprintf("agent-node-%03d", i)}
		if i%5 == 0 {
			entries[i].AgentID = ""
		}
	}
	var got []registeredJSON
	// Importing hosts with given agent ids takes an admin token (agent ids are global NATS identities).
	h.must(201, "POST", batchPath, h.admin, batchBody(entries)).data(t, &got)
	if len(got) != len(entries) {
		t.Fatalf("%d hosts returned for %d entries", len(got), len(entries))
	}
	ids := map[uuid.UUID]bool{}
	for i, r := range got {
		if r.Hostname != strings.TrimSpace(entries[i].Hostname) || r.EnvironmentID != a.env || r.ClientID != a.client || r.NATSCredentials != "" {
			t.Fatalf("entry %d answered %+v", i, r)
		}
		if entries[i].AgentID != "" && r.AgentID != entries[i].AgentID {
			t.Fatalf("entry %d: agent_id %q, want %q", i, r.AgentID, entries[i].AgentID)
		}
		if _, err := uuid.Parse(r.AgentID); entries[i].AgentID == "" && err != nil {
			t.Fatalf("entry %d: generated agent_id %q is not a UUID", i, r.AgentID)
		}
		if r.ID == uuid.Nil || ids[r.ID] {
			t.Fatalf("entry %d: id %s is nil or repeated", i, r.ID)
		}
		ids[r.ID] = true
	}
	// All listed afterwards, as returned.
	var page struct {
		Data []hostJSON `json:"data"`
	}
	if err := json.Unmarshal(h.must(200, "GET", "/api/v1/environments/"+a.env.String()+"/hosts?limit=5000", a.token, nil).body, &page); err != nil {
		t.Fatal(err)
	}
	listed := map[uuid.UUID]hostJSON{}
	for _, hj := range page.Data {
		listed[hj.ID] = hj
	}
	if len(page.Data) != len(entries)+1 {
		t.Fatalf("%d hosts listed, want %d", len(page.Data), len(entries)+1)
	}
	for _, r := range got {
		if l, ok := listed[r.ID]; !ok || l.AgentID != r.AgentID || l.Hostname != r.Hostname {
			t.Fatalf("registered %+v, listed %+v", r, l)
		}
	}
	// One audit event for the batch.
	var detail map[string]any
	var object string
	if err := h.pool.QueryRow(context.Background(), `SELECT object, detail FROM audit_events WHERE action = 'hosts_registered'`).Scan(&object, &detail); err != nil {
		t.Fatal(err)
	}
	if object != "environment:"+a.env.String() || detail["hosts"] != float64(len(entries)) || detail["nats_users"] != float64(0) {
		t.Fatalf("audit event: %s %v", object, detail)
	}
	before := hostsIn(a.env)

	// Refusals: nothing registered, and the message names the entry. The offending entry comes last, so
	// a registration that was not all-or-nothing would have left the others behind.
	fresh := func(n int, prefix string) []batchEntry {
		out := make([]batchEntry, n)
		for i := range out {
			out[i] = batchEntry{Hostname: fmt.Sprintf("%s-%d", prefix, i), AgentID: fmt.Sprintf("%s-agent-%d", prefix, i)}
		}
		return out
	}
	with := func(es []batchEntry, i int, e batchEntry) []batchEntry { es[i] = e; return es }
	refusals := []struct {
		name    string
		body    any
		status  int
		message string
	}{
		{"empty hostname", batchBody(with(fresh(10, "r1"), 9, batchEntry{Hostname: "  "})), 400, "hosts[9].hostname"},
		{"hostname too long", batchBody(with(fresh(10, "r2"), 9, batchEntry{Hostname: strings.Repeat("h", 256)})), 400, "hosts[9].hostname"},
		{"NUL in a hostname", batchBody(with(fresh(10, "r2n"), 9, batchEntry{Hostname: "a\x00b"})), 400, "hosts[9].hostname: must not contain NUL"},
		{"invalid agent_id", batchBody(with(fresh(10, "r3"), 9, batchEntry{Hostname: "ok", AgentID: "bad.agent"})), 400, "hosts[9].agent_id"},
		{"duplicate agent_id", batchBody(with(fresh(10, "r4"), 9, batchEntry{Hostname: "r4-x", AgentID: "r4-agent-2"})), 400, "hosts[9].agent_id: the same as hosts[2].agent_id"},
		{"duplicate hostname", batchBody(with(fresh(10, "r5"), 9, batchEntry{Hostname: " r5-3"})), 400, "hosts[9].hostname: the same as hosts[3].hostname"},
		{"existing agent_id", batchBody(with(fresh(10, "r6"), 9, batchEntry{Hostname: "r6-x", AgentID: "agent-node-007"})), 409, `hosts[9].agent_id: a host with agent_id "agent-node-007" already exists`},
		{"another environment's agent_id", batchBody(with(fresh(10, "r7"), 9, batchEntry{Hostname: "r7-x", AgentID: a.agentID})), 409, "hosts[9].agent_id"},
		{"existing hostname", batchBody(with(fresh(10, "r8"), 9, batchEntry{Hostname: "node-001"})), 409, "hosts[9].hostname: a host of this environment already has this hostname"},
		{"several collisions", batchBody(with(with(fresh(10, "r9"), 4, batchEntry{Hostname: "node-002"}), 9, batchEntry{Hostname: "x", AgentID: "agent-node-003"})), 409, "hosts[4].hostname"},
		{"1001 entries", batchBody(fresh(1001, "r10")), 400, "1 to 1000 hosts"},
		{"empty list", `{"hosts": []}`, 400, "1 to 1000 hosts"},
		{"no list", `{}`, 400, "1 to 1000 hosts"},
		{"unknown entry field", `{"hosts": [{"hostname": "x", "name": "y"}]}`, 400, "unknown field"},
		{"single-host body", `{"hostname": "x"}`, 400, "unknown field"},
	}
	for _, rf := range refusals {
		r := h.must(rf.status, "POST", batchPath, h.admin, rf.body)
		if msg := r.message(t); !strings.Contains(msg, rf.message) {
			t.Errorf("%s: message %q, want it to contain %q", rf.name, msg, rf.message)
		}
		if rf.name == "several collisions" && !strings.Contains(r.message(t), "2 entries collide") {
			t.Errorf("%s: message %q does not count the collisions", rf.name, r.message(t))
		}
		if n := hostsIn(a.env); n != before {
			t.Fatalf("%s: %d hosts registered", rf.name, n-before)
		}
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'hosts_registered'`); n != 1 {
		t.Fatalf("%d hosts_registered audit events, want 1 (refused batches are not audited)", n)
	}

	// 1000 entries with the longest hostname and agent_id fit the body limit.
	long := make([]batchEntry, 1000)
	for i := range long {
		long[i] = batchEntry{
			Hostname: fmt.Sprintf("%04d", i) + strings.Repeat("h", 251),
			AgentID:  fmt.Sprintf("%04d", i) + strings.Repeat("a", 124),
		}
	}
	h.must(201, "POST", batchPath, h.admin, batchBody(long)).data(t, &got)
	if len(got) != 1000 || got[999].AgentID != long[999].AgentID || hostsIn(a.env) != before+1000 {
		t.Fatalf("1000 long entries: %d returned, %d registered", len(got), hostsIn(a.env)-before)
	}

	// A client token lets the server choose every agent id: naming one is refused, so no answer can
	// tell it whether an id is taken in another tenant. A hostname collision in its own environment is
	// still named.
	audits := h.count(`SELECT count(*) FROM audit_events WHERE action = 'hosts_registered'`)
	for _, probe := range []string{"agent-node-007", "never-used-agent"} {
		r := h.must(400, "POST", batchPath, a.token, batchBody(with(fresh(3, "c1"), 2, batchEntry{Hostname: "c1-x", AgentID: probe})))
		if msg := r.message(t); !strings.Contains(msg, "hosts[0].agent_id") || !strings.Contains(msg, "chosen by the server") {
			t.Fatalf("client-chosen agent_id %s: %q", probe, msg)
		}
	}
	own := []batchEntry{{Hostname: "c2-a"}, {Hostname: "node-004"}}
	if r := h.must(409, "POST", batchPath, a.token, batchBody(own)); !strings.Contains(r.message(t), "hosts[1].hostname") {
		t.Fatalf("own hostname collision: %s", r.body)
	}
	var generated []registeredJSON
	h.must(201, "POST", batchPath, a.token, batchBody([]batchEntry{{Hostname: "c3-a"}, {Hostname: "c3-b"}})).data(t, &generated)
	for _, r := range generated {
		if _, err := uuid.Parse(r.AgentID); err != nil {
			t.Fatalf("client batch: agent_id %q is not a generated UUID", r.AgentID)
		}
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'hosts_registered'`); n != audits+1 {
		t.Fatalf("%d hosts_registered audit events for the client's batch, want 1", n-audits)
	}

	// Another client's environment: 404 and a cross-tenant audit event, whatever the body; nothing
	// registered there.
	b := h.newTenant("bravo")
	for _, body := range []any{batchBody(fresh(3, "intruder")), `{"name": "intruder"}`, `not json`} {
		audits := h.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access'`)
		r := h.must(404, "POST", "/api/v1/environments/"+b.env.String()+"/hosts/batch", a.token, body)
		if r.errCode(t) != "not_found" || strings.Contains(string(r.body), "bravo") {
			t.Fatalf("cross-tenant batch: %s", r.body)
		}
		if n := h.count(`SELECT count(*) FROM audit_events WHERE action = 'cross_tenant_access'`); n != audits+1 {
			t.Fatalf("cross-tenant batch: %d audit events, want 1", n-audits)
		}
	}
	if n := hostsIn(b.env); n != 1 {
		t.Fatalf("bravo's environment has %d hosts, want its own 1", n)
	}
	h.must(404, "POST", "/api/v1/environments/"+uuid.NewString()+"/hosts/batch", a.token, batchBody(fresh(1, "ghost")))
}

// TestHostBatchNATSCredentials: with per-agent NATS identity, every host of a batch gets its own NATS
// user (stored key, creds file returned once), and those credentials connect as that agent.
func TestHostBatchNATSCredentials(t *testing.T) {
	t.Parallel()
	h, a := newTenantHarness(t, "acme", withNATSIdentity(newAuthority(t)))
	entries := make([]batchEntry, 40)
	for i := range entries {
		entries[i] = batchEntry{Hostname: fmt.Sprintf("db-%d", i), AgentID: fmt.Sprintf("agent-db-%d", i)}
	}
	var got []registeredJSON
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts/batch", h.admin, batchBody(entries)).data(t, &got)
	if len(got) != len(entries) {
		t.Fatalf("%d hosts returned", len(got))
	}
	files := map[string]bool{}
	for i, r := range got {
		if r.AgentID != entries[i].AgentID || !isCredsFile(r.NATSCredentials) || files[r.NATSCredentials] {
			t.Fatalf("entry %d: agent %s, creds missing or repeated", i, r.AgentID)
		}
		files[r.NATSCredentials] = true
	}
	if n := h.count(`SELECT count(DISTINCT nats_public_key) FROM hosts WHERE environment_id = $1 AND agent_id LIKE 'agent-db-%'`, a.env); n != len(entries) {
		t.Fatalf("%d distinct NATS keys stored, want %d", n, len(entries))
	}
	var detail map[string]any
	var object string
	if err := h.pool.QueryRow(context.Background(), `SELECT object, detail FROM audit_events WHERE action = 'hosts_registered'`).Scan(&object, &detail); err != nil {
		t.Fatal(err)
	}
	if detail["nats_users"] != float64(len(entries)) {
		t.Fatalf("audit detail %v", detail)
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE detail::text LIKE '%NKEY%' OR detail::text LIKE '%JWT%'`); n != 0 {
		t.Fatal("credentials reached the audit trail")
	}

	// Two of them connect as their agent and receive their own command.
	dir := t.TempDir()
	for _, r := range []registeredJSON{got[0], got[len(got)-1]} {
		file := writeCreds(t, dir, r.AgentID, natsauth.Creds{File: []byte(r.NATSCredentials)})
		agent, _ := connectAgent(t, h.natsURL, r.AgentID, file)
		h.receivesOwnCommand(agent, r.AgentID)
		agent.Close()
	}
}
