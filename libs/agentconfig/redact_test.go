package agentconfig

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name, in string
		pointers []string
		want     string
	}{
		{"array_member", `[{"type":"mysql","name":"a","password":"pw"},{"type":"tcp","name":"b"}]`, []string{"/0/password"},
			`[{"type":"mysql","name":"a","password":"[REDACTED]"},{"type":"tcp","name":"b"}]`},
		{"several", `[{"username":"u","password":"p"},{"password":"q"}]`, []string{"/1/password", "/0/password", "/0/username"},
			`[{"username":"[REDACTED]","password":"[REDACTED]"},{"password":"[REDACTED]"}]`},
		{"non_string_value", `{"a":{"b":[1,2]}}`, []string{"/a/b"}, `{"a":{"b":"[REDACTED]"}}`},
		{"escaped_tokens", `{"a/b":{"m~n":1}}`, []string{"/a~1b/m~0n"}, `{"a/b":{"m~n":"[REDACTED]"}}`},
		{"whole_document", `{"a":1}`, []string{""}, `"[REDACTED]"`},
		{"keeps_order_and_tokens", "{ \"z\" : 1.50, \"a\" : \"x\" }", []string{"/a"}, `{"z":1.50,"a":"[REDACTED]"}`},
		{"same_pointer_twice", `{"a":1}`, []string{"/a", "/a"}, `{"a":"[REDACTED]"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Redact(json.RawMessage(tt.in), tt.pointers)
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestRedact_NoPointersReturnsInput(t *testing.T) {
	in := json.RawMessage(`{ "a": 1 }`)
	got, err := Redact(in, nil)
	if err != nil || string(got) != string(in) {
		t.Fatalf("got %s, %v", got, err)
	}
}

func TestRedact_Errors(t *testing.T) {
	tests := map[string]struct {
		in      string
		pointer string
	}{
		"missing_member":     {`{"a":1}`, "/b"},
		"index_out_of_range": {`[1]`, "/1"},
		"leading_zero":       {`[1,2]`, "/01"},
		"dash_index":         {`[1]`, "/-"},
		"no_leading_slash":   {`{"a":1}`, "a"},
		"into_scalar":        {`{"a":1}`, "/a/b"},
		"bad_tilde":          {`{"a~2":1}`, "/a~2"},
	}
	for name, tt := range tests {
		if got, err := Redact(json.RawMessage(tt.in), []string{tt.pointer}); err == nil {
			t.Errorf("%s: got %s, want an error", name, got)
		}
	}
	if _, err := Redact(json.RawMessage(`{`), []string{"/a"}); err == nil {
		t.Error("invalid JSON: want an error")
	}
}

var credentialCollectors = json.RawMessage(`[
	{"type":"tcp","name":"ssh","address":"localhost:22"},
	{"type":"postgres","name":"main","host":"db","port":5432,"credential_id":"cred-pg","password":"stale"},
	{"type":"mysql","name":"replica","credential_id":"cred-my","host":"db2"},
	{"type":"postgres","name":"second","credential_id":"cred-pg"}
]`)

// credentialCollectorsFilled is credentialCollectors, compacted, with each credential_id replaced by
// its credential's fields: cred-pg's password and username, cred-my's password (JSON values).
func credentialCollectorsFilled(pgPassword, pgUsername, myPassword string) string {
	pg := `"password":` + pgPassword + `,"username":` + pgUsername
	return `[{"type":"tcp","name":"ssh","address":"localhost:22"},` +
		`{"type":"postgres","name":"main","host":"db","port":5432,` + pg + `},` +
		`{"type":"mysql","name":"replica","host":"db2","password":` + myPassword + `},` +
		`{"type":"postgres","name":"second",` + pg + `}]`
}

func TestCredentialIDs(t *testing.T) {
	ids, err := CredentialIDs(credentialCollectors)
	if err != nil || !reflect.DeepEqual(ids, []string{"cred-pg", "cred-my"}) {
		t.Fatalf("got %v, %v", ids, err)
	}
	for _, in := range []string{"", "null", `[]`, `[{"type":"tcp","name":"a"}]`} {
		if ids, err := CredentialIDs(json.RawMessage(in)); err != nil || len(ids) != 0 {
			t.Errorf("%q: got %v, %v", in, ids, err)
		}
	}
	for _, in := range []string{`{}`, `[{"credential_id":5}]`, `[`} {
		if _, err := CredentialIDs(json.RawMessage(in)); err == nil {
			t.Errorf("%q: want an error", in)
		}
	}
}

func TestInjectSecrets(t *testing.T) {
	secrets := map[string]map[string]string{
		"cred-pg": {"password": "pg-pw", "username": "monitor"},
		"cred-my": {"password": `my"pw\`},
		"unused":  {"password": "x"},
	}
	got, pointers, err := InjectSecrets(credentialCollectors, secrets)
	if err != nil {
		t.Fatal(err)
	}
	if want := credentialCollectorsFilled(`"pg-pw"`, `"monitor"`, `"my\"pw\\"`); string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	wantPointers := []string{"/1/password", "/1/username", "/2/password", "/3/password", "/3/username"}
	if !reflect.DeepEqual(pointers, wantPointers) {
		t.Errorf("pointers %v, want %v", pointers, wantPointers)
	}
	if strings.Contains(string(got), "credential_id") {
		t.Error("credential_id left in the payload")
	}
	if err := ValidateDelivered(Collectors, got, pointers); err != nil {
		t.Errorf("injected config does not validate as delivered: %v", err)
	}
}

func TestInjectSecrets_Errors(t *testing.T) {
	_, _, err := InjectSecrets(credentialCollectors, map[string]map[string]string{"cred-pg": {"password": "x"}})
	if !errors.Is(err, ErrCredentialMissing) || !strings.Contains(err.Error(), "cred-my") {
		t.Errorf("missing credential: %v", err)
	}
	for _, field := range []string{"type", "name", "credential_id", "enabled", ""} {
		_, _, err := InjectSecrets(json.RawMessage(`[{"type":"http","name":"a","credential_id":"c"}]`),
			map[string]map[string]string{"c": {field: "x"}})
		if err == nil {
			t.Errorf("secret field %q: want an error", field)
		}
	}
	if _, _, err := InjectSecrets(json.RawMessage(`[{"credential_id":"c"}]`), map[string]map[string]string{"c": {"password": "\xff"}}); err == nil {
		t.Error("invalid UTF-8 secret: want an error")
	}
	if _, _, err := InjectSecrets(json.RawMessage(`{}`), nil); err == nil {
		t.Error("not an array: want an error")
	}
}

func TestInjectSecrets_NothingToInject(t *testing.T) {
	for _, in := range []string{``, `null`, ` [ {"type":"tcp", "name":"a"} ] `} {
		got, pointers, err := InjectSecrets(json.RawMessage(in), nil)
		if err != nil || string(got) != in || pointers != nil {
			t.Errorf("%q: got %s %v %v", in, got, pointers, err)
		}
	}
	// A credential with no fields still loses its credential_id.
	got, pointers, err := InjectSecrets(json.RawMessage(`[{"type":"http","name":"a","credential_id":"c"}]`), map[string]map[string]string{"c": {}})
	if err != nil || string(got) != `[{"type":"http","name":"a"}]` || len(pointers) != 0 {
		t.Errorf("got %s %v %v", got, pointers, err)
	}
}

func TestRedactForCache(t *testing.T) {
	got, pointers, err := RedactForCache(credentialCollectors, map[string][]string{
		"cred-pg": {"username", "password", "password"},
		"cred-my": {"password"},
	})
	if err != nil {
		t.Fatal(err)
	}
	const r = `"[REDACTED]"`
	if want := credentialCollectorsFilled(r, r, r); string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if len(pointers) != 5 {
		t.Errorf("pointers %v", pointers)
	}
	if _, _, err := RedactForCache(credentialCollectors, map[string][]string{"cred-pg": {"password"}}); !errors.Is(err, ErrCredentialMissing) {
		t.Errorf("missing credential: %v", err)
	}
}

// What the agent caches (Redact of the delivered payload) must equal what the backend predicts without
// decrypting (RedactForCache), so their config hashes agree.
func TestInjectSecrets_RedactAgreesWithRedactForCache(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		secrets map[string]map[string]string
	}{
		{"mixed", string(credentialCollectors), map[string]map[string]string{
			"cred-pg": {"password": "pg-pw", "username": "monitor"}, "cred-my": {"password": "x"}}},
		{"field_needing_pointer_escape", `[{"type":"http","name":"a","credential_id":"c"}]`,
			map[string]map[string]string{"c": {"x/y~z": "v", "a": "b"}}},
		{"overwrites_inline_value", `[{"type":"redis","name":"a","password":"inline","credential_id":"c","host":"h"}]`,
			map[string]map[string]string{"c": {"password": "secret"}}},
		{"no_references", `[{"type":"tcp","name":"a"}]`, nil},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			injected, pointers, err := InjectSecrets(json.RawMessage(tt.in), tt.secrets)
			if err != nil {
				t.Fatal(err)
			}
			agentView, err := Redact(injected, pointers)
			if err != nil {
				t.Fatal(err)
			}
			fields := map[string][]string{}
			for id, s := range tt.secrets {
				for name := range s {
					fields[id] = append(fields[id], name)
				}
			}
			backendView, backendPointers, err := RedactForCache(json.RawMessage(tt.in), fields)
			if err != nil {
				t.Fatal(err)
			}
			if string(agentView) != string(backendView) || !reflect.DeepEqual(pointers, backendPointers) {
				t.Errorf("agent   %s %v\nbackend %s %v", agentView, pointers, backendView, backendPointers)
			}
			for _, s := range tt.secrets {
				for _, v := range s {
					if strings.Contains(string(agentView), `"`+v+`"`) {
						t.Errorf("secret %q survived redaction: %s", v, agentView)
					}
				}
			}
			agentHash := ConfigHash([]CacheEntry{{ConfigType: Collectors, ConfigData: agentView, Redacted: true}})
			backendHash := ConfigHash([]CacheEntry{{ConfigType: Collectors, ConfigData: backendView}})
			if agentHash != backendHash {
				t.Error("config hashes differ")
			}
		})
	}
}
