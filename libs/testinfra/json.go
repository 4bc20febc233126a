package testinfra

import (
	"encoding/json"
	"testing"
)

// JSONValue re-encodes v through JSON into maps, slices and scalars, so that values encoding to equal
// JSON documents compare equal (reflect.DeepEqual) whatever their Go types or key order.
func JSONValue(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// JSONEqual reports whether a and b are JSON documents of equal value (key order and spacing aside);
// false when either does not parse.
func JSONEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
