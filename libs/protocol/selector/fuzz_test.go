package selector

import (
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, and that whatever it accepts prints to a canonical text
// that parses back to the same selector and matches the same labels.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "a=b,c!=d,e in (x,y),f notin (z),g,!h", "a==b", " ! a ", "a in(", "x/y.z=1"} {
		f.Add(s, "a", "b")
	}
	f.Fuzz(func(t *testing.T, text, k, v string) {
		sel, err := Parse(text)
		if err != nil {
			return
		}
		again, err := Parse(sel.String())
		if err != nil {
			t.Fatalf("Parse(%q) = %q which does not parse: %v", text, sel.String(), err)
		}
		if !reflect.DeepEqual(sel, again) {
			t.Fatalf("Parse(%q) = %#v, its text %q parses to %#v", text, sel, sel.String(), again)
		}
		labels := Labels{k: v}
		if sel.Matches(labels) != again.Matches(labels) {
			t.Fatalf("%q and %q disagree on %v", text, sel.String(), labels)
		}
	})
}
