package webui

import (
	"strings"
	"testing"
)

func TestDiffLines(t *testing.T) {
	cases := []struct {
		before, after string
		want          string // one op per line
	}{
		{"", "", ""},
		{"", "a\nb", "+a +b"},
		{"a\nb", "", "-a -b"},
		{"a\nb\nc", "a\nb\nc", " a  b  c"},
		{"a\nb\nc", "a\nx\nc", " a -b +x  c"},
		{"{\n  \"p\": 1\n}", "{\n  \"p\": 1,\n  \"q\": 2\n}", ` { -  "p": 1 +  "p": 1, +  "q": 2  }`},
	}
	for _, c := range cases {
		var got []string
		for _, l := range diffLines(c.before, c.after) {
			got = append(got, l.Op+l.Text)
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("diff(%q, %q) = %q, want %q", c.before, c.after, g, c.want)
		}
	}
	if changed(diffLines("a\nb", "a\nb")) || !changed(diffLines("a", "b")) {
		t.Error("changed() is wrong")
	}
}

// Documents too large for the quadratic diff are shown whole, removed then added, not refused.
func TestDiffLinesLargeDocumentsStayBounded(t *testing.T) {
	big := strings.Repeat("x\n", 3000)
	d := diffLines(big, big+"y")
	if len(d) != 6001 || d[0].Op != "-" || d[len(d)-1].Text != "y" {
		t.Fatalf("large diff: %d lines, first %+v, last %+v", len(d), d[0], d[len(d)-1])
	}
}

func TestNextPathStaysInTheConsole(t *testing.T) {
	for in, want := range map[string]string{
		"/ui/hosts?env=1":         "/ui/hosts?env=1",
		"":                        "/ui/",
		"https://evil.example/ui": "/ui/",
		"//evil.example/ui/":      "/ui/",
		"/ui/\\evil":              "/ui/",
		"/api/v1/tokens":          "/ui/",
		"/ui/x\r\nSet-Cookie: a":  "/ui/",
	} {
		if got := nextPath(in); got != want {
			t.Errorf("nextPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDocumentNamesLineAndColumn(t *testing.T) {
	_, err := document("{\n  \"a\": 1,\n  \"b\" 2\n}")
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("syntax error: %v", err)
	}
	if _, err := document("  "); err == nil {
		t.Fatal("an empty document was accepted")
	}
	if raw, err := document(`{"a": [1, 2]}`); err != nil || string(raw) != `{"a": [1, 2]}` {
		t.Fatalf("valid document: %s, %v", raw, err)
	}
}

func TestTemplatesParse(t *testing.T) {
	pages, err := parseTemplates()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range pageNames {
		if pages[name].Lookup("layout") == nil || pages[name].Lookup("content") == nil {
			t.Errorf("page %s lacks the layout or its content", name)
		}
	}
}
