package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/configsync/configsync/libs/platform/outbox"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/applystatus"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
	"github.com/configsync/configsync/services/config-api/internal/rollouts"
)

// Rollouts is the rollouts.Repository adapter over the Store's database.
type Rollouts struct{ s *Store }

var _ rollouts.Repository = (*Rollouts)(nil)

// NewRollouts returns the rollout repository over s.
func NewRollouts(s *Store) *Rollouts { return &Rollouts{s: s} }

// rolloutTx is rollouts.Tx over one transaction holding the rollout's row lock.
type rolloutTx struct {
	tx pgx.Tx
	q  *sqlcdb.Queries
	r  *rollouts.Rollout
}

// Create is rollouts.Repository.Create: the environment is locked as a PUT locks it (so rollouts and
// writes of the environment serialise), the rollout row is inserted with a new version and its data
// recorded as a revision at that version, then start runs in the same transaction.
func (s *Rollouts) Create(ctx context.Context, filter uuid.NullUUID, environmentID uuid.UUID, configType, actor string,
	fn func(rollouts.EnvironmentRow) (*rollouts.Rollout, error), start func(rollouts.Tx, *rollouts.Rollout) error) (rollouts.Rollout, error) {
	var out rollouts.Rollout
	err := s.s.inTx(ctx, func(tx pgx.Tx, q *sqlcdb.Queries) error {
		env, err := q.LockEnvironment(ctx, sqlcdb.LockEnvironmentParams{ID: environmentID, ClientFilter: filter})
		if err != nil {
			return rowErr(err, rollouts.ErrNoEnvironment, "lock environment")
		}
		cur, err := readCurrent(ctx, q, configs.Target{Scope: protocol.ScopeEnvironment, ClientID: env.ClientID, EnvironmentID: env.ID}, configType)
		if err != nil {
			return err
		}
		r, err := fn(rollouts.EnvironmentRow{ClientID: env.ClientID, Row: cur.Row, Active: cur.ActiveRollout})
		if err != nil {
			return err
		}
		if r.Version, err = q.NextConfigVersion(ctx); err != nil {
			return fmt.Errorf("postgres: next version: %w", err)
		}
		plan, stages, err := encodeRollout(r)
		if err != nil {
			return err
		}
		row, err := q.InsertRollout(ctx, sqlcdb.InsertRolloutParams{
			ClientID: r.ClientID, EnvironmentID: r.EnvironmentID, ConfigType: r.ConfigType, State: r.State, Reason: r.Reason,
			Plan: plan, Stages: stages, CurrentStage: int32(r.CurrentStage), ConfigData: r.ConfigData,
			PreviousVersion: r.PreviousVersion, PreviousData: r.PreviousData, Version: r.Version, CreatedBy: actor,
		})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
			// Another start won the race for the (environment, type): the partial unique index.
			active, aerr := q.ActiveRolloutOf(ctx, sqlcdb.ActiveRolloutOfParams{EnvironmentID: environmentID, ConfigType: configType})
			if aerr != nil {
				return configs.RolloutActive(uuid.Nil)
			}
			return configs.RolloutActive(active)
		}
		if err != nil {
			return fmt.Errorf("postgres: insert rollout: %w", err)
		}
		if *r, err = rolloutFrom(row); err != nil {
			return err
		}
		var old []byte
		if cur.Row.Live() {
			old = cur.Row.Data
		}
		if err := q.InsertRevision(ctx, sqlcdb.InsertRevisionParams{
			Scope: protocol.ScopeEnvironment, ClientID: r.ClientID, EnvironmentID: r.EnvironmentID, ConfigType: configType,
			Version: r.Version, Action: configs.ActionPut, OldData: old, NewData: r.ConfigData, Actor: actor,
		}); err != nil {
			return fmt.Errorf("postgres: insert revision: %w", err)
		}
		if err := start(&rolloutTx{tx: tx, q: q, r: r}, r); err != nil {
			return err
		}
		out = *r
		return nil
	})
	return out, err
}

// Update is rollouts.Repository.Update.
func (s *Rollouts) Update(ctx context.Context, filter uuid.NullUUID, environmentID uuid.UUID, configType string, id uuid.UUID, fn func(rollouts.Tx, *rollouts.Rollout) error) (rollouts.Rollout, error) {
	var out rollouts.Rollout
	err := s.s.inTx(ctx, func(tx pgx.Tx, q *sqlcdb.Queries) error {
		row, err := q.LockRollout(ctx, sqlcdb.LockRolloutParams{ID: id, EnvironmentID: environmentID, ConfigType: configType, ClientFilter: filter})
		if err != nil {
			return rowErr(err, rollouts.ErrNotFound, "lock rollout")
		}
		r, err := rolloutFrom(row)
		if err != nil {
			return err
		}
		if err := fn(&rolloutTx{tx: tx, q: q, r: &r}, &r); err != nil {
			return err
		}
		out = r
		return nil
	})
	return out, err
}

// Lead is rollouts.Repository.Lead.
func (s *Rollouts) Lead(ctx context.Context, id uuid.UUID, fn func(rollouts.Tx, *rollouts.Rollout) error) (bool, error) {
	led := false
	err := s.s.inTx(ctx, func(tx pgx.Tx, q *sqlcdb.Queries) error {
		row, err := q.LeadRollout(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another replica holds it, or it ended
		}
		if err != nil {
			return fmt.Errorf("postgres: lead rollout: %w", err)
		}
		r, err := rolloutFrom(row)
		if err != nil {
			return err
		}
		led = true
		return fn(&rolloutTx{tx: tx, q: q, r: &r}, &r)
	})
	return led && err == nil, err
}

// ActiveIDs is rollouts.Repository.ActiveIDs.
func (s *Rollouts) ActiveIDs(ctx context.Context) ([]uuid.UUID, error) {
	ids, err := s.s.q.ActiveRolloutIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: active rollouts: %w", err)
	}
	return ids, nil
}

// Get is rollouts.Repository.Get.
func (s *Rollouts) Get(ctx context.Context, filter uuid.NullUUID, environmentID uuid.UUID, configType string, id uuid.UUID) (rollouts.Rollout, error) {
	row, err := s.s.q.GetRollout(ctx, sqlcdb.GetRolloutParams{ID: id, EnvironmentID: environmentID, ConfigType: configType, ClientFilter: filter})
	if err != nil {
		return rollouts.Rollout{}, rowErr(err, rollouts.ErrNotFound, "get rollout")
	}
	return rolloutFrom(row)
}

// List is rollouts.Repository.List.
func (s *Rollouts) List(ctx context.Context, environmentID uuid.UUID, configType string, limit int) ([]rollouts.Rollout, error) {
	rows, err := s.s.q.ListRollouts(ctx, sqlcdb.ListRolloutsParams{EnvironmentID: environmentID, ConfigType: configType, MaxRows: int32(limit)})
	return listOfErr(rows, err, "list rollouts", rolloutFrom)
}

// ActiveIn is rollouts.Repository.ActiveIn.
func (s *Rollouts) ActiveIn(ctx context.Context, filter uuid.NullUUID, environmentIDs []uuid.UUID) ([]rollouts.Rollout, error) {
	rows, err := s.s.q.ActiveRolloutsIn(ctx, sqlcdb.ActiveRolloutsInParams{EnvironmentIds: environmentIDs, ClientFilter: filter})
	return listOfErr(rows, err, "active rollouts in", rolloutFrom)
}

// Members is rollouts.Repository.Members.
func (s *Rollouts) Members(ctx context.Context, r rollouts.Rollout) ([]rollouts.Member, error) {
	return members(ctx, s.s.q, &r)
}

func members(ctx context.Context, q *sqlcdb.Queries, r *rollouts.Rollout) ([]rollouts.Member, error) {
	rows, err := q.RolloutMembers(ctx, sqlcdb.RolloutMembersParams{RolloutID: r.ID, ConfigType: r.ConfigType})
	return listOf(rows, err, "rollout members", func(m sqlcdb.RolloutMembersRow) rollouts.Member {
		h := statusHost(m.HostID, m.LastHeartbeatAt, m.HeartbeatIntervalMs,
			layer(m.Version, true, &m.JoinedAt), layer(m.HostVersion, m.HostPresent, m.HostWrittenAt))
		if m.AckStatus != "" {
			a := &applystatus.Ack{Version: m.AckVersion, Status: m.AckStatus, Error: m.AckError}
			if m.AckAppliedAt != nil {
				a.AppliedAt = *m.AckAppliedAt
			}
			h.Ack = a
		}
		return rollouts.Member{Stage: int(m.Stage), Host: h}
	})
}

func (t *rolloutTx) Fleet(ctx context.Context) ([]rollouts.FleetHost, error) {
	rows, err := t.q.RolloutFleet(ctx, sqlcdb.RolloutFleetParams{RolloutID: t.r.ID, EnvironmentID: t.r.EnvironmentID})
	return listOfErr(rows, err, "rollout fleet", func(h sqlcdb.RolloutFleetRow) (rollouts.FleetHost, error) {
		labels, err := labelsFromJSON(h.ID, h.InventoryLabels)
		return rollouts.FleetHost{ID: h.ID, Labels: labels, LastHeartbeatAt: h.LastHeartbeatAt,
			HeartbeatInterval: time.Duration(h.HeartbeatIntervalMs) * time.Millisecond, Stage: int(h.Stage)}, err
	})
}

func (t *rolloutTx) NextVersion(ctx context.Context) (int64, error) {
	v, err := t.q.NextConfigVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("postgres: next version: %w", err)
	}
	return v, nil
}

func (t *rolloutTx) Join(ctx context.Context, version int64, hosts []rollouts.Joined) error {
	if len(hosts) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(hosts))
	stages := make([]int32, len(hosts))
	for i, h := range hosts {
		ids[i], stages[i] = h.HostID, int32(h.Stage)
	}
	if err := t.q.InsertRolloutHosts(ctx, sqlcdb.InsertRolloutHostsParams{RolloutID: t.r.ID, Version: version, HostIds: ids, Stages: stages}); err != nil {
		return fmt.Errorf("postgres: join rollout: %w", err)
	}
	return nil
}

func (t *rolloutTx) Members(ctx context.Context) ([]rollouts.Member, error) {
	return members(ctx, t.q, t.r)
}

func (t *rolloutTx) Save(ctx context.Context, r *rollouts.Rollout) error {
	_, stages, err := encodeRollout(r)
	if err != nil {
		return err
	}
	var final *int64
	if r.FinalVersion != 0 {
		final = &r.FinalVersion
	}
	if err := t.q.UpdateRollout(ctx, sqlcdb.UpdateRolloutParams{ID: r.ID, State: r.State, Reason: r.Reason, Stages: stages,
		CurrentStage: int32(r.CurrentStage), Promoted: r.Promoted, FinalVersion: final}); err != nil {
		return fmt.Errorf("postgres: save rollout: %w", err)
	}
	r.UpdatedAt = time.Now().UTC()
	return nil
}

func (t *rolloutTx) Complete(ctx context.Context, r *rollouts.Rollout, actor string) (int64, error) {
	row, err := t.q.CompleteEnvironmentConfig(ctx, sqlcdb.CompleteEnvironmentConfigParams{EnvironmentID: r.EnvironmentID,
		ConfigType: r.ConfigType, ConfigData: r.ConfigData, UpdatedBy: actor})
	if err != nil {
		return 0, fmt.Errorf("postgres: complete rollout: %w", err)
	}
	// Every version of the environment row has its revision; no event: the hosts already hold it.
	if err := t.q.InsertRevision(ctx, sqlcdb.InsertRevisionParams{
		Scope: protocol.ScopeEnvironment, ClientID: r.ClientID, EnvironmentID: r.EnvironmentID, ConfigType: r.ConfigType,
		Version: row.Version, Action: configs.ActionPut, OldData: r.PreviousData, NewData: r.ConfigData, Actor: actor,
	}); err != nil {
		return 0, fmt.Errorf("postgres: insert revision: %w", err)
	}
	return row.Version, nil
}

func (t *rolloutTx) Revert(ctx context.Context, r *rollouts.Rollout, actor string) (int64, error) {
	target := configs.Target{Scope: protocol.ScopeEnvironment, ClientID: r.ClientID, EnvironmentID: r.EnvironmentID}
	cur, err := readCurrent(ctx, t.q, target, r.ConfigType)
	if err != nil {
		return 0, err
	}
	// The revert is a write of the environment like any other (new version, revision, event); its
	// old data is the rollout's, which the reached hosts held.
	cur.Row = &configs.Record{Data: r.ConfigData}
	rec, err := write(ctx, t.tx, t.q, cur, r.ConfigType, configs.Write{Action: configs.ActionRollback, Data: r.PreviousData}, actor)
	if err != nil {
		return 0, err
	}
	return rec.Version, nil
}

func (t *rolloutTx) Announce(ctx context.Context, r *rollouts.Rollout, version int64, actor string) error {
	ev := protocol.ConfigChanged{
		EventID:       uuid.NewString(),
		Scope:         protocol.ScopeEnvironment,
		ClientID:      r.ClientID.String(),
		EnvironmentID: r.EnvironmentID.String(),
		ConfigType:    r.ConfigType,
		Version:       version,
		Actor:         actor,
		OccurredAt:    time.Now().UTC(),
	}
	if _, err := outbox.Insert(ctx, t.tx, protocol.ConfigChangedSubject, ev); err != nil {
		return fmt.Errorf("postgres: insert outbox event: %w", err)
	}
	return nil
}

func (t *rolloutTx) Audit(ctx context.Context, r *rollouts.Rollout, actor, action string, detail map[string]any) error {
	d := map[string]any{"environment_id": r.EnvironmentID.String(), "config_type": r.ConfigType, "state": r.State}
	for k, v := range detail {
		d[k] = v
	}
	js, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("postgres: audit detail: %w", err)
	}
	if err := t.q.InsertAuditEvent(ctx, sqlcdb.InsertAuditEventParams{Actor: actor, ClientID: uuid.NullUUID{UUID: r.ClientID, Valid: true},
		Action: action, Object: "rollout:" + r.ID.String(), Detail: js}); err != nil {
		return fmt.Errorf("postgres: insert audit event: %w", err)
	}
	return nil
}

func encodeRollout(r *rollouts.Rollout) (plan, stages []byte, err error) {
	if plan, err = json.Marshal(r.Plan); err != nil {
		return nil, nil, fmt.Errorf("postgres: encode plan: %w", err)
	}
	if stages, err = json.Marshal(r.Stages); err != nil {
		return nil, nil, fmt.Errorf("postgres: encode stages: %w", err)
	}
	return plan, stages, nil
}

func rolloutFrom(row sqlcdb.Rollout) (rollouts.Rollout, error) {
	r := rollouts.Rollout{
		ID: row.ID, ClientID: row.ClientID, EnvironmentID: row.EnvironmentID, ConfigType: row.ConfigType, State: row.State,
		Reason: row.Reason, CurrentStage: int(row.CurrentStage), Promoted: row.Promoted, ConfigData: row.ConfigData,
		PreviousVersion: row.PreviousVersion, PreviousData: row.PreviousData, Version: row.Version,
		CreatedBy: row.CreatedBy, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
	}
	if row.FinalVersion != nil {
		r.FinalVersion = *row.FinalVersion
	}
	if err := json.Unmarshal(row.Plan, &r.Plan); err != nil {
		return rollouts.Rollout{}, fmt.Errorf("postgres: rollout %s plan: %w", row.ID, err)
	}
	if err := json.Unmarshal(row.Stages, &r.Stages); err != nil {
		return rollouts.Rollout{}, fmt.Errorf("postgres: rollout %s stages: %w", row.ID, err)
	}
	return r, nil
}
