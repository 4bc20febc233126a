package ingest

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// HostLayers is what anti-entropy reads of one host: its two levels' config rows (versions and
// whether they hold data, never the data) and its open repairs.
type HostLayers struct {
	Revoked     bool
	Environment map[string]agentconfig.LayerState
	Host        map[string]agentconfig.LayerState
	Repairs     map[string]OpenRepair
	// EnvironmentChanged and Changed are when the environment's and the host's rows were last
	// written, by type.
	EnvironmentChanged, Changed map[string]time.Time
}

// changedAt is when the newer of a type's two rows was last written.
func (l *HostLayers) changedAt(t string) time.Time {
	a, b := l.EnvironmentChanged[t], l.Changed[t]
	if a.After(b) {
		return a
	}
	return b
}

// OpenRepair is a repair already asked for one (host, type).
type OpenRepair struct {
	Version  int64
	Attempts int
	NextAt   time.Time
}

// RepairKey names one (host, type) repair.
type RepairKey struct {
	HostID     uuid.UUID
	ConfigType string
}

// Repair is the state written for one (host, type) repair.
type Repair struct {
	RepairKey
	Version  int64
	Attempts int
	NextAt   time.Time
}

// HostReport is a host's last stored report, for a check after the grace: the versions it reported,
// its layers, and per type the version it last acked "applied".
type HostReport struct {
	AgentID  string
	Versions map[string]int64
	Layers   *HostLayers
	Applied  map[string]int64
}

// RepairPublisher hands repair requests to delivery, the only service that publishes to agents.
type RepairPublisher interface {
	PublishRepair(ctx context.Context, req protocol.RepairRequest) error
}

// RepairOptions tune anti-entropy.
type RepairOptions struct {
	// Backoff is the wait after the first repair of a (host, type, version) before the second; it
	// doubles per attempt up to MaxBackoff. The first repair is asked at the first heartbeat behind.
	Backoff, MaxBackoff time.Duration
	// Grace: a heartbeat stored less than Grace after a type's last write is not behind on it yet
	// (the push is on its way, or the heartbeat left before it arrived); such a host is checked again
	// when the grace ends (Run). 0 means 5 s; negative none.
	Grace time.Duration
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// RepairStats counts what anti-entropy did since start.
type RepairStats struct {
	// Requested: (host, type) repairs handed to delivery.
	Requested int64
	// BackedOff: gaps left alone because the last repair of that version is too recent.
	BackedOff int64
	// Refused: gaps at a version the agent acked "failed", recorded and deferred by the backoff.
	Refused int64
	// Closed: repairs closed because the host now reports the version.
	Closed int64
}

// AntiEntropy compares the per-type versions a heartbeat reports with the versions the host should
// hold (agentconfig.Expected over its rows, the resolver's rule) and asks delivery to repair the gaps.
// Repeats of the same (host, type, version) back off, so a version that cannot be applied or delivered
// is not re-sent at every heartbeat.
type AntiEntropy struct {
	store     Store
	publisher RepairPublisher
	opts      RepairOptions
	log       *zap.Logger

	requested, backedOff, refused, closed atomic.Int64

	// deferred: hosts whose heartbeat came within the grace of a write, with when to look again.
	mu       sync.Mutex
	deferred map[uuid.UUID]time.Time
}

// maxDeferred bounds the hosts waiting for a check after the grace (a write to a whole fleet defers
// at most one grace's worth of heartbeats).
const maxDeferred = 200000

// NewAntiEntropy returns an AntiEntropy; zero options get defaults (30 s, doubling up to 30 min).
func NewAntiEntropy(store Store, publisher RepairPublisher, opts RepairOptions, log *zap.Logger) *AntiEntropy {
	if opts.Backoff <= 0 {
		opts.Backoff = 30 * time.Second
	}
	if opts.MaxBackoff < opts.Backoff {
		opts.MaxBackoff = max(30*time.Minute, opts.Backoff)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Grace == 0 {
		opts.Grace = 5 * time.Second
	}
	opts.Grace = max(opts.Grace, 0)
	return &AntiEntropy{store: store, publisher: publisher, opts: opts, log: log, deferred: map[uuid.UUID]time.Time{}}
}

// Run checks the deferred hosts as their grace ends, until ctx is done: a host whose heartbeat came
// just after a write is looked at again from its stored report, so a push lost at that moment is
// repaired after the grace rather than at the host's next heartbeat. A host that has acked the
// version meanwhile is fine (its next heartbeat will report it).
func (a *AntiEntropy) Run(ctx context.Context) {
	t := time.NewTicker(max(a.opts.Grace/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.checkDeferred(ctx)
		}
	}
}

func (a *AntiEntropy) checkDeferred(ctx context.Context) {
	now := a.opts.Now()
	a.mu.Lock()
	var due []uuid.UUID
	for id, at := range a.deferred {
		if !now.Before(at) {
			due = append(due, id)
			delete(a.deferred, id)
			if len(due) == protocol.MaxRepairHosts {
				break
			}
		}
	}
	a.mu.Unlock()
	if len(due) == 0 {
		return
	}
	reports, err := a.store.HostReports(ctx, due)
	if err != nil {
		a.log.Warn("anti-entropy: deferred check failed; the hosts' next heartbeats check again", zap.Int("hosts", len(due)), zap.Error(err))
		return
	}
	rows := make([]HostHeartbeat, 0, len(reports))
	layers := make(map[uuid.UUID]*HostLayers, len(reports))
	acked := make(map[uuid.UUID]map[string]int64, len(reports))
	for id, rep := range reports {
		rows = append(rows, HostHeartbeat{HostID: id, Heartbeat: Heartbeat{AgentID: rep.AgentID, ReceivedAt: now, ConfigVersions: rep.Versions}})
		layers[id], acked[id] = rep.Layers, rep.Applied
	}
	a.check(ctx, rows, layers, acked)
}

func (a *AntiEntropy) deferUntil(id uuid.UUID, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur, ok := a.deferred[id]; ok && !at.After(cur) {
		return
	}
	if _, ok := a.deferred[id]; !ok && len(a.deferred) >= maxDeferred {
		return // the host's next heartbeat checks it
	}
	a.deferred[id] = at
}

// Stats returns the counters.
func (a *AntiEntropy) Stats() RepairStats {
	return RepairStats{Requested: a.requested.Load(), BackedOff: a.backedOff.Load(), Refused: a.refused.Load(), Closed: a.closed.Load()}
}

func (a *AntiEntropy) backoff(attempt int) time.Duration {
	d := a.opts.Backoff
	for n := 1; n < attempt && d < a.opts.MaxBackoff; n++ {
		d *= 2
	}
	return min(d, a.opts.MaxBackoff)
}

// typeNames are the registered config types (fixed at build time).
var typeNames = agentconfig.TypeNames()

// gap is one type a host reports behind what it should hold.
type gap struct {
	configType string
	expected   int64
	reported   int64
}

// gaps returns the types of which a host reporting versions at reportedAt is behind: it holds an older
// version than it should (or none), or it holds a type deleted since. A type it reports without any
// row at either level cannot be repaired (there is no version to send) and is left to drift. A type
// last written less than grace before reportedAt is not a gap yet: recheckAt says when the last such
// grace ends (zero: none).
func gaps(l *HostLayers, versions map[string]int64, reportedAt time.Time, grace time.Duration) (out []gap, recheckAt time.Time) {
	for _, t := range typeNames {
		env, hasEnv := l.Environment[t]
		host, hasHost := l.Host[t]
		if !hasEnv && !hasHost {
			continue
		}
		exp := agentconfig.Expected(env, host)
		got, holds := versions[t]
		behind := (exp.Present && got < exp.Version) || (!exp.Present && holds && got < exp.Version)
		if !behind {
			continue
		}
		if end := l.changedAt(t).Add(grace); reportedAt.Before(end) {
			// Reported before the agent could hold the last write: look again when the grace ends.
			recheckAt = maxTime(recheckAt, end)
			continue
		}
		out = append(out, gap{t, exp.Version, got})
	}
	return out, recheckAt
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Check compares the heartbeats just written with what their hosts should hold and asks for the
// repairs that are due. layers holds the batch's hosts (as UpdateHeartbeats returns them). Failures
// are logged: the next heartbeat checks again.
func (a *AntiEntropy) Check(ctx context.Context, rows []HostHeartbeat, layers map[uuid.UUID]*HostLayers) {
	a.check(ctx, rows, layers, nil)
}

// check is Check; acked (deferred checks only) holds, per host and type, the version last acked
// "applied": a host that acked what it should hold is not behind, its next heartbeat will say so.
func (a *AntiEntropy) check(ctx context.Context, rows []HostHeartbeat, layers map[uuid.UUID]*HostLayers, acked map[uuid.UUID]map[string]int64) {
	now := a.opts.Now()
	type hostGaps struct {
		row  HostHeartbeat
		gaps []gap
	}
	var behind []hostGaps
	var closeKeys []RepairKey
	for _, r := range rows {
		l := layers[r.HostID]
		if l == nil || l.Revoked {
			continue
		}
		g, recheck := gaps(l, r.ConfigVersions, r.ReceivedAt, a.opts.Grace)
		if !recheck.IsZero() {
			a.deferUntil(r.HostID, recheck)
		}
		if acked != nil {
			g = slices.DeleteFunc(g, func(x gap) bool {
				v, ok := acked[r.HostID][x.configType]
				return ok && v >= x.expected
			})
		}
		if len(g) > 0 {
			behind = append(behind, hostGaps{r, g})
		}
		for t := range l.Repairs {
			if !slices.ContainsFunc(g, func(x gap) bool { return x.configType == t }) {
				closeKeys = append(closeKeys, RepairKey{r.HostID, t})
			}
		}
	}
	if len(closeKeys) > 0 {
		slices.SortFunc(closeKeys, compareKeys)
		if err := a.store.DeleteRepairs(ctx, closeKeys); err != nil {
			a.log.Warn("anti-entropy: closing repairs failed", zap.Int("repairs", len(closeKeys)), zap.Error(err))
		} else {
			a.closed.Add(int64(len(closeKeys)))
		}
	}
	if len(behind) == 0 {
		return
	}
	ids := make([]uuid.UUID, len(behind))
	for i, b := range behind {
		ids[i] = b.row.HostID
	}
	failed, err := a.store.FailedApplies(ctx, ids)
	if err != nil {
		a.log.Warn("anti-entropy: reading failed applies failed; repairs wait for the next heartbeat", zap.Int("hosts", len(ids)), zap.Error(err))
		return
	}
	var (
		req     protocol.RepairRequest
		records []Repair
	)
	for _, b := range behind {
		l := layers[b.row.HostID]
		rh := protocol.RepairHost{HostID: b.row.HostID.String(), AgentID: b.row.AgentID, Types: map[string]protocol.RepairState{}}
		for _, g := range b.gaps {
			open, hasOpen := l.Repairs[g.configType]
			if hasOpen && open.Version == g.expected && now.Before(open.NextAt) {
				a.backedOff.Add(1)
				continue
			}
			attempt := 1
			if hasOpen && open.Version == g.expected {
				attempt = open.Attempts + 1
			} else if v, ok := failed[b.row.HostID][g.configType]; ok && v == g.expected {
				// The agent refused this very version: count that as the first attempt and wait.
				a.refused.Add(1)
				records = append(records, Repair{RepairKey{b.row.HostID, g.configType}, g.expected, 1, now.Add(a.backoff(1))})
				continue
			}
			records = append(records, Repair{RepairKey{b.row.HostID, g.configType}, g.expected, attempt, now.Add(a.backoff(attempt))})
			rh.Types[g.configType] = protocol.RepairState{Expected: g.expected, Reported: g.reported, Attempt: attempt}
		}
		if len(rh.Types) > 0 {
			req.Hosts = append(req.Hosts, rh)
		}
	}
	if len(records) == 0 {
		return
	}
	slices.SortFunc(records, func(x, y Repair) int { return compareKeys(x.RepairKey, y.RepairKey) })
	// The state is recorded first: a repair that is then lost is asked again after the backoff, while
	// a repair asked but not recorded would be asked again at every heartbeat.
	if err := a.store.UpsertRepairs(ctx, records); err != nil {
		a.log.Warn("anti-entropy: recording repairs failed; they wait for the next heartbeat", zap.Int("repairs", len(records)), zap.Error(err))
		return
	}
	types := 0
	for lo := 0; lo < len(req.Hosts); lo += protocol.MaxRepairHosts {
		chunk := protocol.RepairRequest{Hosts: req.Hosts[lo:min(lo+protocol.MaxRepairHosts, len(req.Hosts))]}
		if err := a.publisher.PublishRepair(ctx, chunk); err != nil {
			a.log.Warn("anti-entropy: publishing repairs failed; they are asked again after the backoff", zap.Int("hosts", len(chunk.Hosts)), zap.Error(err))
			continue
		}
		for _, h := range chunk.Hosts {
			types += len(h.Types)
		}
	}
	if types > 0 {
		a.requested.Add(int64(types))
		a.log.Info("anti-entropy: repairs requested", zap.Int("hosts", len(req.Hosts)), zap.Int("types", types))
	}
}

func compareKeys(a, b RepairKey) int {
	return cmp.Or(bytes.Compare(a.HostID[:], b.HostID[:]), cmp.Compare(a.ConfigType, b.ConfigType))
}
