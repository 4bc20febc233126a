package protocol

import "time"

// Scopes of a config change.
const (
	ScopeEnvironment = "environment"
	ScopeHost        = "host"
)

// ConfigChanged is published (through the outbox) on ConfigChangedSubject after every committed config
// write or delete. For ScopeHost, HostID and AgentID name the host.
type ConfigChanged struct {
	EventID       string    `json:"event_id"`
	Scope         string    `json:"scope"`
	ClientID      string    `json:"client_id"`
	EnvironmentID string    `json:"environment_id"`
	HostID        string    `json:"host_id,omitempty"`
	AgentID       string    `json:"agent_id,omitempty"`
	ConfigType    string    `json:"config_type"`
	Version       int64     `json:"version"`
	Deleted       bool      `json:"deleted,omitempty"`
	Actor         string    `json:"actor,omitempty"`
	OccurredAt    time.Time `json:"occurred_at"`
}
