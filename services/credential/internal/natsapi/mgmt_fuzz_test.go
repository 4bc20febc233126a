package natsapi

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/credential/internal/credential"
	"github.com/configsync/configsync/services/credential/internal/credential/credentialtest"
)

// FuzzManagementRequests feeds arbitrary bodies to create, rotate, delete, get and list: nothing panics,
// every refusal is a client error (invalid_request, not_found or conflict) whose message holds no secret
// value, and every success is metadata only, never a secret value of the request or of the stored
// credential.
func FuzzManagementRequests(f *testing.F) {
	ref := `"client_id":"` + fuzzClient + `","id":"` + fuzzCred + `"`
	for _, seed := range []struct {
		endpoint uint8
		body     string
	}{
		{0, `{"client_id":"` + fuzzClient + `","environment_id":"` + fuzzEnv + `","name":"db2","secret":{"password":"` + fuzzSecret + `-new","username":"u"}}`},
		{0, `{"client_id":"` + fuzzClient + `","name":"db","secret":{"password":"` + fuzzSecret + `-dup"}}`},
		{0, `{"client_id":"` + fuzzClient + `","name":"x","secret":{"type":"` + fuzzSecret + `-reserved"}}`},
		{0, `{"client_id":"` + fuzzClient + `","name":"x","secret":{"password":["` + fuzzSecret + `-array"]}}`},
		{0, `{"client_id":"` + fuzzClient + `","name":"x","secret":{"password":"` + fuzzSecret + `-trunc"`},
		{1, `{` + ref + `,"secret":{"password":"` + fuzzSecret + `-rotated"}}`},
		{1, `{` + ref + `}`},
		{1, `{` + ref + `,"secret":{"":"` + fuzzSecret + `-empty-name"}}`},
		{2, `{` + ref + `}`},
		{3, `{` + ref + `}`},
		{3, `{"client_id":"` + fuzzClient + `","id":"nope"}`},
		{4, `{"client_id":"` + fuzzClient + `"}`},
		{4, `{"client_id":"` + fuzzClient + `","environment_id":"` + fuzzEnv + `"}`},
		{4, `{}`}, {0, `[]`}, {1, `null`}, {2, ``}, {3, `{"id":1}`}, {4, `{"client_id":"` + fuzzClient + `"} {}`},
	} {
		f.Add(seed.endpoint, []byte(seed.body))
	}
	ring, ct := sealedFuzzSecret(f)
	stored := credential.Record{ID: fuzzCred, ClientID: fuzzClient, EnvironmentID: fuzzEnv, Name: "db",
		Fields: []string{"password", "username"}, Ciphertext: ct, KeyVersion: credential.KeyVersion(ct)}
	endpoints := []string{"create", "rotate", "delete", "get", "list"}

	f.Fuzz(func(t *testing.T, endpoint uint8, data []byte) {
		// Every input starts from the same state: fuzzClient with fuzzEnv, holding the stored credential.
		store := credentialtest.NewMemStore()
		store.AddClient(fuzzClient, fuzzEnv)
		if _, err := store.Create(context.Background(), stored); err != nil {
			t.Fatal(err)
		}
		s := New(credential.NewService(store, ring), credential.NewInjector(store, ring, zap.NewNop()), Options{}, zap.NewNop())
		name := endpoints[int(endpoint)%len(endpoints)]
		secrets := requestSecrets(data)
		// The handlers zero request bodies after use (they may hold secrets): hand them a copy.
		reply, err := s.admin(context.Background(), &natsrpc.Request{Endpoint: name, Data: append([]byte(nil), data...)})
		if err != nil {
			perr := s.replyError(name, err)
			switch perr.Code {
			case protocol.CodeInvalidRequest, protocol.CodeNotFound, protocol.CodeConflict:
			default:
				t.Fatalf("%s: error %v answered %s", name, err, perr.Code)
			}
			if strings.Contains(perr.Message, fuzzSecret) {
				t.Fatalf("%s: error holds the stored secret: %s", name, perr.Message)
			}
			for _, v := range secrets {
				if strings.Contains(perr.Message, v) {
					t.Fatalf("%s: error holds a secret value of the request: %s", name, perr.Message)
				}
			}
			return
		}
		body, err := json.Marshal(reply)
		if err != nil {
			t.Fatalf("%s: reply does not encode: %v", name, err)
		}
		if strings.Contains(string(body), fuzzSecret) {
			t.Fatalf("%s: reply holds the stored secret: %s", name, body)
		}
		for _, v := range secrets {
			if strings.Contains(string(body), v) {
				t.Fatalf("%s: reply holds a secret value of the request: %s", name, body)
			}
		}
	})
}

// requestSecrets returns the secret values of a create or rotate body that could only reach a reply
// or an error by leaking: at least 12 bytes long and not also written elsewhere in the request (as the
// name, an id or a field name, which replies and errors may legitimately quote).
func requestSecrets(data []byte) []string {
	var req struct {
		ClientID      string            `json:"client_id"`
		EnvironmentID string            `json:"environment_id"`
		ID            string            `json:"id"`
		Name          string            `json:"name"`
		Secret        map[string]string `json:"secret"`
	}
	if json.Unmarshal(data, &req) != nil {
		return nil
	}
	public := []string{req.ClientID, req.EnvironmentID, req.ID, req.Name}
	for k := range req.Secret {
		public = append(public, k)
	}
	var out []string
	for _, v := range req.Secret {
		if len(v) < 12 {
			continue
		}
		quoted := false
		for _, p := range public {
			quoted = quoted || strings.Contains(p, v)
		}
		if !quoted {
			out = append(out, v)
		}
	}
	return out
}
