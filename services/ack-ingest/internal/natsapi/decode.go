package natsapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
)

// Limits on agent-supplied values: anything longer is cut (free text) or refused (identifiers).
const (
	maxMessageBytes   = 64 << 10
	maxErrorText      = 4096
	maxAgentVersion   = 128
	maxConfigHash     = 128
	maxConfigVersions = 64
	// maxHeartbeatInterval bounds the interval a heartbeat may claim (a longer one keeps a dead host
	// "online" for three times as long).
	maxHeartbeatInterval = 24 * time.Hour
)

// errMalformed is wrapped by every decode error: the message can never be ingested.
var errMalformed = errors.New("malformed message")

// decodeAck validates an ack received on subject and stored by the broker at storedAt. The subject's
// agent token must equal the payload's agent_id, so an agent can only report for itself.
func decodeAck(subject string, data []byte, storedAt time.Time) (ingest.Ack, error) {
	token, err := agentToken(subject, data)
	if err != nil {
		return ingest.Ack{}, err
	}
	m, ok := decodeAckFast(data) // the acks agents send; anything else (and every error) encoding/json
	if !ok {
		m = protocol.Ack{}
		if err := json.Unmarshal(data, &m); err != nil {
			return ingest.Ack{}, fmt.Errorf("%w: %s", errMalformed, jsonErrorKind(err))
		}
	}
	if m.AgentID != token {
		return ingest.Ack{}, fmt.Errorf("%w: agent_id does not match the subject", errMalformed)
	}
	if !protocol.ValidConfigTypeName(m.ConfigType) {
		return ingest.Ack{}, fmt.Errorf("%w: invalid config_type", errMalformed)
	}
	// Only registered types have a status row: an agent cannot grow host_config_apply_status beyond
	// one row per host and registered type.
	if !agentconfig.Known(m.ConfigType) {
		return ingest.Ack{}, fmt.Errorf("%w: unknown config_type", errMalformed)
	}
	if m.Version <= 0 {
		return ingest.Ack{}, fmt.Errorf("%w: version must be positive", errMalformed)
	}
	if m.Status != protocol.AckApplied && m.Status != protocol.AckFailed {
		return ingest.Ack{}, fmt.Errorf("%w: invalid status", errMalformed)
	}
	return ingest.NewAck(m.AgentID, m.ConfigType, m.Version, m.Status, cleanText(m.Error, maxErrorText), m.AppliedAt, storedAt), nil
}

// decodeHeartbeat validates a heartbeat received on subject and stored by the broker at storedAt. The
// payload's agent_id may be absent (the spec's payload has none) but, when present, must equal the
// subject's token.
func decodeHeartbeat(subject string, data []byte, storedAt time.Time) (ingest.Heartbeat, error) {
	token, err := agentToken(subject, data)
	if err != nil {
		return ingest.Heartbeat{}, err
	}
	// The heartbeats agents send take the fast path; anything else (and every error) encoding/json.
	m := new(protocol.Heartbeat)
	if fast, ok := decodeHeartbeatFast(data); ok {
		*m = fast
	} else {
		m = nil
		if err := json.Unmarshal(data, &m); err != nil {
			return ingest.Heartbeat{}, fmt.Errorf("%w: %s", errMalformed, jsonErrorKind(err))
		}
	}
	// JSON null, or an object without the config state every heartbeat carries (spec: config_hash is
	// always reported), would otherwise blank the host's reported state.
	if m == nil {
		return ingest.Heartbeat{}, fmt.Errorf("%w: not a JSON object", errMalformed)
	}
	if m.ConfigHash == "" {
		return ingest.Heartbeat{}, fmt.Errorf("%w: config_hash is missing", errMalformed)
	}
	if m.AgentID != "" && m.AgentID != token {
		return ingest.Heartbeat{}, fmt.Errorf("%w: agent_id does not match the subject", errMalformed)
	}
	if m.ConfigVersion < 0 {
		return ingest.Heartbeat{}, fmt.Errorf("%w: negative config_version", errMalformed)
	}
	if len(m.ConfigVersions) > maxConfigVersions {
		return ingest.Heartbeat{}, fmt.Errorf("%w: too many config_versions", errMalformed)
	}
	for t, v := range m.ConfigVersions {
		if !protocol.ValidConfigTypeName(t) || v < 0 {
			return ingest.Heartbeat{}, fmt.Errorf("%w: invalid config_versions entry", errMalformed)
		}
	}
	// The interval is advisory (liveness): an impossible one is ignored rather than refused.
	interval := time.Duration(m.HeartbeatIntervalMS) * time.Millisecond
	if m.HeartbeatIntervalMS <= 0 || interval > maxHeartbeatInterval {
		interval = 0
	}
	return ingest.Heartbeat{
		AgentID:           token,
		ReceivedAt:        storedAt,
		AgentVersion:      cleanText(m.AgentVersion, maxAgentVersion),
		ConfigHash:        cleanText(m.ConfigHash, maxConfigHash),
		ConfigVersion:     m.ConfigVersion,
		ConfigVersions:    m.ConfigVersions,
		HeartbeatInterval: interval,
	}, nil
}

// agentToken returns the agent token of the subject a message of data was received on, refusing a
// subject without one and a message over maxMessageBytes.
func agentToken(subject string, data []byte) (string, error) {
	token, ok := protocol.AgentIDFromSubject(subject)
	if !ok {
		return "", fmt.Errorf("%w: subject has no agent id", errMalformed)
	}
	if len(data) > maxMessageBytes {
		return "", fmt.Errorf("%w: %d bytes, limit %d", errMalformed, len(data), maxMessageBytes)
	}
	return token, nil
}

// cleanText makes agent-supplied text storable: valid UTF-8, no NUL (PostgreSQL text refuses it), at
// most limit bytes (cut on a rune boundary).
func cleanText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// jsonErrorKind describes a decode error without echoing the payload: natsrpc.JSONErrorKind, naming
// the member of a wrong type.
func jsonErrorKind(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		field, _, _ := strings.Cut(typeErr.Field, ".") // the top-level name only: map keys are payload
		return fmt.Sprintf("field %q has the wrong type", field)
	}
	return natsrpc.JSONErrorKind(err)
}
