package natsapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
)

// Wrong-typed and oversized requests on every endpoint are refused with invalid_request, the error
// stays small and never holds the planted secret (call checks that), and the service keeps serving.
func TestWrongTypedAndOversizedRequests(t *testing.T) {
	st := newStack(t)
	db := st.create(t, "", "db", map[string]string{"password": planted})
	client := `"client_id":"` + st.client + `"`
	ref := client + `,"id":"` + db.ID + `"`
	big := strings.Repeat("P", 900<<10)
	bigSecret := planted + strings.Repeat("s", 900<<10)
	var fields strings.Builder
	fields.WriteString(`"f0":"` + planted + `"`)
	for i := 1; i < 40_000; i++ {
		fmt.Fprintf(&fields, `,"f%d":"v"`, i)
	}
	manyFields := fields.String()
	manyItems := `{"key":"k"}` + strings.Repeat(`,{"key":"k"}`, 70_000)
	binary := strings.Repeat("\x00\xff", 450<<10)
	cases := []struct {
		name, subject, body string
	}{
		{"create: client_id a number", protocol.CredentialCreateSubject, `{"client_id":1,"name":"x","secret":{"password":"` + planted + `"}}`},
		{"create: name an array", protocol.CredentialCreateSubject, `{` + client + `,"name":["x"],"secret":{"password":"` + planted + `"}}`},
		{"create: environment_id an object", protocol.CredentialCreateSubject, `{` + client + `,"name":"x","environment_id":{},"secret":{"password":"` + planted + `"}}`},
		{"create: secret a string", protocol.CredentialCreateSubject, `{` + client + `,"name":"x","secret":"` + planted + `"}`},
		{"create: secret value a number", protocol.CredentialCreateSubject, `{` + client + `,"name":"x","secret":{"port":5432,"password":"` + planted + `"}}`},
		{"create: secret null", protocol.CredentialCreateSubject, `{` + client + `,"name":"x","secret":null}`},
		{"create: an array", protocol.CredentialCreateSubject, `[{` + client + `,"name":"x","secret":{"password":"` + planted + `"}}]`},
		{"create: null", protocol.CredentialCreateSubject, `null`},
		{"create: huge name", protocol.CredentialCreateSubject, `{` + client + `,"name":"` + big + `","secret":{"password":"` + planted + `"}}`},
		{"create: huge secret value", protocol.CredentialCreateSubject, `{` + client + `,"name":"x","secret":{"password":"` + bigSecret + `"}}`},
		{"create: huge number of fields", protocol.CredentialCreateSubject, `{` + client + `,"name":"x","secret":{` + manyFields + `}}`},
		{"create: huge unknown field", protocol.CredentialCreateSubject, `{` + client + `,"name":"x","secret":{"password":"` + planted + `"},"pad":"` + big + `"}`},
		{"create: binary", protocol.CredentialCreateSubject, binary},
		{"rotate: id a number", protocol.CredentialRotateSubject, `{` + client + `,"id":1,"secret":{"password":"` + planted + `"}}`},
		{"rotate: secret an array", protocol.CredentialRotateSubject, `{` + ref + `,"secret":["` + planted + `"]}`},
		{"rotate: client_id a boolean", protocol.CredentialRotateSubject, `{"client_id":true,"id":"` + db.ID + `"}`},
		{"rotate: huge secret value", protocol.CredentialRotateSubject, `{` + ref + `,"secret":{"password":"` + bigSecret + `"}}`},
		{"rotate: huge unknown field", protocol.CredentialRotateSubject, `{` + ref + `,"pad":"` + big + `"}`},
		{"delete: id a number", protocol.CredentialDeleteSubject, `{` + client + `,"id":7}`},
		{"delete: client_id an array", protocol.CredentialDeleteSubject, `{"client_id":["` + st.client + `"],"id":"` + db.ID + `"}`},
		{"delete: huge id", protocol.CredentialDeleteSubject, `{` + client + `,"id":"` + big + `"}`},
		{"delete: binary", protocol.CredentialDeleteSubject, binary},
		{"get: id an object", protocol.CredentialGetSubject, `{` + client + `,"id":{}}`},
		{"get: a string", protocol.CredentialGetSubject, `"` + db.ID + `"`},
		{"get: huge client_id", protocol.CredentialGetSubject, `{"client_id":"` + big + `","id":"` + db.ID + `"}`},
		{"get: huge unknown field", protocol.CredentialGetSubject, `{` + ref + `,"pad":"` + big + `"}`},
		{"list: client_id a number", protocol.CredentialListSubject, `{"client_id":1}`},
		{"list: environment_id an array", protocol.CredentialListSubject, `{` + client + `,"environment_id":[]}`},
		{"list: huge environment_id", protocol.CredentialListSubject, `{` + client + `,"environment_id":"` + big + `"}`},
		{"list: null", protocol.CredentialListSubject, `null`},
		{"inject: items an object", protocol.CredentialInjectSubject, `{"items":{"key":"k"}}`},
		{"inject: items of strings", protocol.CredentialInjectSubject, `{"items":["k"]}`},
		{"inject: key a number", protocol.CredentialInjectSubject, `{"items":[{"key":1}]}`},
		{"inject: client_id an array", protocol.CredentialInjectSubject, `{"items":[{"key":"k","client_id":[]}]}`},
		{"inject: a number", protocol.CredentialInjectSubject, `1`},
		{"inject: huge number of items", protocol.CredentialInjectSubject, `{"items":[` + manyItems + `]}`},
		{"inject: huge unknown field", protocol.CredentialInjectSubject, `{"items":[],"pad":"` + big + `"}`},
		{"inject: binary", protocol.CredentialInjectSubject, binary},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.body) >= 1<<20 {
				t.Fatalf("case body of %d bytes is over NATS's max payload", len(c.body))
			}
			e := st.call(t, c.subject, []byte(c.body), nil)
			if e == nil || e.Code != protocol.CodeInvalidRequest {
				t.Fatalf("got %+v, want code %s", e, protocol.CodeInvalidRequest)
			}
			if len(e.Message) > 1024 {
				t.Fatalf("error message of %d bytes", len(e.Message))
			}
		})
	}

	// Still serving: the credential is intact and injects.
	items := []protocol.InjectItem{{Key: "h", ClientID: st.client, EnvironmentID: st.envs[0], Collectors: refs(db.ID)}}
	var reply protocol.InjectReply
	if e := st.call(t, protocol.CredentialInjectSubject, protocol.InjectRequest{Items: items}, &reply); e != nil ||
		len(reply.Results) != 1 || reply.Results[0].Error != nil || !strings.Contains(string(reply.Results[0].Collectors), planted) {
		t.Fatalf("inject after the malformed requests: %+v, %d results", e, len(reply.Results))
	}
	clear(reply.Results[0].Collectors)
}
