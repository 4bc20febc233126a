package protocol

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// refSigned has Signed's fields and no methods: json.Unmarshal decodes it by reflection, the reference
// Signed.DecodeJSON must agree with.
type refSigned Signed

// checkSignedSame checks Signed.DecodeJSON against encoding/json, decoding into copies of into.
func checkSignedSame(t *testing.T, into Signed, data []byte) {
	t.Helper()
	checkDecodeSame(t, "Signed.DecodeJSON", into, data, (*Signed).DecodeJSON,
		func(v *Signed, data []byte) error { return json.Unmarshal(data, (*refSigned)(v)) })
}

func checkSigned(t *testing.T, data []byte) { t.Helper(); checkSignedSame(t, Signed{}, data) }

// Whatever json.Marshal or AppendJSON writes for a Signed, Signed.DecodeJSON reads as encoding/json
// does; so does every prefix of it and every one-byte change of it.
func TestSignedDecodeJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 2026))
	mutations := []byte{'"', '\\', '{', '}', '[', ']', ',', ':', 'n', '0', '-', '.', 'e', ' ', '=', '+', '/', 0, 0x80, 'x', 'A'}
	for i := range 500 {
		s := randomSigned(r)
		if s == nil {
			s = &Signed{}
		}
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if byHand, err := s.AppendJSON(nil); err != nil || string(byHand) != string(data) {
			t.Fatalf("AppendJSON %s (%v), json.Marshal %s", byHand, err, data)
		}
		var back Signed
		if err := back.DecodeJSON(data); err != nil {
			t.Fatalf("signed %d: %v", i, err)
		}
		checkDamaged(t, r, data, i%10 == 0, mutations, checkSigned)
	}
}

func TestSignedDecodeJSONEdgeCases(t *testing.T) {
	cases := []string{
		// accepted
		`{}`, `null`, ` null `, " \t\r\n{ \"statement\" : \"AA==\" , \"key_id\" : \"k\" } \n",
		`{"statement":null,"key_id":null,"signature":null}`, `{"statement":"","signature":""}`,
		`{"STATEMENT":"aGVsbG8=","Key_Id":"k","sIgnature":"AA=="}`, "{\"\u017ftatement\":\"AA==\",\"\u212aey_id\":\"k\"}",
		`{"statement":"aGVs\nbG8=","signature":"\u0061GVsbG8=","extra":{"a":[1,null]}}`, `{"statement":"\n"}`,
		`{"statement":[104,101,null,255],"signature":[]}`, `{"key_id":"\u00e9\ud83d\ude00\ud800x\\\/\b\f\n\r\t\""}`,
		`{"key_id":"` + "\xff\xfe\xed\xa0\x80 ok é" + `"}`, `{"key_id":"a","key_id":"b","statement":"AA==","statement":"AQ=="}`,
		// refused
		``, ` `, `n`, `nul`, `nullx`, `{`, `}`, `[]`, `"s"`, `1`, `true`, `{} {}`, `{}x`, `{,}`, `{"key_id":"k",}`,
		`{"key_id"}`, `{"key_id":}`, `{key_id:"k"}`, `{"statement":"a"}`, `{"statement":"!!!!"}`, `{"statement":"aGVsbG8"}`,
		`{"statement":1}`, `{"statement":{}}`, `{"statement":[256]}`, `{"statement":[-1]}`, `{"statement":[-0]}`,
		`{"statement":[1.5]}`, `{"key_id":7}`, `{"key_id":["k"]}`, `{"signature":true}`, `{"key_id":"a` + "\x01" + `"}`,
		`{"key_id":"\x"}`, `{"key_id":"\u12g4"}`, `{"key_id":"abc`, `{"x":[1,]}`, `{"x":tru}`, `{"x":01}`,
		`{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	}
	for _, c := range cases {
		checkSigned(t, []byte(c))
	}
}

// Decoding into a Signed that holds values merges as encoding/json does (null and absent members leave
// what was there), and the decoded bytes do not alias data.
func TestSignedDecodeJSONIntoExisting(t *testing.T) {
	into := Signed{Statement: []byte("old statement"), KeyID: "old", Signature: []byte("old signature")}
	for _, c := range []string{`null`, `{}`, `{"key_id":null}`, `{"statement":null}`, `{"signature":"AA=="}`,
		`{"key_id":"new","statement":[1,2]}`} {
		checkSignedSame(t, into, []byte(c))
	}
	data := []byte(`{"statement":"aGVsbG8=","key_id":"k","signature":"AQID"}`)
	var s Signed
	if err := s.DecodeJSON(data); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 'x'
	}
	if string(s.Statement) != "hello" || s.KeyID != "k" || string(s.Signature) != "\x01\x02\x03" {
		t.Fatalf("decoded %#v changed with its input", s)
	}
	if err := (*Signed)(nil).DecodeJSON([]byte(`{}`)); err == nil {
		t.Fatal("decoding into a nil *Signed succeeded")
	}
}

func FuzzSignedDecodeJSON(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 10 {
		data, _ := json.Marshal(randomSigned(r))
		f.Add(data)
	}
	f.Add([]byte(`{"statement":[1,2],"KEY_ID":"k","x":[{"y":null}]}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkSigned(t, data) })
}

// BenchmarkDecodeSigned decodes an identity statement as a fetch reply carries it, by DecodeJSON and by
// encoding/json's reflection.
func BenchmarkDecodeSigned(b *testing.B) {
	id := benchReply(1).Sets[0].Hosts[0].Identity
	data, err := id.AppendJSON(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("DecodeJSON", func(b *testing.B) {
		benchDecode(b, len(data), func() error {
			var s Signed
			return s.DecodeJSON(data)
		})
	})
	b.Run("reflect", func(b *testing.B) {
		benchDecode(b, len(data), func() error {
			var s Signed
			return json.Unmarshal(data, &s)
		})
	})
}
