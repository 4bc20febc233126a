package postgres

import (
	"encoding/json"
	"testing"
)

// TestAppendVersionsJSONIsJSONMarshal holds the direct encoding of config_versions to json.Marshal's
// bytes (a nil map is {}), for plain type names and for keys that need escaping (the fallback).
func TestAppendVersionsJSONIsJSONMarshal(t *testing.T) {
	cases := []map[string]int64{
		nil,
		{},
		{"collectors": 5},
		{"watch_files": 3, "collectors": 5, "labels": -2, "intervals": 0, "a.b-c": 9223372036854775807},
		{"quote\"d": 1, "labels": 2},
		{"<tag>&": 1},
		{"ünïcode": 7, "tab\t": 8},
	}
	prefix := []byte("prefix")
	for _, m := range cases {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if m == nil {
			want = []byte("{}")
		}
		got, err := appendVersionsJSON(append([]byte(nil), prefix...), m)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		if string(got) != string(prefix)+string(want) {
			t.Errorf("%v: got %s, want %s%s", m, got, prefix, want)
		}
	}
}
