package protocol

import "encoding/json"

// What the external tests use of this package's own tests: they are external because they import
// protocoltest, which imports this package.
var (
	BenchReply  = benchReply
	CheckDecode = check
	BenchDecode = benchDecode
)

// UnmarshalByReflection decodes data into v by encoding/json's reflection, without DecodeJSON.
func UnmarshalByReflection(data []byte, v *ResolveSetsReply) error {
	return json.Unmarshal(data, (*refReply)(v))
}
