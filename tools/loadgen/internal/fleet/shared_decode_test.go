package fleet

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
)

// Commands that share everything but their command id decode, from the cache, exactly as a whole
// decode does; so do fetch replies that share everything but their identity. Messages of another
// layout are decoded whole.
func TestSharedDecodesEqualWholeDecodes(t *testing.T) {
	stmt := &protocol.Signed{Statement: []byte(`{"kind":"config"}`), KeyID: "k1", Signature: []byte("sig")}
	command := func(id string, version int64) []byte {
		return commandWith(t, id, version, `[{"type":"mysql","name":"db","credential_ref":"c1"}]`, stmt)
	}
	for _, data := range [][]byte{command("a-1", 4), command("a-2", 4), command("a-3", 4), command("a-1", 5),
		commandWith(t, "b-1", 4, `{"command_id":"x"}`, stmt), commandWith(t, "b-2", 4, `{"command_id":"x"}`, stmt),
		[]byte(`{"type":"config_update","command_id":"late","config_type":"labels","version":1,"payload":{}}`),
		[]byte(`{"command_id":"esc\"aped","type":"config_update","config_type":"labels","version":1,"payload":{}}`),
		[]byte(`{"command_id":"dup","type":"config_update","Command_ID":"other","version":1,"payload":{}}`),
		[]byte(`{"command_id":"dup2","type":"config_update","Command_ID":"other","version":1,"payload":{}}`),
		[]byte(`{"command_id":"bad","type":`)} {
		got, gotErr := decodeCommand(data)
		want, wantErr := decodeWhole[protocol.Command](data)
		if (gotErr != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: shared decode %+v (%v), whole %+v (%v)", data, got, gotErr, want, wantErr)
		}
	}
	if _, ok := sharedCommands.get(command("z", 4)[len(commandIDHead)+2:]); !ok {
		t.Error("the shared part of a command was not kept")
	}

	shared := protocol.FetchReply{Configs: map[string]json.RawMessage{"labels": json.RawMessage(`{"a":"b"}`)},
		Versions: map[string]int64{"labels": 3}, Statements: map[string]protocol.Signed{"labels": *stmt}}
	body, err := json.Marshal(shared)
	if err != nil {
		t.Fatal(err)
	}
	reply := func(agent string) []byte {
		id, err := json.Marshal(protocol.Signed{Statement: []byte(`{"agent_id":"` + agent + `"}`), KeyID: "k1", Signature: []byte(agent)})
		if err != nil {
			t.Fatal(err)
		}
		// As delivery's withIdentity writes it.
		return append(append(append(body[:len(body)-1:len(body)-1], `,"identity":`...), id...), '}')
	}
	// The per-agent part written otherwise than delivery writes it, after the shared part was kept.
	withIdentity := func(identity string) []byte {
		return append(append(append(body[:len(body)-1:len(body)-1], `,"identity":`...), identity...), '}')
	}
	for _, data := range [][]byte{reply("a-1"), reply("a-2"), reply("a-3"), body,
		withIdentity(`null`), withIdentity(` null `), withIdentity(`{}`), withIdentity(`{"KEY_ID":"k","statement":[1,2],"x":{}}`),
		withIdentity(`{"statement":"aGVs\nbG8=","signature":null}`), withIdentity(`{"statement":"!!!!"}`),
		withIdentity(`{"statement":"aGVsbG8"}`), withIdentity(`{"key_id":7}`), withIdentity(`[]`), withIdentity(`"x"`),
		withIdentity(`{"key_id":"k"} x`), withIdentity(`{"key_id":"k"`), withIdentity(``), withIdentity(`nul`),
		[]byte(`{"configs":{"x":{"identity":1}},"versions":{}}`),
		[]byte(`{"configs":{},"error":{"code":"unavailable","message":"later"}}`),
		[]byte(`{"configs":{},"identity":{"key_id":"k2"},"versions":{},"identity":{"key_id":"k1"}}`),
		[]byte(`{"configs":{"s":"a,\"identity\":{}}"},"versions":{}}`),
		[]byte(`{"configs":`)} {
		got, gotErr := decodeFetchReply(data)
		want, wantErr := decodeWhole[protocol.FetchReply](data)
		if (gotErr != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: shared decode %+v (%v), whole %+v (%v)", data, got, gotErr, want, wantErr)
		}
	}
	if _, ok := sharedReplies.get(body[:len(body)-1]); !ok {
		t.Error("the shared part of a fetch reply was not kept")
	}
}

func commandWith(t *testing.T, id string, version int64, payload string, stmt *protocol.Signed) []byte {
	t.Helper()
	b, err := json.Marshal(protocol.Command{CommandID: id, Type: protocol.CommandConfigUpdate, ConfigType: "collectors", Version: version,
		Payload: json.RawMessage(payload), SecretFields: []string{"/0/password"},
		IssuedAt: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC), Statement: stmt})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkDecodeFetchReply decodes a herd's fetch reply as delivery writes it (a signed config set
// shared by the agents, each agent's identity appended): decodeFetchReply, which decodes the shared
// part once and the identity per agent, against a whole decode by encoding/json.
func BenchmarkDecodeFetchReply(b *testing.B) {
	sig := make([]byte, 64)
	stmt := protocol.Signed{Statement: []byte(`{"config_type":"labels","data_sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","kind":"config","version":3}`), KeyID: "k-2026", Signature: sig}
	shared := protocol.FetchReply{Configs: map[string]json.RawMessage{}, Versions: map[string]int64{}, Statements: map[string]protocol.Signed{}}
	for _, typ := range []string{"collectors", "intervals", "labels"} {
		shared.Configs[typ] = json.RawMessage(`{"static":{"env":"prod","team":"payments","region":"eu-west-1"},"dynamic":[]}`)
		shared.Versions[typ] = 3
		shared.Statements[typ] = stmt
	}
	body, err := json.Marshal(shared)
	if err != nil {
		b.Fatal(err)
	}
	const agents = 1000
	replies := make([][]byte, agents)
	for i := range replies {
		agent := fmt.Sprintf("lg-20261202t114455-6948-%06d", i)
		id := protocol.Signed{Statement: []byte(`{"agent_id":"` + agent + `","environment_id":"5f0c1c1e-0000-4000-8000-000000000002","kind":"identity"}`), KeyID: "k-2026", Signature: sig}
		idJSON, err := id.AppendJSON(nil)
		if err != nil {
			b.Fatal(err)
		}
		replies[i] = append(append(append(body[:len(body)-1:len(body)-1], `,"identity":`...), idJSON...), '}')
	}
	for _, bc := range []struct {
		name   string
		decode func([]byte) (protocol.FetchReply, error)
	}{{"decodeFetchReply", decodeFetchReply}, {"whole", decodeWhole[protocol.FetchReply]}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r, err := bc.decode(replies[i%agents])
				if err != nil || r.Identity == nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
