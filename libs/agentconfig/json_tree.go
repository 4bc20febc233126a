package agentconfig

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// This file holds the one JSON reader of the package. Merge, Validate, Redact and the credential
// helpers all work on its flat tree instead of encoding/json values: object member order is kept (so
// merges keep the environment's order), number and string tokens are kept verbatim (so merges copy
// content exactly), and a whole document costs a few slice allocations, reused through a pool.
// Canonicalize and ConfigHash read with the same scanners and limits but build no tree (canonical.go).
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

	scratch []byte // string decoding
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

// add appends a node, in room made beforehand (by reserve, or by object for a member). It writes the
// fields straight into the slice: appending a node value built beforehand made the CPU reload a word
// from several narrower stores, which stalls store forwarding and was the single most expensive line
// of parsing.
func (p *parser) add(k kind, a, b int32, escaped bool) int32 {
	d := p.d
	i := len(d.nodes)
	d.nodes = d.nodes[:i+1]
	d.nodes[i] = node{a: a, b: b, kind: k, escaped: escaped}
	return int32(i)
}

// reserve makes room for one more node. Kept apart from add (and called once per value or key), so
// that both are small enough to inline.
func (p *parser) reserve() {
	if d := p.d; len(d.nodes) == cap(d.nodes) {
		d.nodes = slices.Grow(d.nodes, 1)
	}
}

func (p *parser) skipSpace() {
	if pos := p.pos; pos < len(p.data) && p.data[pos] <= ' ' {
		p.pos = skipSpace(p.data, pos)
	}
}

// skipSpace returns the position of the first byte at or after pos that is not JSON whitespace, or
// len(data). The usual byte there is no whitespace (and in compact input none ever is), which the first
// comparison settles.
func skipSpace(data []byte, pos int) int {
	for pos < len(data) && data[pos] <= ' ' && spaceBytes>>data[pos]&1 != 0 {
		pos++
	}
	return pos
}

// spaceBytes has bit c set for each whitespace byte c of JSON: space, tab, line feed, carriage return.
const spaceBytes uint64 = 1<<' ' | 1<<'\t' | 1<<'\n' | 1<<'\r'

func (p *parser) value(depth int) (int32, error) {
	if p.pos >= len(p.data) {
		return -1, p.fail("unexpected end of input")
	}
	p.reserve()
	switch k := tokenKinds[p.data[p.pos]]; k {
	case kindObject:
		return p.object(depth + 1)
	case kindArray:
		return p.array(depth + 1)
	case kindString:
		return p.stringNode()
	case kindNumber:
		return p.number()
	case noKind:
		return -1, p.unexpected()
	default:
		start := p.pos
		if err := p.scanLiteral(k); err != nil {
			return -1, err
		}
		return p.add(k, int32(start), int32(p.pos), false), nil
	}
}

// noKind marks, in tokenKinds, the bytes that start no value.
const noKind kind = 0xFF

// tokenKinds maps the first byte of a value token to the kind of the value.
var tokenKinds = func() (t [256]kind) {
	for i := range t {
		t[i] = noKind
	}
	t['{'], t['['], t['"'] = kindObject, kindArray, kindString
	t['t'], t['f'], t['n'] = kindTrue, kindFalse, kindNull
	t['-'] = kindNumber
	for c := '0'; c <= '9'; c++ {
		t[c] = kindNumber
	}
	return t
}()

var literalWords = [...]string{kindNull: "null", kindFalse: "false", kindTrue: "true"}

// shortScalar reads the literal or short integer at data[pos], the scalars other than strings that
// configs hold: it returns the end of the token (else 0) and its kind. A short integer has at most 15
// digits and no sign, fraction or exponent, so Canonicalize leaves it as it stands. Anything else
// (including what is not JSON) is left to the general path, which reads it or reports it as before.
func shortScalar(data []byte, pos int) (end int, k kind) {
	if pos >= len(data) {
		return 0, 0
	}
	switch c := data[pos]; {
	case c-'0' <= 9:
		end = pos + 1
		if c != '0' {
			end = skipDigits(data, end)
		}
		if end-pos > 15 || end < len(data) && (data[end] == '.' || data[end] == 'e' || data[end] == 'E') {
			return 0, 0
		}
		return end, kindNumber
	case c == 't':
		if pos+4 <= len(data) && string(data[pos:pos+4]) == "true" {
			return pos + 4, kindTrue
		}
	case c == 'f':
		if pos+5 <= len(data) && string(data[pos:pos+5]) == "false" {
			return pos + 5, kindFalse
		}
	case c == 'n':
		if pos+4 <= len(data) && string(data[pos:pos+4]) == "null" {
			return pos + 4, kindNull
		}
	}
	return 0, 0
}

// scanLiteral moves past the word of literal kind k (kindNull, kindFalse or kindTrue) at p.pos.
func (p *parser) scanLiteral(k kind) error {
	word := literalWords[k]
	end := p.pos + len(word)
	if end > len(p.data) || string(p.data[p.pos:end]) != word {
		return p.fail("invalid literal")
	}
	p.pos = end
	return nil
}

// unexpected reports the byte at p.pos, which starts no value.
func (p *parser) unexpected() error {
	return p.fail(fmt.Sprintf("unexpected character %q", p.data[p.pos]))
}

func (p *parser) number() (int32, error) {
	start := p.pos
	if err := p.scanNumber(); err != nil {
		return -1, err
	}
	return p.add(kindNumber, int32(start), int32(p.pos), false), nil
}

// scanNumber moves past one number token, checking its syntax. The position is kept in a local and
// stored once: p lives in memory, and a number is read a byte at a time.
func (p *parser) scanNumber() error {
	data, pos := p.data, p.pos
	if data[pos] == '-' {
		pos++
	}
	switch {
	case pos < len(data) && data[pos] == '0':
		pos++
	case pos < len(data) && data[pos] >= '1' && data[pos] <= '9':
		pos = skipDigits(data, pos+1)
	default:
		p.pos = pos
		return p.fail("invalid number")
	}
	if pos < len(data) && data[pos] == '.' {
		pos++
		if end := skipDigits(data, pos); end > pos {
			pos = end
		} else {
			p.pos = pos
			return p.fail("invalid number: no digits after the decimal point")
		}
	}
	if pos < len(data) && (data[pos] == 'e' || data[pos] == 'E') {
		pos++
		if pos < len(data) && (data[pos] == '+' || data[pos] == '-') {
			pos++
		}
		if end := skipDigits(data, pos); end > pos {
			pos = end
		} else {
			p.pos = pos
			return p.fail("invalid number: no digits in the exponent")
		}
	}
	p.pos = pos
	return nil
}

// skipDigits returns the position of the first byte at or after pos that is not a decimal digit, or
// len(data).
func skipDigits(data []byte, pos int) int {
	for pos < len(data) && data[pos]-'0' <= 9 {
		pos++
	}
	return pos
}

func (p *parser) stringNode() (int32, error) {
	start := p.pos
	escaped, err := p.scanString()
	if err != nil {
		return -1, err
	}
	return p.add(kindString, int32(start), int32(p.pos), escaped), nil
}

// scanString moves past one string token, checking escapes and UTF-8. Most strings are plain: one
// skipPlainString reaches their closing quote (eight bytes at a time, so a short one in one step), and
// only the others go on to scanStringRest, from the first byte that is not plain.
func (p *parser) scanString() (escaped bool, err error) {
	data := p.data
	end := skipPlainString(data, p.pos+1)
	if end < len(data) && data[end] == '"' {
		p.pos = end + 1
		return false, nil
	}
	p.pos = end
	return p.scanStringRest()
}

// scanStringRest moves past the rest of a string token from p.pos, inside it.
func (p *parser) scanStringRest() (escaped bool, err error) {
	for {
		p.pos = skipPlainString(p.data, p.pos)
		if done, err := p.stringSpecial(&escaped); err != nil {
			return false, err
		} else if done {
			return escaped, nil
		}
	}
}

// stringSpecial moves past the byte at p.pos of a string token that is not a plain one: the closing
// quote (done), an escape (which sets *escaped) or a non-ASCII character; anything else is an error.
func (p *parser) stringSpecial(escaped *bool) (done bool, err error) {
	data := p.data
	if p.pos >= len(data) {
		return false, p.fail("unterminated string")
	}
	switch c := data[p.pos]; {
	case c == '"':
		p.pos++
		return true, nil
	case c == '\\':
		*escaped = true
		return false, p.scanEscape()
	case c < 0x20:
		return false, p.fail("control character in string")
	default: // non-ASCII
		r, size := utf8.DecodeRune(data[p.pos:])
		if r == utf8.RuneError && size == 1 {
			return false, p.fail("invalid UTF-8 in string")
		}
		p.pos += size
		return false, nil
	}
}

// skipPlainString returns the position of the first byte at or after pos that a string token does not
// hold as itself ('"', '\\', a control character or a non-ASCII byte), or len(data). It looks at eight
// bytes at a time.
func skipPlainString(data []byte, pos int) int {
	for pos+8 <= len(data) {
		if special := specialBytes(binary.LittleEndian.Uint64(data[pos:])); special != 0 {
			return pos + bits.TrailingZeros64(special)>>3
		}
		pos += 8
	}
	for pos < len(data) && plainStringByte[data[pos]] {
		pos++
	}
	return pos
}

// specialBytes flags, in their high bits, the bytes of the little-endian word x that a string token
// does not hold as themselves. Each term flags one kind; a term can flag false positives only above a
// true one, so the lowest flag of them all is exact (and the only one to rely on). Below the lowest
// special byte every byte is printable ASCII other than '"' and '\\', which none of the subtractions
// borrows from or turns negative: that is why the terms need no masking with their inputs.
func specialBytes(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	return (x | (x - 0x20*ones) | ((x ^ '"'*ones) - ones) | ((x ^ '\\'*ones) - ones)) & highs
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
	idx := p.add(kindArray, 0, 0, false)
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
		if p.comma() {
			continue
		}
		if closed, err := p.separator(']'); err != nil {
			return -1, err
		} else if closed {
			break
		}
	}
	p.d.popChildren(idx, base)
	return idx, nil
}

func (p *parser) object(depth int) (int32, error) {
	if depth > maxDepth {
		return -1, p.fail("nesting too deep")
	}
	start := p.pos
	d, data := p.d, p.data
	idx := p.add(kindObject, 0, 0, false)
	base := len(d.stack)
	// The position is kept in a local and stored back only around calls: this loop runs once per
	// member of every object, and p lives in memory.
	pos := skipSpace(data, start+1)
	if pos < len(data) && data[pos] == '}' {
		p.pos = pos + 1
		return idx, nil
	}
	// Repeated keys are looked for as the keys arrive, by cheap fingerprints first; only equal
	// fingerprints compare bytes, and only keys whose fingerprint falls in a bucket of seen that an
	// earlier key took look at the fingerprints at all. Larger objects are checked with a map at the
	// end.
	var prints [16]uint64
	var seen uint64
	n, dup := 0, int32(-1)
	for {
		pos = skipSpace(data, pos)
		if pos >= len(data) || data[pos] != '"' {
			p.pos = pos
			return -1, p.fail("expected a string object key")
		}
		ks := pos
		// Most keys are short and plain: shortPlainString reads them and gives their fingerprint (the
		// prefix, see fingerprintOf) from one word.
		escaped, short := false, uint64(0)
		if end, prefix := shortPlainString(data, ks); end > 0 {
			pos, short = end, prefix
		} else {
			p.pos = ks + 1 // past the opening quote
			var err error
			if escaped, err = p.scanStringRest(); err != nil {
				return -1, err
			}
			pos = p.pos
		}
		if len(d.nodes)+2 > cap(d.nodes) {
			d.nodes = slices.Grow(d.nodes, 2) // room for the key and a value read below
		}
		k := p.add(kindString, int32(ks), int32(pos), escaped)
		if n < len(prints) {
			f := short
			switch {
			case short != 0:
			case escaped:
				f = d.fingerprint(k)
			default:
				f = fingerprintOf(data[ks+1 : pos-1])
			}
			if bucket := uint64(1) << (f * 0x9E3779B97F4A7C15 >> 58); seen&bucket != 0 {
				for j := 0; j < n && dup < 0; j++ {
					if prints[j] == f && d.sameString(d, k, d.stack[base+2*j]) {
						dup = k
					}
				}
			} else {
				seen |= bucket
			}
			prints[n] = f
		}
		n++
		pos = skipSpace(data, pos)
		if pos >= len(data) || data[pos] != ':' {
			p.pos = pos
			return -1, p.fail("expected ':' after object key")
		}
		pos = skipSpace(data, pos+1)
		// The value. A string without escapes, a literal or a short integer, the usual ones, is read
		// here; anything else by value.
		v := int32(-1)
		if pos < len(data) && data[pos] == '"' {
			if end := skipPlainString(data, pos+1); end < len(data) && data[end] == '"' {
				v = p.add(kindString, int32(pos), int32(end+1), false)
				pos = end + 1
			}
		} else if end, k := shortScalar(data, pos); end > 0 {
			v = p.add(k, int32(pos), int32(end), false)
			pos = end
		}
		if v < 0 {
			p.pos = pos
			var err error
			if v, err = p.value(depth); err != nil {
				return -1, err
			}
			pos = p.pos
		}
		d.stack = append(d.stack, k, v)
		if pos < len(data) && data[pos] == ',' {
			pos++
			continue
		}
		p.pos = pos
		if closed, err := p.separator('}'); err != nil {
			return -1, err
		} else if closed {
			break
		}
		pos = p.pos
	}
	d.popChildren(idx, base)
	if n > len(prints) {
		dup = d.duplicateKey(idx)
	}
	if dup >= 0 {
		return -1, &syntaxError{offset: start, msg: fmt.Sprintf("duplicate object key %s", d.raw(dup))}
	}
	return idx, nil
}

// comma moves past a comma straight after a member of an array or object, the usual separator, and
// reports whether there was one. It is small enough to inline; separator handles everything else.
func (p *parser) comma() bool {
	if p.pos < len(p.data) && p.data[p.pos] == ',' {
		p.pos++
		return true
	}
	return false
}

// separator moves past what follows a member of an array (end ']') or an object (end '}'): a comma, or
// the end, which it reports as closed.
func (p *parser) separator(end byte) (closed bool, err error) {
	p.skipSpace()
	if closed, ok := p.compactSeparator(end); ok {
		return closed, nil
	}
	container := "array"
	if end == '}' {
		container = "object"
	}
	if p.pos >= len(p.data) {
		return false, p.fail("unterminated " + container)
	}
	return false, p.fail(fmt.Sprintf("expected ',' or '%c' in %s", end, container))
}

// compactSeparator moves past a comma or the end byte at p.pos, without looking past whitespace, and
// reports which it was (closed for the end); ok is false when it is neither.
func (p *parser) compactSeparator(end byte) (closed, ok bool) {
	if p.pos < len(p.data) {
		if c := p.data[p.pos]; c == ',' || c == end {
			p.pos++
			return c == end, true
		}
	}
	return false, false
}

// keep stores s, which was appended to from *field, back into *field. When s still lies in the field's
// array (the usual case once pooled buffers have grown) only the length is stored: storing a slice's
// pointer into a heap object costs a write barrier while the garbage collector marks, and reslicing a
// field to itself does not store the pointer.
func keep[T any](field *[]T, s []T) {
	if cap(s) == cap(*field) && unsafe.SliceData(s) == unsafe.SliceData(*field) {
		*field = (*field)[:len(s)]
		return
	}
	*field = s
}

// popChildren moves the child indices pushed since base into the shared kids array as the children of
// container node idx.
//
// It extends d.kids in place and copies rather than appending: d is in the heap, and appending a slice
// stores the result back even when it did not grow, which costs a write barrier while the garbage
// collector marks; reslicing a field to itself stores only the length.
func (d *document) popChildren(idx int32, base int) {
	children := d.stack[base:]
	n := len(d.kids)
	d.nodes[idx].a = int32(n)
	d.nodes[idx].b = int32(len(children))
	if len(children) > cap(d.kids)-n {
		d.kids = slices.Grow(d.kids, len(children))
	}
	d.kids = d.kids[:n+len(children)]
	copy(d.kids[n:], children)
	d.stack = d.stack[:base]
}

// duplicateKey returns the key node of the first repeated key of object obj, or -1.
func (d *document) duplicateKey(obj int32) int32 {
	kids := d.kidsOf(obj)
	n := len(kids) / 2
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
	return fingerprintOf(s)
}

// Texts of at most eight bytes are their own fingerprint: the bytes big-endian, zero-padded, as
// shortPlainString and keyPrefix give them (which is how the parser gets most keys' fingerprints for
// free). Longer ones are summarized by their length and three of their bytes.
func fingerprintOf(s []byte) uint64 {
	if len(s) <= 8 {
		var b [8]byte
		copy(b[:], s)
		return binary.BigEndian.Uint64(b[:])
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

// member returns the value node of the member named key in object obj, or -1. A key without escapes
// is compared only when its token has key's length (with its quotes): most keys are told apart by
// their length alone.
func (d *document) member(obj int32, key string) int32 {
	kids := d.kidsOf(obj)
	for k := 0; k < len(kids); k += 2 {
		n := &d.nodes[kids[k]]
		if n.escaped {
			if d.isString(kids[k], key) {
				return kids[k+1]
			}
		} else if int(n.b-n.a) == len(key)+2 && string(d.data[n.a+1:n.b-1]) == key {
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
			k, v := &d.nodes[kids[j]], &d.nodes[kids[j+1]]
			if end := int(k.b); end < len(d.data) && d.data[end] == ':' {
				dst = append(dst, d.data[k.a:end+1]...) // the key and its colon at once
			} else {
				dst = append(dst, d.data[k.a:k.b]...)
				dst = append(dst, ':')
			}
			if v.kind < kindArray && !v.redact {
				dst = append(dst, d.data[v.a:v.b]...) // a scalar, without the call
			} else {
				dst = d.appendCompact(dst, kids[j+1])
			}
		}
		return append(dst, '}')
	default:
		return append(dst, d.raw(i)...)
	}
}
