package protocol

import (
	"encoding/base64"
	"encoding/json"
)

// CodeSignatureInvalid is the error text an agent acknowledges a config with when its statement is
// missing, not signed by a trusted key, or does not match the config (type, version, content or scope).
const CodeSignatureInvalid = "signature_invalid"

// Signed is a statement signed by the config authority (the resolver): the exact RFC 8785 canonical
// JSON bytes of the statement (base64 on the wire, so no re-encoding on the way can change them), the
// id of the key that signed them, and the ed25519 signature over those bytes. libs/agentconfig/signing
// builds and verifies statements; everything between the resolver and the agent only carries them.
type Signed struct {
	Statement []byte `json:"statement"`
	KeyID     string `json:"key_id"`
	Signature []byte `json:"signature"`
}

// AppendJSON appends s encoded exactly as json.Marshal encodes it (byte slices in standard base64, null
// when nil), without reflection: a herd's replies carry one identity statement per host. A key id that
// needs escaping takes json.Marshal.
func (s *Signed) AppendJSON(dst []byte) ([]byte, error) {
	if !PlainJSONString(s.KeyID) {
		b, err := json.Marshal(s)
		if err != nil {
			return dst, err
		}
		return append(dst, b...), nil
	}
	dst = append(dst, `{"statement":`...)
	dst = appendBase64(dst, s.Statement)
	dst = append(dst, `,"key_id":"`...)
	dst = append(dst, s.KeyID...)
	dst = append(dst, `","signature":`...)
	dst = appendBase64(dst, s.Signature)
	return append(dst, '}'), nil
}

func appendBase64(dst, b []byte) []byte {
	if b == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// PlainJSONString reports whether json.Marshal encodes str as itself in quotes: printable ASCII without
// the characters it escapes.
func PlainJSONString(str string) bool {
	for i := 0; i < len(str); i++ {
		switch c := str[i]; {
		case c < 0x20, c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
