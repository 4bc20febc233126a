package agentconfig

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// RedactedValue replaces secret values in what the agent caches and hashes.
const RedactedValue = "[REDACTED]"

const redactedToken = `"` + RedactedValue + `"`

// Redact returns raw with the value at each RFC 6901 JSON pointer (e.g. "/0/password") replaced by
// RedactedValue. The result is compact JSON in the input's member order. A pointer that does not name
// an existing value is an error: redaction must never silently miss a secret. With no pointers raw is
// returned unchanged.
func Redact(raw json.RawMessage, pointers []string) (json.RawMessage, error) {
	if len(pointers) == 0 {
		return raw, nil
	}
	d := getDocument()
	defer putDocument(d)
	root, err := d.parse(raw)
	if err != nil {
		return nil, fmt.Errorf("agentconfig: redact: %w", err)
	}
	for _, p := range pointers {
		i, err := d.resolvePointer(root, p)
		if err != nil {
			return nil, fmt.Errorf("agentconfig: redact: pointer %q: %w", p, err)
		}
		d.nodes[i].redact = true
	}
	return d.appendCompact(make([]byte, 0, len(raw)), root), nil
}

// resolvePointer returns the node that RFC 6901 pointer p names, starting at root.
func (d *document) resolvePointer(root int32, p string) (int32, error) {
	if p == "" {
		return root, nil
	}
	if p[0] != '/' {
		return -1, fmt.Errorf("does not start with /")
	}
	cur := root
	for _, tok := range strings.Split(p[1:], "/") {
		if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(tok, "~0", ""), "~1", ""), "~") {
			return -1, fmt.Errorf("invalid ~ escape")
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		n := &d.nodes[cur]
		switch n.kind {
		case kindObject:
			next := d.member(cur, tok)
			if next < 0 {
				return -1, fmt.Errorf("no member %q", tok)
			}
			cur = next
		case kindArray:
			idx, err := strconv.Atoi(tok)
			kids := d.kidsOf(cur)
			if err != nil || idx < 0 || idx >= len(kids) || tok != strconv.Itoa(idx) {
				return -1, fmt.Errorf("no array element %q", tok)
			}
			cur = kids[idx]
		default:
			return -1, fmt.Errorf("cannot descend into a scalar")
		}
	}
	return cur, nil
}

// escapePointerToken escapes one RFC 6901 reference token.
func escapePointerToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
