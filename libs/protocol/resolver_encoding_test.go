package protocol_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/protocol/protocoltest"
)

// A reply written by hand as the resolver writes it (Signed.AppendJSON) decodes to the reply it encodes.
func TestDecodeJSONResolverEncoding(t *testing.T) {
	reply := protocol.BenchReply(40)
	data := protocoltest.EncodeSetsLikeResolver(t, reply)
	var got protocol.ResolveSetsReply
	if err := got.DecodeJSON(data); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, reply) {
		t.Fatalf("decoded reply differs from the encoded one")
	}
	protocol.CheckDecode(t, data)
}

// BenchmarkDecodeResolveSetsReply decodes a signed reply to a batch of fetches as delivery receives it,
// by DecodeJSON (what natsrpc calls) and by encoding/json's reflection (what it did before).
func BenchmarkDecodeResolveSetsReply(b *testing.B) {
	for _, agents := range []int{32, 500} {
		data := protocoltest.EncodeSetsLikeResolver(b, protocol.BenchReply(agents))
		b.Run(fmt.Sprintf("agents=%d/DecodeJSON", agents), func(b *testing.B) {
			protocol.BenchDecode(b, len(data), func() error {
				var r protocol.ResolveSetsReply
				return r.DecodeJSON(data)
			})
		})
		b.Run(fmt.Sprintf("agents=%d/reflect", agents), func(b *testing.B) {
			protocol.BenchDecode(b, len(data), func() error {
				var r protocol.ResolveSetsReply
				return protocol.UnmarshalByReflection(data, &r)
			})
		})
	}
}
