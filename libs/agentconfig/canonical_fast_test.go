package agentconfig

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// The straightforward path the fast one must agree with, byte for byte: parse into the tree, then
// write it with every object's members sorted by compareUTF16 of their decoded keys. This is how
// Canonicalize and ConfigHash worked before the one-pass canonicalizer and the already-canonical check.

func canonicalizeTree(raw []byte) ([]byte, error) {
	var d document
	root, err := d.parse(raw)
	if err != nil {
		return nil, err
	}
	return appendCanonicalTree(&d, nil, root)
}

func appendCanonicalTree(d *document, dst []byte, i int32) ([]byte, error) {
	var err error
	switch n := &d.nodes[i]; n.kind {
	case kindNull, kindTrue, kindFalse:
		return append(dst, d.raw(i)...), nil
	case kindNumber:
		return appendCanonicalNumber(dst, d.raw(i))
	case kindString:
		return appendCanonicalString(dst, d.text(i, nil)), nil
	case kindArray:
		dst = append(dst, '[')
		for j, k := range d.kidsOf(i) {
			if j > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendCanonicalTree(d, dst, k); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	default:
		kids := d.kidsOf(i)
		var keys []int32
		for j := 0; j < len(kids); j += 2 {
			keys = append(keys, kids[j])
		}
		slices.SortFunc(keys, func(a, b int32) int { return compareUTF16(d.text(a, nil), d.text(b, nil)) })
		dst = append(dst, '{')
		for j, k := range keys {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendCanonicalString(dst, d.text(k, nil))
			dst = append(dst, ':')
			if dst, err = appendCanonicalTree(d, dst, k+1); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	}
}

func configHashReference(entries []CacheEntry) string {
	type item struct {
		typ  string
		data []byte
	}
	var items []item
	for _, e := range entries {
		if IsNull(e.ConfigData) {
			continue
		}
		c, err := canonicalizeTree(e.ConfigData)
		if err != nil {
			c = appendCanonicalString(nil, strings.ToValidUTF8(string(e.ConfigData), "\uFFFD"))
		}
		items = append(items, item{e.ConfigType, c})
	}
	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(a.typ, b.typ), bytes.Compare(a.data, b.data))
	})
	out := []byte{'['}
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"config_data":`...)
		out = append(out, it.data...)
		out = append(out, `,"config_type":`...)
		out = appendCanonicalString(out, strings.ToValidUTF8(it.typ, "\uFFFD"))
		out = append(out, '}')
	}
	sum := sha256.Sum256(append(out, ']'))
	return hex.EncodeToString(sum[:])
}

// checkAgainstTree fails unless Canonicalize, isCanonical and the tree parser agree with the
// straightforward path on raw.
func checkAgainstTree(t *testing.T, raw []byte) {
	t.Helper()
	want, wantErr := canonicalizeTree(raw)
	got, err := Canonicalize(raw)
	if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("Canonicalize(%q) = %q, %v; straightforward path %q, %v", raw, got, err, want, wantErr)
	}
	if errors.Is(wantErr, errNumberRange) != errors.Is(err, errNumberRange) {
		t.Fatalf("Canonicalize(%q): error %v, straightforward path %v", raw, err, wantErr)
	}
	if fast, slow := isCanonical(raw), wantErr == nil && bytes.Equal(want, raw); fast != slow {
		t.Fatalf("isCanonical(%q) = %v, want %v", raw, fast, slow)
	}
	if wantErr == nil && !isCanonical(want) {
		t.Fatalf("isCanonical(%q) = false for canonical output", want)
	}
	entries := []CacheEntry{{ConfigType: Labels, ConfigData: raw}, {ConfigType: Intervals, ConfigData: want}}
	if got, want := ConfigHash(entries), configHashReference(entries); got != want {
		t.Fatalf("ConfigHash of %q = %s, straightforward path %s", raw, got, want)
	}
}

// genJSON writes a random JSON text meant to reach the corners of canonicalization: keys that order
// differently by UTF-8 and UTF-16, share eight-byte prefixes, carry escapes or repeat; numbers in
// every form; big objects; random whitespace; and now and then a syntax error.
type genJSON struct {
	r   *rand.Rand
	b   []byte
	bad bool // allow syntax errors and repeated keys
}

var (
	genKeys = []string{
		`a`, `b`, `aa`, ``, `type`, `name`, `enabled`, `interval`, `é`, `\u00e9`, `€`, `\u20ac`, `😀`,
		`\ud83d\ude00`, `\ud83d\ude01`, `\ufb33`, `\uffff`, `\ue000`, `x\ue000`, `x😀`, `\u0061`, `a\u0000`,
		`\n`, `\r`, `\"`, `\\`, `\/`, `abcdefgh`, `abcdefgh1`, `abcdefgh2`, `abcdefg`, `abcdefgé`,
		`abcdefg€`, `abcdefg😀`, `\u0080`, `ö`, `1`, `credential_id`, `expect_status`, `\u001f`, `\u007f`,
	}
	genNumbers = []string{
		`0`, `-0`, `1`, `-1`, `42`, `123456789012345`, `-123456789012345`, `1234567890123456`,
		`9007199254740993`, `1.0`, `4.50`, `0.1`, `1e21`, `1E21`, `1e20`, `1e-7`, `0.000001`, `2e-3`,
		`-1.5e-9`, `1e400`, `-1e309`, `1e-400`, `0e10`, `-0.0`, `333333333.33333329`, `5e-324`, `1e+2`,
	}
	genStrings = []string{
		`""`, `"x"`, `"plain text"`, `"\u0041\/"`, `"\b\f\n\r\t"`, `"\u001f\u007f"`, `"\"\\"`, `"ünï"`,
		`"\u2028\u2029"`, `"\ud83d\ude00"`, `"\u00E9"`, `"https://example.com/a?b=c"`, `"\u0000"`,
		`"a very long string value that goes on past several eight byte words"`, `"\u0008"`, `"\u0009"`,
		`"\u000a"`, `"\u000b"`, `"\u000c"`, `"\u000d"`, `"\u000e"`, `"\u0010"`, `"\u0020"`, `"\u00a0"`,
	}
	genBad = []string{`{"a":1,"a":2}`, `[1,]`, `"\ud800"`, `01`, `1.`, `"\x"`, "\"\xff\"", `{"a"}`, `nul`}
)

func (g *genJSON) space() {
	if g.r.IntN(4) == 0 {
		g.b = append(g.b, " \n\t\r"[g.r.IntN(4)])
	}
}

func (g *genJSON) value(depth int) {
	g.space()
	switch n := g.r.IntN(12); {
	case g.bad && n == 0 && g.r.IntN(8) == 0:
		g.b = append(g.b, genBad[g.r.IntN(len(genBad))]...)
	case n < 3 && depth < 5:
		g.object(depth + 1)
	case n < 5 && depth < 5:
		g.b = append(g.b, '[')
		for i := range g.r.IntN(5) {
			if i > 0 {
				g.b = append(g.b, ',')
			}
			g.value(depth + 1)
		}
		g.space()
		g.b = append(g.b, ']')
	case n < 8:
		g.b = append(g.b, genNumbers[g.r.IntN(len(genNumbers))]...)
	case n < 11:
		g.b = append(g.b, genStrings[g.r.IntN(len(genStrings))]...)
	default:
		g.b = append(g.b, []string{"true", "false", "null"}[g.r.IntN(3)]...)
	}
	g.space()
}

func (g *genJSON) object(depth int) {
	g.b = append(g.b, '{')
	n := g.r.IntN(9)
	if g.r.IntN(10) == 0 {
		n = 17 + g.r.IntN(30) // past the small-object paths
	}
	used := map[string]bool{}
	for i := range n {
		key := genKeys[g.r.IntN(len(genKeys))]
		if n > 8 || used[key] {
			key = key + string(rune('A'+i%26)) + strings.Repeat("z", i/26)
		}
		if g.bad && g.r.IntN(20) == 0 && i > 0 {
			for k := range used {
				key = k // a repeat
				break
			}
		}
		used[key] = true
		if i > 0 {
			g.b = append(g.b, ',')
		}
		g.space()
		g.b = append(g.b, '"')
		g.b = append(g.b, key...)
		g.b = append(g.b, '"')
		g.space()
		g.b = append(g.b, ':')
		g.value(depth)
	}
	g.space()
	g.b = append(g.b, '}')
}

func genDocs(seed uint64, n int, bad bool) [][]byte {
	g := genJSON{r: rand.New(rand.NewPCG(seed, 1)), bad: bad}
	docs := make([][]byte, 0, n)
	for range n {
		g.b = nil
		g.value(0)
		docs = append(docs, g.b)
	}
	return docs
}

func fixtureDocs() [][]byte {
	var docs [][]byte
	for _, typ := range TypeNames() {
		for _, d := range validConfigs[typ] {
			docs = append(docs, []byte(d))
		}
	}
	for _, tt := range invalidConfigs {
		docs = append(docs, []byte(tt.doc))
	}
	env, host := benchCollectors()
	merged, _, _ := Merge(Collectors, env, host)
	docs = append(docs, env, host, merged)
	for _, s := range []string{
		`1e21`, `0.000001`, `-0`, `{"\ud83d\ude00":1,"\ufb33":2}`, `"\u0000\u001f\""`, `[1.5e300,-1e-300]`,
		`{"a":1,"\u0061":2}`, `{"\ue000":1,"\ud800\udc00":2}`, `{"abcdefg\ue000":1,"abcdefg\ud800\udc00":2}`,
		`{"a\u0000":1,"a":2}`, `{"":1}`, `[]`, `{}`, `{"a":{"b":{"c":[{"e":1,"d":2}]}}}`, `"\u00e9"`,
		`"\u001F"`, `"\u0008"`, `"\b"`, `1.0e0`, `100`, `1e2`, `-`, `{"a":1}x`, ` {"a":1}`, `{"a":1} `,
		strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
		strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
		strings.Repeat(`{"a":`, maxDepth) + `1` + strings.Repeat("}", maxDepth),
		strings.Repeat(`{"a":`, maxDepth+1) + `1` + strings.Repeat("}", maxDepth+1),
	} {
		docs = append(docs, []byte(s))
	}
	return docs
}

func TestCanonicalize_MatchesStraightforwardPath(t *testing.T) {
	docs := fixtureDocs()
	docs = append(docs, genDocs(1, 3000, false)...)
	docs = append(docs, genDocs(2, 3000, true)...)
	canonical := 0
	for _, raw := range docs {
		checkAgainstTree(t, raw)
		if c, err := canonicalizeTree(raw); err == nil {
			canonical++
			checkAgainstTree(t, c)
			// Near misses: one byte changed, dropped or doubled.
			r := rand.New(rand.NewPCG(uint64(len(c)), 2))
			for range 4 {
				i := r.IntN(len(c))
				edits := [][]byte{
					slices.Concat(c[:i], []byte{c[r.IntN(len(c))]}, c[i+1:]),
					slices.Concat(c[:i], c[i+1:]),
					slices.Concat(c[:i+1], c[i:]),
					slices.Concat(c[:i], []byte{' '}, c[i:]),
				}
				for _, e := range edits {
					checkAgainstTree(t, e)
				}
			}
		}
	}
	if canonical < len(docs)/2 {
		t.Fatalf("only %d of %d generated documents are valid: the generator is too noisy", canonical, len(docs))
	}
}

// Both readers of the package, the tree parser (Merge, Validate, Redact) and the canonicalizer, accept
// the same documents, repeated keys included.
func TestParse_AcceptsWhatCanonicalizeAccepts(t *testing.T) {
	for _, raw := range append(fixtureDocs(), genDocs(3, 3000, true)...) {
		var d document
		_, perr := d.parse(raw)
		_, cerr := (&canonicalizer{}).appendCanonical(nil, raw)
		if errors.Is(cerr, errNumberRange) {
			cerr = nil // the parser does not evaluate numbers
		}
		if (perr == nil) != (cerr == nil) {
			t.Fatalf("%q: parse error %v, canonicalize error %v", raw, perr, cerr)
		}
		if perr != nil && strings.Contains(perr.Error(), "duplicate") != strings.Contains(cerr.Error(), "duplicate") {
			t.Fatalf("%q: parse error %v, canonicalize error %v", raw, perr, cerr)
		}
	}
}

func TestConfigHash_MatchesStraightforwardPath(t *testing.T) {
	docs := append(fixtureDocs(), genDocs(4, 600, true)...)
	r := rand.New(rand.NewPCG(5, 5))
	for range 400 {
		var entries []CacheEntry
		for range r.IntN(6) {
			data := docs[r.IntN(len(docs))]
			if r.IntN(2) == 0 {
				if c, err := Canonicalize(data); err == nil {
					data = c // the common case of canonical data, hashed without a copy
				}
			}
			if r.IntN(10) == 0 {
				data = nil
			}
			typ := TypeNames()[r.IntN(3)] // few types, so that entries share them
			if r.IntN(20) == 0 {
				typ = "bad\xfftype\n"
			}
			entries = append(entries, CacheEntry{ConfigType: typ, ConfigData: data, Version: int64(r.IntN(9))})
		}
		if got, want := ConfigHash(entries), configHashReference(entries); got != want {
			t.Fatalf("ConfigHash(%v) = %s, straightforward path %s", entries, got, want)
		}
	}
}

func TestSkipPlainString(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	alphabet := []byte("ab \x00\x1f\x20\x7f\x80\xff\"\\\xc3\xa9~")
	for range 20000 {
		data := make([]byte, r.IntN(40))
		for i := range data {
			if r.IntN(6) == 0 {
				data[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				data[i] = byte(0x20 + r.IntN(0x60))
			}
		}
		start := 0
		if len(data) > 0 {
			start = r.IntN(len(data) + 1)
		}
		want := start
		for want < len(data) && plainStringByte[data[want]] {
			want++
		}
		if got := skipPlainString(data, start); got != want {
			t.Fatalf("skipPlainString(%q, %d) = %d, want %d", data, start, got, want)
		}
	}
}

// scanStringByteByByte is scanString without its eight-byte shortcuts: it skips plain bytes one at a
// time and hands every other byte to stringSpecial.
func scanStringByteByByte(p *parser) (escaped bool, err error) {
	p.pos++
	for {
		for p.pos < len(p.data) && plainStringByte[p.data[p.pos]] {
			p.pos++
		}
		if done, err := p.stringSpecial(&escaped); err != nil {
			return false, err
		} else if done {
			return escaped, nil
		}
	}
}

func TestShortPlainString_MatchesScanAndKeyPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	alphabet := []byte("ab~ \"\\\x01\x7f\xc3\xa9")
	hits := 0
	for range 20000 {
		data := []byte{'"'}
		for range r.IntN(12) {
			data = append(data, alphabet[r.IntN(len(alphabet))])
		}
		data = append(data, []byte(`":1}`)[:r.IntN(5)]...)
		end, prefix := shortPlainString(data, 0)
		if end == 0 {
			continue
		}
		hits++
		p := parser{data: data}
		escaped, err := scanStringByteByByte(&p)
		if err != nil || escaped || p.pos != end || end-2 > 8 {
			t.Fatalf("shortPlainString(%q) = %d; byte by byte %v, %v at %d", data, end, escaped, err, p.pos)
		}
		if want, plain := keyPrefix(data, 1, end-1); prefix != want || !plain {
			t.Fatalf("shortPlainString(%q) prefix %x, keyPrefix %x, %v", data, prefix, want, plain)
		}
	}
	if hits < 500 {
		t.Fatalf("only %d short plain strings among the generated ones", hits)
	}
}

func TestScanString_MatchesByteByByte(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	pieces := []string{"a", "bc", " ", "~", `"`, `\"`, `\\`, `\n`, `\u00e9`, `\ud83d\ude00`, `\ud800`, `\x`, "\x01",
		"\x7f", "é", "😀", "\xff", "\xed\xa0\x80", "\xc3", "0123456789"}
	for range 20000 {
		data := []byte{'"'}
		for range r.IntN(12) {
			data = append(data, pieces[r.IntN(len(pieces))]...)
		}
		if r.IntN(4) > 0 {
			data = append(data, '"')
		}
		data = append(data, []byte(`,"next":1}`)[:r.IntN(11)]...)
		fast, slow := parser{data: data}, parser{data: data}
		fe, ferr := fast.scanString()
		se, serr := scanStringByteByByte(&slow)
		if fe != se || (ferr == nil) != (serr == nil) || (ferr == nil && fast.pos != slow.pos) {
			t.Fatalf("scanString(%q) = %v, %v at %d; byte by byte %v, %v at %d", data, fe, ferr, fast.pos,
				se, serr, slow.pos)
		}
	}
}

func FuzzCanonicalFastPath(f *testing.F) {
	for _, d := range fixtureDocs() {
		if len(d) < 4096 {
			f.Add(d)
		}
	}
	for _, d := range genDocs(7, 40, true) {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkAgainstTree(t, raw)
	})
}

// The already-canonical check against hand-picked spellings: only the one Canonicalize writes passes,
// and every case agrees with the straightforward path.
func TestIsCanonical_Spellings(t *testing.T) {
	for raw, want := range map[string]bool{
		`"a"`: true, `"\u001f"`: true, `"\b\t\n\f\r"`: true, `"\"\\"`: true, `"é€😀"`: true, `"\u007f"`: false,
		"\"\x7f\"": true, `"\u0041"`: false, `"\/"`: false, `"\u001F"`: false, `"\u0008"`: false, `"\u00e9"`: false,
		`"\ud83d\ude00"`: false, `{"a":1,"b":2}`: true, `{"b":1,"a":2}`: false, `{"a":1,"a":1}`: false,
		`{"\u00e9":1}`: false, `{"\n":1,"a":2}`: true, `{"a":1,"\n":2}`: false, "{\"\U0001F600\":1,\"\uFB33\":2}": true,
		"{\"\uFB33\":1,\"\U0001F600\":2}": false, `{"\ufb33":1}`: false, `[1,-1,0,1.5,1e+21,1e-7]`: true, `[-0]`: false, `[1.0]`: false, `[1E21]`: false,
		`[100000000000000000000]`: true, `[1e20]`: false, `[0.000001]`: true, `[true,false,null]`: true,
		`[ 1]`: false, `{"a": 1}`: false, `[1,]`: false, `"`: false, `[1e400]`: false, ``: false,
	} {
		if got := isCanonical([]byte(raw)); got != want {
			t.Errorf("isCanonical(%s) = %v, want %v", raw, got, want)
		}
		checkAgainstTree(t, []byte(raw))
	}
}

// The parser finds repeated keys by fingerprints, taken from the key's first word when the key is short
// and plain and from its decoded text otherwise: every pair of keys, escaped or not, short or long,
// must be a repeat exactly when their decoded texts are equal.
func TestParse_RepeatedKeysByFingerprint(t *testing.T) {
	keys := append(slices.Clone(genKeys), `abcdefg\u0068`, `\u0061bcdefgh`, `abcdefgh\u0031`, `credential\u005fid`)
	for _, a := range keys {
		for _, b := range keys {
			var d document
			doc := []byte(`{"` + a + `":1,"` + b + `":2}`)
			_, err := d.parse(doc)
			var ta, tb []byte
			var da, db document
			ra, _ := da.parse([]byte(`"` + a + `"`))
			rb, _ := db.parse([]byte(`"` + b + `"`))
			ta, tb = da.text(ra, nil), db.text(rb, nil)
			if repeated := err != nil && strings.Contains(err.Error(), "duplicate"); repeated != bytes.Equal(ta, tb) {
				t.Errorf("parse %s: %v; decoded keys %q and %q", doc, err, ta, tb)
			}
		}
	}
}

// keep leaves the field equal to the slice it is given, whether that slice grew out of the field's
// array or not.
func TestKeep(t *testing.T) {
	field := make([]byte, 2, 4)
	for _, n := range []int{1, 2, 5, 0, 40} {
		s := append(field[:0], bytes.Repeat([]byte{'x'}, n)...)
		keep(&field, s)
		if len(field) != len(s) || cap(field) != cap(s) || unsafe.SliceData(field) != unsafe.SliceData(s) {
			t.Fatalf("after appending %d bytes: field len %d cap %d, slice len %d cap %d", n, len(field), cap(field), len(s), cap(s))
		}
	}
}

// TestSort8 checks the sorting network on every 0-1 input (which, by the 0-1 principle, covers all
// inputs) and on every order of eight distinct values.
func TestSort8(t *testing.T) {
	for bitsIn := range 256 {
		var k [8]uint64
		for i := range k {
			k[i] = uint64(bitsIn >> i & 1)
		}
		sort8(&k)
		if !slices.IsSorted(k[:]) {
			t.Fatalf("sort8 of the bits of %08b: %v", bitsIn, k)
		}
	}
	perm := []uint64{0, 1, 2, 3, 4, 5, 6, 7}
	var next func(int)
	count := 0
	next = func(n int) {
		if n == len(perm) {
			k := [8]uint64(perm)
			sort8(&k)
			if k != [8]uint64{0, 1, 2, 3, 4, 5, 6, 7} {
				t.Fatalf("sort8 of %v: %v", perm, k)
			}
			count++
			return
		}
		for i := n; i < len(perm); i++ {
			perm[n], perm[i] = perm[i], perm[n]
			next(n + 1)
			perm[n], perm[i] = perm[i], perm[n]
		}
	}
	next(0)
	if count != 40320 {
		t.Fatalf("%d orders tried", count)
	}
}

// TestCanonicalize_RepeatedKeyNamed pins which of several repeated keys the error names: the first
// pair met when the members are put in order from their order by key prefix.
func TestCanonicalize_RepeatedKeyNamed(t *testing.T) {
	for raw, key := range map[string]string{
		`{"c":1,"b":2,"a":3,"c":4,"a":5}`:          `"a"`,
		`{"abcdefgh":1,"abcdefgi":2,"abcdefgh":3}`: `"abcdefgh"`,
		`{"b":1,"\n":2,"a":3,"b":4,"\n":5}`:        `"\n"`,
	} {
		_, err := Canonicalize([]byte(raw))
		if err == nil || !strings.HasSuffix(err.Error(), "duplicate object key "+key) {
			t.Errorf("Canonicalize(%s): %v, want the repeated key %s named", raw, err, key)
		}
	}
}
