package protocol

import (
	"strings"
	"testing"
)

func TestDecodeStrict(t *testing.T) {
	const secret = "hunter2-planted"
	cases := map[string]string{
		"":                                "empty request body",
		`{"agent_id":"a","extra":1}`:      `unknown field "extra"`,
		`{"agent_id":7}`:                  `field "agent_id" must be a string`,
		`{"agent_id":"a"} {}`:             "data after the request object",
		`{"agent_id":"` + secret + `"`:    "unexpected end of input",
		`{"agent_id":"a",` + secret + `}`: "syntax error at offset",
	}
	for body, want := range cases {
		var req FetchRequest
		err := DecodeStrict([]byte(body), &req)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeStrict(%q) = %v, want an error containing %q", body, err, want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("DecodeStrict(%q) echoed the payload: %v", body, err)
		}
	}
	var req FetchRequest
	if err := DecodeStrict([]byte(` {"agent_id":"a"} `), &req); err != nil || req.AgentID != "a" {
		t.Fatalf("valid body: %v %+v", err, req)
	}
}
