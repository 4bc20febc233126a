package natsapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"unicode/utf8"

	"github.com/configsync/configsync/libs/protocol"
)

// spliceIdentityReference is the reply the fetch endpoint sends an agent with an identity: the shared
// reply's encoding with the identity member, as json.Marshal encodes it, appended last.
func spliceIdentityReference(t testing.TB, reply []byte, identity *protocol.Signed) []byte {
	id, err := json.Marshal(identity)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte(nil), reply[:len(reply)-1]...)
	if len(reply) > 2 {
		out = append(out, ',')
	}
	out = append(out, `"identity":`...)
	out = append(out, id...)
	return append(out, '}')
}

func TestAppendWithIdentityMatchesJSONEncoding(t *testing.T) {
	full, err := json.Marshal(&protocol.FetchReply{
		Configs:     map[string]json.RawMessage{"labels": json.RawMessage(`{"static":{"env":"prod"}}`)},
		Versions:    map[string]int64{"labels": 3},
		TrustedKeys: &protocol.Signed{Statement: []byte(`{"keys":[]}`), KeyID: "k1", Signature: []byte{1, 2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	identities := []*protocol.Signed{
		{},
		{Statement: []byte{}, Signature: []byte{}},
		{Statement: []byte(`{"agent_id":"a-1","environment_id":"e"}`), KeyID: "resolver-2026", Signature: randBytes(64)},
		{Statement: randBytes(1), KeyID: `k"q`, Signature: randBytes(2)},
		{Statement: randBytes(3), KeyID: `k\b`, Signature: nil},
		{Statement: nil, KeyID: "<k>&", Signature: randBytes(5)},
		{Statement: randBytes(7), KeyID: "k\n\x01", Signature: randBytes(64)},
		{Statement: randBytes(300), KeyID: "kλ\u2028", Signature: randBytes(64)},
		{Statement: randBytes(10), KeyID: "k\xff", Signature: randBytes(64)},
		{Statement: randBytes(10), KeyID: "k\x7f~ ", Signature: randBytes(64)},
	}
	for range 200 {
		key := make([]byte, rng.IntN(12))
		for i := range key {
			key[i] = byte(rng.UintN(128))
		}
		identities = append(identities, &protocol.Signed{Statement: randBytes(rng.IntN(400)), KeyID: string(key), Signature: randBytes(rng.IntN(80))})
	}
	var buf []byte
	for i, id := range identities {
		for _, reply := range [][]byte{full, []byte(`{}`)} {
			want := spliceIdentityReference(t, reply, id)
			buf, err = appendWithIdentity(buf[:0], reply, id)
			if err != nil {
				t.Fatalf("identity %d: %v", i, err)
			}
			if !bytes.Equal(buf, want) {
				t.Fatalf("identity %d (key id %q):\n got %s\nwant %s", i, id.KeyID, buf, want)
			}
			if !utf8.ValidString(id.KeyID) {
				continue // json.Marshal replaces invalid UTF-8: it cannot decode back
			}
			var back protocol.FetchReply
			if err := json.Unmarshal(buf, &back); err != nil || back.Identity == nil || back.Identity.KeyID != id.KeyID ||
				!bytes.Equal(back.Identity.Statement, id.Statement) || !bytes.Equal(back.Identity.Signature, id.Signature) {
				t.Fatalf("identity %d does not decode back: %v", i, err)
			}
		}
	}
	if _, err := appendWithIdentity(nil, []byte(`[]`), identities[2]); err == nil {
		t.Fatal("a reply that is not an object was accepted")
	}
}

// BenchmarkAnswerIdentity is the per-agent part of a fetch reply: the shared encoding of a config
// set's reply with the agent's own identity statement spliced in.
func BenchmarkAnswerIdentity(b *testing.B) {
	reply := []byte(`{"configs":{"collectors":[` + string(bytes.Repeat([]byte(`{"type":"mysql","name":"db","host":"db","port":3306,"password":"secretsecret"},`), 8)) +
		`{"type":"http"}],"labels":{"static":{"env":"prod"}}},"versions":{"collectors":2,"labels":3},"statements":{}}`)
	id := &protocol.Signed{Statement: []byte(fmt.Sprintf(`{"agent_id":"lg-1-%d","environment_id":"24e344af-4783-49a0-8765-598d46004fb8","issued_at":"2026-12-02T11:48:03Z"}`, 12345)),
		KeyID: "resolver-2026-12", Signature: bytes.Repeat([]byte{7}, 64)}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = appendWithIdentity(buf[:0], reply, id); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAllowReplyOnlyTheAgentsOwnInbox(t *testing.T) {
	s := &FetchServer{}
	subject := protocol.FetchSubject("a-1")
	for reply, want := range map[string]bool{
		"_INBOX.a-1.x":       true,
		"_INBOX.a-1.x.y":     true,
		"_INBOX.a-1.":        true,
		"_INBOX.a-1":         false,
		"_INBOX.a-12.x":      false,
		"_INBOX.a-.x":        false,
		"_INBOX.b-1.x":       false,
		"_inbox.a-1.x":       false,
		"x_INBOX.a-1.x":      false,
		"configsync.cmd.a-1": false,
		"":                   false,
	} {
		if got := s.allowReply(subject, reply); got != want {
			t.Errorf("reply %q: allowed %v, want %v", reply, got, want)
		}
	}
	if s.allowReply("configsync.agent", "_INBOX.a-1.x") {
		t.Error("a subject without an agent id was allowed a reply")
	}
	if got := s.RefusedReplies(); got != 9 {
		t.Errorf("refused replies counted %d, want 9", got)
	}
}
