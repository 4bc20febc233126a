package ingest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Ingester writes batches of acks and heartbeats. It is safe for concurrent use; concurrent batches
// cannot deadlock because every batch touches its rows in key order.
type Ingester struct {
	store Store
	hosts *HostDirectory
	log   *zap.Logger
}

// NewIngester returns an Ingester writing through store and resolving agents with hosts.
func NewIngester(store Store, hosts *HostDirectory, log *zap.Logger) *Ingester {
	return &Ingester{store: store, hosts: hosts, log: log}
}

// IngestAcks writes a batch of acks and returns one Outcome per ack, in order. Per (host, config type)
// only the newest ack of the batch is written (highest version, then latest received); the others are
// Done as well since the database would not keep them anyway.
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

	type key struct {
		host       uuid.UUID
		configType string
	}
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
	hostIDs, err := in.hosts.Lookup(ctx, agentIDsOf(beats, func(h Heartbeat) string { return h.AgentID }))
	if err != nil {
		in.log.Warn("heartbeat batch: host lookup failed, will retry", zap.Int("heartbeats", len(beats)), zap.Error(err))
		fill(outcomes, Retry)
		return outcomes
	}
	winner := make(map[uuid.UUID]int, len(beats))
	hostOf := make([]uuid.UUID, len(beats))
	for i, h := range beats {
		hostID, ok := hostIDs[h.AgentID]
		if !ok {
			in.log.Warn("heartbeat from unknown agent dropped", zap.String("agent_id", h.AgentID))
			outcomes[i] = Drop
			continue
		}
		hostOf[i] = hostID
		if j, seen := winner[hostID]; !seen || !h.ReceivedAt.Before(beats[j].ReceivedAt) {
			winner[hostID] = i
		}
	}
	rows := make([]HostHeartbeat, 0, len(winner))
	for hostID, i := range winner {
		rows = append(rows, HostHeartbeat{HostID: hostID, Heartbeat: beats[i]})
	}
	slices.SortFunc(rows, func(a, b HostHeartbeat) int { return bytes.Compare(a.HostID[:], b.HostID[:]) })
	rowAgents := make([]string, len(rows))
	for i, r := range rows {
		rowAgents[i] = r.AgentID
	}

	rowOutcome := in.write(ctx, "heartbeat", len(rows), rowAgents, func(ctx context.Context, lo, hi int) error {
		return in.store.UpdateHeartbeats(ctx, rows[lo:hi])
	})
	byHost := make(map[uuid.UUID]Outcome, len(rows))
	for i, r := range rows {
		byHost[r.HostID] = rowOutcome[i]
	}
	for i := range beats {
		if outcomes[i] != Drop {
			outcomes[i] = byHost[hostOf[i]]
		}
	}
	return outcomes
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

// newerAck reports whether a should be kept instead of b (same host and config type).
func newerAck(a, b Ack) bool {
	if a.Version != b.Version {
		return a.Version > b.Version
	}
	return !a.ReceivedAt.Before(b.ReceivedAt)
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
