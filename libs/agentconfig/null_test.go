package agentconfig

import "testing"

func TestIsNull(t *testing.T) {
	for _, raw := range []string{"", " ", "\n\t\r ", "null", " null\n", "\tnull "} {
		if !IsNull([]byte(raw)) {
			t.Errorf("IsNull(%q) = false", raw)
		}
	}
	if !IsNull(nil) {
		t.Error("IsNull(nil) = false")
	}
	for _, raw := range []string{"0", "false", `""`, `"null"`, "{}", "[]", "[null]", "nul", "nullx", "null null", "Null"} {
		if IsNull([]byte(raw)) {
			t.Errorf("IsNull(%q) = true", raw)
		}
	}
}
