package protocol

import (
	"errors"
	"time"
)

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

// Validate reports whether ev is a config-change event a consumer can act on: an event_id, a known
// scope, an environment_id, a host_id for a host event, a well-formed config_type and a version that is
// not negative. The message names the first field at fault and never echoes a value; consumers wrap it
// in their own error kind (delivery: invalid_request).
func (ev ConfigChanged) Validate() error {
	switch {
	case ev.EventID == "":
		return errors.New("event_id is required")
	case ev.Scope != ScopeEnvironment && ev.Scope != ScopeHost:
		return errors.New("unknown scope")
	case ev.EnvironmentID == "":
		return errors.New("environment_id is required")
	case ev.Scope == ScopeHost && ev.HostID == "":
		return errors.New("host_id is required for a host event")
	case !ValidConfigTypeName(ev.ConfigType):
		return errors.New("invalid config_type")
	case ev.Version < 0:
		return errors.New("negative version")
	}
	return nil
}
