package configapi_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

// deletedAudits counts the credential_deleted audit events.
func (f *rotationFixture) deletedAudits() int {
	f.h.t.Helper()
	return f.h.count(`SELECT count(*)::int FROM audit_events WHERE action = 'credential_deleted'`)
}

// checkUntouched asserts that no collectors row changed and that nothing was queued or revised since.
func (f *rotationFixture) checkUntouched(before map[configKey]storedConfig, outboxBefore, revBefore int64) {
	t := f.h.t
	t.Helper()
	after := f.collectors()
	if len(after) != len(before) {
		t.Fatalf("%d collectors rows, want %d", len(after), len(before))
	}
	for k, b := range before {
		if after[k] != b {
			t.Fatalf("%s %s changed from %+v to %+v", k.scope, k.id, b, after[k])
		}
	}
	if ev := f.eventsSince(outboxBefore); len(ev) != 0 {
		t.Fatalf("%d events queued: %+v", len(ev), ev)
	}
	if revs := f.revisionsSince(revBefore); len(revs) != 0 {
		t.Fatalf("%d revisions written: %+v", len(revs), revs)
	}
}

// TestCredentialDeleteInUseRefused: deleting a credential that live configs of the client still reference
// answers 409 credential_in_use naming how many and where (environment and active host override, not the
// revoked host, nor another client's configs), deletes nothing and writes nothing: the credential is still
// there and still injected. A bad force value is a 400. Once the references are gone (rewritten, or
// deleted as a tombstone), the same DELETE succeeds without force.
func TestCredentialDeleteInUseRefused(t *testing.T) {
	t.Parallel()
	f := newRotationFixture(t)
	h := f.h
	before, outboxBefore, revBefore, audits := f.collectors(), f.lastOutboxID(), f.lastRevisionID(), f.deletedAudits()

	for _, query := range []string{"", "?force=false"} {
		r := h.must(409, "DELETE", f.credPath(f.cred)+query, f.a.token, nil)
		if code := r.errCode(t); code != "credential_in_use" {
			t.Fatalf("DELETE%s: code %q, want credential_in_use", query, code)
		}
		msg := r.message(t)
		for _, want := range []string{"2 live collectors configs", "environment " + f.a.env.String(), "host " + f.a.host.String(), "force=true"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("DELETE%s: message %q does not say %q", query, msg, want)
			}
		}
		for _, other := range []uuid.UUID{f.revoked, f.host2, f.staging, f.b.env, f.b.host, f.b.client} {
			if strings.Contains(msg, other.String()) {
				t.Fatalf("DELETE%s: message %q names %s, which does not reference the credential here", query, msg, other)
			}
		}
	}
	for _, bad := range []string{"maybe", "yes", "2"} {
		r := h.must(400, "DELETE", f.credPath(f.cred)+"?force="+bad, f.a.token, nil)
		if code := r.errCode(t); code != "invalid_request" || !strings.Contains(r.message(t), "force") {
			t.Fatalf("force=%s: code %q message %q", bad, code, r.message(t))
		}
	}

	f.checkUntouched(before, outboxBefore, revBefore)
	if n := f.deletedAudits(); n != audits {
		t.Fatalf("%d credential_deleted audit events after refused deletes", n-audits)
	}
	var meta struct {
		ID uuid.UUID `json:"id"`
	}
	h.must(200, "GET", f.credPath(f.cred), f.a.token, nil).data(t, &meta)
	if meta.ID != f.cred {
		t.Fatalf("GET answered %+v", meta)
	}
	if pw := h.inject(f.a, f.cred.String()); pw != "s3cret-1" {
		t.Fatal("the refused delete changed what the credential injects")
	}

	// Remove the references: rewrite the environment's collectors, delete the host override (tombstone).
	h.must(200, "PUT", envConfigPath(f.a.env, "collectors"), f.a.token, map[string]any{"config_data": []map[string]any{{
		"type": "tcp", "name": "ssh", "address": "localhost:22",
	}}})
	h.must(409, "DELETE", f.credPath(f.cred), f.a.token, nil) // the host override still references it
	h.must(200, "DELETE", hostConfigPath(f.a.host, "collectors"), f.a.token, nil)

	before, outboxBefore, revBefore = f.collectors(), f.lastOutboxID(), f.lastRevisionID()
	h.must(204, "DELETE", f.credPath(f.cred), f.a.token, nil)
	h.must(404, "GET", f.credPath(f.cred), f.a.token, nil)
	f.checkUntouched(before, outboxBefore, revBefore) // an unreferenced credential re-announces nothing
}

// TestCredentialDeleteUnreferenced: a credential no config references is deleted without force, audited
// with nothing re-announced.
func TestCredentialDeleteUnreferenced(t *testing.T) {
	t.Parallel()
	f := newRotationFixture(t)
	h := f.h
	unused := f.createCredential(f.a, "unused", "unused-1")
	before, outboxBefore, revBefore := f.collectors(), f.lastOutboxID(), f.lastRevisionID()

	h.must(204, "DELETE", f.credPath(unused), f.a.token, nil)
	h.must(404, "GET", f.credPath(unused), f.a.token, nil)
	f.checkUntouched(before, outboxBefore, revBefore)
	var reannounced string
	var forced *string
	if err := h.pool.QueryRow(t.Context(), `SELECT detail->>'reannounced_configs', detail->>'forced' FROM audit_events
		WHERE action = 'credential_deleted' AND object = $1`, "credential:"+unused.String()).Scan(&reannounced, &forced); err != nil ||
		reannounced != "0" || forced != nil {
		t.Fatalf("audit detail reannounced_configs = %q, forced = %v (%v); want 0 and no forced", reannounced, forced, err)
	}
	// The credentials that are in use are still there.
	h.must(200, "GET", f.credPath(f.cred), f.a.token, nil)
	h.must(200, "GET", f.credPath(f.other), f.a.token, nil)
}

// TestCredentialDeleteIgnoresOtherClients: references from another client's configs to a credential's id
// never block its deletion (and are never re-announced), in either direction: a's credential referenced
// only by b's configs is deleted without force, and b's own credential referenced by a's configs too.
func TestCredentialDeleteIgnoresOtherClients(t *testing.T) {
	t.Parallel()
	f := newRotationFixture(t)
	h := f.h
	lone := f.createCredential(f.a, "lone", "lone-1")
	h.must(200, "PUT", envConfigPath(f.b.env, "collectors"), f.b.token, mysqlCollectors("main", lone))
	h.must(200, "PUT", hostConfigPath(f.b.host, "collectors"), f.b.token, mysqlCollectors("main", lone))
	theirs := f.createCredential(f.b, "theirs", "theirs-1")
	h.must(200, "PUT", hostConfigPath(f.host2, "collectors"), f.a.token, mysqlCollectors("replica", theirs))

	before, outboxBefore, revBefore := f.collectors(), f.lastOutboxID(), f.lastRevisionID()
	h.must(204, "DELETE", f.credPath(lone), f.a.token, nil)
	h.must(404, "GET", f.credPath(lone), f.a.token, nil)
	h.must(204, "DELETE", credentialsPath(f.b.client)+"/"+theirs.String(), f.b.token, nil)
	f.checkUntouched(before, outboxBefore, revBefore)

	// a's credential cred stays in use through a's configs only (b's reference the same id too).
	r := h.must(409, "DELETE", f.credPath(f.cred), f.a.token, nil)
	if msg := r.message(t); !strings.Contains(msg, "2 live collectors configs") || strings.Contains(msg, f.b.env.String()) {
		t.Fatalf("message %q", msg)
	}
	if r.errCode(t) != "credential_in_use" {
		t.Fatalf("code %q", r.errCode(t))
	}
	// b's token cannot learn anything about a's credential from the refusal: it is a 404 for b.
	if code := h.must(404, "DELETE", f.credPath(f.cred), f.b.token, nil).errCode(t); code != "not_found" {
		t.Fatalf("b deleting a's credential: code %q", code)
	}
	if pw := h.inject(f.a, f.cred.String()); pw != "s3cret-1" {
		t.Fatal("a's credential changed")
	}
}
