package natsapi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap/zapcore"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential/internal/credential"
)

func TestReplyErrorMapsDatabaseOutagesToUnavailable(t *testing.T) {
	log, logs := testinfra.Logger(t)
	s := New(credential.NewService(nil, nil), credential.NewInjector(nil, nil, log), Options{}, log)
	cases := []struct {
		name     string
		err      error
		code     string
		message  string
		logLevel zapcore.Level
	}{
		// As the postgres adapter reports outages: the domain's error around the driver's.
		{"lost connection", fmt.Errorf("credential: inject: read credentials: %w: %w", credential.ErrStoreUnavailable, &pgconn.PgError{Severity: "FATAL", Code: "57P01"}),
			protocol.CodeUnavailable, "database unavailable", zapcore.WarnLevel},
		{"connection failure", fmt.Errorf("postgres: get: %w: %w", credential.ErrStoreUnavailable, &pgconn.PgError{Severity: "FATAL", Code: "08006"}),
			protocol.CodeUnavailable, "database unavailable", zapcore.WarnLevel},
		{"query error", fmt.Errorf("postgres: list: %w", &pgconn.PgError{Severity: "ERROR", Code: "42P01", Message: "relation credentials"}),
			protocol.CodeInternal, "internal error", zapcore.ErrorLevel},
		{"cipher unavailable", fmt.Errorf("%w: vault sealed", credential.ErrUnavailable), protocol.CodeUnavailable, "", zapcore.WarnLevel},
	}
	for _, c := range cases {
		before := logs.Len()
		got := s.replyError("get", c.err)
		if got.Code != c.code || (c.message != "" && got.Message != c.message) {
			t.Errorf("%s: replied %s %q, want %s %q", c.name, got.Code, got.Message, c.code, c.message)
		}
		entries := logs.All()[before:]
		if len(entries) != 1 || entries[0].Level != c.logLevel {
			t.Errorf("%s: logged %+v, want one %s entry", c.name, entries, c.logLevel)
		}
	}
}

// With the database refusing connections, management and inject requests answer unavailable (which
// config-api and delivery retry) and leak nothing; once it is back, the same requests succeed.
func TestDatabaseDownAnswersUnavailable(t *testing.T) {
	st := newStack(t)
	db := st.create(t, "", "db", map[string]string{"password": planted})
	get := protocol.CredentialRef{ClientID: st.client, ID: db.ID}
	list := protocol.CredentialListRequest{ClientID: st.client}
	inject := protocol.InjectRequest{Items: []protocol.InjectItem{{Key: "h", ClientID: st.client, EnvironmentID: st.envs[0], Collectors: refs(db.ID)}}}
	create := protocol.CredentialCreateRequest{ClientID: st.client, Name: "cache", Secret: map[string]string{"password": planted}}

	restore := testinfra.RefuseConnections(t, st.pool)
	for _, r := range []struct {
		subject string
		body    any
	}{
		{protocol.CredentialGetSubject, get},
		{protocol.CredentialListSubject, list},
		{protocol.CredentialInjectSubject, inject},
		{protocol.CredentialCreateSubject, create},
	} {
		e := st.call(t, r.subject, r.body, nil) // call also checks the reply never holds the secret
		if e == nil || e.Code != protocol.CodeUnavailable || e.Message != "database unavailable" {
			t.Errorf("%s with the database down: got %+v, want %s", r.subject, e, protocol.CodeUnavailable)
		}
	}
	if n := st.logs.FilterMessage("credential request failed: database unavailable").FilterLevelExact(zapcore.WarnLevel).Len(); n < 4 {
		t.Errorf("%d outage warnings logged, want 4", n)
	}
	if n := st.logs.FilterMessage("credential request failed").Len(); n != 0 {
		t.Errorf("the outage was logged as an internal failure %d times", n)
	}

	restore()
	// The pool may still hold a connection that died in the outage; a retrying client gets through.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var got protocol.CredentialMeta
		e := st.call(t, protocol.CredentialGetSubject, get, &got)
		if e == nil {
			if got.ID != db.ID {
				t.Fatalf("get after the outage: %+v", got)
			}
			break
		}
		if e.Code != protocol.CodeUnavailable || time.Now().After(deadline) {
			t.Fatalf("get after the outage: %+v", e)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var l protocol.CredentialListReply
	if e := st.call(t, protocol.CredentialListSubject, list, &l); e != nil || len(l.Credentials) != 1 || !strings.EqualFold(l.Credentials[0].ID, db.ID) {
		t.Fatalf("list after the outage: %+v %+v", e, l)
	}
}
