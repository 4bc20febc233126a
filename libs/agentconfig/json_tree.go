package agentconfig

import (
	"bytes"
	"fmt"
	"math"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds the one JSON reader of the package. Merge, Validate, Canonicalize, Redact and the
// credential helpers all work on its flat tree instead of encoding/json values: object member order is
// kept (so merges keep the environment's order), number and string tokens are kept verbatim (so merges
// copy content exactly), and a whole document costs a few slice allocations, reused through a pool.
//
// The reader is strict in the I-JSON sense that RFC 8785 requires: duplicate object keys, invalid UTF-8
// and lone surrogate escapes are errors.

// kind is the JSON type of a parsed value.
type kind uint8

const (
	kindNull kind = iota
	kindFalse
	kindTrue
	kindNumber
	kindString
	kindArray
	kindObject
)

// maxDepth bounds nesting so hostile input cannot exhaust the stack. Real configs nest a few levels.
const maxDepth = 512

// node is one parsed value. Scalars keep the span of their token in the input (a string token includes
// its quotes, so it can be copied out verbatim). Containers list their children as node indices in
// document.kids: array elements, or key/value pairs for objects (the key is a string node). Nodes hold
// no pointers, so building and pooling them costs the garbage collector nothing.
type node struct {
	// Scalars: the token is document.data[a:b]. Containers: the children are document.kids[a:a+b].
	a, b    int32
	kind    kind
	escaped bool // string token contains backslash escapes
	redact  bool // Redact marks values to replace on output
}

// document is a parsed JSON text. The zero value is ready to use.
type document struct {
	data  []byte
	nodes []node
	kids  []int32
	stack []int32

	members []int32 // appendCanonical's sort stack
	scratch []byte  // string decoding
}

// raw returns the token bytes of scalar node i.
func (d *document) raw(i int32) []byte {
	n := &d.nodes[i]
	if n.kind >= kindArray {
		panic("agentconfig: internal error: token of a container")
	}
	return d.data[n.a:n.b:n.b]
}

// kidsOf returns the children of container node i.
func (d *document) kidsOf(i int32) []int32 {
	n := &d.nodes[i]
	if n.kind < kindArray {
		panic("agentconfig: internal error: children of a scalar")
	}
	return d.kids[n.a : n.a+n.b : n.a+n.b]
}

var documents = sync.Pool{New: func() any { return new(document) }}

func getDocument() *document { return documents.Get().(*document) }

// putDocument returns d to the pool; very large documents are left to the garbage collector.
func putDocument(d *document) {
	if cap(d.nodes) > 1<<16 {
		return
	}
	d.reset()
	documents.Put(d)
}

func (d *document) reset() {
	d.data = nil // drop the reference to the parsed input
	d.nodes = d.nodes[:0]
	d.kids = d.kids[:0]
	d.stack = d.stack[:0]
	d.members = d.members[:0]
}

// syntaxError reports malformed JSON.
type syntaxError struct {
	offset int
	msg    string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at offset %d: %s", e.offset, e.msg)
}

// parse reads data into d (which it resets) and returns the root node index. The tree refers to data,
// which must not change while the tree is in use.
func (d *document) parse(data []byte) (int32, error) {
	d.reset()
	if len(data) > math.MaxInt32 {
		return -1, &syntaxError{msg: "document too large"}
	}
	d.data = data
	p := parser{d: d, data: data}
	p.skipSpace()
	root, err := p.value(0)
	if err != nil {
		return -1, err
	}
	p.skipSpace()
	if p.pos < len(data) {
		return -1, p.fail("unexpected data after the top-level value")
	}
	return root, nil
}

type parser struct {
	d    *document
	data []byte
	pos  int
}

func (p *parser) fail(msg string) error { return &syntaxError{offset: p.pos, msg: msg} }

func (p *parser) add(n node) int32 {
	p.d.nodes = append(p.d.nodes, n)
	return int32(len(p.d.nodes) - 1)
}

func (p *parser) skipSpace() {
	data, pos := p.data, p.pos
	for pos < len(data) && (data[pos] == ' ' || data[pos] == '\n' || data[pos] == '\t' || data[pos] == '\r') {
		pos++
	}
	p.pos = pos
}

func (p *parser) value(depth int) (int32, error) {
	if p.pos >= len(p.data) {
		return -1, p.fail("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		return p.stringNode()
	case c == 't':
		return p.literal("true", kindTrue)
	case c == 'f':
		return p.literal("false", kindFalse)
	case c == 'n':
		return p.literal("null", kindNull)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return -1, p.fail(fmt.Sprintf("unexpected character %q", c))
	}
}

func (p *parser) literal(word string, k kind) (int32, error) {
	end := p.pos + len(word)
	if end > len(p.data) || string(p.data[p.pos:end]) != word {
		return -1, p.fail("invalid literal")
	}
	i := p.add(node{kind: k, a: int32(p.pos), b: int32(end)})
	p.pos = end
	return i, nil
}

func (p *parser) number() (int32, error) {
	data, start := p.data, p.pos
	if data[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(data) && data[p.pos] == '0':
		p.pos++
	case p.pos < len(data) && data[p.pos] >= '1' && data[p.pos] <= '9':
		p.digits()
	default:
		return -1, p.fail("invalid number")
	}
	if p.pos < len(data) && data[p.pos] == '.' {
		p.pos++
		if p.digits() == 0 {
			return -1, p.fail("invalid number: no digits after the decimal point")
		}
	}
	if p.pos < len(data) && (data[p.pos] == 'e' || data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(data) && (data[p.pos] == '+' || data[p.pos] == '-') {
			p.pos++
		}
		if p.digits() == 0 {
			return -1, p.fail("invalid number: no digits in the exponent")
		}
	}
	return p.add(node{kind: kindNumber, a: int32(start), b: int32(p.pos)}), nil
}

func (p *parser) digits() int {
	start := p.pos
	for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
		p.pos++
	}
	return p.pos - start
}

func (p *parser) stringNode() (int32, error) {
	start := p.pos
	escaped, err := p.scanString()
	if err != nil {
		return -1, err
	}
	return p.add(node{kind: kindString, a: int32(start), b: int32(p.pos), escaped: escaped}), nil
}

// scanString moves past one string token, checking escapes and UTF-8.
func (p *parser) scanString() (escaped bool, err error) {
	data := p.data
	p.pos++ // opening quote
	for p.pos < len(data) {
		pos := p.pos
		for pos < len(data) && plainStringByte[data[pos]] {
			pos++
		}
		p.pos = pos
		if pos == len(data) {
			break
		}
		c := data[pos]
		switch {
		case c == '"':
			p.pos++
			return escaped, nil
		case c == '\\':
			escaped = true
			if err := p.scanEscape(); err != nil {
				return false, err
			}
		case c < 0x20:
			return false, p.fail("control character in string")
		default: // non-ASCII

			r, size := utf8.DecodeRune(data[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return false, p.fail("invalid UTF-8 in string")
			}
			p.pos += size
		}
	}
	return false, p.fail("unterminated string")
}

// plainStringByte marks the bytes a string token holds as themselves: printable ASCII but '"' and '\\'.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (p *parser) scanEscape() error {
	data := p.data
	if p.pos+1 >= len(data) {
		return p.fail("unterminated string")
	}
	switch data[p.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		p.pos += 2
		return nil
	case 'u':
	default:
		return p.fail("invalid escape in string")
	}
	r, ok := hex4(data[p.pos+2:])
	if !ok {
		return p.fail("invalid \\u escape in string")
	}
	p.pos += 6
	if !utf16.IsSurrogate(r) {
		return nil
	}
	if r < 0xDC00 && p.pos+1 < len(data) && data[p.pos] == '\\' && data[p.pos+1] == 'u' {
		if lo, ok := hex4(data[p.pos+2:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
			p.pos += 6
			return nil
		}
	}
	return p.fail("lone UTF-16 surrogate in string")
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (p *parser) array(depth int) (int32, error) {
	if depth > maxDepth {
		return -1, p.fail("nesting too deep")
	}
	p.pos++ // [
	idx := p.add(node{kind: kindArray})
	base := len(p.d.stack)
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return idx, nil
	}
	for {
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return -1, err
		}
		p.d.stack = append(p.d.stack, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return -1, p.fail("unterminated array")
		}
		if p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.data[p.pos] == ']' {
			p.pos++
			break
		}
		return -1, p.fail("expected ',' or ']' in array")
	}
	p.d.popChildren(idx, base)
	return idx, nil
}

func (p *parser) object(depth int) (int32, error) {
	if depth > maxDepth {
		return -1, p.fail("nesting too deep")
	}
	start := p.pos
	p.pos++ // {
	idx := p.add(node{kind: kindObject})
	base := len(p.d.stack)
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return idx, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return -1, p.fail("expected a string object key")
		}
		k, err := p.stringNode()
		if err != nil {
			return -1, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return -1, p.fail("expected ':' after object key")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return -1, err
		}
		p.d.stack = append(p.d.stack, k, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return -1, p.fail("unterminated object")
		}
		if p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.data[p.pos] == '}' {
			p.pos++
			break
		}
		return -1, p.fail("expected ',' or '}' in object")
	}
	p.d.popChildren(idx, base)
	if dup := p.d.duplicateKey(idx); dup >= 0 {
		return -1, &syntaxError{offset: start, msg: fmt.Sprintf("duplicate object key %s", p.d.raw(dup))}
	}
	return idx, nil
}

// popChildren moves the child indices pushed since base into the shared kids array as the children of
// container node idx.
func (d *document) popChildren(idx int32, base int) {
	d.nodes[idx].a = int32(len(d.kids))
	d.nodes[idx].b = int32(len(d.stack) - base)
	d.kids = append(d.kids, d.stack[base:]...)
	d.stack = d.stack[:base]
}

// duplicateKey returns the key node of the first repeated key of object obj, or -1.
func (d *document) duplicateKey(obj int32) int32 {
	kids := d.kidsOf(obj)
	n := len(kids) / 2
	if n <= 16 {
		// Compare cheap fingerprints first; only equal fingerprints compare bytes.
		var prints [16]uint64
		for i := range n {
			k := kids[2*i]
			prints[i] = d.fingerprint(k)
			for j := range i {
				if prints[j] == prints[i] && d.sameString(d, k, kids[2*j]) {
					return k
				}
			}
		}
		return -1
	}
	seen := make(map[string]struct{}, n)
	for i := range n {
		k := string(d.text(kids[2*i], nil))
		if _, ok := seen[k]; ok {
			return kids[2*i]
		}
		seen[k] = struct{}{}
	}
	return -1
}

// fingerprint summarizes the decoded value of string node i: equal strings have equal fingerprints.
func (d *document) fingerprint(i int32) uint64 {
	s := d.inner(i)
	if d.nodes[i].escaped {
		d.scratch = d.text(i, d.scratch[:0])
		s = d.scratch
	}
	f := uint64(len(s)) << 32
	if len(s) > 0 {
		f |= uint64(s[0])<<24 | uint64(s[len(s)-1])<<16 | uint64(s[len(s)/2])<<8
	}
	return f
}

// inner returns the bytes between the quotes of string node i.
func (d *document) inner(i int32) []byte {
	n := &d.nodes[i]
	return d.data[n.a+1 : n.b-1 : n.b-1]
}

// text returns the decoded value of string node i. Unescaped strings are returned without copying;
// escaped ones are decoded onto buf.
func (d *document) text(i int32, buf []byte) []byte {
	if !d.nodes[i].escaped {
		return d.inner(i)
	}
	return appendUnescaped(buf, d.inner(i))
}

// appendText appends the decoded value of string node i to dst.
func (d *document) appendText(dst []byte, i int32) []byte {
	if !d.nodes[i].escaped {
		return append(dst, d.inner(i)...)
	}
	return appendUnescaped(dst, d.inner(i))
}

// sameString reports whether string node i of d and string node j of e have the same decoded value.
func (d *document) sameString(e *document, i, j int32) bool {
	if !d.nodes[i].escaped && !e.nodes[j].escaped {
		return bytes.Equal(d.raw(i), e.raw(j))
	}
	return bytes.Equal(d.text(i, nil), e.text(j, nil))
}

// isString reports whether node i is a string equal to s.
func (d *document) isString(i int32, s string) bool {
	n := &d.nodes[i]
	if n.kind != kindString {
		return false
	}
	if !n.escaped {
		return string(d.inner(i)) == s
	}
	return string(d.text(i, nil)) == s
}

// member returns the value node of the member named key in object obj, or -1.
func (d *document) member(obj int32, key string) int32 {
	kids := d.kidsOf(obj)
	for k := 0; k < len(kids); k += 2 {
		if d.isString(kids[k], key) {
			return kids[k+1]
		}
	}
	return -1
}

// appendUnescaped decodes the inside of a validated string token onto dst.
func appendUnescaped(dst, s []byte) []byte {
	for len(s) > 0 {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		s = s[i:]
		switch s[1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(s[2:])
			if utf16.IsSurrogate(r) {
				lo, _ := hex4(s[8:])
				r = utf16.DecodeRune(r, lo)
				s = s[6:]
			}
			dst = utf8.AppendRune(dst, r)
			s = s[6:]
			continue
		default: // '"', '\\', '/'
			dst = append(dst, s[1])
		}
		s = s[2:]
	}
	return dst
}

// appendCompact writes node i without insignificant whitespace, keeping member order and tokens as
// they were. Nodes marked redact are written as RedactedValue.
func (d *document) appendCompact(dst []byte, i int32) []byte {
	n := &d.nodes[i]
	if n.redact {
		return append(dst, redactedToken...)
	}
	switch n.kind {
	case kindArray:
		dst = append(dst, '[')
		for j, k := range d.kidsOf(i) {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = d.appendCompact(dst, k)
		}
		return append(dst, ']')
	case kindObject:
		dst = append(dst, '{')
		kids := d.kidsOf(i)
		for j := 0; j < len(kids); j += 2 {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, d.raw(kids[j])...)
			dst = append(dst, ':')
			dst = d.appendCompact(dst, kids[j+1])
		}
		return append(dst, '}')
	default:
		return append(dst, d.raw(i)...)
	}
}

// present reports whether raw holds a value: nil, empty and JSON null all mean "no config".
func present(raw []byte) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}
