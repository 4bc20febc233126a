package protocol

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// DecodeJSON decodes data, one JSON value, into r as json.Unmarshal does (same result, same inputs
// refused), without reflection: a herd's resolve_sets replies carry a host id, an agent id and a signed
// identity statement per host, and decoding them through reflection was most of delivery's CPU per
// fetch. Unlike UnmarshalJSON it validates data itself, so a caller holding the raw reply (natsrpc)
// skips encoding/json's validation passes. Nothing of data is retained. Errors name an offset and what
// was wrong, never the payload.
func (r *ResolveSetsReply) DecodeJSON(data []byte) error {
	d := setsDecoder{data: data}
	return d.document(func() error { return d.reply(r) })
}

// UnmarshalJSON implements json.Unmarshaler with DecodeJSON (config-api's drift decodes the same reply
// through natsrpc; tests through json.Unmarshal).
func (r *ResolveSetsReply) UnmarshalJSON(data []byte) error { return r.DecodeJSON(data) }

// DecodeJSON decodes data, one JSON value, into s as json.Unmarshal(data, s) does (same result, same
// inputs refused), with the decoder of DecodeJSON on a ResolveSetsReply and without reflection: a
// herd's fetch replies carry one identity statement per agent (tools/loadgen decodes them). Statement
// and Signature share one allocation. Nothing of data is retained; errors (a *SetsDecodeError) name an
// offset and what was wrong, never the payload.
func (s *Signed) DecodeJSON(data []byte) error {
	if s == nil {
		return &SetsDecodeError{What: "decode into a nil *Signed"}
	}
	// Room for every base64 string of data: the decoded bytes of all of them never need more.
	d := setsDecoder{data: data, arena: make([]byte, base64.StdEncoding.DecodedLen(len(data)))}
	return d.document(func() error {
		if ok, err := d.beginObject("signed statement"); !ok {
			return err
		}
		return d.signedObject(s)
	})
}

// SetsDecodeError is a malformed or mistyped resolve_sets reply: where and what, never the payload.
type SetsDecodeError struct {
	Offset int
	What   string
}

func (e *SetsDecodeError) Error() string {
	return fmt.Sprintf("resolve_sets reply: %s at offset %d", e.What, e.Offset)
}

// maxNesting is encoding/json's limit on nested arrays and objects.
const maxNesting = 10000

type setsDecoder struct {
	data  []byte
	pos   int
	depth int
	// arena holds the decoded statements and signatures of a reply's Signed values, one allocation for
	// many; keyID is the last key id read (a reply's statements mostly share one key).
	arena  []byte
	keyID  string
	signed []Signed
}

func (d *setsDecoder) syntax(what string) error { return &SetsDecodeError{Offset: d.pos, What: what} }

func (d *setsDecoder) typeErr(field, want string) error {
	return &SetsDecodeError{Offset: d.pos, What: fmt.Sprintf("%s must be %s", field, want)}
}

// mistyped consumes a value of the wrong type for field (which must be want) and reports it. The value
// is read first, so that a syntax error in it wins over its type, as in encoding/json.
func (d *setsDecoder) mistyped(field, want string) error {
	if err := d.skipValue(); err != nil {
		return err
	}
	return d.typeErr(field, want)
}

// document decodes data as one top-level value, with value, and refuses anything after it but space.
func (d *setsDecoder) document(value func() error) error {
	d.ws()
	if err := value(); err != nil {
		return err
	}
	d.ws()
	if d.pos != len(d.data) {
		return d.syntax("data after the top-level value")
	}
	return nil
}

func (d *setsDecoder) ws() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\r', '\n':
			d.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end) without consuming it.
func (d *setsDecoder) peek() byte {
	d.ws()
	if d.pos < len(d.data) {
		return d.data[d.pos]
	}
	return 0
}

// null consumes a null literal, if one comes next.
func (d *setsDecoder) null() bool {
	if d.peek() == 'n' && len(d.data)-d.pos >= 4 && string(d.data[d.pos:d.pos+4]) == "null" {
		d.pos += 4
		return true
	}
	return false
}

func (d *setsDecoder) push() error {
	d.depth++
	if d.depth > maxNesting {
		return d.syntax("exceeded max depth")
	}
	return nil
}

// object reads an object, calling field for each member with the key (unescaped); field must consume
// the member's value. It is called after the opening brace's type was checked.
func (d *setsDecoder) object(field func(key []byte) error) error {
	if err := d.push(); err != nil {
		return err
	}
	d.pos++ // {
	if d.peek() == '}' {
		d.pos++
		d.depth--
		return nil
	}
	for {
		if d.peek() != '"' {
			return d.syntax("expected a member name")
		}
		key, err := d.rawString(nil)
		if err != nil {
			return err
		}
		if d.peek() != ':' {
			return d.syntax("expected ':'")
		}
		d.pos++
		d.ws()
		if err := field(key); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			d.depth--
			return nil
		default:
			return d.syntax("expected ',' or '}'")
		}
	}
}

// array reads an array, calling elem with the index of each element; elem must consume it. It is
// called after the opening bracket's type was checked. It returns the number of elements.
func (d *setsDecoder) array(elem func(i int) error) (int, error) {
	if err := d.push(); err != nil {
		return 0, err
	}
	d.pos++ // [
	if d.peek() == ']' {
		d.pos++
		d.depth--
		return 0, nil
	}
	for i := 0; ; i++ {
		d.ws()
		if err := elem(i); err != nil {
			return 0, err
		}
		switch d.peek() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			d.depth--
			return i + 1, nil
		default:
			return 0, d.syntax("expected ',' or ']'")
		}
	}
}

// sliceAt returns s with an element at i, as encoding/json grows a slice it decodes into.
func sliceAt[T any](s []T, i int) []T {
	if i < len(s) {
		return s
	}
	if i < cap(s) {
		return s[:i+1]
	}
	var zero T
	return append(s, zero)
}

// endSlice cuts s to the n elements decoded (an empty array is an empty, non-nil slice).
func endSlice[T any](s []T, n int) []T {
	if n == 0 {
		return []T{}
	}
	return s[:n]
}

// decodeSlice decodes an array (or null) into *s, elements by elem.
func decodeSlice[T any](d *setsDecoder, s *[]T, field string, elem func(*T) error) error {
	switch d.peek() {
	case 'n':
		*s = nil
		return d.literal("null")
	case '[':
	default:
		return d.mistyped(field, "an array")
	}
	v := *s
	n, err := d.array(func(i int) error {
		v = sliceAt(v, i)
		return elem(&v[i])
	})
	if err != nil {
		return err
	}
	*s = endSlice(v, n)
	return nil
}

// members decodes an object (or null, which leaves the value as it is) member by member: member is
// called with the name among names that the member's key matches (fieldName: "" for none) and must
// consume the value. what names the value in a type error.
func (d *setsDecoder) members(what string, names []string, member func(name string) error) error {
	if ok, err := d.beginObject(what); !ok {
		return err
	}
	return d.object(func(key []byte) error { return member(fieldName(key, names...)) })
}

// beginObject checks that an object comes next: true when it does, false after a null (which leaves
// the value as it is), a type error else.
func (d *setsDecoder) beginObject(field string) (bool, error) {
	switch d.peek() {
	case '{':
		return true, nil
	case 'n':
		return false, d.literal("null")
	default:
		return false, d.mistyped(field, "an object")
	}
}

func (d *setsDecoder) reply(r *ResolveSetsReply) error {
	return d.members("reply", []string{"contract", "configs", "sets", "missing", "remaining", "failed", "trusted_keys", "next_after"}, func(name string) error {
		switch name {
		case "contract":
			return d.int(&r.Contract, name)
		case "configs":
			return decodeSlice(d, &r.Configs, name, d.effectiveConfig)
		case "sets":
			return decodeSlice(d, &r.Sets, name, d.configSet)
		case "missing":
			return decodeSlice(d, &r.Missing, name, func(s *string) error { return d.string(s, name) })
		case "remaining":
			return decodeSlice(d, &r.Remaining, name, func(s *string) error { return d.string(s, name) })
		case "failed":
			return decodeSlice(d, &r.Failed, name, d.agentError)
		case "trusted_keys":
			return d.signedPtr(&r.TrustedKeys, name)
		case "next_after":
			return d.string(&r.NextAfter, name)
		default:
			return d.skipValue()
		}
	})
}

func (d *setsDecoder) effectiveConfig(c *EffectiveConfig) error {
	return d.members("configs[]", []string{"config_type", "config_data", "version", "source", "environment_version", "host_version", "provenance", "statement"}, func(name string) error {
		switch name {
		case "config_type":
			return d.string(&c.ConfigType, name)
		case "config_data":
			return d.raw(&c.ConfigData)
		case "version":
			return d.int64(&c.Version, name)
		case "source":
			return d.string(&c.Source, name)
		case "environment_version":
			return d.int64(&c.EnvironmentVersion, name)
		case "host_version":
			return d.int64(&c.HostVersion, name)
		case "provenance":
			return d.raw(&c.Provenance)
		case "statement":
			return d.signedPtr(&c.Statement, name)
		default:
			return d.skipValue()
		}
	})
}

func (d *setsDecoder) configSet(s *ConfigSet) error {
	return d.members("sets[]", []string{"client_id", "environment_id", "configs", "hosts"}, func(name string) error {
		switch name {
		case "client_id":
			return d.string(&s.ClientID, name)
		case "environment_id":
			return d.string(&s.EnvironmentID, name)
		case "configs":
			return d.indexMap(&s.Configs, name)
		case "hosts":
			if p := d.peek(); p == '[' && s.Hosts == nil {
				// Sized ahead: the hosts are most of a reply.
				s.Hosts = make([]SetHost, 0, 16)
			}
			return decodeSlice(d, &s.Hosts, name, d.setHost)
		default:
			return d.skipValue()
		}
	})
}

func (d *setsDecoder) indexMap(m *map[string]int, field string) error {
	ok, err := d.beginObject(field)
	if !ok {
		if err == nil {
			*m = nil // a null map is nil
		}
		return err
	}
	if *m == nil {
		*m = make(map[string]int, 10)
	}
	return d.object(func(key []byte) error {
		k := string(key)
		n := 0 // a null value stores the zero value
		if err := d.int(&n, field); err != nil {
			return err
		}
		(*m)[k] = n
		return nil
	})
}

func (d *setsDecoder) setHost(h *SetHost) error {
	return d.members("hosts[]", []string{"host_id", "agent_id", "identity"}, func(name string) error {
		switch name {
		case "host_id":
			return d.string(&h.HostID, name)
		case "agent_id":
			return d.string(&h.AgentID, name)
		case "identity":
			return d.signedPtr(&h.Identity, name)
		default:
			return d.skipValue()
		}
	})
}

func (d *setsDecoder) agentError(a *AgentError) error {
	return d.members("failed[]", []string{"agent_id", "error"}, func(name string) error {
		switch name {
		case "agent_id":
			return d.string(&a.AgentID, name)
		case "error":
			return d.members(name, []string{"code", "message", "retry_after_ms"}, func(name string) error {
				switch name {
				case "code":
					return d.string(&a.Error.Code, name)
				case "message":
					return d.string(&a.Error.Message, name)
				case "retry_after_ms":
					return d.int64(&a.Error.RetryAfterMS, name)
				default:
					return d.skipValue()
				}
			})
		default:
			return d.skipValue()
		}
	})
}

// signedPtr decodes a Signed (or null: nil) into *p, into the Signed already there if any.
func (d *setsDecoder) signedPtr(p **Signed, field string) error {
	switch d.peek() {
	case 'n':
		*p = nil
		return d.literal("null")
	case '{':
	default:
		return d.mistyped(field, "an object")
	}
	s := *p
	if s == nil {
		if len(d.signed) == 0 {
			d.signed = make([]Signed, 64)
		}
		s, d.signed = &d.signed[0], d.signed[1:]
		*p = s
	}
	return d.signedObject(s)
}

// signedObject decodes the members of a Signed object (next in data) into s.
func (d *setsDecoder) signedObject(s *Signed) error {
	return d.object(func(key []byte) error {
		switch name := fieldName(key, "statement", "key_id", "signature"); name {
		case "statement":
			return d.bytes(&s.Statement, name)
		case "key_id":
			if d.peek() == '"' {
				// Most statements of a reply name one key: share its string.
				b, err := d.rawString(nil)
				if err != nil {
					return err
				}
				if string(b) != d.keyID {
					d.keyID = string(b)
				}
				s.KeyID = d.keyID
				return nil
			}
			return d.string(&s.KeyID, name)
		case "signature":
			return d.bytes(&s.Signature, name)
		default:
			return d.skipValue()
		}
	})
}

// bytes decodes a []byte as encoding/json does: standard base64 in a string, an array of byte values,
// or null (nil).
func (d *setsDecoder) bytes(b *[]byte, field string) error {
	switch d.peek() {
	case 'n':
		*b = nil
		return d.literal("null")
	case '"':
		start := d.pos
		s, err := d.rawString(nil)
		if err != nil {
			return err
		}
		n := base64.StdEncoding.DecodedLen(len(s))
		if n == 0 {
			if len(s) > 0 { // "\n" and the like: nothing to decode
				if _, err := base64.StdEncoding.Decode(nil, s); err != nil {
					return &SetsDecodeError{Offset: start, What: field + " is not valid base64"}
				}
			}
			*b = []byte{}
			return nil
		}
		if len(d.arena) < n {
			d.arena = make([]byte, max(n, 4096))
		}
		out := d.arena[:n:n]
		m, err := base64.StdEncoding.Decode(out, s)
		if err != nil {
			return &SetsDecodeError{Offset: start, What: field + " is not valid base64"}
		}
		d.arena = d.arena[n:]
		*b = out[:m]
		return nil
	case '[':
		v := *b
		n, err := d.array(func(i int) error {
			v = sliceAt(v, i)
			if d.peek() == 'n' && d.null() {
				return nil
			}
			if d.peek() == '-' { // a byte value is unsigned: even -0 is refused
				return d.mistyped(field, "bytes")
			}
			var x int64
			if err := d.int64(&x, field); err != nil {
				return err
			}
			if x < 0 || x > 255 {
				return d.typeErr(field, "bytes")
			}
			v[i] = byte(x)
			return nil
		})
		if err != nil {
			return err
		}
		*b = endSlice(v, n)
		return nil
	default:
		return d.mistyped(field, "a base64 string")
	}
}

// raw decodes a json.RawMessage: a copy of the value's bytes (null is "null").
func (d *setsDecoder) raw(m *json.RawMessage) error {
	start := d.pos
	if err := d.skipValue(); err != nil {
		return err
	}
	*m = append((*m)[:0], d.data[start:d.pos]...)
	return nil
}

// string decodes a string field; null leaves it as it is.
func (d *setsDecoder) string(s *string, field string) error {
	switch d.peek() {
	case '"':
		b, err := d.rawString(nil)
		if err != nil {
			return err
		}
		*s = string(b)
		return nil
	case 'n':
		return d.literal("null")
	default:
		return d.mistyped(field, "a string")
	}
}

func (d *setsDecoder) int(n *int, field string) error {
	var x int64
	set, err := d.integer(&x, field, strconv.IntSize)
	if set {
		*n = int(x)
	}
	return err
}

func (d *setsDecoder) int64(n *int64, field string) error {
	_, err := d.integer(n, field, 64)
	return err
}

// integer decodes an integer of bits bits into *n (null leaves it); set reports whether it stored one.
func (d *setsDecoder) integer(n *int64, field string, bits int) (set bool, err error) {
	switch c := d.peek(); {
	case c == '-' || '0' <= c && c <= '9':
		start := d.pos
		if err := d.number(); err != nil {
			return false, err
		}
		x, err := strconv.ParseInt(string(d.data[start:d.pos]), 10, bits)
		if err != nil {
			return false, d.typeErr(field, "an integer")
		}
		*n = x
		return true, nil
	case c == 'n':
		return false, d.literal("null")
	default:
		return false, d.mistyped(field, "an integer")
	}
}

// number consumes a JSON number.
func (d *setsDecoder) number() error {
	p, data := d.pos, d.data
	if p < len(data) && data[p] == '-' {
		p++
	}
	ok := true
	if p < len(data) && data[p] == '0' {
		p++ // a leading zero stands alone
	} else {
		p, ok = digits(data, p)
	}
	if ok && p < len(data) && data[p] == '.' {
		p, ok = digits(data, p+1)
	}
	if ok && p < len(data) && (data[p] == 'e' || data[p] == 'E') {
		p++
		if p < len(data) && (data[p] == '+' || data[p] == '-') {
			p++
		}
		p, ok = digits(data, p)
	}
	d.pos = p
	if !ok {
		return d.syntax("invalid number")
	}
	return nil
}

// digits skips the decimal digits of data at p and returns where they end; ok is false when there are
// none (the integer part, a fraction and an exponent each need one).
func digits(data []byte, p int) (end int, ok bool) {
	start := p
	for p < len(data) && '0' <= data[p] && data[p] <= '9' {
		p++
	}
	return p, p > start
}

// rawString consumes a string and returns its contents, unescaped as encoding/json does (invalid
// UTF-8 and lone surrogates become U+FFFD). Without escapes and with valid UTF-8 the result aliases
// data; else it is appended to buf.
func (d *setsDecoder) rawString(buf []byte) ([]byte, error) {
	d.pos++ // "
	start := d.pos
	data := d.data
	ascii := true
	for p := start; p < len(data); p++ {
		// Eight bytes at a time while none is special (the base64 of statements is most of a reply).
		for p+8 <= len(data) && !specialWord(binary.LittleEndian.Uint64(data[p:])) {
			p += 8
		}
		for p < len(data) && plainByte[data[p]] {
			p++
		}
		if p == len(data) {
			break
		}
		switch c := data[p]; {
		case c == '"':
			s := data[start:p]
			if ascii || utf8.Valid(s) {
				d.pos = p + 1
				return s, nil
			}
			return d.unquote(buf)
		case c == '\\':
			return d.unquote(buf)
		case c < 0x20:
			d.pos = p
			return nil, d.syntax("control character in string")
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	d.pos = len(data)
	return nil, d.syntax("unexpected end of input in string")
}

// unquote is rawString's slow path, from the string's first byte.
func (d *setsDecoder) unquote(out []byte) ([]byte, error) {
	data := d.data
	p := d.pos
	for p < len(data) {
		c := data[p]
		switch {
		case c == '"':
			d.pos = p + 1
			if out == nil {
				out = []byte{}
			}
			return out, nil
		case c < 0x20:
			d.pos = p
			return nil, d.syntax("control character in string")
		case c == '\\':
			if p+1 >= len(data) {
				d.pos = len(data)
				return nil, d.syntax("unexpected end of input in string")
			}
			switch e := data[p+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
				p += 2
			case 'b':
				out = append(out, '\b')
				p += 2
			case 'f':
				out = append(out, '\f')
				p += 2
			case 'n':
				out = append(out, '\n')
				p += 2
			case 'r':
				out = append(out, '\r')
				p += 2
			case 't':
				out = append(out, '\t')
				p += 2
			case 'u':
				r, ok := hex4(data[p+2:])
				if !ok {
					d.pos = p
					return nil, d.syntax("invalid \\u escape")
				}
				p += 6
				if utf16.IsSurrogate(r) {
					if len(data)-p >= 6 && data[p] == '\\' && data[p+1] == 'u' {
						if r2, ok := hex4(data[p+2:]); ok {
							if dec := utf16.DecodeRune(r, r2); dec != unicode.ReplacementChar {
								out = utf8.AppendRune(out, dec)
								p += 6
								continue
							}
						}
					}
					r = unicode.ReplacementChar
				}
				out = utf8.AppendRune(out, r)
			default:
				d.pos = p
				return nil, d.syntax("invalid escape in string")
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			p++
		default:
			r, size := utf8.DecodeRune(data[p:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, unicode.ReplacementChar)
			} else {
				out = append(out, data[p:p+size]...)
			}
			p += size
		}
	}
	d.pos = len(data)
	return nil, d.syntax("unexpected end of input in string")
}

// specialWord reports whether any byte of x is not plain: a control character, '"', '\\' or not
// ASCII.
func specialWord(x uint64) bool {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	quote, backslash := x^(ones*'"'), x^(ones*'\\')
	return (x|(x-ones*0x20)&^x|(quote-ones)&^quote|(backslash-ones)&^backslash)&high != 0
}

// plainByte holds the bytes a string holds as themselves: printable ASCII but '"' and '\\'.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// skipValue consumes any JSON value, checking its syntax.
func (d *setsDecoder) skipValue() error {
	switch c := d.peek(); {
	case c == '{':
		return d.object(func([]byte) error { return d.skipValue() })
	case c == '[':
		_, err := d.array(func(int) error { return d.skipValue() })
		return err
	case c == '"':
		_, err := d.rawString(nil)
		return err
	case c == '-' || '0' <= c && c <= '9':
		return d.number()
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	case c == 0 && d.pos == len(d.data):
		return d.syntax("unexpected end of input")
	default:
		return d.syntax("invalid character")
	}
}

func (d *setsDecoder) literal(lit string) error {
	if len(d.data)-d.pos < len(lit) || string(d.data[d.pos:d.pos+len(lit)]) != lit {
		return d.syntax("invalid literal")
	}
	d.pos += len(lit)
	return nil
}

// fieldName returns the name among names that key matches as encoding/json matches a member name to
// a field: exactly, else case-insensitively (Unicode simple folding); "" for none.
func fieldName(key []byte, names ...string) string {
	for _, n := range names {
		if string(key) == n {
			return n
		}
	}
	folded := string(appendFoldedName(nil, key))
	for _, n := range names {
		if folded == string(appendFoldedName(nil, []byte(n))) {
			return n
		}
	}
	return ""
}

// appendFoldedName folds a name as encoding/json does to match member names to fields.
func appendFoldedName(out, in []byte) []byte {
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

// foldRune returns the smallest rune of r's fold set.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}
