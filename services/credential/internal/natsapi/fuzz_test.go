package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/credential/internal/credential"
	"github.com/configsync/configsync/services/credential/internal/keyring"
)

// Fuzz fixtures: one client, one environment, one credential holding fuzzSecret.
const (
	fuzzClient = "0a000000-0000-4000-8000-000000000001"
	fuzzEnv    = "0a000000-0000-4000-8000-0000000000e1"
	fuzzCred   = "0a000000-0000-4000-8000-0000000000c1"
	fuzzSecret = "fuzz-S3CRET-value"
)

// sealedStore answers SealedByIDs from a fixed map; the injector needs nothing else.
type sealedStore struct {
	credential.Store
	rows map[string]credential.Sealed
}

func (s sealedStore) SealedByIDs(_ context.Context, ids []string) (map[string]credential.Sealed, error) {
	out := map[string]credential.Sealed{}
	for _, id := range ids {
		if r, ok := s.rows[id]; ok {
			out[id] = r
		}
	}
	return out, nil
}

// FuzzInjectRequest feeds arbitrary bodies through the inject decoder and the injector: nothing
// panics, a body is either refused as invalid_request or answered with exactly one result per item in
// order, and no error message carries the secret.
func FuzzInjectRequest(f *testing.F) {
	for _, seed := range []string{
		`{"items":[{"key":"h1","client_id":"` + fuzzClient + `","environment_id":"` + fuzzEnv + `","collectors":[{"type":"mysql","name":"p","credential_id":"` + fuzzCred + `"}]}]}`,
		`{"items":[{"key":"h1","client_id":"` + fuzzClient + `","environment_id":"` + fuzzEnv + `","collectors":[{"type":"mysql","name":"p","credential_id":"` + fuzzCred + `","password":"x"},{"type":"http","name":"h"}]}]}`,
		`{"items":[{"key":"h2","client_id":"` + fuzzClient + `","environment_id":"` + fuzzEnv + `","collectors":[{"type":"mysql","name":"p","credential_id":7}]}]}`,
		`{"items":[{"key":"h3","client_id":"x","environment_id":"y","collectors":{"a":1}}]}`,
		`{"items":[{"collectors":null},{"collectors":[]},{}]}`,
		`{"items":[]}`, `{"items":null}`, `{}`, `[]`, `null`, ``, `{"items":[1]}`, `{"itemz":[]}`,
		`{"items":[{"collectors":[{"credential_id":"` + fuzzCred + `"},{"credential_id":"` + strings.ToUpper(fuzzCred) + `"}]}]}`,
		`{"items":[{"key":"\u0000","collectors":"[]"}]} trailing`,
	} {
		f.Add([]byte(seed))
	}
	ring, ct := sealedFuzzSecret(f)
	store := sealedStore{rows: map[string]credential.Sealed{
		fuzzCred: {ID: fuzzCred, ClientID: fuzzClient, EnvironmentID: fuzzEnv, Ciphertext: ct},
	}}
	s := New(credential.NewService(store, ring), credential.NewInjector(store, ring, zap.NewNop()), Options{MaxInjectItems: 64}, zap.NewNop())

	f.Fuzz(func(t *testing.T, data []byte) {
		req, decodeErr := decodeInjectRequest(append([]byte(nil), data...), 64)
		body, err := s.inject(context.Background(), data)
		if err != nil {
			if !errors.Is(err, credential.ErrInvalidRequest) {
				t.Fatalf("error is not invalid_request: %v", err)
			}
			if decodeErr == nil {
				t.Fatalf("decoder accepted what inject refused: %v", err)
			}
			if e := s.replyError("inject", err); e.Code != protocol.CodeInvalidRequest || strings.Contains(e.Message, fuzzSecret) {
				t.Fatalf("reply error %+v", e)
			}
			return
		}
		var reply protocol.InjectReply
		if err := json.Unmarshal(body, &reply); err != nil {
			t.Fatalf("reply is not JSON: %v", err)
		}
		if len(reply.Results) != len(req.Items) {
			t.Fatalf("%d results for %d items", len(reply.Results), len(req.Items))
		}
		for i, r := range reply.Results {
			if r.Key != req.Items[i].Key {
				t.Fatalf("result %d key %q, want %q", i, r.Key, req.Items[i].Key)
			}
			if r.Error != nil {
				if r.Collectors != nil || r.SecretFields != nil || strings.Contains(r.Error.Message, fuzzSecret) {
					t.Fatalf("failed item %d carries data: %+v", i, r)
				}
				continue
			}
			if len(r.SecretFields) == 0 {
				continue
			}
			var cols []map[string]json.RawMessage
			if err := json.Unmarshal(r.Collectors, &cols); err != nil {
				t.Fatalf("injected collectors are not an array of objects: %v", err)
			}
			for _, c := range cols {
				if _, ok := c["credential_id"]; ok {
					t.Fatalf("credential_id left after injection: %s", r.Collectors)
				}
			}
		}
	})
}

// sealedFuzzSecret returns a keyring of one all-zero key and the ciphertext it seals fuzzSecret's
// fields (password and username) into for fuzzCred of fuzzClient.
func sealedFuzzSecret(f *testing.F) (*keyring.Keyring, string) {
	f.Helper()
	ring, err := keyring.New(map[uint32][]byte{1: make([]byte, keyring.KeySize)})
	if err != nil {
		f.Fatal(err)
	}
	plaintext, _ := json.Marshal(map[string]string{"password": fuzzSecret, "username": "u"})
	cts, err := ring.Encrypt(context.Background(), []credential.EncryptItem{{Plaintext: plaintext, AAD: credential.AAD(fuzzClient, fuzzCred)}})
	if err != nil {
		f.Fatal(err)
	}
	return ring, cts[0]
}
