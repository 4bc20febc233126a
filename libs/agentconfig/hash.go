package agentconfig

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	doc   document
	canon []byte // canonical data of every entry, back to back
	spans []hashSpan
	out   []byte
}

type hashSpan struct {
	typ        string
	start, end int
}

var hashers = sync.Pool{New: func() any { return new(hasher) }}

func (h *hasher) hash(entries []CacheEntry) string {
	h.canon, h.spans = h.canon[:0], h.spans[:0]
	for _, e := range entries {
		if !present(e.ConfigData) {
			continue
		}
		start := len(h.canon)
		h.canon = h.appendCanonical(h.canon, e.ConfigData)
		h.spans = append(h.spans, hashSpan{typ: e.ConfigType, start: start, end: len(h.canon)})
	}
	slices.SortFunc(h.spans, func(a, b hashSpan) int {
		if c := cmp.Compare(a.typ, b.typ); c != 0 {
			return c
		}
		return bytes.Compare(h.canon[a.start:a.end], h.canon[b.start:b.end])
	})
	out := append(h.out[:0], '[')
	for i, s := range h.spans {
		if i > 0 {
			out = append(out, ',')
		}
		// Keys in RFC 8785 order: "config_data" < "config_type".
		out = append(out, `{"config_data":`...)
		out = append(out, h.canon[s.start:s.end]...)
		out = append(out, `,"config_type":`...)
		out = appendCanonicalString(out, strings.ToValidUTF8(s.typ, "\uFFFD"))
		out = append(out, '}')
	}
	out = append(out, ']')
	h.out = out
	sum := sha256.Sum256(out)
	if cap(h.canon) > 1<<20 || cap(h.doc.nodes) > 1<<16 {
		*h = hasher{} // don't keep huge buffers in the pool
	}
	h.doc.reset()
	clear(h.spans)
	return hex.EncodeToString(sum[:])
}

// appendCanonical appends the canonical form of data, or of data as a JSON string if it is not I-JSON.
func (h *hasher) appendCanonical(dst, data []byte) []byte {
	if root, err := h.doc.parse(data); err == nil {
		if out, err := h.doc.appendCanonical(dst, root); err == nil {
			return out
		}
	}
	return appendCanonicalString(dst, strings.ToValidUTF8(string(data), "\uFFFD"))
}
