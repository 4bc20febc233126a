package protocol

import "encoding/json"

// EncodeJSON returns v encoded as JSON, or v itself when it is already encoded (a json.RawMessage or
// []byte, which is not checked): what a request, a reply or an outbox event carries on the wire.
func EncodeJSON(v any) ([]byte, error) {
	switch b := v.(type) {
	case json.RawMessage:
		return b, nil
	case []byte:
		return b, nil
	default:
		return json.Marshal(v)
	}
}
