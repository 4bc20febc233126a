package ingest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Ingester writes batches of acks and heartbeats. It is safe for concurrent use; concurrent batches
// cannot deadlock because every batch touches its rows in key order.
type Ingester struct {
	store   Store
	hosts   *HostDirectory
	entropy *AntiEntropy // nil: heartbeats are only stored
	log     *zap.Logger

	revokedAcks, revokedHeartbeats atomic.Int64
}

// NewIngester returns an Ingester writing through store and resolving agents with hosts. With
// entropy, every heartbeat batch is also checked against what its hosts should hold.
func NewIngester(store Store, hosts *HostDirectory, entropy *AntiEntropy, log *zap.Logger) *Ingester {
	return &Ingester{store: store, hosts: hosts, entropy: entropy, log: log}
}

// DropStats counts the records dropped because their host is revoked.
type DropStats struct {
	RevokedAcks, RevokedHeartbeats int64
}

// Drops returns the counters of revoked hosts' records dropped since start.
func (in *Ingester) Drops() DropStats {
	return DropStats{RevokedAcks: in.revokedAcks.Load(), RevokedHeartbeats: in.revokedHeartbeats.Load()}
}

// IngestAcks writes a batch of acks and returns one Outcome per ack, in order. Per (host, config type)
// only the newest ack of the batch is written (highest version, then latest in the stream); the others
// are Done as well since the database would not keep them anyway. Acks of revoked hosts are dropped.
func (in *Ingester) IngestAcks(ctx context.Context, acks []Ack) []Outcome {
	outcomes := make([]Outcome, len(acks))
	if len(acks) == 0 {
		return outcomes
	}
	hostIDs, err := in.hosts.Lookup(ctx, agentIDsOf(acks, func(a Ack) string { return a.AgentID }))
	if err != nil {
		in.log.Warn("ack batch: host lookup failed, will retry", zap.Int("acks", len(acks)), zap.Error(err))
		fill(outcomes, Retry)
		return outcomes
	}

	type key = ackKey
	winner := make(map[key]int, len(acks)) // key -> index into acks of the ack to write
	keyOf := make([]key, len(acks))
	for i, a := range acks {
		hostID, ok := hostIDs[a.AgentID]
		if !ok {
			in.log.Warn("ack from unknown agent dropped", zap.String("agent_id", a.AgentID),
				zap.String("config_type", a.ConfigType), zap.Int64("version", a.Version))
			outcomes[i] = Drop
			continue
		}
		k := key{hostID, a.ConfigType}
		keyOf[i] = k
		if j, seen := winner[k]; !seen || newerAck(a, acks[j]) {
			winner[k] = i
		}
	}
	// A revoked (or deleted) host's acks are dropped, never stored (the upsert skips revoked hosts too,
	// in case of a revocation meanwhile).
	revoked, err := in.store.InactiveHosts(ctx, uniqueHosts(keyOf, outcomes))
	if err != nil {
		in.log.Warn("ack batch: revocation check failed, will retry", zap.Int("acks", len(acks)), zap.Error(err))
		fill(outcomes, Retry)
		return outcomes
	}
	if len(revoked) > 0 {
		for i, a := range acks {
			if outcomes[i] != Drop && revoked[keyOf[i].host] {
				outcomes[i] = Drop
				in.revokedAcks.Add(1)
				in.hosts.Forget(a.AgentID)
			}
		}
		for k := range winner {
			if revoked[k.host] {
				delete(winner, k)
			}
		}
		in.log.Warn("acks from revoked or deleted hosts dropped", zap.Int("hosts", len(revoked)))
	}
	rows := make([]ApplyStatus, 0, len(winner))
	rowAgents := make([]string, 0, len(winner))
	for k, i := range winner {
		rows = append(rows, ApplyStatus{HostID: k.host, Ack: acks[i]})
	}
	slices.SortFunc(rows, func(a, b ApplyStatus) int {
		return cmp.Or(bytes.Compare(a.HostID[:], b.HostID[:]), cmp.Compare(a.ConfigType, b.ConfigType))
	})
	for _, r := range rows {
		rowAgents = append(rowAgents, r.AgentID)
	}

	rowOutcome := in.write(ctx, "ack", len(rows), rowAgents, func(ctx context.Context, lo, hi int) error {
		return in.store.UpsertApplyStatuses(ctx, rows[lo:hi])
	})
	byKey := make(map[key]Outcome, len(rows))
	for i, r := range rows {
		byKey[key{r.HostID, r.ConfigType}] = rowOutcome[i]
	}
	for i := range acks {
		if outcomes[i] != Drop {
			outcomes[i] = byKey[keyOf[i]]
		}
	}
	return outcomes
}

// IngestHeartbeats writes a batch of heartbeats and returns one Outcome per heartbeat, in order. Per
// host only the latest heartbeat of the batch is written.
func (in *Ingester) IngestHeartbeats(ctx context.Context, beats []Heartbeat) []Outcome {
	outcomes := make([]Outcome, len(beats))
	if len(beats) == 0 {
		return outcomes
	}
	refs, err := in.hosts.LookupRefs(ctx, agentIDsOf(beats, func(h Heartbeat) string { return h.AgentID }))
	if err != nil {
		in.log.Warn("heartbeat batch: host lookup failed, will retry", zap.Int("heartbeats", len(beats)), zap.Error(err))
		fill(outcomes, Retry)
		return outcomes
	}
	winner := make(map[uuid.UUID]int, len(beats))
	hostOf := make([]uuid.UUID, len(beats))
	envOf := make(map[uuid.UUID]uuid.UUID, len(beats))
	for i, h := range beats {
		ref, ok := refs[h.AgentID]
		if !ok {
			in.log.Warn("heartbeat from unknown agent dropped", zap.String("agent_id", h.AgentID))
			outcomes[i] = Drop
			continue
		}
		hostID := ref.ID
		envOf[hostID] = ref.EnvironmentID
		hostOf[i] = hostID
		if j, seen := winner[hostID]; !seen || !h.ReceivedAt.Before(beats[j].ReceivedAt) {
			winner[hostID] = i
		}
	}
	rows := make([]HostHeartbeat, 0, len(winner))
	for hostID, i := range winner {
		rows = append(rows, HostHeartbeat{HostID: hostID, EnvironmentID: envOf[hostID], Heartbeat: beats[i]})
	}
	slices.SortFunc(rows, func(a, b HostHeartbeat) int { return bytes.Compare(a.HostID[:], b.HostID[:]) })
	rowAgents := make([]string, len(rows))
	for i, r := range rows {
		rowAgents[i] = r.AgentID
	}

	// The write returns, for anti-entropy, the versions each host should hold, and how many hosts it
	// wrote: when that is fewer than its rows, some host is revoked or deleted (dropped, counted,
	// forgotten) or had an older heartbeat than the one stored (done); those rows are looked up.
	layers := make(map[uuid.UUID]*HostLayers, len(rows))
	unsure := make([]bool, len(rows))
	rowOutcome := in.write(ctx, "heartbeat", len(rows), rowAgents, func(ctx context.Context, lo, hi int) error {
		got, err := in.store.UpdateHeartbeats(ctx, rows[lo:hi])
		if err != nil {
			return err
		}
		maps.Copy(layers, got.Layers)
		if got.Written < hi-lo {
			for i := lo; i < hi; i++ {
				unsure[i] = true
			}
		}
		return nil
	})
	var check []uuid.UUID
	for i, r := range rows {
		if rowOutcome[i] == Done && unsure[i] {
			check = append(check, r.HostID)
		}
	}
	inactive := map[uuid.UUID]bool{}
	if len(check) > 0 {
		if inactive, err = in.store.InactiveHosts(ctx, check); err != nil {
			in.log.Warn("heartbeat batch: revocation check failed; the heartbeats are settled anyway", zap.Int("hosts", len(check)), zap.Error(err))
			inactive = map[uuid.UUID]bool{}
		}
	}
	byHost := make(map[uuid.UUID]Outcome, len(rows))
	written := make([]HostHeartbeat, 0, len(rows))
	for i, r := range rows {
		o := rowOutcome[i]
		if o == Done && inactive[r.HostID] {
			o = Drop
			in.hosts.Forget(r.AgentID)
		}
		byHost[r.HostID] = o
		if o == Done && layers[r.HostID] != nil {
			written = append(written, r)
		}
	}
	revoked := 0
	for i := range beats {
		if outcomes[i] != Drop {
			outcomes[i] = byHost[hostOf[i]]
			if outcomes[i] == Drop && inactive[hostOf[i]] {
				revoked++
			}
		}
	}
	if revoked > 0 {
		in.revokedHeartbeats.Add(int64(revoked))
		in.log.Warn("heartbeats from revoked or deleted hosts dropped", zap.Int("heartbeats", revoked))
	}
	if in.entropy != nil && len(written) > 0 {
		in.entropy.Check(ctx, written, layers)
	}
	return outcomes
}

// ackKey is the (host, config type) an ack is stored under.
type ackKey struct {
	host       uuid.UUID
	configType string
}

// uniqueHosts returns the distinct hosts of keys whose outcome is not Drop.
func uniqueHosts(keys []ackKey, outcomes []Outcome) []uuid.UUID {
	seen := map[uuid.UUID]bool{}
	var out []uuid.UUID
	for i, k := range keys {
		if outcomes[i] == Drop || seen[k.host] {
			continue
		}
		seen[k.host] = true
		out = append(out, k.host)
	}
	return out
}

// write stores rows [0, n) with one call of put and returns each row's outcome. When the database
// refuses the batch because of its data, the rows are written one at a time so that only the offending
// ones are dropped (and their agents forgotten, in case the host was deleted).
func (in *Ingester) write(ctx context.Context, kind string, n int, agents []string, put func(ctx context.Context, lo, hi int) error) []Outcome {
	out := make([]Outcome, n)
	if n == 0 {
		return out
	}
	err := put(ctx, 0, n)
	switch {
	case err == nil:
		return out
	case !errors.Is(err, ErrRejected):
		in.log.Warn("batch write failed, will retry", zap.String("kind", kind), zap.Int("rows", n), zap.Error(err))
		fill(out, Retry)
		return out
	}
	in.log.Warn("batch refused by the database, writing rows one by one", zap.String("kind", kind), zap.Int("rows", n), zap.Error(err))
	for i := range n {
		err := put(ctx, i, i+1)
		switch {
		case err == nil:
		case errors.Is(err, ErrRejected):
			in.hosts.Forget(agents[i])
			in.log.Warn("record refused by the database, dropped", zap.String("kind", kind), zap.String("agent_id", agents[i]), zap.Error(err))
			out[i] = Drop
		default:
			out[i] = Retry
		}
	}
	return out
}

// newerAck reports whether a should be kept instead of b (same host and config type): the higher
// version, and of the same version the one later in the ack stream (the one the agent sent last).
func newerAck(a, b Ack) bool {
	if a.Version != b.Version {
		return a.Version > b.Version
	}
	return a.Seq >= b.Seq
}

func agentIDsOf[T any](items []T, id func(T) string) []string {
	ids := make([]string, 0, len(items))
	seen := make(map[string]struct{}, len(items))
	for _, it := range items {
		a := id(it)
		if _, dup := seen[a]; !dup {
			seen[a] = struct{}{}
			ids = append(ids, a)
		}
	}
	return ids
}

func fill(out []Outcome, o Outcome) {
	for i := range out {
		out[i] = o
	}
}
