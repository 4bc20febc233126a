package protocol

import (
	"encoding/json"
	"time"
)

// FetchRequest is the agent's startup pull on FetchSubject. AgentID must equal the subject token.
type FetchRequest struct {
	AgentID string `json:"agent_id"`
}

// FetchReply answers a FetchRequest. Configs holds every type the host has; Versions the effective
// version of each (deleted types appear in Versions only, so the agent can drop them). SecretFields lists,
// per type, the RFC 6901 pointers of values the backend injected (credentials): the agent keeps them in
// memory only. TypeErrors names the types left out because they could not be delivered whole (for
// example a credential that failed to resolve); Error is set when the whole fetch failed.
type FetchReply struct {
	Configs      map[string]json.RawMessage `json:"configs"`
	Versions     map[string]int64           `json:"versions"`
	SecretFields map[string][]string        `json:"secret_fields,omitempty"`
	TypeErrors   map[string]Error           `json:"type_errors,omitempty"`
	Error        *Error                     `json:"error,omitempty"`
	// Statements holds the signed statement of every type in Configs or Versions (deletions included);
	// Identity binds the agent to its environment, so environment-scoped statements can be checked.
	Statements map[string]Signed `json:"statements,omitempty"`
	Identity   *Signed           `json:"identity,omitempty"`
	// TrustedKeys is a signed list of trusted keys (rotation): the agent adopts it when a key it trusts
	// signed it and it is newer than the last one it accepted.
	TrustedKeys *Signed `json:"trusted_keys,omitempty"`
}

// Command types sent on CommandSubject.
const (
	CommandConfigUpdate = "config_update"
)

// Command is the envelope of everything the backend sends an agent. For config_update, Payload is the
// effective config of ConfigType at Version; a JSON null Payload means the type was deleted.
type Command struct {
	CommandID    string          `json:"command_id"`
	Type         string          `json:"type"`
	ConfigType   string          `json:"config_type"`
	Version      int64           `json:"version"`
	Payload      json.RawMessage `json:"payload"`
	SecretFields []string        `json:"secret_fields,omitempty"`
	IssuedAt     time.Time       `json:"issued_at,omitzero"`
	// Statement is the resolver's signed statement of ConfigType at Version (a deletion too).
	Statement *Signed `json:"statement,omitempty"`
}

// Apply statuses of an Ack.
const (
	AckApplied = "applied"
	AckFailed  = "failed"
)

// Ack is the agent's report after applying (or failing to apply) one config version.
type Ack struct {
	AgentID    string    `json:"agent_id"`
	ConfigType string    `json:"config_type"`
	Version    int64     `json:"version"`
	Status     string    `json:"status"`
	Error      string    `json:"error,omitempty"`
	AppliedAt  time.Time `json:"applied_at,omitzero"`
}

// Heartbeat is the agent's periodic report of its config state. HeartbeatIntervalMS (optional, beyond
// the spec's payload) is the period the agent heartbeats at now, in milliseconds: the backend judges
// the host's liveness by it (see Online), so a long intervals.heartbeat never makes a live host look
// offline. Older agents leave it out.
type Heartbeat struct {
	AgentID             string           `json:"agent_id"`
	SentAt              time.Time        `json:"sent_at"`
	AgentVersion        string           `json:"agent_version"`
	ConfigHash          string           `json:"config_hash"`
	ConfigVersion       int64            `json:"config_version"`
	ConfigVersions      map[string]int64 `json:"config_versions"`
	HeartbeatIntervalMS int64            `json:"heartbeat_interval_ms,omitempty"`
}

// LogRecord is one agent self-log line shipped on LogsSubject.
type LogRecord struct {
	AgentID string         `json:"agent_id"`
	Time    time.Time      `json:"time"`
	Level   string         `json:"level"`
	Message string         `json:"message"`
	Attrs   map[string]any `json:"attrs,omitempty"`
}

// CredsRenewRequest is an agent's request, on CredsRenewSubject, for a fresh JWT for its NATS user
// (its credentials expire). PublicKey is the user key of the agent's creds file; the agent keeps the
// seed, which never travels.
type CredsRenewRequest struct {
	AgentID   string `json:"agent_id"`
	PublicKey string `json:"public_key"`
}

// CredsRenewReply answers a CredsRenewRequest: the new user JWT (same key) and when it expires, or an
// error (not_found when the host is unknown, revoked or holds another key).
type CredsRenewReply struct {
	JWT       string    `json:"jwt,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	Error     *Error    `json:"error,omitempty"`
}
