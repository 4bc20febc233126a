package natsapi

import (
	"context"
	"encoding/json"
	"testing"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// A malformed resolve_agents request is refused with invalid_request; anything accepted encodes to a
// reply that decodes and whose hosts all resolve.
func FuzzResolveAgentsRequest(f *testing.F) {
	for _, seed := range []string{
		`{"agent_ids":["agent-1"]}`,
		`{"agent_ids":["agent-1","agent-1","nobody"],"types":["healthcheck"]}`,
		`{"agent_ids":["agent-1"],"types":["nope"]}`,
		`{"agent_ids":[]}`, `{"agent_ids":["a.b"]}`, `{"agent_ids":[""]}`, `{"agent_ids":null}`,
		`{"agent_ids":"agent-1"}`, `{"agent_ids":[1]}`, `{"agent_id":"agent-1"}`, `{}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(seed))
	}
	s := New(resolve.New(fuzzStore{}, resolve.Options{}), Options{}, zap.NewNop())
	f.Fuzz(func(t *testing.T, data []byte) {
		body, err := s.resolveAgents(context.Background(), data, defaultMaxPayload)
		checkClientError(t, err)
		if err != nil {
			return
		}
		var reply protocol.ResolveAgentsReply
		if err := json.Unmarshal(body, &reply); err != nil {
			t.Fatalf("reply %q does not decode: %v", body, err)
		}
		for i := range reply.Hosts {
			if _, err := reply.Resolved(i); err != nil {
				t.Fatalf("reply %s: %v", body, err)
			}
		}
	})
}
