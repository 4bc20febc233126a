package natsapi

import (
	"fmt"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// decodeResolveRequest decodes a resolve request body.
func decodeResolveRequest(data []byte) (protocol.ResolveRequest, error) {
	var req protocol.ResolveRequest
	return req, decodeStrict(data, &req)
}

// decodeResolveAgentsRequest decodes a resolve_agents request body.
func decodeResolveAgentsRequest(data []byte) (protocol.ResolveAgentsRequest, error) {
	var req protocol.ResolveAgentsRequest
	return req, decodeStrict(data, &req)
}

// decodeResolveBatchRequest decodes a resolve_batch request body.
func decodeResolveBatchRequest(data []byte) (protocol.ResolveBatchRequest, error) {
	var req protocol.ResolveBatchRequest
	return req, decodeStrict(data, &req)
}

// decodeStrict decodes exactly one JSON object into dst (protocol.DecodeStrict: unknown fields,
// trailing data and empty bodies are refused, and the error never echoes the payload).
func decodeStrict(data []byte, dst any) error {
	if err := protocol.DecodeStrict(data, dst); err != nil {
		return fmt.Errorf("%w: %v", resolve.ErrInvalidRequest, err)
	}
	return nil
}
