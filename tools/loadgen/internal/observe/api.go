package observe

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/configsync/configsync/tools/loadgen/internal/configapi"
)

// API reads the fleet's state through GET /environments/{id}/hosts (5,000 hosts a page). Every call
// reads the whole environment, so poll it gently at large fleet sizes.
type API struct {
	client *configapi.Client
}

// NewAPI observes through client.
func NewAPI(client *configapi.Client) *API { return &API{client: client} }

// Name implements Observer.
func (a *API) Name() string { return "config-api" }

// Close implements Observer.
func (a *API) Close() {}

// Online implements Observer.
func (a *API) Online(ctx context.Context, environmentID string, since time.Time) (int, error) {
	n := 0
	err := a.client.AllHosts(ctx, environmentID, func(h configapi.Host) {
		if h.LastHeartbeatAt != nil && !h.LastHeartbeatAt.Before(since) {
			n++
		}
	})
	return n, err
}

// Acks implements Observer. Last stays zero: the API shows when the agent applied, not when the
// backend persisted.
func (a *API) Acks(ctx context.Context, environmentID, configType string, version int64) (AckProgress, error) {
	var out AckProgress
	err := a.client.AllHosts(ctx, environmentID, func(h configapi.Host) {
		s, ok := h.ApplyStatus[configType]
		if !ok || s.Version < version {
			return
		}
		if s.Status == "applied" {
			out.Applied++
		} else {
			out.Failed++
		}
	})
	return out, err
}

// AckTimes implements Observer: persist times are not exposed by the API.
func (a *API) AckTimes(context.Context, string, string, int64) ([]time.Time, error) { return nil, nil }

// HeartbeatSeqSum implements Observer.
func (a *API) HeartbeatSeqSum(ctx context.Context, environmentID string) (int64, error) {
	var sum int64
	err := a.client.AllHosts(ctx, environmentID, func(h configapi.Host) {
		if h.AgentVersion != nil {
			sum += HeartbeatSeq(*h.AgentVersion)
		}
	})
	return sum, err
}

// HeartbeatSeq parses the sequence number out of a loadgen agent_version ("…+hb.<n>"), 0 if none.
func HeartbeatSeq(agentVersion string) int64 {
	i := strings.LastIndex(agentVersion, "+hb.")
	if i < 0 {
		return 0
	}
	n, err := strconv.ParseInt(agentVersion[i+len("+hb."):], 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
