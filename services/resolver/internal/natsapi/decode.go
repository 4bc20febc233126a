package natsapi

import (
	"encoding/json"
	"fmt"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// decodeResolveRequest decodes a resolve request body.
func decodeResolveRequest(data []byte) (protocol.ResolveRequest, error) {
	var req protocol.ResolveRequest
	return req, decodeStrict(data, &req)
}

// decodeResolveSetsRequest decodes a resolve_sets request body. Its contract is read first, leniently:
// a request of another contract (which may have fields this resolver does not know) is refused as a
// contract mismatch, which the caller retries, not as a malformed request.
func decodeResolveSetsRequest(data []byte) (protocol.ResolveSetsRequest, error) {
	var head struct {
		Contract int `json:"contract"`
	}
	if err := json.Unmarshal(data, &head); err == nil && head.Contract != protocol.ResolveSetsContract {
		return protocol.ResolveSetsRequest{}, fmt.Errorf("%w: request of contract %d, this resolver speaks %d",
			resolve.ErrContractMismatch, head.Contract, protocol.ResolveSetsContract)
	}
	var req protocol.ResolveSetsRequest
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
