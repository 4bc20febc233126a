package agentconfig

import (
	"encoding/json"
	"testing"
)

// canon returns the canonical form of s, failing the test on invalid JSON.
func canon(t testing.TB, s []byte) string {
	t.Helper()
	c, err := Canonicalize(s)
	if err != nil {
		t.Fatalf("canonicalize %s: %v", s, err)
	}
	return string(c)
}

// assertJSON fails unless got and want are the same JSON value.
func assertJSON(t testing.TB, got json.RawMessage, want string) {
	t.Helper()
	if g, w := canon(t, got), canon(t, []byte(want)); g != w {
		t.Errorf("got  %s\nwant %s", g, w)
	}
}
