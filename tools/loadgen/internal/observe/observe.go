// Package observe watches what the backend has persisted about a fleet: which hosts are online, which
// acknowledged a config version, how many heartbeats have landed. Two implementations: straight from
// PostgreSQL (exact persist times, cheap to poll; used when loadgen knows the database) and through the
// config-api's host list (works against any stack; times are only as precise as the polling).
package observe

import (
	"context"
	"time"
)

// Observer reads a fleet's persisted state in one environment.
type Observer interface {
	// Name says where the observations come from ("postgres" or "config-api").
	Name() string
	// Online counts hosts whose last heartbeat was stored at or after since.
	Online(ctx context.Context, environmentID string, since time.Time) (int, error)
	// Acks counts hosts whose apply status of configType is at version or newer.
	Acks(ctx context.Context, environmentID, configType string, version int64) (AckProgress, error)
	// AckTimes returns, per host acknowledged at version or newer, when that status was persisted; nil
	// when the source does not know persist times.
	AckTimes(ctx context.Context, environmentID, configType string, version int64) ([]time.Time, error)
	// HeartbeatSeqSum sums the heartbeat sequence numbers that loadgen agents put in agent_version
	// ("…+hb.<n>") over the environment's hosts: the number of heartbeats that have landed or been
	// superseded by a newer one of the same agent.
	HeartbeatSeqSum(ctx context.Context, environmentID string) (int64, error)
	Close()
}

// AckProgress counts acknowledgements of one version.
type AckProgress struct {
	Applied int `json:"applied"`
	Failed  int `json:"failed"`
	// Last is when the newest counted status was persisted (postgres) or zero (config-api).
	Last time.Time `json:"last"`
}
