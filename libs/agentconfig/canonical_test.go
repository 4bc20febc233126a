package agentconfig

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// Number vectors of RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
func TestCanonicalize_RFC8785NumberVectors(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"}, // -0
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		f := math.Float64frombits(tt.bits)
		if got := string(appendES6Number(nil, f)); got != tt.want {
			t.Errorf("%#016x: got %s, want %s", tt.bits, got, tt.want)
		}
		// The same through Canonicalize, from Go's shortest text of the value.
		lit, _ := json.Marshal(f)
		if got, err := Canonicalize(lit); err != nil || string(got) != tt.want {
			t.Errorf("Canonicalize(%s) = %s, %v; want %s", lit, got, err, tt.want)
		}
	}
}

func TestCanonicalize_NumberLiterals(t *testing.T) {
	tests := map[string]string{
		"1e21":                           "1e+21",
		"1E21":                           "1e+21",
		"1e20":                           "100000000000000000000",
		"0.000001":                       "0.000001",
		"0.0000001":                      "1e-7",
		"-0":                             "0",
		"-0.0":                           "0",
		"0e10":                           "0",
		"4.50":                           "4.5",
		"2e-3":                           "0.002",
		"1E30":                           "1e+30",
		"100":                            "100",
		"-100":                           "-100",
		"1.0":                            "1",
		"1e-400":                         "0",
		"123456789012345678901234567890": "1.2345678901234568e+29",
		"9007199254740993":               "9007199254740992",
		"999999999999999":                "999999999999999",
		"0.1":                            "0.1",
		"-1.5e-9":                        "-1.5e-9",
	}
	for in, want := range tests {
		got, err := Canonicalize(json.RawMessage(in))
		if err != nil || string(got) != want {
			t.Errorf("Canonicalize(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}

func TestCanonicalize_NumberOutOfRange(t *testing.T) {
	for _, in := range []string{"1e400", "-1e309", `{"a":[1e999]}`} {
		if _, err := Canonicalize(json.RawMessage(in)); !errors.Is(err, errNumberRange) {
			t.Errorf("Canonicalize(%s) error = %v, want a range error", in, err)
		}
	}
}

// The example of RFC 8785 section 3.2.2.
func TestCanonicalize_RFC8785Example(t *testing.T) {
	in := `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`
	want := `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`
	got, err := Canonicalize(json.RawMessage(in))
	if err != nil || string(got) != want {
		t.Fatalf("got %s, %v\nwant %s", got, err, want)
	}
}

// The sorting example of RFC 8785 section 3.2.3: keys order by UTF-16 code units, so the emoji
// (a surrogate pair, 0xD83D...) sorts before U+FB33 although its code point is larger.
func TestCanonicalize_RFC8785KeySorting(t *testing.T) {
	in := `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`
	want := "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\"," +
		"\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"
	got, err := Canonicalize(json.RawMessage(in))
	if err != nil || string(got) != want {
		t.Fatalf("got %s, %v\nwant %s", got, err, want)
	}
}

func TestCanonicalize_UnicodeKeySorting(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":2,"aa":3,"":4}`, `{"":4,"a":2,"aa":3,"b":1}`},
		{`{"\uffff":1,"\ud800\udc00":2}`, "{\"\U00010000\":2,\"\uffff\":1}"},
		{`{"\ud83d\ude01":1,"\ud83d\ude00":2}`, "{\"😀\":2,\"😁\":1}"},
		{`{"é":1,"e":2,"z":3}`, `{"e":2,"z":3,"é":1}`},
		{`{"a\u0000":1,"a":2}`, `{"a":2,"a\u0000":1}`},
	}
	for _, tt := range tests {
		got, err := Canonicalize(json.RawMessage(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonicalize(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

func TestCanonicalize_Strings(t *testing.T) {
	tests := []struct{ in, want string }{
		{`"\u0041\/"`, `"A/"`},
		{`"\u001f\u007f"`, "\"\\u001f\u007f\""},
		{`"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
		{`"\u2028\u2029"`, "\"\u2028\u2029\""},
		{`"plain ünïcode"`, `"plain ünïcode"`},
	}
	for _, tt := range tests {
		got, err := Canonicalize(json.RawMessage(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonicalize(%s) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestCanonicalize_Whitespace(t *testing.T) {
	got, err := Canonicalize(json.RawMessage(" \n\t{ \"b\" : [ 1 , 2 ] ,\r\n \"a\" : { } } "))
	if err != nil || string(got) != `{"a":{},"b":[1,2]}` {
		t.Fatalf("got %s, %v", got, err)
	}
}

func TestCanonicalize_RejectsNonIJSON(t *testing.T) {
	tests := map[string]string{
		"duplicate key":       `{"a":1,"a":2}`,
		"duplicate escaped":   `{"a":1,"\u0061":2}`,
		"lone high surrogate": `"\ud800"`,
		"lone low surrogate":  `"\udc00x"`,
		"reversed surrogates": `"\udc00\ud800"`,
		"invalid utf-8":       "\"\xff\"",
		"encoded surrogate":   "\"\xed\xa0\x80\"",
		"trailing data":       `{} {}`,
		"trailing comma":      `[1,]`,
		"leading zero":        `01`,
		"bare dot":            `1.`,
		"control char":        "\"a\x01\"",
		"empty":               ``,
		"single quote":        `'a'`,
		"unterminated":        `{"a":`,
		"bad escape":          `"\x"`,
		"deep nesting":        strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	}
	for name, in := range tests {
		if got, err := Canonicalize(json.RawMessage(in)); err == nil {
			t.Errorf("%s: Canonicalize(%q) = %s, want an error", name, in, got)
		}
	}
	many := `{` // duplicate keys in an object large enough to use the map check
	for i := range 40 {
		many += `"k` + strings.Repeat("x", i) + `":1,`
	}
	if _, err := Canonicalize(json.RawMessage(many + `"kxxx":2}`)); err == nil {
		t.Error("duplicate key in a large object: want an error")
	}
}

func TestCanonicalize_Idempotent(t *testing.T) {
	for _, in := range []string{
		`{"z":[{"b":1e21,"a":"\u00e9"}],"a":null}`,
		`[0.1,-0,1E-7,"x"]`,
		`{"\ud83d\ude00":{"\u20ac":true}}`,
	} {
		once, err := Canonicalize(json.RawMessage(in))
		if err != nil {
			t.Fatal(err)
		}
		twice, err := Canonicalize(once)
		if err != nil || string(twice) != string(once) {
			t.Errorf("not idempotent: %s -> %s -> %s (%v)", in, once, twice, err)
		}
	}
}

func TestCompareUTF16(t *testing.T) {
	ordered := []string{"", "\x00", "A", "a", "aa", "\u00e9", "\u20ac", "\U0001F600", "\ufb33", "\uffff"}
	for i := range ordered {
		for j := range ordered {
			got := compareUTF16([]byte(ordered[i]), []byte(ordered[j]))
			if (got < 0) != (i < j) || (got == 0) != (i == j) {
				t.Errorf("compareUTF16(%q, %q) = %d", ordered[i], ordered[j], got)
			}
		}
	}
}
