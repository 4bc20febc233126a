package natsclient

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
)

// FuzzReplyError reads arbitrary resolver and credential replies (body and micro error headers): nothing
// panics, an error reply always has a code and becomes a classified fault, and only caller errors pass
// the service's message on; anything else is a generic "service failed".
func FuzzReplyError(f *testing.F) {
	for _, seed := range []struct{ body, code, desc string }{
		{`{"configs":{}}`, "", ""},
		{`{"error":{"code":"not_found","message":"host not found"}}`, "not_found", "host not found"},
		{`{"error":{"code":"internal","message":"SQLSTATE 42P01"}}`, "", ""},
		{`{"error":{"code":"","message":"m"}}`, "", ""},
		{`{"error":null}`, "invalid_request", "bad"},
		{``, "unavailable", ""},
		{`{"error":"x"}`, "", ""}, {`[`, "conflict", "dup"}, {`{"error":{"code":7}}`, "", ""},
	} {
		f.Add([]byte(seed.body), seed.code, seed.desc)
	}
	r := requester{service: protocol.ResolverServiceName}
	f.Fuzz(func(t *testing.T, body []byte, code, desc string) {
		msg := &nats.Msg{Data: body, Header: nats.Header{}}
		if code != "" {
			msg.Header.Set(micro.ErrorCodeHeader, code)
			msg.Header.Set(micro.ErrorHeader, desc)
		}
		perr := natsrpc.ReplyError(msg)
		if perr == nil {
			if msg.Header.Get(micro.ErrorCodeHeader) != "" {
				t.Fatalf("error code header %q not seen", code)
			}
			return
		}
		if perr.Code == "" {
			t.Fatal("error reply without a code")
		}
		err := r.mapError(perr)
		var fe *fault.Error
		if !errors.As(err, &fe) || fe.Kind == fault.Internal {
			t.Fatalf("code %q maps to an unclassified error %v", perr.Code, err)
		}
		switch perr.Code {
		case protocol.CodeInvalidRequest, protocol.CodeNotFound, protocol.CodeConflict, protocol.CodeForbidden:
			if fe.Message != perr.Message {
				t.Fatalf("caller error message %q became %q", perr.Message, fe.Message)
			}
		default:
			if fe.Kind != fault.Unavailable || fe.Message != r.service+" service failed" {
				t.Fatalf("code %q: fault %+v passes the service's message on", perr.Code, fe)
			}
		}
	})
}
