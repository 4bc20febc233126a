package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// A malformed resolve_sets request is refused with invalid_request (or, for another contract,
// contract_mismatch); anything accepted encodes to a reply that decodes and passes its contract check.
func FuzzResolveSetsRequest(f *testing.F) {
	for _, seed := range []string{
		`{"contract":1,"agent_ids":["agent-1"]}`,
		`{"contract":1,"agent_ids":["agent-1","agent-1","nobody"],"types":["healthcheck"]}`,
		`{"contract":1,"agent_ids":["agent-1"],"types":["nope"]}`,
		`{"contract":2,"agent_ids":["agent-1"],"stage":"canary"}`, `{"agent_ids":["agent-1"]}`,
		`{"contract":1,"agent_ids":[]}`, `{"contract":1,"agent_ids":["a.b"]}`, `{"contract":1,"agent_ids":[""]}`,
		`{"contract":1,"agent_ids":null}`, `{"contract":1,"agent_ids":"agent-1"}`, `{"contract":"1"}`, `{}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(seed))
	}
	s := New(resolve.New(fuzzStore{}, resolve.Options{}), Options{}, zap.NewNop())
	f.Fuzz(func(t *testing.T, data []byte) {
		body, err := s.resolveSets(context.Background(), data, defaultMaxPayload)
		checkSetsAnswer(t, s, "resolve_sets", body, err)
	})
}

// checkSetsAnswer checks the answer to a request of the sets contract: a contract mismatch answered as
// such, a client error with a code and a message, or a reply of this contract that is consistent.
func checkSetsAnswer(t *testing.T, s *Service, endpoint string, body []byte, err error) {
	t.Helper()
	if errors.Is(err, resolve.ErrContractMismatch) {
		if code := s.replyError(endpoint, err).Code; code != protocol.CodeContractMismatch {
			t.Fatalf("contract mismatch answered as %s", code)
		}
		return
	}
	checkClientError(t, err)
	if err != nil {
		if e := s.replyError(endpoint, err); e.Code == "" || natsrpc.HeaderValue(e.Message) == "" {
			t.Fatalf("error %v maps to an empty micro error %+v", err, e)
		}
		return
	}
	var reply protocol.ResolveSetsReply
	if err := json.Unmarshal(body, &reply); err != nil {
		t.Fatalf("reply %q does not decode: %v", body, err)
	}
	if err := reply.Check(); err != nil {
		t.Fatalf("reply %s: %v", body, err)
	}
}
