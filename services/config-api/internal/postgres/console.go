package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/audit"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/fleet"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
	"github.com/configsync/configsync/services/config-api/internal/sessions"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// CreateSession stores a console session by the hash of its id.
func (s *Store) CreateSession(ctx context.Context, idHash []byte, tokenID uuid.UUID, expiresAt time.Time) error {
	err := s.q.CreateConsoleSession(ctx, sqlcdb.CreateConsoleSessionParams{IDHash: idHash, TokenID: tokenID, ExpiresAt: expiresAt})
	if err != nil {
		return classify(err, "session")
	}
	return nil
}

// Session returns the principal of a live session (not expired, token not revoked).
func (s *Store) Session(ctx context.Context, idHash []byte) (tenancy.Principal, time.Time, error) {
	row, err := s.q.GetConsoleSession(ctx, idHash)
	if err != nil {
		return tenancy.Principal{}, time.Time{}, rowErr(err, fault.NotFoundf("session not found"), "get session")
	}
	return tenancy.Principal{TokenID: row.TokenID, Name: row.Name, ClientID: row.ClientID, IsAdmin: !row.ClientID.Valid}, row.ExpiresAt, nil
}

// DeleteSession deletes a session.
func (s *Store) DeleteSession(ctx context.Context, idHash []byte) error {
	if err := s.q.DeleteConsoleSession(ctx, idHash); err != nil {
		return fmt.Errorf("postgres: delete session: %w", err)
	}
	return nil
}

// DeleteExpiredSessions deletes every expired session.
func (s *Store) DeleteExpiredSessions(ctx context.Context) (int64, error) {
	n, err := s.q.DeleteExpiredConsoleSessions(ctx)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete expired sessions: %w", err)
	}
	return n, nil
}

// HostCounts counts an environment's hosts by state in one query.
func (s *Store) HostCounts(ctx context.Context, environmentID uuid.UUID, onlineWindow time.Duration) (fleet.Counts, error) {
	r, err := s.q.EnvironmentHostSummary(ctx, sqlcdb.EnvironmentHostSummaryParams{OnlineWindow: interval(onlineWindow), EnvironmentID: environmentID})
	if err != nil {
		return fleet.Counts{}, fmt.Errorf("postgres: host counts: %w", err)
	}
	return fleet.Counts{
		Active:    int(r.Active),
		Online:    int(r.Online),
		Offline:   int(r.Active - r.Online),
		NeverSeen: int(r.NeverSeen),
		Failed:    int(r.Failed),
		Revoked:   int(r.Revoked),
		Stats:     fleetStats(r.StatsAt, r.StatsOnline, r.StatsDrifted, r.StatsStale),
	}, nil
}

// fleetStats is an environment's stored fleet stats, nil when none were computed yet (the LEFT JOIN
// found no row).
func fleetStats(at *time.Time, online, drifted, stale *int64) *fleet.Stats {
	if at == nil || online == nil || drifted == nil || stale == nil {
		return nil
	}
	return &fleet.Stats{At: *at, Online: int(*online), Drifted: int(*drifted), Stale: int(*stale)}
}

// interval is d as a PostgreSQL interval (microseconds only, so adding it to a timestamptz never
// depends on the session's time zone).
func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// WorstHosts returns the active hosts with the most failed types, then the oldest heartbeats.
func (s *Store) WorstHosts(ctx context.Context, environmentID uuid.UUID, onlineWindow time.Duration, limit int) ([]fleet.Offender, error) {
	rows, err := s.q.EnvironmentWorstHosts(ctx, sqlcdb.EnvironmentWorstHostsParams{EnvironmentID: environmentID, OnlineWindow: interval(onlineWindow), MaxRows: int32(limit)})
	return listOf(rows, err, "worst hosts", func(r sqlcdb.EnvironmentWorstHostsRow) fleet.Offender {
		return fleet.Offender{HostID: r.ID, Hostname: r.Hostname, LastHeartbeatAt: r.LastHeartbeatAt, FailedTypes: int(r.FailedTypes)}
	})
}

// FleetSummaries counts the hosts of every environment within filter, in one query.
func (s *Store) FleetSummaries(ctx context.Context, filter uuid.NullUUID, onlineWindow time.Duration) ([]fleet.Summary, error) {
	rows, err := s.q.FleetSummary(ctx, sqlcdb.FleetSummaryParams{OnlineWindow: interval(onlineWindow), ClientFilter: filter})
	return listOf(rows, err, "fleet summary", func(r sqlcdb.FleetSummaryRow) fleet.Summary {
		return fleet.Summary{
			Environment: tenants.Environment{ID: r.EnvironmentID, ClientID: r.ClientID, Name: r.EnvironmentName, CreatedAt: r.CreatedAt},
			ClientName:  r.ClientName,
			Counts: fleet.Counts{Active: int(r.Active), Online: int(r.Online), Offline: int(r.Active - r.Online),
				NeverSeen: int(r.NeverSeen), Failed: int(r.Failed), Revoked: int(r.Revoked),
				Stats: fleetStats(r.StatsAt, r.StatsOnline, r.StatsDrifted, r.StatsStale)},
		}
	})
}

// VisibleEnvironments lists the environments within filter with their clients' names.
func (s *Store) VisibleEnvironments(ctx context.Context, filter uuid.NullUUID) ([]fleet.EnvironmentRef, error) {
	rows, err := s.q.ListVisibleEnvironments(ctx, filter)
	return listOf(rows, err, "list environments", func(r sqlcdb.ListVisibleEnvironmentsRow) fleet.EnvironmentRef {
		return fleet.EnvironmentRef{ID: r.ID, ClientID: r.ClientID, Name: r.Name, ClientName: r.ClientName}
	})
}

// DriftComputedAt is when an environment's fleet stats and drifted hosts were last stored (nil: never).
func (s *Store) DriftComputedAt(ctx context.Context, environmentID uuid.UUID) (*time.Time, error) {
	at, err := s.q.EnvironmentFleetStatsAt(ctx, environmentID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: fleet stats time: %w", err)
	}
	return &at, nil
}

// FleetWorstHosts returns the worst offenders of every environment within filter, in one query.
func (s *Store) FleetWorstHosts(ctx context.Context, filter uuid.NullUUID, onlineWindow time.Duration, perEnv int) (map[uuid.UUID][]fleet.Offender, error) {
	rows, err := s.q.FleetWorstHosts(ctx, sqlcdb.FleetWorstHostsParams{PerEnv: int64(perEnv), ClientFilter: filter, OnlineWindow: interval(onlineWindow)})
	if err != nil {
		return nil, fmt.Errorf("postgres: fleet worst hosts: %w", err)
	}
	out := map[uuid.UUID][]fleet.Offender{}
	for _, r := range rows {
		out[r.EnvironmentID] = append(out[r.EnvironmentID], fleet.Offender{HostID: r.ID, Hostname: r.Hostname, LastHeartbeatAt: r.LastHeartbeatAt, FailedTypes: int(r.FailedTypes)})
	}
	return out, nil
}

// likeEscaper makes a search string match literally inside ILIKE (whose default escape is backslash).
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// SearchHosts returns a page of an environment's hosts by hostname.
func (s *Store) SearchHosts(ctx context.Context, environmentID uuid.UUID, q fleet.Search, onlineWindow time.Duration) ([]hosts.Host, error) {
	p := sqlcdb.SearchHostsParams{
		EnvironmentID: environmentID,
		HostnameLike:  likeEscaper.Replace(q.Hostname),
		State:         q.State,
		OnlineWindow:  interval(onlineWindow),
		MaxRows:       int32(q.Limit),
	}
	if q.AfterID.Valid {
		after := q.AfterHostname
		p.AfterHostname, p.AfterID = &after, q.AfterID
	}
	if !q.Labels.Empty() {
		p.LabelsPath = labelsPath(q.Labels)
	}
	rows, err := s.q.SearchHosts(ctx, p)
	return listOfErr(rows, err, "search hosts", hostFromRow)
}

// labelsPath is sel as a JSON path filter over a host's inventory labels, for `inventory_labels @? path`:
// one operator per row and no function call. Each requirement becomes one condition, all joined by &&:
// `k=v` and `k in (..)` compare the label with each value (false when the label is missing), `k!=v`
// and `k notin (..)` hold when the label is missing or equals none of them, `k` and `!k` test its
// presence. Keys and values are quoted as JSON path strings: selector.Parse admits only letters, digits
// and - _ . / in them, nothing that needs escaping. TestLabelsPathAgreesWithSelector checks it against
// selector.Matches in PostgreSQL.
func labelsPath(sel selector.Selector) string {
	conds := make([]string, len(sel.Requirements))
	for i, r := range sel.Requirements {
		key := `@."` + r.Key + `"`
		anyOf := make([]string, len(r.Values))
		for j, v := range r.Values {
			anyOf[j] = key + ` == "` + v + `"`
		}
		switch r.Operator {
		case selector.Equals, selector.In:
			conds[i] = "(" + strings.Join(anyOf, " || ") + ")"
		case selector.NotEquals, selector.NotIn:
			conds[i] = "(!exists(" + key + ") || !(" + strings.Join(anyOf, " || ") + "))"
		case selector.Exists:
			conds[i] = "exists(" + key + ")"
		case selector.DoesNotExist:
			conds[i] = "!exists(" + key + ")"
		default:
			conds[i] = "1 == 0" // an operator Parse never returns
		}
	}
	return "$ ? (" + strings.Join(conds, " && ") + ")"
}

// AuditEvents reads a page of the audit log, newest first.
func (s *Store) AuditEvents(ctx context.Context, q audit.Query) ([]audit.Event, error) {
	p := sqlcdb.ListAuditEventsParams{
		ClientFilter: q.Client,
		Actor:        q.Actor,
		Object:       q.Object,
		Since:        q.Since,
		Until:        q.Until,
		MaxRows:      int32(q.Limit),
	}
	if q.Before > 0 {
		before := q.Before
		p.BeforeID = &before
	}
	rows, err := s.q.ListAuditEvents(ctx, p)
	return listOf(rows, err, "list audit events", func(r sqlcdb.AuditEvent) audit.Event {
		return audit.Event{ID: r.ID, Actor: r.Actor, ClientID: r.ClientID, Action: r.Action, Object: r.Object, Detail: r.Detail, CreatedAt: r.CreatedAt}
	})
}

var (
	_ sessions.Store = (*Store)(nil)
	_ fleet.Store    = (*Store)(nil)
	_ audit.Store    = (*Store)(nil)
)
