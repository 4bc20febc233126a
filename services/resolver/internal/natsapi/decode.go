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

// decodeResolveSetsRequest decodes a resolve_sets request body (decodeSetsRequest).
func decodeResolveSetsRequest(data []byte) (protocol.ResolveSetsRequest, error) {
	return decodeSetsRequest(data, func(r *protocol.ResolveSetsRequest) int { return r.Contract })
}

// decodeResolvePushRequest decodes a resolve_push request body (decodeSetsRequest).
func decodeResolvePushRequest(data []byte) (protocol.ResolvePushRequest, error) {
	return decodeSetsRequest(data, func(r *protocol.ResolvePushRequest) int { return r.Contract })
}

// decodeSetsRequest decodes a request body of the resolve_sets contract; contract reads a decoded
// request's contract. A well-formed request of this contract (every request of a herd batch) takes one
// strict decode; any other body takes decodeContract's two, which tell a contract mismatch from a
// malformed request. Both give the same result for the first kind: a body the strict decode accepts is
// an object in which the lenient read finds the same contract.
func decodeSetsRequest[R any](data []byte, contract func(*R) int) (R, error) {
	var req R
	if protocol.DecodeStrict(data, &req) == nil && contract(&req) == protocol.ResolveSetsContract {
		return req, nil
	}
	var fresh R
	err := decodeContract(data, &fresh)
	return fresh, err
}

// decodeContract decodes a request of the resolve_sets contract. Its contract is read first,
// leniently: a request of another contract (which may have fields this resolver does not know) is
// refused as a contract mismatch, which the caller retries, not as a malformed request.
func decodeContract(data []byte, dst any) error {
	var head *struct {
		Contract int `json:"contract"`
	}
	switch err := json.Unmarshal(data, &head); {
	case err != nil: // decodeStrict says what is wrong
	case head == nil:
		return fmt.Errorf("%w: the request must be a JSON object", resolve.ErrInvalidRequest)
	case head.Contract != protocol.ResolveSetsContract:
		return fmt.Errorf("%w: request of contract %d, this resolver speaks %d",
			resolve.ErrContractMismatch, head.Contract, protocol.ResolveSetsContract)
	}
	return decodeStrict(data, dst)
}

// decodeStrict decodes exactly one JSON object into dst (protocol.DecodeStrict: unknown fields,
// trailing data and empty bodies are refused, and the error never echoes the payload).
func decodeStrict(data []byte, dst any) error {
	if err := protocol.DecodeStrict(data, dst); err != nil {
		return fmt.Errorf("%w: %v", resolve.ErrInvalidRequest, err)
	}
	return nil
}
