package agentconfig

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of raw: object keys sorted by
// their UTF-16 code units, numbers in ECMAScript form, strings with the minimal escapes, no whitespace.
// Input that is not I-JSON (duplicate keys, invalid UTF-8, lone surrogates, numbers beyond the range
// of an IEEE 754 double) is an error.
func Canonicalize(raw json.RawMessage) ([]byte, error) {
	c := canonicalizers.Get().(*canonicalizer)
	defer c.release()
	out, err := c.appendCanonical(make([]byte, 0, len(raw)), raw)
	if err != nil {
		return nil, fmt.Errorf("agentconfig: canonicalize: %w", err)
	}
	return out, nil
}

// canonicalizer writes the RFC 8785 form of a JSON text in one pass, without building a tree: scalars
// are written as they are read, and the members of an object are put in key order when it closes
// (an object whose members arrive in order is not touched again). It reads with the tree parser's
// scanners and limits, so it accepts exactly what the parser accepts. The zero value is ready to use.
type canonicalizer struct {
	p        parser // only its scanners: p.d is nil
	out      []byte
	members  []canonMember // members of the open objects, innermost last
	keys     []byte        // decoded text of the escaped keys of the open objects
	perm     []int32       // the key order of one object's members
	prefixes []uint64      // their key prefixes, sorted
	moved    []byte        // the members of one object while they are put in order
	text     []byte        // string decoding
	numErr   error         // the first number out of range: reported only if the syntax is fine
}

// canonMember is one member of an object being written. Its key text is p.data[ka:kb], or keys[ka:kb]
// when decoded (the key has escapes). A verbatim member is still in the input, canonical as it
// stands: the key token p.data[ka-1:kb+1] and the value token p.data[vs:ve]. Any other is written
// already: out[start:end] is `"key":value`. prefix is the first eight bytes of the key text,
// big-endian and zero-padded; when both prefixes are plain and differ, they order the keys as
// compareUTF16 does, which spares most comparisons a look at the bytes.
type canonMember struct {
	start, end int
	ka, kb     int32
	vs, ve     int32
	prefix     uint64
	decoded    bool
	verbatim   bool
	plain      bool // no prefix byte starts a supplementary character, where UTF-8 and UTF-16 order part
}

var canonicalizers = sync.Pool{New: func() any { return new(canonicalizer) }}

func (c *canonicalizer) release() {
	if !c.oversized() {
		canonicalizers.Put(c)
	}
}

// oversized reports whether c holds buffers too large to keep around for reuse.
func (c *canonicalizer) oversized() bool {
	return cap(c.moved) > 1<<20 || cap(c.keys) > 1<<20 || cap(c.text) > 1<<20 || cap(c.members) > 1<<14 ||
		cap(c.perm) > 1<<14 || cap(c.prefixes) > 1<<14
}

// appendCanonical appends the canonical form of data to dst. On error it returns nil, and what lies
// past len(dst) in its array is garbage.
func (c *canonicalizer) appendCanonical(dst, data []byte) ([]byte, error) {
	if len(data) > math.MaxInt32 {
		return nil, &syntaxError{msg: "document too large"}
	}
	c.p, c.out, c.numErr = parser{data: data}, dst, nil
	c.p.skipSpace()
	err := c.value(0)
	if err == nil {
		c.p.skipSpace()
		if c.p.pos < len(data) {
			err = c.p.fail("unexpected data after the top-level value")
		}
	}
	if err == nil {
		err = c.numErr
	}
	out := c.out
	c.p, c.out, c.numErr = parser{}, nil, nil // drop the references to the caller's buffers
	c.members, c.keys = c.members[:0], c.keys[:0]
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *canonicalizer) value(depth int) error {
	p := &c.p
	if p.pos >= len(p.data) {
		return p.fail("unexpected end of input")
	}
	start := p.pos
	switch k := tokenKinds[p.data[start]]; k {
	case kindObject:
		return c.object(depth + 1)
	case kindArray:
		return c.array(depth + 1)
	case kindString:
		return c.str()
	case kindNumber:
		if err := p.scanNumber(); err != nil {
			return err
		}
		out, err := appendCanonicalNumber(c.out, p.data[start:p.pos])
		if err != nil {
			if c.numErr == nil {
				c.numErr = err
			}
			return nil
		}
		c.out = out
		return nil
	case noKind:
		return p.unexpected()
	default:
		if err := p.scanLiteral(k); err != nil {
			return err
		}
		c.out = append(c.out, p.data[start:p.pos]...)
		return nil
	}
}

func (c *canonicalizer) str() error {
	p := &c.p
	start := p.pos
	escaped, err := p.scanString()
	if err != nil {
		return err
	}
	if !escaped {
		// Without escapes a token holds no '"', '\\' or control character: it is already canonical.
		c.out = append(c.out, p.data[start:p.pos]...)
		return nil
	}
	c.writeEscaped(start)
	return nil
}

// writeEscaped writes the string token p.data[start:p.pos], which has escapes, with the canonical ones.
func (c *canonicalizer) writeEscaped(start int) {
	c.text = appendUnescaped(c.text[:0], c.p.data[start+1:c.p.pos-1])
	c.out = appendCanonicalString(c.out, c.text)
}

// open moves past the '[' or '{' that starts an array or object at depth and writes it. If the
// container is empty it also moves past and writes its end, and reports it as empty.
func (c *canonicalizer) open(depth int, end byte) (empty bool, err error) {
	p := &c.p
	if depth > maxDepth {
		return false, p.fail("nesting too deep")
	}
	c.out = append(c.out, p.data[p.pos])
	p.pos++
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == end {
		p.pos++
		c.out = append(c.out, end)
		return true, nil
	}
	return false, nil
}

func (c *canonicalizer) array(depth int) error {
	p := &c.p
	if empty, err := c.open(depth, ']'); err != nil || empty {
		return err
	}
	for {
		p.skipSpace()
		if err := c.value(depth); err != nil {
			return err
		}
		if !p.comma() {
			closed, err := p.separator(']')
			if err != nil {
				return err
			}
			if closed {
				c.out = append(c.out, ']')
				return nil
			}
		}
		c.out = append(c.out, ',')
	}
}

func (c *canonicalizer) object(depth int) error {
	p := &c.p
	start := p.pos
	if empty, err := c.open(depth, '}'); err != nil || empty {
		return err
	}
	base, keysBase, body := len(c.members), len(c.keys), len(c.out)
	verbatim := false // some member is left in the input, to be copied when the object closes
	// The position is kept in a local and stored back only around calls: this loop runs once per
	// member of every object, and p lives in memory.
	data, pos := p.data, p.pos
	for {
		pos = skipSpace(data, pos)
		if pos >= len(data) || data[pos] != '"' {
			p.pos = pos
			return p.fail("expected a string object key")
		}
		if end, prefix := shortPlainString(data, pos); end > 0 {
			// Most keys: at most eight plain ASCII bytes, read and summarized from one word.
			m := c.addMember()
			m.decoded, m.verbatim = false, false
			m.ka, m.kb = int32(pos+1), int32(end-1)
			m.prefix, m.plain = prefix, true
			pos = end
		} else {
			p.pos = pos
			if err := c.key(); err != nil {
				return err
			}
			pos = p.pos
		}
		m := len(c.members) - 1 // the recursion below adds and drops members after it
		pos = skipSpace(data, pos)
		if pos >= len(data) || data[pos] != ':' {
			p.pos = pos
			return p.fail("expected ':' after object key")
		}
		pos = skipSpace(data, pos+1)
		// The value. A string without escapes, a literal or a short integer after a key without
		// escapes, the usual member, is canonical as it stands: it stays in the input (see
		// memberValue), settled here.
		settled := false
		if mb := &c.members[m]; !mb.decoded && pos < len(data) {
			end := 0 // of the value token, if it is one of those
			if data[pos] != '"' {
				end, _ = shortScalar(data, pos)
			} else if e := skipPlainString(data, pos+1); e < len(data) && data[e] == '"' {
				end = e + 1
			}
			if end > 0 {
				mb.verbatim, mb.vs, mb.ve = true, int32(pos), int32(end)
				pos, verbatim, settled = end, true, true
			}
		}
		if !settled {
			p.pos = pos
			if err := c.memberValue(depth, m, body); err != nil {
				return err
			}
			verbatim = verbatim || c.members[m].verbatim
			pos = p.pos
		}
		if pos < len(data) && data[pos] == ',' {
			pos++
			continue
		}
		p.pos = pos
		if closed, err := p.separator('}'); err != nil {
			return err
		} else if closed {
			break
		}
		pos = p.pos
	}
	if dup := c.order(base, body, verbatim); dup >= 0 {
		key := appendCanonicalString(nil, c.keyText(&c.members[dup]))
		return &syntaxError{offset: start, msg: "duplicate object key " + string(key)}
	}
	c.members, c.keys = c.members[:base], c.keys[:keysBase]
	c.out = append(c.out, '}')
	return nil
}

// key reads an object key that is not short and plain (object reads those itself) and adds it to
// c.members (field by field: a member value built and then copied makes the CPU reload words from
// narrower stores, which stalls).
func (c *canonicalizer) key() error {
	p := &c.p
	start := p.pos
	p.pos++ // opening quote; shortPlainString in object settled the short plain keys
	escaped, err := p.scanStringRest()
	if err != nil {
		return err
	}
	m := c.addMember()
	m.decoded, m.verbatim = escaped, false
	if !escaped {
		m.ka, m.kb = int32(start+1), int32(p.pos-1)
		m.prefix, m.plain = keyPrefix(p.data, start+1, p.pos-1)
	} else {
		ka := len(c.keys)
		c.keys = appendUnescaped(c.keys, p.data[start+1:p.pos-1])
		m.ka, m.kb = int32(ka), int32(len(c.keys))
		m.prefix, m.plain = keyPrefix(c.keys, ka, len(c.keys))
	}
	return nil
}

// addMember appends a member to c.members and returns it, its fields left to the caller.
func (c *canonicalizer) addMember() *canonMember {
	i := len(c.members)
	if i == cap(c.members) {
		c.members = slices.Grow(c.members, 1)
	}
	c.members = c.members[:i+1]
	return &c.members[i]
}

// shortPlainString reads the string token at data[pos] if its text is at most eight plain ASCII bytes
// (no escapes): it returns the end of the token (else 0) and the text's prefix as keyPrefix gives it.
// When the eight bytes after the quote are all plain, n is 8 and the ninth must be the closing quote.
func shortPlainString(data []byte, pos int) (end int, prefix uint64) {
	if pos+10 > len(data) {
		return 0, 0
	}
	w := binary.LittleEndian.Uint64(data[pos+1:])
	n := bits.TrailingZeros64(specialBytes(w)) >> 3
	if data[pos+1+n] != '"' {
		return 0, 0
	}
	return pos + n + 2, bits.ReverseBytes64(w) &^ (^uint64(0) >> (8 * n))
}

// memberValue reads the value of member m of the object whose members start at out[body]. A member
// whose key and value tokens are canonical as they stand (no escapes, a short integer, a literal) is
// left in the input and only marked verbatim; any other is written to out now, after a comma if it
// is not the first there.
func (c *canonicalizer) memberValue(depth, m, body int) error {
	p := &c.p
	if !c.members[m].decoded && p.pos < len(p.data) {
		start := p.pos
		switch b := p.data[start]; {
		case b == '"':
			escaped, err := p.scanString()
			if err != nil {
				return err
			}
			if !escaped {
				c.setVerbatim(m, start)
				return nil
			}
			c.writeKey(m, body)
			c.writeEscaped(start)
			c.members[m].end = len(c.out)
			return nil
		case b == '-' || (b >= '0' && b <= '9'):
			if err := p.scanNumber(); err != nil {
				return err
			}
			lit := p.data[start:p.pos]
			if isShortInteger(lit) && string(lit) != "-0" {
				c.setVerbatim(m, start)
				return nil
			}
			c.writeKey(m, body)
			if out, err := appendCanonicalNumber(c.out, lit); err == nil {
				c.out = out
			} else if c.numErr == nil {
				c.numErr = err
			}
			c.members[m].end = len(c.out)
			return nil
		case b == 't' || b == 'f' || b == 'n':
			if err := p.scanLiteral(tokenKinds[b]); err != nil {
				return err
			}
			c.setVerbatim(m, start)
			return nil
		}
	}
	c.writeKey(m, body)
	if err := c.value(depth); err != nil {
		return err
	}
	c.members[m].end = len(c.out)
	return nil
}

// setVerbatim marks member m as left in the input, its value being p.data[start:p.pos].
func (c *canonicalizer) setVerbatim(m, start int) {
	mb := &c.members[m]
	mb.verbatim, mb.vs, mb.ve = true, int32(start), int32(c.p.pos)
}

// writeKey starts member m in out: a comma unless it is the first member there, the key, a colon.
func (c *canonicalizer) writeKey(m, body int) {
	if len(c.out) > body {
		c.out = append(c.out, ',')
	}
	mb := &c.members[m]
	mb.start = len(c.out)
	if mb.decoded {
		c.out = appendCanonicalString(c.out, c.keys[mb.ka:mb.kb])
	} else {
		c.out = append(c.out, c.p.data[mb.ka-1:mb.kb+1]...)
	}
	c.out = append(c.out, ':')
}

// keyPrefix returns the first eight bytes of the key text buf[start:end], big-endian and zero-padded,
// and whether none of them is 0xF0 or above. Those bytes start the four-byte sequences of the
// supplementary characters, the only ones whose UTF-8 order is not their UTF-16 order (see
// compareUTF16); prefixes without them order as UTF-16 does. Padding with zeros only ever makes
// prefixes equal, never misordered, and equal prefixes are settled by compareUTF16.
func keyPrefix(buf []byte, start, end int) (prefix uint64, plain bool) {
	if n := end - start; start+8 <= len(buf) {
		// One load, then drop the bytes past the key (a shift by 64 or more gives 0 in Go).
		prefix = binary.BigEndian.Uint64(buf[start:]) &^ (^uint64(0) >> (8 * min(n, 8)))
	} else {
		var b [8]byte
		copy(b[:], buf[start:end])
		prefix = binary.BigEndian.Uint64(b[:])
	}
	if prefix&0x8080808080808080 == 0 {
		return prefix, true // ASCII
	}
	for x := prefix; x != 0; x >>= 8 {
		if x&0xFF >= 0xF0 {
			return prefix, false
		}
	}
	return prefix, true
}

func (c *canonicalizer) keyText(m *canonMember) []byte {
	if m.decoded {
		return c.keys[m.ka:m.kb]
	}
	return c.p.data[m.ka:m.kb]
}

func (c *canonicalizer) compare(a, b *canonMember) int {
	if a.prefix != b.prefix && a.plain && b.plain {
		if a.prefix < b.prefix {
			return -1
		}
		return 1
	}
	return compareUTF16(c.keyText(a), c.keyText(b))
}

// order writes the members of one object, members[base:], in key order from out[body:]. The members
// written already are there in input order, separated by commas; verbatim says some are still in the
// input. It sorts a permutation rather than moving members around. It returns the index in members
// of a repeated key, or -1.
func (c *canonicalizer) order(base, body int, verbatim bool) int {
	ms := c.members[base:]
	if len(ms) > cap(c.perm) {
		c.perm, c.prefixes = make([]int32, len(ms), 2*len(ms)), make([]uint64, len(ms), 2*len(ms))
	}
	perm, prefixes := c.perm[:len(ms)], c.prefixes[:len(ms)]
	plain := true
	for i := range ms {
		perm[i], prefixes[i] = int32(i), ms[i].prefix
		plain = plain && ms[i].plain
	}
	moved, settled := false, false
	if plain && len(ms) <= 8 {
		// Usually the prefixes alone decide, and most objects are this small: sort the prefixes by a
		// sorting network, which takes the same steps whatever the order (comparing and swapping
		// mispredicts a branch at about every member, each object's keys arriving in their own order).
		// Each member's position rides in the low byte of its prefix, whose other seven bytes decide;
		// if no two of those are equal, that is the order. Unused slots hold the largest value, above
		// any prefix of plain bytes.
		var keys [8]uint64
		for i, x := range prefixes {
			keys[i] = x&^0xFF | uint64(i)
		}
		for i := len(prefixes); i < len(keys); i++ {
			keys[i] = ^uint64(0)
		}
		sort8(&keys)
		settled = true
		diff := uint64(0) // nonzero once a member's place is not its position
		for i := range perm {
			perm[i] = int32(keys[i] & 0xFF)
			diff |= keys[i]&0xFF ^ uint64(i)
			if i > 0 && keys[i-1]>>8 == keys[i]>>8 {
				settled = false
			}
		}
		moved = diff != 0
		if !settled {
			// Two keys share seven bytes: sort as larger objects are, from the input order, which
			// also names the same one of two repeated keys.
			for i := range perm {
				perm[i] = int32(i)
			}
			moved = false
		}
	}
	if plain && !settled && len(ms) <= 32 {
		// Usually the prefixes alone decide: sort them (insertion sort, with the permutation alongside),
		// and if no two are equal, that is the order. Equal prefixes end up side by side, so one look
		// at the neighbours finds them.
		for i := 1; i < len(prefixes); i++ {
			x := prefixes[i]
			if prefixes[i-1] < x {
				continue
			}
			k, j := perm[i], i
			for ; j > 0 && prefixes[j-1] > x; j-- {
				prefixes[j], perm[j] = prefixes[j-1], perm[j-1]
			}
			prefixes[j], perm[j] = x, k
			moved = moved || j != i
		}
		settled = true
		for i := 1; i < len(prefixes); i++ {
			if prefixes[i-1] == prefixes[i] {
				settled = false
				break
			}
		}
	}
	switch {
	case settled:
	case len(ms) <= 32:
		// Insertion sort by the full keys, from the order reached so far. It compares every member with
		// its final left neighbour, so a repeated key always meets its twin.
		for i := 1; i < len(perm); i++ {
			for j := i; j > 0; j-- {
				r := c.compare(&ms[perm[j-1]], &ms[perm[j]])
				if r == 0 {
					return base + int(perm[j])
				}
				if r < 0 {
					break
				}
				perm[j-1], perm[j] = perm[j], perm[j-1]
				moved = true
			}
		}
	default:
		cmp := func(a, b int32) int { return c.compare(&ms[a], &ms[b]) }
		moved = !slices.IsSortedFunc(perm, cmp)
		if moved {
			slices.SortFunc(perm, cmp)
		}
		for i := 1; i < len(perm); i++ {
			if cmp(perm[i-1], perm[i]) == 0 {
				return base + int(perm[i])
			}
		}
	}
	if !moved && !verbatim {
		return -1 // out[body:] is the object already
	}
	// Everything written here lies within this object, after any span an enclosing object recorded.
	// The output is appended to in local variables and stored back once: c is in the heap, and storing
	// a slice there at every member costs a write barrier each while the garbage collector marks.
	held := append(c.moved[:0], c.out[body:]...)
	out := c.out[:body]
	data := c.p.data
	for i, k := range perm {
		if i > 0 {
			out = append(out, ',')
		}
		m := &ms[k]
		switch ke := m.kb + 1; {
		case !m.verbatim:
			out = append(out, held[m.start-body:m.end-body]...)
		case ke+1 == m.vs && data[ke] == ':':
			out = append(out, data[m.ka-1:m.ve]...) // compact input: the member at once
		default:
			out = append(out, data[m.ka-1:ke]...)
			out = append(out, ':')
			out = append(out, data[m.vs:m.ve]...)
		}
	}
	keep(&c.out, out)
	keep(&c.moved, held)
	return -1
}

// compareUTF16 orders two UTF-8 strings by their UTF-16 code units, as RFC 8785 sorts keys. This
// differs from byte order only between supplementary characters and U+E000..U+FFFF.
func compareUTF16(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	switch {
	case i == len(a) && i == len(b):
		return 0
	case i == len(a):
		return -1
	case i == len(b):
		return 1
	}
	if a[i] < utf8.RuneSelf && b[i] < utf8.RuneSelf {
		return int(a[i]) - int(b[i])
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i-- // back to the start of the rune where they differ
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	return int(firstUnit(ra)) - int(firstUnit(rb))
}

// firstUnit is the first UTF-16 code unit of r, scaled so that runes sharing a high surrogate still
// order by their low surrogate.
func firstUnit(r rune) rune {
	if r < 0x10000 {
		return r << 10
	}
	hi, lo := utf16.EncodeRune(r)
	return hi<<10 | (lo - 0xDC00)
}

// sort8 sorts k ascending with the 19 compare-exchanges of an optimal sorting network for eight
// inputs (Knuth, TAOCP vol. 3, 5.3.4). min and max compile to conditional moves, so it does not branch.
func sort8(k *[8]uint64) {
	ce := func(i, j int) { k[i], k[j] = min(k[i], k[j]), max(k[i], k[j]) }
	ce(0, 2)
	ce(1, 3)
	ce(4, 6)
	ce(5, 7)
	ce(0, 4)
	ce(1, 5)
	ce(2, 6)
	ce(3, 7)
	ce(0, 1)
	ce(2, 3)
	ce(4, 5)
	ce(6, 7)
	ce(2, 4)
	ce(3, 5)
	ce(1, 4)
	ce(3, 6)
	ce(1, 2)
	ce(3, 4)
	ce(5, 6)
}

// appendCanonicalString writes s (valid UTF-8) as a JSON string with the escapes of ECMAScript's
// JSON.stringify: \b \t \n \f \r \" \\ and \u00xx for the other control characters.
func appendCanonicalString[T ~string | ~[]byte](dst []byte, s T) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

var errNumberRange = errors.New("number out of the range of an IEEE 754 double")

// appendCanonicalNumber writes a JSON number token in its ECMAScript form.
func appendCanonicalNumber(dst, lit []byte) ([]byte, error) {
	if isShortInteger(lit) {
		if string(lit) == "-0" {
			return append(dst, '0'), nil
		}
		return append(dst, lit...), nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil && (math.IsInf(f, 0) || !errors.Is(err, strconv.ErrRange)) {
		return nil, fmt.Errorf("%w: %s", errNumberRange, lit)
	}
	return appendES6Number(dst, f), nil
}

// isShortInteger reports whether lit is an integer token of at most 15 digits: exactly representable,
// and already in ECMAScript form (JSON forbids leading zeros).
func isShortInteger(lit []byte) bool {
	digits := lit
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// appendES6Number formats f as ECMAScript's Number.prototype.toString does (ECMA-262 7.1.12.1), which
// RFC 8785 adopts: shortest round-trip digits, plain notation for exponents -6 < n <= 21.
func appendES6Number(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // also -0
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d[.ddd]e±xx, shortest digits
	e := bytes.IndexByte(b, 'e')
	exp, _ := strconv.Atoi(string(b[e+1:]))
	var digitBuf [24]byte
	digits := append(digitBuf[:0], b[0])
	if e > 1 {
		digits = append(digits, b[2:e]...)
	}
	k, n := len(digits), exp+1
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for ; k < n; k++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for ; n < 0; n++ {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 > 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// isCanonical reports whether data is already in RFC 8785 form, that is, whether Canonicalize would
// return it unchanged. It reads data once without building a tree or writing anything, with the tree
// parser's scanners and limits (the grammar Canonicalize reads with): no whitespace, every string and
// number spelled as Canonicalize would write it, and the keys of each object strictly ascending by
// UTF-16 code units (which also rules out duplicates). A false result only means "take the general
// path": it is also returned for input the general path rejects.
func isCanonical(data []byte) bool {
	if len(data) > math.MaxInt32 {
		return false
	}
	c := canonicalChecker{p: parser{data: data}}
	return c.value(0) && c.p.pos == len(data)
}

// canonicalChecker is the state of isCanonical: only the parser's scanners are used (p.d is nil).
type canonicalChecker struct {
	p       parser
	keys    []byte // decoded escaped keys, compared and dropped
	text    []byte // the decoded text of an escaped string
	spelled []byte // that text as Canonicalize writes it
}

func (c *canonicalChecker) value(depth int) bool {
	p := &c.p
	if p.pos >= len(p.data) {
		return false
	}
	switch k := tokenKinds[p.data[p.pos]]; k {
	case kindObject:
		return c.object(depth + 1)
	case kindArray:
		return c.array(depth + 1)
	case kindString:
		_, ok := c.str()
		return ok
	case kindNumber:
		start := p.pos
		if p.scanNumber() != nil {
			return false
		}
		lit := p.data[start:p.pos]
		if isShortInteger(lit) {
			return string(lit) != "-0"
		}
		// Rare: long integers, fractions, exponents.
		var buf [32]byte
		out, err := appendCanonicalNumber(buf[:0], lit)
		return err == nil && bytes.Equal(out, lit)
	case noKind:
		return false
	default:
		return p.scanLiteral(k) == nil
	}
}

// str accepts a string token that Canonicalize would write as it stands, and reports whether it holds
// escapes. A token without escapes always is canonical; one with escapes is, if writing its decoded
// text again (as Canonicalize does) gives the token back.
func (c *canonicalChecker) str() (escaped, ok bool) {
	p := &c.p
	start := p.pos
	escaped, err := p.scanString()
	if err != nil {
		return false, false
	}
	if !escaped {
		return false, true
	}
	c.text = appendUnescaped(c.text[:0], p.data[start+1:p.pos-1])
	c.spelled = appendCanonicalString(c.spelled[:0], c.text)
	return true, bytes.Equal(c.spelled, p.data[start:p.pos])
}

func (c *canonicalChecker) array(depth int) bool {
	p := &c.p
	if depth > maxDepth {
		return false
	}
	p.pos++ // [
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return true
	}
	for {
		if !c.value(depth) {
			return false
		}
		if closed, ok := p.compactSeparator(']'); !ok || closed {
			return ok
		}
	}
}

func (c *canonicalChecker) object(depth int) bool {
	p := &c.p
	if depth > maxDepth {
		return false
	}
	// The position is kept in a local and stored back only around calls: this loop runs once per
	// member of every object, and p lives in memory.
	data, pos := p.data, p.pos+1 // past '{'
	if pos < len(data) && data[pos] == '}' {
		p.pos = pos + 1
		return true
	}
	prevStart, prevEnd, prevEscaped := -1, -1, false // the previous key's token
	prevShort, prevPrefix := false, uint64(0)        // it is short and plain, with that prefix
	for {
		if pos >= len(data) || data[pos] != '"' {
			return false
		}
		start := pos
		if end, prefix := shortPlainString(data, start); end > 0 {
			// Most keys: at most eight plain ASCII bytes, whose zero-padded prefix is the whole key (a
			// plain byte is never zero). Two such keys order as their prefixes do, and only equal keys
			// have equal prefixes.
			pos = end
			switch {
			case prevStart < 0:
			case prevShort:
				if prevPrefix >= prefix {
					return false
				}
			case !c.ascending(prevStart, prevEnd, prevEscaped, start, end, false):
				return false
			}
			prevStart, prevEnd, prevEscaped, prevShort, prevPrefix = start, end, false, true, prefix
		} else {
			p.pos = pos
			escaped, ok := c.str()
			if !ok {
				return false
			}
			pos = p.pos
			if prevStart >= 0 && !c.ascending(prevStart, prevEnd, prevEscaped, start, pos, escaped) {
				return false
			}
			prevStart, prevEnd, prevEscaped, prevShort = start, pos, escaped, false
		}
		if pos >= len(data) || data[pos] != ':' {
			return false
		}
		pos++
		// The value. A string without escapes, a literal or a short integer, the usual ones, is
		// settled here; anything else by value.
		if end := pos + 1; pos < len(data) && data[pos] == '"' {
			if end = skipPlainString(data, end); end < len(data) && data[end] == '"' {
				pos = end + 1
			} else {
				p.pos = pos
				if _, ok := c.str(); !ok {
					return false
				}
				pos = p.pos
			}
		} else if end, _ = shortScalar(data, pos); end > 0 {
			pos = end
		} else {
			p.pos = pos
			if !c.value(depth) {
				return false
			}
			pos = p.pos
		}
		if pos < len(data) {
			switch data[pos] {
			case ',':
				pos++
				continue
			case '}':
				p.pos = pos + 1
				return true
			}
		}
		return false
	}
}

// ascending reports whether the key token data[aStart:aEnd] sorts strictly before data[bStart:bEnd].
func (c *canonicalChecker) ascending(aStart, aEnd int, aEscaped bool, bStart, bEnd int, bEscaped bool) bool {
	data := c.p.data
	a, b := data[aStart+1:aEnd-1], data[bStart+1:bEnd-1]
	if !aEscaped && !bEscaped {
		return compareUTF16(a, b) < 0
	}
	c.keys = appendUnescaped(c.keys[:0], a)
	n := len(c.keys)
	c.keys = appendUnescaped(c.keys, b)
	return compareUTF16(c.keys[:n], c.keys[n:]) < 0
}
