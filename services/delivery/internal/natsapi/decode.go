package natsapi

import (
	"encoding/json"
	"fmt"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

const (
	maxFetchRequestBytes = 4 << 10
	maxEventBytes        = 64 << 10
)

// decodeFetchRequest returns the agent id of a fetch request received on subject. The payload's
// agent_id must equal the subject's token: an agent may only fetch its own configs.
func decodeFetchRequest(subject string, data []byte) (string, error) {
	token, ok := protocol.AgentIDFromSubject(subject)
	if !ok {
		return "", fmt.Errorf("%w: subject has no agent id", deliver.ErrInvalidRequest)
	}
	if len(data) > maxFetchRequestBytes {
		return "", fmt.Errorf("%w: request larger than %d bytes", deliver.ErrInvalidRequest, maxFetchRequestBytes)
	}
	if isPlainFetchRequest(data, token) {
		return token, nil
	}
	var req protocol.FetchRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return "", fmt.Errorf("%w: %s", deliver.ErrInvalidRequest, natsrpc.JSONErrorKind(err))
	}
	if req.AgentID == "" {
		return "", fmt.Errorf("%w: agent_id is required", deliver.ErrInvalidRequest)
	}
	if req.AgentID != token {
		return "", fmt.Errorf("%w: agent_id does not match the subject", deliver.ErrForbidden)
	}
	return token, nil
}

// isPlainFetchRequest reports whether data is exactly the request an agent sends for token,
// {"agent_id":"<token>"} as json.Marshal encodes it: then it needs no decoding (a subject token holds
// no character JSON escapes). Anything else is decoded.
func isPlainFetchRequest(data []byte, token string) bool {
	const prefix, suffix = `{"agent_id":"`, `"}`
	return len(data) == len(prefix)+len(token)+len(suffix) && string(data[:len(prefix)]) == prefix &&
		string(data[len(prefix):len(prefix)+len(token)]) == token && string(data[len(prefix)+len(token):]) == suffix
}

// decodeConfigChanged decodes a config-change event and validates it (protocol.ConfigChanged.Validate,
// the one check of an event); the Pusher relies on that.
func decodeConfigChanged(data []byte) (protocol.ConfigChanged, error) {
	if len(data) > maxEventBytes {
		return protocol.ConfigChanged{}, fmt.Errorf("%w: event larger than %d bytes", deliver.ErrInvalidRequest, maxEventBytes)
	}
	var ev protocol.ConfigChanged
	if err := json.Unmarshal(data, &ev); err != nil {
		return protocol.ConfigChanged{}, fmt.Errorf("%w: %s", deliver.ErrInvalidRequest, natsrpc.JSONErrorKind(err))
	}
	if err := ev.Validate(); err != nil {
		return protocol.ConfigChanged{}, fmt.Errorf("%w: %v", deliver.ErrInvalidRequest, err)
	}
	return ev, nil
}
