package agentconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of raw: object keys sorted by
// their UTF-16 code units, numbers in ECMAScript form, strings with the minimal escapes, no whitespace.
// Input that is not I-JSON (duplicate keys, invalid UTF-8, lone surrogates, numbers beyond the range
// of an IEEE 754 double) is an error.
func Canonicalize(raw json.RawMessage) ([]byte, error) {
	d := getDocument()
	defer putDocument(d)
	root, err := d.parse(raw)
	if err != nil {
		return nil, fmt.Errorf("agentconfig: canonicalize: %w", err)
	}
	out, err := d.appendCanonical(make([]byte, 0, len(raw)), root)
	if err != nil {
		return nil, fmt.Errorf("agentconfig: canonicalize: %w", err)
	}
	return out, nil
}

// appendCanonical writes node i in RFC 8785 form. d.members is scratch space for sorting object
// members, used as a stack by the recursion.
func (d *document) appendCanonical(dst []byte, i int32) ([]byte, error) {
	n := &d.nodes[i]
	switch n.kind {
	case kindNull, kindTrue, kindFalse:
		return append(dst, d.raw(i)...), nil
	case kindNumber:
		return appendCanonicalNumber(dst, d.raw(i))
	case kindString:
		if !n.escaped {
			// Without escapes a token holds no '"', '\\' or control character: it is already canonical.
			return append(dst, d.raw(i)...), nil
		}
		d.scratch = d.text(i, d.scratch[:0])
		return appendCanonicalString(dst, d.scratch), nil
	case kindArray:
		dst = append(dst, '[')
		for j, k := range d.kidsOf(i) {
			if j > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = d.appendCanonical(dst, k); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	default:
		kids := d.kidsOf(i)
		base := len(d.members)
		escaped := false
		for j := 0; j < len(kids); j += 2 {
			d.members = append(d.members, kids[j]) // a member's value node directly follows its key node
			escaped = escaped || d.nodes[kids[j]].escaped
		}
		members := d.members[base:]
		if escaped {
			slices.SortFunc(members, func(a, b int32) int { return compareUTF16(d.text(a, nil), d.text(b, nil)) })
		} else {
			slices.SortFunc(members, func(a, b int32) int { return compareUTF16(d.inner(a), d.inner(b)) })
		}
		dst = append(dst, '{')
		for j := range len(kids) / 2 {
			k := d.members[base+j] // re-read: the recursion may grow d.members
			if j > 0 {
				dst = append(dst, ',')
			}
			if d.nodes[k].escaped {
				d.scratch = d.text(k, d.scratch[:0])
				dst = appendCanonicalString(dst, d.scratch)
			} else {
				dst = append(dst, d.raw(k)...)
			}
			dst = append(dst, ':')
			var err error
			if dst, err = d.appendCanonical(dst, k+1); err != nil {
				d.members = d.members[:base]
				return nil, err
			}
		}
		d.members = d.members[:base]
		return append(dst, '}'), nil
	}
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
