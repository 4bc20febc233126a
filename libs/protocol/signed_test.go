package protocol

import (
	"encoding/json"
	"testing"
)

// Signed.AppendJSON writes what json.Marshal writes, for plain key ids and for those it must escape.
func TestSignedAppendJSONIsJSONMarshal(t *testing.T) {
	for _, s := range []Signed{
		{},
		{Statement: []byte{}, Signature: []byte{}},
		{Statement: []byte(`{"agent_id":"a"}`), KeyID: "k-2026", Signature: []byte{0, 1, 2, 250, 255}},
		{Statement: []byte("x"), KeyID: `quote"back\slash`},
		{Statement: []byte("x"), KeyID: "<html>&\x01\x7f"},
		{Statement: []byte("x"), KeyID: "ключ\xff"},
	} {
		want, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.AppendJSON([]byte("prefix:"))
		if err != nil || string(got) != "prefix:"+string(want) {
			t.Errorf("AppendJSON(%+v) = %s, %v; want prefix:%s", s, got, err, want)
		}
		if plain, same := PlainJSONString(s.KeyID), string(mustJSON(t, s.KeyID)) == `"`+s.KeyID+`"`; plain != same {
			t.Errorf("PlainJSONString(%q) = %t, json.Marshal writes it as itself: %t", s.KeyID, plain, same)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
