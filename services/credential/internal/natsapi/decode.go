package natsapi

import (
	"fmt"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/credential/internal/credential"
)

// decodeInjectRequest decodes an inject request body and bounds its number of items.
func decodeInjectRequest(data []byte, maxItems int) (protocol.InjectRequest, error) {
	var req protocol.InjectRequest
	if err := decodeStrict(data, &req); err != nil {
		return protocol.InjectRequest{}, err
	}
	if req.Items == nil {
		return protocol.InjectRequest{}, fmt.Errorf("%w: items is required", credential.ErrInvalidRequest)
	}
	if len(req.Items) > maxItems {
		return protocol.InjectRequest{}, fmt.Errorf("%w: %d items, at most %d per request", credential.ErrInvalidRequest, len(req.Items), maxItems)
	}
	return req, nil
}

// decode decodes a body of one of the management requests.
func decode[T any](data []byte) (T, error) {
	var req T
	return req, decodeStrict(data, &req)
}

// decodeStrict decodes exactly one JSON object into dst (protocol.DecodeStrict: unknown fields,
// trailing data and empty bodies are refused, and the error never echoes the payload).
func decodeStrict(data []byte, dst any) error {
	if err := protocol.DecodeStrict(data, dst); err != nil {
		return fmt.Errorf("%w: %v", credential.ErrInvalidRequest, err)
	}
	return nil
}
