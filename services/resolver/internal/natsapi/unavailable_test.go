package natsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap/zapcore"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver/internal/postgres"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

func TestReplyErrorMapsDatabaseOutagesToUnavailable(t *testing.T) {
	log, logs := testinfra.Logger(t)
	s := New(resolve.New(fuzzStore{}, resolve.Options{}), Options{}, log)
	connectErr := testinfra.UnreachablePostgres(t).Ping(context.Background())
	cases := []struct {
		name     string
		err      error
		code     string
		message  string
		outage   bool
		logLevel zapcore.Level
	}{
		// As the postgres adapter reports outages: the domain's error around the driver's.
		{"connect error", fmt.Errorf("resolve: host h: %w: %w", resolve.ErrUnavailable, connectErr), protocol.CodeUnavailable, "database unavailable", true, zapcore.WarnLevel},
		{"admin shutdown", fmt.Errorf("postgres: read host and config rows: %w: %w", resolve.ErrUnavailable, &pgconn.PgError{Severity: "FATAL", Code: "57P01"}),
			protocol.CodeUnavailable, "database unavailable", true, zapcore.WarnLevel},
		{"too many connections", fmt.Errorf("%w: %w", resolve.ErrUnavailable, &pgconn.PgError{Severity: "FATAL", Code: "53300"}), protocol.CodeUnavailable, "database unavailable", true, zapcore.WarnLevel},
		{"syntax error", fmt.Errorf("postgres: %w", &pgconn.PgError{Severity: "ERROR", Code: "42601", Message: "SELECT secret FROM x"}),
			protocol.CodeInternal, "internal error", false, zapcore.ErrorLevel},
		{"deadline", fmt.Errorf("resolve: %w", context.DeadlineExceeded), protocol.CodeUnavailable, "resolver timed out", false, zapcore.WarnLevel},
	}
	for _, c := range cases {
		before := logs.Len()
		got := s.replyError("resolve", c.err)
		if got.Code != c.code || got.Message != c.message {
			t.Errorf("%s: replied %s %q, want %s %q", c.name, got.Code, got.Message, c.code, c.message)
		}
		entries := logs.All()[before:]
		if len(entries) != 1 || entries[0].Level != c.logLevel {
			t.Errorf("%s: logged %+v, want one %s entry", c.name, entries, c.logLevel)
			continue
		}
		if isOutage := entries[0].Message == "resolver request failed: database unavailable"; isOutage != c.outage {
			t.Errorf("%s: logged %q", c.name, entries[0].Message)
		}
		if _, ok := entries[0].ContextMap()["error"]; !ok {
			t.Errorf("%s: the cause is not logged", c.name)
		}
	}
}

// With PostgreSQL unreachable, every endpoint answers unavailable (which delivery retries), not internal.
func TestDatabaseDownAnswersUnavailable(t *testing.T) {
	srv := testinfra.NATS(t)
	nc := srv.Connect(t)
	startService(t, nc, postgres.NewStore(testinfra.UnreachablePostgres(t)), Options{RequestTimeout: 20 * time.Second})
	requests := []struct {
		subject string
		body    any
	}{
		{protocol.ResolveSubject, protocol.ResolveRequest{AgentID: "agent-1"}},
		{protocol.ResolveSubject, protocol.ResolveRequest{HostID: "00000000-0000-0000-0000-000000000001"}},
		{protocol.ResolveSetsSubject, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: []string{"agent-1", "agent-2"}}},
		{protocol.ResolvePushSubject, protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: "00000000-0000-0000-0000-0000000000e1", ConfigType: "labels"}},
	}
	for _, r := range requests {
		msg := request(t, nc, r.subject, r.body)
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != protocol.CodeUnavailable {
			t.Errorf("%s: code %q (%s), want %q", r.subject, code, msg.Header.Get(micro.ErrorHeader), protocol.CodeUnavailable)
		}
		var body struct {
			Error protocol.Error `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &body); err != nil || body.Error.Code != protocol.CodeUnavailable || body.Error.Message != "database unavailable" {
			t.Errorf("%s: body %s", r.subject, msg.Data)
		}
		// The reply names no address, user or database: those stay in the log.
		if strings.Contains(string(msg.Data), "127.0.0.1") || strings.Contains(string(msg.Data), "user=") {
			t.Errorf("%s: reply leaks connection details: %s", r.subject, msg.Data)
		}
	}
}
