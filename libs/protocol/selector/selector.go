// Package selector holds host inventory labels and the selectors that pick hosts by them.
//
// Inventory labels are operator-owned key/value metadata on a host (set through the API at
// registration or later, never by an agent), distinct from the agent's `labels` config type. A selector
// follows Kubernetes' label selector syntax: comma-separated requirements that must all hold,
//
//	a=b  a==b  a!=b  a in (x,y)  a notin (x,y)  a  !a
//
// where `a!=b` and `a notin (...)` also match hosts without the label. Every service that picks hosts by
// label (config-api's listing and drift, rollout stages) parses and matches with this package, so a
// selector means the same wherever it is used.
package selector

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Limits on labels, so one host's labels stay small in every row and message that carries them.
const (
	MaxLabels      = 64
	MaxKeyLength   = 63
	MaxValueLength = 63
	// MaxSelectorLength caps a selector's text (a query parameter or a rollout stage).
	MaxSelectorLength = 4096
	// MaxValues caps the values of one in/notin requirement.
	MaxValues = 100
)

// Labels are one host's inventory labels.
type Labels map[string]string

// ValidKey reports whether k can be a label key: 1 to MaxKeyLength ASCII letters, digits, '-', '_',
// '.' or '/', beginning and ending with a letter or digit.
func ValidKey(k string) bool {
	return k != "" && validText(k, MaxKeyLength, "-_./")
}

// ValidValue reports whether v can be a label value: empty, or up to MaxValueLength ASCII letters,
// digits, '-', '_' or '.', beginning and ending with a letter or digit.
func ValidValue(v string) bool {
	return v == "" || validText(v, MaxValueLength, "-_.")
}

// validText reports whether the non-empty s is at most maxLen letters, digits or bytes of punct,
// beginning and ending with a letter or digit.
func validText(s string, maxLen int, punct string) bool {
	if len(s) > maxLen || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		if !alnum(s[i]) && !strings.ContainsRune(punct, rune(s[i])) {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Rules, as error texts name them.
const (
	RuleKey   = "must be 1 to 63 letters, digits, '-', '_', '.' or '/', beginning and ending with a letter or digit"
	RuleValue = "must be at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
)

// Validate checks a whole label set and returns an error naming the first bad key (in key order).
func (l Labels) Validate() error {
	if len(l) > MaxLabels {
		return fmt.Errorf("at most %d labels, not %d", MaxLabels, len(l))
	}
	for _, k := range slices.Sorted(maps.Keys(l)) {
		if !ValidKey(k) {
			return fmt.Errorf("key %q %s", truncate(k), RuleKey)
		}
		if !ValidValue(l[k]) {
			return fmt.Errorf("%q: value %q %s", k, truncate(l[k]), RuleValue)
		}
	}
	return nil
}

// truncate keeps error texts short when they quote an oversized input.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Operator is how a requirement compares a label.
type Operator string

// The operators of the syntax.
const (
	Equals       Operator = "="
	NotEquals    Operator = "!="
	In           Operator = "in"
	NotIn        Operator = "notin"
	Exists       Operator = "exists"
	DoesNotExist Operator = "!"
)

// Requirement is one comma-separated term of a selector.
type Requirement struct {
	Key      string
	Operator Operator
	// Values: one for Equals/NotEquals, one or more (sorted, distinct) for In/NotIn, none otherwise.
	Values []string
}

// Matches reports whether labels meet the requirement.
func (r Requirement) Matches(labels Labels) bool {
	v, ok := labels[r.Key]
	switch r.Operator {
	case Equals, In:
		return ok && slices.Contains(r.Values, v)
	case NotEquals, NotIn:
		return !ok || !slices.Contains(r.Values, v)
	case Exists:
		return ok
	case DoesNotExist:
		return !ok
	}
	return false
}

func (r Requirement) String() string {
	switch r.Operator {
	case Equals, NotEquals:
		return r.Key + string(r.Operator) + r.Values[0]
	case In, NotIn:
		return r.Key + " " + string(r.Operator) + " (" + strings.Join(r.Values, ",") + ")"
	case DoesNotExist:
		return "!" + r.Key
	}
	return r.Key
}

// Selector is a parsed selector: all of its requirements must hold. The zero Selector (from an empty
// text) matches every host.
type Selector struct {
	Requirements []Requirement
}

// Matches reports whether labels meet every requirement.
func (s Selector) Matches(labels Labels) bool {
	for _, r := range s.Requirements {
		if !r.Matches(labels) {
			return false
		}
	}
	return true
}

// Empty reports whether the selector matches every host.
func (s Selector) Empty() bool { return len(s.Requirements) == 0 }

// String is the selector's canonical text: requirements in the order given, spaces only around
// in/notin, values sorted. Parse(s.String()) gives s back.
func (s Selector) String() string {
	parts := make([]string, len(s.Requirements))
	for i, r := range s.Requirements {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// SyntaxError is Parse's error: where in the text and what was expected.
type SyntaxError struct {
	Offset  int
	Message string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("selector: at offset %d: %s", e.Offset, e.Message)
}

// Parse parses a selector. Whitespace around tokens is ignored; an empty or blank text is the
// selector that matches everything.
func Parse(text string) (Selector, error) {
	if len(text) > MaxSelectorLength {
		return Selector{}, &SyntaxError{Offset: MaxSelectorLength, Message: fmt.Sprintf("longer than %d bytes", MaxSelectorLength)}
	}
	p := parser{text: text}
	var sel Selector
	p.space()
	if p.eof() {
		return sel, nil
	}
	for {
		r, err := p.requirement()
		if err != nil {
			return Selector{}, err
		}
		sel.Requirements = append(sel.Requirements, r)
		p.space()
		if p.eof() {
			return sel, nil
		}
		if !p.take(",") {
			return Selector{}, p.errorf("expected ',' or the end of the selector")
		}
		p.space()
	}
}

// MustParse parses a selector known to be valid (tests, constants); it panics otherwise.
func MustParse(text string) Selector {
	s, err := Parse(text)
	if err != nil {
		panic(err)
	}
	return s
}

type parser struct {
	text string
	pos  int
}

func (p *parser) eof() bool { return p.pos >= len(p.text) }

func (p *parser) space() {
	for !p.eof() && (p.text[p.pos] == ' ' || p.text[p.pos] == '\t') {
		p.pos++
	}
}

func (p *parser) take(tok string) bool {
	if strings.HasPrefix(p.text[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

func (p *parser) errorf(format string, args ...any) error {
	return &SyntaxError{Offset: p.pos, Message: fmt.Sprintf(format, args...)}
}

// word reads a run of the characters keys and values may hold (checked by the caller).
func (p *parser) word() string {
	start := p.pos
	for !p.eof() && (alnum(p.text[p.pos]) || strings.ContainsRune("-_./", rune(p.text[p.pos]))) {
		p.pos++
	}
	return p.text[start:p.pos]
}

func (p *parser) key() (string, error) {
	start := p.pos
	k := p.word()
	if !ValidKey(k) {
		p.pos = start
		if k == "" {
			return "", p.errorf("expected a label key")
		}
		return "", p.errorf("label key %q %s", truncate(k), RuleKey)
	}
	return k, nil
}

func (p *parser) value() (string, error) {
	start := p.pos
	v := p.word()
	if !ValidValue(v) {
		p.pos = start
		return "", p.errorf("label value %q %s", truncate(v), RuleValue)
	}
	return v, nil
}

func (p *parser) requirement() (Requirement, error) {
	if p.take("!") {
		p.space()
		k, err := p.key()
		if err != nil {
			return Requirement{}, err
		}
		return Requirement{Key: k, Operator: DoesNotExist}, nil
	}
	k, err := p.key()
	if err != nil {
		return Requirement{}, err
	}
	p.space()
	var op Operator
	switch {
	case p.take("!="):
		op = NotEquals
	case p.take("=="), p.take("="):
		op = Equals
	case p.keyword("notin"):
		op = NotIn
	case p.keyword("in"):
		op = In
	default:
		return Requirement{Key: k, Operator: Exists}, nil
	}
	p.space()
	if op == Equals || op == NotEquals {
		v, err := p.value()
		if err != nil {
			return Requirement{}, err
		}
		return Requirement{Key: k, Operator: op, Values: []string{v}}, nil
	}
	if !p.take("(") {
		return Requirement{}, p.errorf("expected '(' after %s", op)
	}
	var values []string
	for {
		p.space()
		v, err := p.value()
		if err != nil {
			return Requirement{}, err
		}
		if v == "" {
			// An empty element would read as a typo (",," or "()"); equality can still name the empty value.
			return Requirement{}, p.errorf("expected a value in the %s list", op)
		}
		values = append(values, v)
		if len(values) > MaxValues {
			return Requirement{}, p.errorf("at most %d values in one %s list", MaxValues, op)
		}
		p.space()
		if p.take(")") {
			break
		}
		if !p.take(",") {
			return Requirement{}, p.errorf("expected ',' or ')' in the %s list", op)
		}
	}
	slices.Sort(values)
	return Requirement{Key: k, Operator: op, Values: slices.Compact(values)}, nil
}

// keyword takes an in/notin operator: the word followed by a space or '(' (so a key named "input"
// after another key is not misread; there, a missing ',' is the error).
func (p *parser) keyword(w string) bool {
	rest := p.text[p.pos:]
	if !strings.HasPrefix(rest, w) {
		return false
	}
	if len(rest) > len(w) && rest[len(w)] != ' ' && rest[len(w)] != '\t' && rest[len(w)] != '(' {
		return false
	}
	p.pos += len(w)
	return true
}
