package configsync

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// fuzzPlanted is the secret of the collectors cached before each re-sync; it never reaches the file.
const (
	fuzzPlanted           = "pl4nted-fetch-S3CRET-41d9"
	fuzzPlantedCollectors = `[{"type":"postgres","name":"db","host":"h","password":"` + fuzzPlanted + `"}]`
)

// FuzzFetchReply decodes arbitrary bytes as the transport decodes a fetch reply and, when they pass,
// re-syncs a populated cache with them: nothing panics, callbacks only ever see configs the type
// registry accepts (or nil for built-in defaults), every live cache entry is valid, and the cache
// file loads back unchanged.
func FuzzFetchReply(f *testing.F) {
	for _, seed := range []string{
		`{"configs":{"labels":{"static":{"env":"prod"}},"collectors":` + pgCollectors + `},"versions":{"labels":9,"collectors":9},"secret_fields":{"collectors":["/0/password"]}}`,
		`{"configs":{"labels":{"static":{"env":5}}},"versions":{"labels":9}}`,
		`{"configs":{"labels":null},"versions":{"labels":9,"tracing":12}}`,
		`{"configs":{"collectors":` + pgCollectors + `},"versions":{"collectors":9},"secret_fields":{"collectors":["/0/nope"]}}`,
		`{"configs":{"bogus":{}},"versions":{"bogus":-1},"type_errors":{"collectors":{"code":"credential_failed","message":"m"}}}`,
		`{"configs":{"intervals":{"metrics":"1s"}},"versions":{"intervals":1}}`,
		`{"error":{"code":"not_found","message":"unknown agent"}}`,
		`{"error":null}`, `{}`, `null`, `[]`, `{"configs":[]}`, `{"versions":{"labels":"9"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// transport.Client.Fetch: a reply is the JSON decoding of the message, refused when it
		// carries an error.
		var reply protocol.FetchReply
		if err := json.Unmarshal(data, &reply); err != nil || reply.Error != nil {
			return
		}
		dir := t.TempDir()
		c := openCache(t, dir)
		must(t, c.Put("labels", json.RawMessage(`{"static":{"from":"cache"}}`), 5, nil))
		must(t, c.Put("collectors", json.RawMessage(fuzzPlantedCollectors), 5, []string{"/0/password"}))
		s, rec := newSyncer(t, c, nil, map[string]json.RawMessage{"labels": json.RawMessage(`{"static":{"from":"local"}}`)})
		s.Resync(context.Background(), &reply)

		for typ, applied := range rec.data {
			if applied == "" || applied == "null" {
				continue
			}
			// From the reply or the cache: a secret field is valid at the pointers of either.
			pointers := slices.Clone(reply.SecretFields[typ])
			if typ == agentconfig.Collectors {
				pointers = append(pointers, "/0/password")
			}
			if err := agentconfig.ValidateDelivered(typ, json.RawMessage(applied), pointers); err != nil {
				t.Fatalf("%s applied although the registry refuses it: %v", typ, err)
			}
		}
		for _, a := range rec.acks {
			if !agentconfig.Known(a.ConfigType) {
				t.Fatalf("ack for unknown type %q", a.ConfigType)
			}
		}
		for _, typ := range agentconfig.TypeNames() {
			e, ok := c.Get(typ)
			if !ok || e.Redacted {
				continue
			}
			if err := agentconfig.ValidateDelivered(typ, e.Data, c.SecretFields(typ)); err != nil {
				t.Fatalf("cached %s is invalid: %v", typ, err)
			}
		}
		want, _ := json.Marshal(c.Entries())
		got, _ := json.Marshal(openCache(t, dir).Entries())
		if !bytes.Equal(want, got) {
			t.Fatalf("cache reloads as %s, was %s", got, want)
		}
		if bytes.Contains(want, []byte(fuzzPlanted)) {
			t.Fatalf("a secret reached the cache file: %s", want)
		}
	})
}
