package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// marker is planted in hostile payloads; no service may log it (payloads are never logged).
const marker = "HOSTILE-MARKER-7f3a"

type payload struct {
	name string
	data []byte
}

// garbage is what every subject gets: broken, wrong-shaped and oversized messages.
func garbage() []payload {
	deep := append(bytes.Repeat([]byte(`{"a":[`), 12000), bytes.Repeat([]byte(`]}`), 12000)...)
	return []payload{
		{"empty", nil},
		{"not JSON", []byte("hello " + marker)},
		{"truncated", []byte(`{"agent_id":"` + marker)},
		{"binary", []byte{0xff, 0xfe, 0x00, 0x01, 0x80, 0xc3}},
		{"null", []byte(`null`)},
		{"array", []byte(`[1,2,"` + marker + `"]`)},
		{"string", []byte(`"` + marker + `"`)},
		{"number", []byte(`42`)},
		{"two values", []byte(`{} {}`)},
		{"unknown fields", []byte(`{"` + marker + `":1}`)},
		{"nested 24k deep", deep},
		{"oversized (900 KiB)", []byte(`{"agent_id":"` + strings.Repeat("A", 900<<10) + marker + `"}`)},
	}
}

func wrongTyped(docs ...string) []payload {
	out := make([]payload, len(docs))
	for i, d := range docs {
		out[i] = payload{"wrong-typed " + d, []byte(d)}
	}
	return out
}

// TestHostileNATSInput sends broken, wrong-typed and oversized messages on every subject the backend
// serves: agents' fetch, ack and heartbeat, the resolver's and credential service's micro endpoints
// and config.changed events.
//
// Setup: every service in-process, one tenant with two hosts (fake agents, online), configs and a
// credential. Requests are sent with the test's own connection; what the services store is compared
// before and after with a digest of every table.
//
// Proves: every request gets a clear error reply (a stable code other than "internal", a message, no
// echo of the payload beyond naming a field), fire-and-forget messages (acks, heartbeats, events) are refused and never
// redelivered, nothing is written and nothing is pushed, no payload reaches a log, and every service
// answers valid requests afterwards.
func TestHostileNATSInput(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startBackend(nil, nil)
	api := s.startAPI()
	ten := api.newTenant("hostile-nats")
	other := api.newTenant("hostile-nats-other")
	hosts := api.registerHosts(ten.EnvID, "h", 2)
	otherHost := api.registerHosts(other.EnvID, "o", 1)[0]
	fakes := newFakeAgents(t, s.nc, hosts)
	s.bringOnline(fakes, hosts)
	ops := api.as(ten.Token)
	hc := ops.putEnv(ten.EnvID, "healthcheck", `{"interval_seconds":30,"timeout_seconds":3}`)
	var cred struct{ ID string }
	ops.must("POST", "/api/v1/clients/"+ten.ClientID+"/credentials", map[string]any{"name": "db", "secret": map[string]string{"password": "pw"}}, &cred)
	waitReceived(t, 20*time.Second, fakes, "healthcheck", hc)
	s.waitApplied(20*time.Second, hosts, "healthcheck", hc)
	s.settle()
	before := s.snapshot()
	pushesBefore := len(fakes[0].received("healthcheck")) + len(fakes[1].received("healthcheck"))

	agent := hosts[0].AgentID
	// The backend services answer only their callers' inboxes (natsauth.ServicePermissions): the
	// barrage on their subjects comes over a connection with delivery's inbox prefix, as a compromised
	// or buggy caller would send it; fetches come from an agent's inbox as usual.
	caller := s.nats.Connect(t, nats.UserCredentials(s.writeCreds("hostile-caller", must(s.auth.UnrestrictedCreds("hostile-caller")))),
		nats.CustomInboxPrefix(natsauth.ServiceInboxPrefix(natsauth.DeliveryService)))
	requester := func(subject string) *nats.Conn {
		if strings.HasPrefix(subject, "configsync.svc.") {
			return caller
		}
		return s.nc
	}
	requests := []struct {
		subject string
		bodies  []payload
	}{
		{protocol.FetchSubject(agent), append(garbage(), wrongTyped(
			`{"agent_id":42}`, `{"agent_id":["`+agent+`"]}`, `{"agent_id":{"id":"x"}}`, `{"agent_id":"`+hosts[1].AgentID+`"}`,
			`{"agent_id":"`+otherHost.AgentID+`"}`, `{"agent_id":""}`)...)},
		{protocol.FetchSubject("no-such-agent"), wrongTyped(`{"agent_id":"no-such-agent"}`)},
		{protocol.ResolveSubject, append(garbage(), wrongTyped(
			`{"host_id":42}`, `{"agent_id":["x"]}`, `{"host_id":"not-a-uuid"}`, `{"types":"healthcheck","agent_id":"`+agent+`"}`,
			`{"agent_id":"`+agent+`","types":["no_such_type"]}`, `{"agent_id":"`+agent+`","host_id":"`+hosts[0].ID+`"}`,
			`{"agent_id":"`+agent+`","explain":"yes"}`, `{}`)...)},
		{protocol.ResolvePushSubject, append(garbage(), wrongTyped(
			`{"contract":1,"environment_id":5}`, `{"contract":1,"environment_id":"`+ten.EnvID+`","config_type":7}`,
			`{"contract":1,"environment_id":"`+ten.EnvID+`","config_type":"healthcheck","limit":"ten"}`,
			`{"contract":1,"environment_id":"`+ten.EnvID+`","config_type":"healthcheck","limit":-1}`,
			`{"contract":1,"environment_id":"`+ten.EnvID+`","config_type":"healthcheck","online_since":"yesterday"}`,
			`{"contract":1,"environment_id":"`+ten.EnvID+`","config_type":"healthcheck","host_ids":"x"}`,
			`{"contract":1,"environment_id":"`+ten.EnvID+`","config_type":"healthcheck","environment_version":"1"}`,
			`{"contract":"1","environment_id":"`+ten.EnvID+`","config_type":"healthcheck"}`,
			`{"contract":1,"environment_id":"`+ten.EnvID+`","config_type":"no_such_type"}`, `{"contract":1}`, `{}`)...)},
		{protocol.CredentialCreateSubject, append(garbage(), wrongTyped(
			`{"client_id":1,"name":"x","secret":{"password":"p"}}`, `{"client_id":"`+ten.ClientID+`","name":{},"secret":[]}`,
			`{"client_id":"`+ten.ClientID+`","name":"x","secret":{"password":5}}`,
			`{"client_id":"`+ten.ClientID+`","name":"x","secret":{"credential_id":"v"}}`,
			`{"client_id":"`+ten.ClientID+`","name":"","secret":{"password":"p"}}`,
			`{"client_id":"`+ten.ClientID+`","name":"x","secret":{}}`,
			`{"client_id":"`+ten.ClientID+`","environment_id":"`+other.EnvID+`","name":"x","secret":{"password":"p"}}`)...)},
		{protocol.CredentialRotateSubject, append(garbage(), wrongTyped(
			`{"client_id":"`+ten.ClientID+`","id":5}`, `{"client_id":"`+ten.ClientID+`","id":"`+cred.ID+`","secret":"pw"}`,
			`{"client_id":"`+other.ClientID+`","id":"`+cred.ID+`","secret":{"password":"stolen"}}`)...)},
		{protocol.CredentialDeleteSubject, append(garbage(), wrongTyped(
			`{"client_id":"`+ten.ClientID+`","id":"not-a-uuid"}`, `{"client_id":"`+other.ClientID+`","id":"`+cred.ID+`"}`, `{"id":"`+cred.ID+`"}`)...)},
		{protocol.CredentialGetSubject, append(garbage(), wrongTyped(`{"client_id":true,"id":"`+cred.ID+`"}`, `{"client_id":"`+other.ClientID+`","id":"`+cred.ID+`"}`)...)},
		{protocol.CredentialListSubject, append(garbage(), wrongTyped(`{"client_id":true}`, `{"client_id":"not-a-uuid"}`, `{}`)...)},
		{protocol.CredentialInjectSubject, append(garbage(), wrongTyped(
			`{"items":{"key":1}}`, `{"items":[{"key":1}]}`, `{"items":"x"}`)...)},
	}
	for _, r := range requests {
		t.Run("request "+r.subject, func(t *testing.T) {
			for _, p := range r.bodies {
				var msg *nats.Msg
				var err error
				if id, ok := protocol.AgentIDFromSubject(r.subject); ok {
					// Delivery answers a fetch only on the agent's own inbox.
					msg, err = testinfra.RequestAsAgent(s.nc, id, r.subject, p.data, 5*time.Second)
				} else {
					msg, err = requester(r.subject).Request(r.subject, p.data, 5*time.Second)
				}
				if err != nil {
					t.Errorf("%s: no answer: %v", p.name, err)
					continue
				}
				code, message := replyError(msg)
				switch {
				case code == "" || message == "":
					t.Errorf("%s: not an error reply: %.200s", p.name, msg.Data)
				case code == protocol.CodeInternal:
					t.Errorf("%s: answered %q, not a clear error: %s", p.name, code, message)
				case len(msg.Data) > 4<<10:
					t.Errorf("%s: the error reply (%d bytes) echoes the request", p.name, len(msg.Data))
				}
			}
		})
	}

	// Messages nobody answers: acks and heartbeats (captured by JetStream for ack-ingest) and events.
	t.Run("acks and heartbeats", func(t *testing.T) {
		for _, id := range []string{agent, "no-such-agent"} {
			acks := append(garbage(), wrongTyped(
				`{"agent_id":"`+id+`","config_type":5,"version":"five","status":true}`,
				`{"agent_id":"`+hosts[1].AgentID+`","config_type":"healthcheck","version":999,"status":"applied"}`,
				`{"agent_id":"`+id+`","config_type":"healthcheck","version":-1,"status":"applied"}`,
				`{"agent_id":"`+id+`","config_type":"healthcheck","version":999,"status":"maybe"}`,
				`{"agent_id":"`+id+`","config_type":"no such type!","version":999,"status":"applied"}`)...)
			for _, p := range acks {
				publish(t, s.nc, protocol.AckSubject(id), p.data)
			}
			beats := append(garbage(), wrongTyped(
				`{"agent_id":"`+id+`","config_version":"x"}`, `{"agent_id":"`+id+`","config_versions":[1]}`,
				`{"agent_id":"`+id+`","sent_at":"yesterday"}`, `{"agent_id":"`+hosts[1].AgentID+`","config_hash":"stolen"}`)...)
			for _, p := range beats {
				publish(t, s.nc, protocol.HeartbeatSubject(id), p.data)
			}
		}
		for _, durable := range []struct{ stream, name string }{
			{protocol.AcksStream, "configsync-ack-ingest-acks"}, {protocol.HeartbeatsStream, "configsync-ack-ingest-heartbeats"},
		} {
			testinfra.EventuallyNoError(t, 30*time.Second, func() error {
				return s.consumerIdle(durable.stream, durable.name)
			}, "ack-ingest to refuse every bad message for good")
		}
	})

	t.Run("config.changed events", func(t *testing.T) {
		events := append(garbage(), wrongTyped(
			`{"event_id":1,"scope":["environment"]}`,
			`{"event_id":"e","scope":"galaxy","environment_id":"`+ten.EnvID+`","config_type":"healthcheck","version":1}`,
			`{"event_id":"e","scope":"environment","environment_id":"not-a-uuid","config_type":"healthcheck","version":1}`,
			`{"event_id":"e","scope":"environment","environment_id":"`+ten.EnvID+`","config_type":"no_such_type","version":1}`,
			`{"event_id":"e","scope":"host","environment_id":"`+ten.EnvID+`","config_type":"healthcheck","version":1}`,
			`{"event_id":"e","scope":"host","environment_id":"`+ten.EnvID+`","host_id":"`+otherHost.ID+`","config_type":"healthcheck","version":1}`)...)
		refused := 0
		for _, p := range events {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := s.js.Publish(ctx, protocol.ConfigChangedSubject, p.data); err != nil {
				refused++ // the stream itself refused it (too large): fine, it never reaches delivery
			}
			cancel()
		}
		t.Logf("%d of %d events refused by the stream itself", refused, len(events))
		testinfra.EventuallyNoError(t, 30*time.Second, func() error {
			return s.consumerIdle(protocol.EventsStream, "configsync-delivery-push")
		}, "delivery to refuse every bad event for good")
	})

	if after := s.snapshot(); after.diff(before) != "" {
		t.Errorf("hostile messages changed stored data: %s", after.diff(before))
	}
	if n := len(fakes[0].received("healthcheck")) + len(fakes[1].received("healthcheck")); n != pushesBefore {
		t.Errorf("hostile messages caused %d pushes", n-pushesBefore)
	}
	for _, e := range s.logs.All() {
		line, _ := json.Marshal(e.ContextMap())
		if strings.Contains(e.Message+string(line), marker) {
			t.Errorf("a hostile payload reached a log entry: %s %s", e.Message, line)
			break
		}
	}

	// Every service still serves.
	if reply := fakes[0].fetch(t); reply.Error != nil || reply.Versions["healthcheck"] != hc {
		t.Errorf("fetch after the barrage: %+v", reply)
	}
	for subject, body := range map[string]string{
		protocol.ResolveSubject:          `{"agent_id":"` + agent + `"}`,
		protocol.CredentialListSubject:   `{"client_id":"` + ten.ClientID + `"}`,
		protocol.CredentialInjectSubject: `{"items":[{"key":"k","client_id":"` + ten.ClientID + `","environment_id":"` + ten.EnvID + `","collectors":[{"type":"mysql","name":"m","host":"h","port":1,"credential_id":"` + cred.ID + `"}]}]}`,
	} {
		msg, err := requester(subject).Request(subject, []byte(body), 5*time.Second)
		if err != nil {
			t.Errorf("%s after the barrage: %v", subject, err)
		} else if code, m := replyError(msg); code != "" {
			t.Errorf("%s after the barrage: %s %s", subject, code, m)
		}
	}
	hc2 := ops.putEnv(ten.EnvID, "healthcheck", `{"interval_seconds":31,"timeout_seconds":3}`)
	waitReceived(t, 20*time.Second, fakes, "healthcheck", hc2)
	s.waitApplied(20*time.Second, hosts, "healthcheck", hc2)
}

// replyError returns the error code and message of a reply: the micro error headers, or the
// {"error":{...}} body. Both empty means the reply is not an error.
func replyError(msg *nats.Msg) (string, string) {
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return code, msg.Header.Get("Nats-Service-Error")
	}
	var body struct {
		Error *protocol.Error `json:"error"`
	}
	if json.Unmarshal(msg.Data, &body) == nil && body.Error != nil {
		return body.Error.Code, body.Error.Message
	}
	var inject protocol.InjectReply
	if json.Unmarshal(msg.Data, &inject) == nil && len(inject.Results) > 0 {
		for _, r := range inject.Results {
			if r.Error == nil {
				return "", ""
			}
		}
		return inject.Results[0].Error.Code, inject.Results[0].Error.Message
	}
	return "", ""
}

func publish(t testing.TB, nc *nats.Conn, subject string, data []byte) {
	t.Helper()
	if err := nc.Publish(subject, data); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", fmt.Errorf("%s: %w", subject, err))
	}
}
