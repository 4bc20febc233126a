package natsclient

import (
	"errors"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
)

// FuzzMapError maps arbitrary error codes and messages of resolver and credential replies (reading them
// off the wire, body and micro error headers, is natsrpc's FuzzReplyError): every code becomes a
// classified fault, and only caller errors pass the service's message on; anything else is a generic
// "service failed".
func FuzzMapError(f *testing.F) {
	for _, seed := range []struct{ code, message string }{
		{protocol.CodeNotFound, "host not found"},
		{protocol.CodeInternal, "SQLSTATE 42P01"},
		{protocol.CodeInvalidRequest, "bad"},
		{protocol.CodeUnavailable, ""},
		{protocol.CodeConflict, "dup"},
		{protocol.CodeForbidden, "not this client's"},
		{"", "m"}, {"7", ""},
	} {
		f.Add(seed.code, seed.message)
	}
	r := requester{service: protocol.ResolverServiceName}
	f.Fuzz(func(t *testing.T, code, message string) {
		err := r.mapError(&protocol.Error{Code: code, Message: message})
		var fe *fault.Error
		if !errors.As(err, &fe) || fe.Kind == fault.Internal {
			t.Fatalf("code %q maps to an unclassified error %v", code, err)
		}
		switch code {
		case protocol.CodeInvalidRequest, protocol.CodeNotFound, protocol.CodeConflict, protocol.CodeForbidden:
			if fe.Message != message {
				t.Fatalf("caller error message %q became %q", message, fe.Message)
			}
		default:
			if fe.Kind != fault.Unavailable || fe.Message != r.service+" service failed" {
				t.Fatalf("code %q: fault %+v passes the service's message on", code, fe)
			}
		}
	})
}
