package protocol

import "time"

// OnlineHeartbeats is how many of its own heartbeat intervals a host may stay silent and still count
// as online.
const OnlineHeartbeats = 3

// OnlineWindow is how old a host's last heartbeat may be for the host to count as online: the
// deployment's window (CONFIGSYNC_ONLINE_WINDOW), or OnlineHeartbeats of the host's own heartbeat
// interval when that is longer (0: the agent did not report one). This is the one liveness rule: the
// API's "online", drift and delivery's choice of the hosts to push to all use it.
func OnlineWindow(window, heartbeatInterval time.Duration) time.Duration {
	return max(window, OnlineHeartbeats*heartbeatInterval)
}

// Online reports whether a host whose last heartbeat was stored at lastHeartbeat (nil: never) and
// which reported heartbeatInterval is online at now.
func Online(now time.Time, lastHeartbeat *time.Time, window, heartbeatInterval time.Duration) bool {
	return lastHeartbeat != nil && now.Sub(*lastHeartbeat) <= OnlineWindow(window, heartbeatInterval)
}

// RepairRequest asks delivery to send hosts the config types they miss: each host's heartbeat showed a
// version behind the one it should hold (or a type it should no longer hold). Delivery resolves the
// types afresh and pushes them to those hosts only.
type RepairRequest struct {
	Hosts []RepairHost `json:"hosts"`
}

// RepairHost is one host of a RepairRequest: for each type, the version it should hold (delivery
// sends what the host should hold now, which may be newer) and the one it reported (0: none).
type RepairHost struct {
	HostID  string                 `json:"host_id"`
	AgentID string                 `json:"agent_id"`
	Types   map[string]RepairState `json:"types"`
}

// RepairState is one type of a RepairHost.
type RepairState struct {
	Expected int64 `json:"expected"`
	Reported int64 `json:"reported,omitempty"`
	// Attempt counts the repairs of this (host, type, version), this one included.
	Attempt int `json:"attempt"`
}

// MaxRepairHosts bounds the hosts of one RepairRequest.
const MaxRepairHosts = 1000
