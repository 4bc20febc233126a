package credential_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
)

// A credential bound to allowed targets, through the whole service (real PostgreSQL, NATS, keyring):
// the targets are validated, stored in canonical form and returned as metadata; injection into a
// collector aimed at an allowed target works, into any other target fails the item (all-or-nothing)
// without the secret; rotation replaces or clears the targets.
func TestCredentialAllowedTargets(t *testing.T) {
	e := newEnv(t)
	setEnv(t, map[string]string{"CONFIGSYNC_KEYRING_FILE": filepath.Join(t.TempDir(), "keyring"), "CONFIGSYNC_KEYRING_CREATE": "true"})
	app, _ := e.app(t)
	defer app.RequireStop()

	create := func(name string, targets []string) (protocol.CredentialMeta, *protocol.Error) {
		var meta protocol.CredentialMeta
		perr := e.call(t, protocol.CredentialCreateSubject, protocol.CredentialCreateRequest{ClientID: e.client, Name: name,
			Secret: map[string]string{"password": planted, "username": "app"}, AllowedTargets: targets}, &meta)
		return meta, perr
	}
	for _, bad := range [][]string{{"db.internal"}, {"db.internal:0"}, {"db.internal:x"}, {"db..internal:5432"}, {"*db.internal:5432"},
		{"http://db.internal:5432"}, {"db.internal:5432/x"}, {""}, {strings.Repeat("a", 301) + ":1"}} {
		if _, perr := create("bad", bad); perr == nil || perr.Code != protocol.CodeInvalidRequest || !strings.Contains(perr.Message, "allowed_targets[0]") {
			t.Errorf("allowed_targets %q: %+v", bad, perr)
		}
	}
	many := make([]string, 33)
	for i := range many {
		many[i] = "h:" + string(rune('1'+i%9))
	}
	if _, perr := create("many", many); perr == nil || !strings.Contains(perr.Message, "at most 32") {
		t.Errorf("33 targets: %+v", perr)
	}

	bound, perr := create("bound", []string{"DB.Internal.:5432", "*.prod.example.com:*", "db.internal:5432", "[2001:DB8::1]:6379"})
	if perr != nil {
		t.Fatal(perr)
	}
	want := []string{"*.prod.example.com:*", "[2001:db8::1]:6379", "db.internal:5432"}
	if !slices.Equal(bound.AllowedTargets, want) {
		t.Fatalf("allowed targets %q, want %q", bound.AllowedTargets, want)
	}
	var got protocol.CredentialMeta
	if perr := e.call(t, protocol.CredentialGetSubject, protocol.CredentialRef{ClientID: e.client, ID: bound.ID}, &got); perr != nil || !slices.Equal(got.AllowedTargets, want) {
		t.Fatalf("get: %+v %+v", got, perr)
	}
	free, perr := create("free", nil)
	if perr != nil || free.AllowedTargets != nil {
		t.Fatalf("credential without targets: %+v %+v", free, perr)
	}

	inject := func(collectors ...map[string]any) protocol.InjectResult {
		raw, _ := json.Marshal(collectors)
		var reply protocol.InjectReply
		if perr := e.call(t, protocol.CredentialInjectSubject, protocol.InjectRequest{Items: []protocol.InjectItem{
			{Key: "k", ClientID: e.client, EnvironmentID: e.envID, Collectors: raw}}}, &reply); perr != nil || len(reply.Results) != 1 {
			t.Fatalf("inject: %+v %+v", reply, perr)
		}
		return reply.Results[0]
	}
	col := func(typ, name string, fields ...any) map[string]any {
		c := map[string]any{"type": typ, "name": name}
		for i := 0; i < len(fields); i += 2 {
			c[fields[i].(string)] = fields[i+1]
		}
		return c
	}
	for _, tt := range []struct {
		name       string
		collectors []map[string]any
		refused    string // empty: injected
	}{
		{"postgres at the default port", []map[string]any{col("postgres", "pg", "host", "db.internal", "credential_id", bound.ID)}, ""},
		{"host names compare case-insensitively", []map[string]any{col("postgres", "pg", "host", "DB.INTERNAL.", "port", 5432, "credential_id", bound.ID)}, ""},
		{"wildcard host, any port", []map[string]any{col("mysql", "m", "host", "a.b.prod.example.com", "port", 3307, "credential_id", bound.ID)}, ""},
		{"http url, default https port", []map[string]any{col("http", "h", "url", "https://api.prod.example.com/health", "credential_id", bound.ID)}, ""},
		{"IPv6 redis", []map[string]any{col("redis", "r", "host", "2001:db8:0::1", "port", 6379, "credential_id", bound.ID)}, ""},
		{"a credential without targets goes anywhere", []map[string]any{col("mysql", "m", "host", "evil.example.net", "credential_id", free.ID)}, ""},
		{"wrong port", []map[string]any{col("mysql", "m", "host", "db.internal", "credential_id", bound.ID)},
			"credential " + bound.ID + " is not allowed for the target of collectors[0] (db.internal:3306)"},
		{"the wildcard's own domain is not below it", []map[string]any{col("http", "h", "url", "http://prod.example.com:8080/", "credential_id", bound.ID)},
			"is not allowed for the target of collectors[0] (prod.example.com:8080)"},
		{"suffix without the dot", []map[string]any{col("http", "h", "url", "https://evilprod.example.com/", "credential_id", bound.ID)},
			"(evilprod.example.com:443)"},
		{"no host to check", []map[string]any{col("postgres", "pg", "credential_id", bound.ID)},
			"credential " + bound.ID + " has allowed targets but collectors[0] names no host"},
		{"all-or-nothing", []map[string]any{col("postgres", "ok", "host", "db.internal", "credential_id", bound.ID),
			col("mysql", "free", "host", "x", "credential_id", free.ID), col("redis", "bad", "host", "attacker.example.org", "credential_id", bound.ID)},
			"target of collectors[2] (attacker.example.org:6379)"},
	} {
		r := inject(tt.collectors...)
		if tt.refused == "" {
			if r.Error != nil || !strings.Contains(string(r.Collectors), planted) || len(r.SecretFields) == 0 {
				t.Errorf("%s: not injected: %+v", tt.name, r.Error)
			}
			continue
		}
		if r.Error == nil || r.Error.Code != protocol.CodeCredentialFailed || !strings.Contains(r.Error.Message, tt.refused) ||
			r.Collectors != nil || r.SecretFields != nil || strings.Contains(r.Error.Message, planted) {
			t.Errorf("%s: got %+v (collectors %d bytes), want refusal %q", tt.name, r.Error, len(r.Collectors), tt.refused)
		}
	}

	// Rotation replaces the targets (with or without a new secret), and an empty list clears them.
	rotate := func(targets *[]string) protocol.CredentialMeta {
		var meta protocol.CredentialMeta
		if perr := e.call(t, protocol.CredentialRotateSubject, protocol.CredentialRotateRequest{ClientID: e.client, ID: bound.ID, AllowedTargets: targets}, &meta); perr != nil {
			t.Fatalf("rotate %v: %+v", targets, perr)
		}
		return meta
	}
	attacker := []map[string]any{col("redis", "r", "host", "attacker.example.org", "credential_id", bound.ID)}
	if m := rotate(&[]string{"attacker.example.org:6379"}); !slices.Equal(m.AllowedTargets, []string{"attacker.example.org:6379"}) {
		t.Fatalf("rotated targets %q", m.AllowedTargets)
	}
	if r := inject(attacker...); r.Error != nil {
		t.Fatalf("after allowing the target: %+v", r.Error)
	}
	if m := rotate(nil); !slices.Equal(m.AllowedTargets, []string{"attacker.example.org:6379"}) {
		t.Fatalf("a rotation without targets changed them: %q", m.AllowedTargets)
	}
	if r := inject(col("postgres", "pg", "host", "db.internal", "credential_id", bound.ID)); r.Error == nil {
		t.Fatal("the old targets still allowed after rotation")
	}
	if m := rotate(&[]string{}); m.AllowedTargets != nil {
		t.Fatalf("cleared targets %q", m.AllowedTargets)
	}
	if r := inject(col("postgres", "pg", "host", "anywhere.example", "credential_id", bound.ID)); r.Error != nil {
		t.Fatalf("after clearing the targets: %+v", r.Error)
	}
	var perr2 protocol.CredentialMeta
	if perr := e.call(t, protocol.CredentialRotateSubject, protocol.CredentialRotateRequest{ClientID: e.client, ID: bound.ID, AllowedTargets: &[]string{"nope"}}, &perr2); perr == nil || perr.Code != protocol.CodeInvalidRequest {
		t.Fatalf("rotate to a bad target: %+v", perr)
	}
}
