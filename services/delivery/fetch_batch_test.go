package delivery_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// Fetches arriving together are answered in batches (one resolver request, one injection per
// distinct collector list); each agent must still get exactly its own answer: the environment's
// configs, its override, its credential failure, or its refusal.
func TestConcurrentFetchesGetTheirOwnAnswers(t *testing.T) {
	s := newServedStack(t, 40)
	cfg := testDeliveryConfig(t)
	cfg.FetchBatch, cfg.FetchWorkers = 16, 16 // one batch at a time: the others queue up behind it
	s.startDelivery(t, cfg)
	good := s.createCredential(t, s.clientID, "db", map[string]string{"password": "db-pw-planted"})
	foreign := s.createCredential(t, s.otherClient(t), "theirs", map[string]string{"password": "foreign-pw-planted"})
	s.putEnv(t, "collectors", fmt.Sprintf(`[{"type":"mysql","name":"db","host":"db","port":3306,"credential_id":%q}]`, good))
	s.putEnv(t, "labels", `{"static":{"env":"prod"}}`)
	s.putHost(t, s.hosts[3], "labels", `{"static":{"team":"edge"}}`)
	s.putHost(t, s.hosts[4], "collectors", fmt.Sprintf(`[{"type":"redis","name":"cache","host":"r","port":6379,"credential_id":%q}]`, good))
	s.putHost(t, s.hosts[5], "collectors", fmt.Sprintf(`[{"type":"mysql","name":"stolen","host":"db","port":3306,"credential_id":%q}]`, foreign))

	type fetch struct{ subject, payload string }
	var fetches []fetch
	for _, h := range s.hosts {
		fetches = append(fetches, fetch{h.agent, h.agent})
	}
	fetches = append(fetches, fetch{"agent-nobody", "agent-nobody"}, fetch{s.hosts[0].agent, s.hosts[1].agent})

	// All at once, then one by one: the answers must be the same.
	concurrent := make([]protocol.FetchReply, len(fetches))
	var wg sync.WaitGroup
	for i, f := range fetches {
		wg.Go(func() { concurrent[i] = fetchCode(t, s, f.subject, f.payload) })
	}
	wg.Wait()
	for i, f := range fetches {
		one := fetchCode(t, s, f.subject, f.payload)
		if !reflect.DeepEqual(testinfra.JSONValue(t, concurrent[i]), testinfra.JSONValue(t, one)) {
			t.Errorf("fetch %s as %s:\n together %+v\n alone    %+v", f.payload, f.subject, concurrent[i], one)
		}
	}

	byAgent := map[string]protocol.FetchReply{}
	for i, f := range fetches[:len(s.hosts)] {
		byAgent[f.payload] = concurrent[i]
	}
	if r := byAgent[s.hosts[0].agent]; r.Error != nil || len(r.TypeErrors) != 0 || !testinfra.JSONEqual(r.Configs["labels"], []byte(`{"static":{"env":"prod"}}`)) || len(r.SecretFields["collectors"]) == 0 {
		t.Errorf("plain host: %+v", r)
	}
	if r := byAgent[s.hosts[3].agent]; !testinfra.JSONEqual(r.Configs["labels"], []byte(`{"static":{"env":"prod","team":"edge"}}`)) {
		t.Errorf("labels override: %s", r.Configs["labels"])
	}
	if r := byAgent[s.hosts[4].agent]; !testinfra.JSONEqual(r.Configs["collectors"], []byte(`[{"type":"mysql","name":"db","host":"db","port":3306,"password":"db-pw-planted"},{"type":"redis","name":"cache","host":"r","port":6379,"password":"db-pw-planted"}]`)) {
		t.Errorf("collectors override: %s", r.Configs["collectors"])
	}
	if r := byAgent[s.hosts[5].agent]; r.TypeErrors["collectors"].Code != protocol.CodeCredentialFailed || r.Configs["labels"] == nil {
		t.Errorf("foreign credential: %+v", r)
	}
	if r := concurrent[len(s.hosts)]; r.Error == nil || r.Error.Code != protocol.CodeNotFound {
		t.Errorf("unknown agent: %+v", r)
	}
	if r := concurrent[len(s.hosts)+1]; r.Error == nil || r.Error.Code != protocol.CodeForbidden {
		t.Errorf("another agent's fetch: %+v", r)
	}
	assertNoSecretLogged(t, s, "db-pw-planted")
	assertNoSecretLogged(t, s, "foreign-pw-planted")
}

// fetchCode fetches as the agent does; an error reply must carry the same code in its header.
func fetchCode(t *testing.T, s *stack, subjectAgent, payloadAgent string) protocol.FetchReply {
	data, _ := json.Marshal(protocol.FetchRequest{AgentID: payloadAgent})
	msg, err := testinfra.RequestAsAgent(s.nc, subjectAgent, protocol.FetchSubject(subjectAgent), data, 30*time.Second)
	if err != nil {
		t.Errorf("fetch %s: %v", subjectAgent, err)
		return protocol.FetchReply{}
	}
	var reply protocol.FetchReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		t.Errorf("fetch reply %s: %v", msg.Data, err)
	}
	if reply.Error != nil && msg.Header.Get(micro.ErrorCodeHeader) != reply.Error.Code {
		t.Errorf("error header %q, body %+v", msg.Header.Get(micro.ErrorCodeHeader), reply.Error)
	}
	return reply
}
