// Package ingest turns agents' apply acknowledgements and heartbeats into database state: it resolves
// agents to hosts, dedupes each batch down to the newest record per key and writes the batch through the
// Store port, deciding per record whether it is done, must be retried or must be dropped for good.
package ingest

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
)

// Ack is one validated apply acknowledgement.
type Ack struct {
	AgentID    string
	ConfigType string
	Version    int64
	// Status is protocol.AckApplied or protocol.AckFailed.
	Status string
	// Error is the agent's failure text (empty when applied).
	Error     string
	AppliedAt time.Time
	// ReceivedAt is when the message broker stored the ack.
	ReceivedAt time.Time
	// Seq is the ack's sequence in the ack stream: of two acks of the same version, the later one sent
	// has the higher sequence, and it is the one kept.
	Seq uint64
}

// ClockSkewAllowance is how far ahead of the broker's clock an agent's applied_at may be.
const ClockSkewAllowance = 5 * time.Minute

// UnspecifiedError is the error text of a failed apply whose agent gave none.
const UnspecifiedError = "unspecified error"

// NewAck is the Ack of an agent's report that the broker stored at receivedAt. A failed apply always
// has an error text (UnspecifiedError if the agent gave none) and an applied one none. An agent cannot
// have applied a config after the broker stored its report: a missing or impossible applied_at (later
// than receivedAt by more than ClockSkewAllowance, or before 2000) becomes receivedAt.
func NewAck(agentID, configType string, version int64, status, errText string, appliedAt, receivedAt time.Time) Ack {
	a := Ack{AgentID: agentID, ConfigType: configType, Version: version, Status: status, AppliedAt: appliedAt, ReceivedAt: receivedAt}
	if status == protocol.AckFailed {
		a.Error = errText
		if a.Error == "" {
			a.Error = UnspecifiedError
		}
	}
	if a.AppliedAt.IsZero() || a.AppliedAt.After(receivedAt.Add(ClockSkewAllowance)) || a.AppliedAt.Year() < 2000 {
		a.AppliedAt = receivedAt
	}
	return a
}

// Heartbeat is one validated heartbeat.
type Heartbeat struct {
	AgentID string
	// ReceivedAt is when the message broker stored the heartbeat (server time, immune to agent clock
	// skew); it becomes hosts.last_heartbeat_at.
	ReceivedAt     time.Time
	AgentVersion   string
	ConfigHash     string
	ConfigVersion  int64
	ConfigVersions map[string]int64
	// HeartbeatInterval is the period the agent reports it heartbeats at (0: not reported).
	HeartbeatInterval time.Duration
}

// ApplyStatus is the row written for one (host, config type).
type ApplyStatus struct {
	HostID uuid.UUID
	Ack
}

// HostHeartbeat is the heartbeat state written for one host.
type HostHeartbeat struct {
	HostID        uuid.UUID
	EnvironmentID uuid.UUID
	Heartbeat
}

// HeartbeatWrite is what writing a batch of heartbeats returns: how many hosts were written (fewer
// than the rows when some are revoked or gone, or an older heartbeat), and each row's host's layers.
type HeartbeatWrite struct {
	Written int
	Layers  map[uuid.UUID]*HostLayers
}

// ErrRejected marks a store error caused by the data of a batch (a constraint or a value the database
// refuses), as opposed to an outage. Retrying the same rows would fail again.
var ErrRejected = errors.New("rejected by the database")

// Store is the persistence port of ingestion. Writes are all-or-nothing per call; an error wrapping
// ErrRejected means the rows themselves were refused.
type Store interface {
	// LookupHostIDs returns the host of every known agent among agentIDs.
	LookupHostIDs(ctx context.Context, agentIDs []string) (map[string]HostRef, error)
	// UpsertApplyStatuses writes rows (unique and sorted by host and type); a row never replaces a newer
	// version.
	UpsertApplyStatuses(ctx context.Context, rows []ApplyStatus) error
	// UpdateHeartbeats writes rows (unique and sorted by host); last_heartbeat_at never moves backwards
	// and revoked hosts are not written. It returns how many hosts were written and, for each row's
	// host, the versions of its config rows at both levels and its open repairs (anti-entropy; no
	// config data is read).
	UpdateHeartbeats(ctx context.Context, rows []HostHeartbeat) (HeartbeatWrite, error)
	// InactiveHosts returns which of hostIDs are revoked or no longer exist.
	InactiveHosts(ctx context.Context, hostIDs []uuid.UUID) (map[uuid.UUID]bool, error)
	// HostReports returns the last stored report of each active host of hostIDs, with its layers and
	// the versions it last acked "applied".
	HostReports(ctx context.Context, hostIDs []uuid.UUID) (map[uuid.UUID]HostReport, error)
	// FailedApplies returns the versions each of hostIDs acked "failed", by host and type.
	FailedApplies(ctx context.Context, hostIDs []uuid.UUID) (map[uuid.UUID]map[string]int64, error)
	// UpsertRepairs records repairs (sorted by host and type); DeleteRepairs closes them.
	UpsertRepairs(ctx context.Context, rows []Repair) error
	DeleteRepairs(ctx context.Context, keys []RepairKey) error
}

// Outcome tells the transport what to do with one received record.
type Outcome int

const (
	// Done: written (or superseded by a newer record of the same batch); acknowledge it.
	Done Outcome = iota
	// Retry: not written because of a transient failure; redeliver it later.
	Retry
	// Drop: can never be written (unknown or revoked agent, refused by the database); terminate it.
	Drop
)

func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case Retry:
		return "retry"
	case Drop:
		return "drop"
	}
	return "unknown"
}
