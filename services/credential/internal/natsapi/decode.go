package natsapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

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

// decodeStrict decodes exactly one JSON object into dst. Unknown fields are rejected: a misspelled
// "environment_id" must not silently widen a credential to every environment.
func decodeStrict(data []byte, dst any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%w: empty request body", credential.ErrInvalidRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("%w: malformed JSON: %s", credential.ErrInvalidRequest, describeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: malformed JSON: data after the request object", credential.ErrInvalidRequest)
	}
	return nil
}

// describeJSONError names what was wrong without echoing any of the payload, which may hold secrets:
// offsets, field names and types only.
func describeJSONError(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("syntax error at offset %d", syntax.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q must be %s", typ.Field, typeName(typ.Type.String()))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "unexpected end of input"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.TrimPrefix(err.Error(), "json: unknown field ")
		if len(field) > 80 {
			field = field[:80] + `..."`
		}
		return "unknown field " + field
	default:
		return "invalid request body"
	}
}

func typeName(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "map["):
		return "an object of strings"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.Contains(goType, "."):
		return "an object"
	default:
		return "a " + goType
	}
}
