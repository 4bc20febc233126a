package natsapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

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

// decodeStrict decodes exactly one JSON object into dst. Unknown fields are rejected: a misspelled
// "host_ids" must not silently widen a batch to every host of the environment.
func decodeStrict(data []byte, dst any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%w: empty request body", resolve.ErrInvalidRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("%w: malformed JSON: %s", resolve.ErrInvalidRequest, describeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: malformed JSON: data after the request object", resolve.ErrInvalidRequest)
	}
	return nil
}

// describeJSONError names what was wrong without echoing the payload back.
func describeJSONError(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("syntax error at offset %d", syntax.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q has the wrong type", typ.Field)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected end of input"
	default:
		// Unknown fields and invalid values (e.g. a bad online_since time); the text names the field.
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return msg
	}
}
