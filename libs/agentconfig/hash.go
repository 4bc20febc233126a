package agentconfig

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"slices"
	"strings"
	"sync"
)

// CacheEntry is one config as the agent caches it (and as the backend models the agent's cache when it
// computes the expected hash). ConfigData is redacted when Redacted is set; SecretFields are the
// pointers that were redacted.
type CacheEntry struct {
	ConfigType   string          `json:"config_type"`
	ConfigData   json.RawMessage `json:"config_data"`
	Version      int64           `json:"version"`
	Redacted     bool            `json:"redacted,omitempty"`
	SecretFields []string        `json:"secret_fields,omitempty"`
}

// ConfigHash is the config_hash of a set of cached configs: the lowercase hex SHA-256 of the RFC 8785
// canonical JSON of
//
//	[{"config_data": <data>, "config_type": <type>}, ...]
//
// with entries sorted by config type and entries whose data is missing or null left out. The empty set
// hashes "[]". Versions are not hashed (staleness is reported separately), so the hash depends only on
// content and not on entry order or formatting. Data that is not valid JSON is hashed as a JSON string
// of its bytes, so a corrupt entry still changes the hash.
func ConfigHash(entries []CacheEntry) string {
	h := hashers.Get().(*hasher)
	defer hashers.Put(h)
	return h.hash(entries)
}

// MaxVersion is the config_version of a set of cached configs: the largest Version, or 0.
func MaxVersion(entries []CacheEntry) int64 {
	var v int64
	for _, e := range entries {
		v = max(v, e.Version)
	}
	return v
}

// hasher holds the scratch buffers of ConfigHash.
type hasher struct {
	c      canonicalizer
	canon  []byte // canonical data of the entries that were not canonical already, back to back
	spans  []hashSpan
	tail   []byte // the config_type member of one entry
	sum    hash.Hash
	digest [sha256.Size]byte
}

// hashSpan is the canonical data of one entry: the entry's data itself when that is canonical already
// (it is then hashed without a copy), else canon[start:end].
type hashSpan struct {
	typ        string
	data       []byte
	start, end int
}

var hashers = sync.Pool{New: func() any { return &hasher{sum: sha256.New()} }}

func (h *hasher) hash(entries []CacheEntry) string {
	h.canon, h.spans = h.canon[:0], h.spans[:0]
	for _, e := range entries {
		if IsNull(e.ConfigData) {
			continue
		}
		if isCanonical(e.ConfigData) {
			h.spans = append(h.spans, hashSpan{typ: e.ConfigType, data: e.ConfigData})
			continue
		}
		start := len(h.canon)
		h.canon = h.appendCanonical(h.canon, e.ConfigData)
		h.spans = append(h.spans, hashSpan{typ: e.ConfigType, start: start, end: len(h.canon)})
	}
	for i := range h.spans {
		if s := &h.spans[i]; s.data == nil {
			s.data = h.canon[s.start:s.end] // h.canon no longer moves
		}
	}
	slices.SortFunc(h.spans, func(a, b hashSpan) int {
		if c := cmp.Compare(a.typ, b.typ); c != 0 {
			return c
		}
		return bytes.Compare(a.data, b.data)
	})
	// The canonical array, written piece by piece into the digest. Only slices that live in the heap
	// already go through the interface, so writing costs no allocation.
	h.sum.Reset()
	h.tail = append(h.tail[:0], '[')
	for i, s := range h.spans {
		if i > 0 {
			h.tail = append(h.tail, ',')
		}
		// Keys in RFC 8785 order: "config_data" < "config_type".
		h.tail = append(h.tail, `{"config_data":`...)
		h.sum.Write(h.tail)
		h.sum.Write(s.data)
		h.tail = append(h.tail[:0], `,"config_type":`...)
		h.tail = appendCanonicalString(h.tail, strings.ToValidUTF8(s.typ, "\uFFFD"))
		h.tail = append(h.tail, '}')
	}
	h.tail = append(h.tail, ']')
	h.sum.Write(h.tail)
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], h.sum.Sum(h.digest[:0]))
	if cap(h.canon) > 1<<20 || cap(h.tail) > 1<<12 || h.c.oversized() {
		h.canon, h.tail, h.c = nil, nil, canonicalizer{} // don't keep huge buffers in the pool
	}
	clear(h.spans)
	return string(text[:])
}

// appendCanonical appends the canonical form of data, or of data as a JSON string if it is not I-JSON.
func (h *hasher) appendCanonical(dst, data []byte) []byte {
	if out, err := h.c.appendCanonical(dst, data); err == nil {
		return out
	}
	return appendCanonicalString(dst, strings.ToValidUTF8(string(data), "\uFFFD"))
}
