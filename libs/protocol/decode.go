package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DecodeStrict decodes exactly one JSON object into dst for a service endpoint. Unknown fields are
// rejected (a misspelled "host_ids" or "environment_id" must not silently widen a request), as are an
// empty body and data after the object. The error describes what was wrong by offset, field name and
// type only: it never echoes the payload, which may hold secrets.
func DecodeStrict(data []byte, dst any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty request body")
	}
	switch err := DecodeOne(data, dst); {
	case errors.Is(err, ErrDataAfterValue):
		return errors.New("malformed JSON: data after the request object")
	case err != nil:
		return fmt.Errorf("malformed JSON: %s", describeJSONError(err))
	}
	return nil
}

// ErrDataAfterValue is DecodeOne's error for data after the JSON value.
var ErrDataAfterValue = errors.New("data after the JSON value")

// DecodeOne decodes exactly one JSON value of data into dst: the strictness every edge applies to a
// request body (DecodeStrict here, config-api's REST API), in one place. Unknown fields are refused, and
// so is anything but space after the value (ErrDataAfterValue); any other error is encoding/json's, for
// the edge to describe in its own words without echoing the payload.
func DecodeOne(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrDataAfterValue
	}
	return nil
}

func describeJSONError(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("syntax error at offset %d", syntax.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q must be %s", typ.Field, jsonTypeName(typ.Type.String()))
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

func jsonTypeName(goType string) string {
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
