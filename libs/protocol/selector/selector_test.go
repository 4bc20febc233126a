package selector

import (
	"errors"
	"slices"
	"testing"
)

func TestParseAndMatch(t *testing.T) {
	hosts := map[string]Labels{
		"web-eu":  {"role": "web", "region": "eu", "canary": ""},
		"web-us":  {"role": "web", "region": "us"},
		"db-eu":   {"role": "db", "region": "eu", "tier": "gold"},
		"nothing": {},
	}
	cases := []struct {
		text string
		want []string
	}{
		{"", []string{"db-eu", "nothing", "web-eu", "web-us"}},
		{"role=web", []string{"web-eu", "web-us"}},
		{"role==web", []string{"web-eu", "web-us"}},
		{"role!=web", []string{"db-eu", "nothing"}},
		{"region in (eu, us)", []string{"db-eu", "web-eu", "web-us"}},
		{"region notin (eu)", []string{"nothing", "web-us"}},
		{"tier", []string{"db-eu"}},
		{"!tier", []string{"nothing", "web-eu", "web-us"}},
		{"canary", []string{"web-eu"}},
		{"canary=", []string{"web-eu"}},
		{" role = web , region in(eu) ", []string{"web-eu"}},
		{"role=web,region!=eu,!tier", []string{"web-us"}},
		{"a=b,c!=d,e in (x,y),f notin (z),g,!h", nil},
	}
	for _, c := range cases {
		sel, err := Parse(c.text)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.text, err)
		}
		var got []string
		for name, l := range hosts {
			if sel.Matches(l) {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%q matches %v, want %v", c.text, got, c.want)
		}
	}
}

func TestParseCanonical(t *testing.T) {
	sel := MustParse(" e in (y, x, y) ,a==b,c != d,f notin(z),g, ! h")
	if got, want := sel.String(), "e in (x,y),a=b,c!=d,f notin (z),g,!h"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]int{
		"=b":             0,
		"a=b,":           4,
		"a=b c=d":        4,
		"a in x":         5,
		"a in (x":        7,
		"a in ()":        6,
		"a=-b":           2,
		"-a=b":           0,
		"a=b,,c":         4,
		"a=b)":           3,
		"!":              1,
		"a notin (x,,y)": 11,
	}
	for text, offset := range cases {
		_, err := Parse(text)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q) = %v, want a *SyntaxError", text, err)
			continue
		}
		if se.Offset != offset {
			t.Errorf("Parse(%q) fails at %d (%s), want %d", text, se.Offset, se.Message, offset)
		}
	}
}

func TestLabelsValidate(t *testing.T) {
	ok := Labels{"role": "web", "example.com/team": "a-b_c.d", "empty": ""}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%v): %v", ok, err)
	}
	for _, bad := range []Labels{
		{"": "x"},
		{"-a": "x"},
		{"a b": "x"},
		{"a": "x y"},
		{"a": "/x"},
		{"a": string(make([]byte, 64))},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%q) accepted", bad)
		}
	}
	many := Labels{}
	for i := range MaxLabels + 1 {
		many[string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	if err := many.Validate(); err == nil {
		t.Errorf("Validate accepted %d labels", len(many))
	}
}
