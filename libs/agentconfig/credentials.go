package agentconfig

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// ErrCredentialMissing is wrapped when a collector references a credential_id that the caller supplied
// no secret fields for.
var ErrCredentialMissing = errors.New("agentconfig: referenced credential not supplied")

// reservedCollectorFields may not be set by a credential: they identify or control the collector.
var reservedCollectorFields = []string{"type", "name", "enabled", "credential_id"}

// CredentialIDs returns the distinct credential_id values of a collectors config in order of first
// appearance. A missing config has none.
func CredentialIDs(collectors json.RawMessage) ([]string, error) {
	var ids []string
	err := eachCollector(collectors, "credential ids", func(d *document, pos int, c int32) error {
		id, ok, err := credentialID(d, c, pos)
		if ok && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// eachCollector parses a collectors config and calls fn with each entry's position and node. A missing
// config has none; a config that is not an array is an error (what names the caller in errors).
func eachCollector(collectors json.RawMessage, what string, fn func(d *document, pos int, c int32) error) error {
	if IsNull(collectors) {
		return nil
	}
	d := getDocument()
	defer putDocument(d)
	root, err := d.parse(collectors)
	if err != nil {
		return fmt.Errorf("agentconfig: %s: %w", what, err)
	}
	if d.nodes[root].kind != kindArray {
		return fmt.Errorf("agentconfig: %s: collectors config is not an array", what)
	}
	for pos, c := range d.kidsOf(root) {
		if err := fn(d, pos, c); err != nil {
			return fmt.Errorf("agentconfig: %s: %w", what, err)
		}
	}
	return nil
}

// credentialID returns the credential_id of collector c at position pos, if it has one.
func credentialID(d *document, c int32, pos int) (string, bool, error) {
	if d.nodes[c].kind != kindObject {
		return "", false, nil
	}
	v := d.member(c, "credential_id")
	if v < 0 {
		return "", false, nil
	}
	if d.nodes[v].kind != kindString {
		return "", false, fmt.Errorf("collectors[%d].credential_id is not a string", pos)
	}
	return string(d.text(v, nil)), true, nil
}

// InjectSecrets inlines credential material into a collectors config: every collector with a
// credential_id loses that key and gains each field of secrets[credential_id] (overwriting a member of
// the same name in place, else appended in field-name order). It returns the new config and the sorted
// RFC 6901 pointers of the injected values, e.g. "/1/password". A referenced id missing from secrets is
// an error wrapping ErrCredentialMissing. A config without references is returned unchanged. The result
// passes Validate when the input did and every secret field is one of SecretFields, which the backend
// enforces when a credential is written.
func InjectSecrets(collectors json.RawMessage, secrets map[string]map[string]string) (json.RawMessage, []string, error) {
	return injectFields(collectors, func(id string) ([]secretField, bool) {
		s, ok := secrets[id]
		if !ok {
			return nil, false
		}
		fields := make([]secretField, 0, len(s))
		for name, value := range s {
			fields = append(fields, secretField{name: name, value: value})
		}
		slices.SortFunc(fields, func(a, b secretField) int { return cmp.Compare(a.name, b.name) })
		return fields, true
	})
}

// RedactForCache produces what the agent caches for a collectors config after InjectSecrets: the same
// document with every injected value RedactedValue. The backend uses it to compute the expected config
// hash from credential metadata alone; Redact(InjectSecrets(x)) equals RedactForCache(x) byte for byte.
func RedactForCache(collectors json.RawMessage, fieldsByCredential map[string][]string) (json.RawMessage, []string, error) {
	return injectFields(collectors, func(id string) ([]secretField, bool) {
		names, ok := fieldsByCredential[id]
		if !ok {
			return nil, false
		}
		names = slices.Clone(names)
		slices.Sort(names)
		names = slices.Compact(names)
		fields := make([]secretField, len(names))
		for i, name := range names {
			fields[i] = secretField{name: name, value: RedactedValue}
		}
		return fields, true
	})
}

type secretField struct{ name, value string }

// injectFields rewrites each collector with a credential_id using the fields that lookup returns.
func injectFields(collectors json.RawMessage, lookup func(id string) ([]secretField, bool)) (json.RawMessage, []string, error) {
	if IsNull(collectors) {
		return collectors, nil, nil
	}
	d := getDocument()
	defer putDocument(d)
	root, err := d.parse(collectors)
	if err != nil {
		return nil, nil, fmt.Errorf("agentconfig: inject credentials: %w", err)
	}
	if d.nodes[root].kind != kindArray {
		return nil, nil, fmt.Errorf("agentconfig: inject credentials: collectors config is not an array")
	}
	out := make([]byte, 0, len(collectors)+64)
	var pointers []string
	rewritten := false
	cache := map[string][]secretField{}
	out = append(out, '[')
	for pos, c := range d.kidsOf(root) {
		if pos > 0 {
			out = append(out, ',')
		}
		id, ok, err := credentialID(d, c, pos)
		if err != nil {
			return nil, nil, fmt.Errorf("agentconfig: inject credentials: %w", err)
		}
		if !ok {
			out = d.appendCompact(out, c)
			continue
		}
		rewritten = true
		fields, ok := cache[id]
		if !ok {
			if fields, ok = lookup(id); !ok {
				return nil, nil, fmt.Errorf("%w: collectors[%d] references credential %q", ErrCredentialMissing, pos, id)
			}
			for _, f := range fields {
				if f.name == "" || slices.Contains(reservedCollectorFields, f.name) {
					return nil, nil, fmt.Errorf("agentconfig: inject credentials: credential %q has a field named %q, which a credential may not set", id, f.name)
				}
				if !utf8.ValidString(f.name) || !utf8.ValidString(f.value) {
					return nil, nil, fmt.Errorf("agentconfig: inject credentials: credential %q field %q is not valid UTF-8", id, f.name)
				}
			}
			cache[id] = fields
		}
		prefix := "/" + strconv.Itoa(pos) + "/"
		injected := make([]bool, len(fields))
		out = append(out, '{')
		kids := d.kidsOf(c)
		n := 0
		for j := 0; j < len(kids); j += 2 {
			key := d.text(kids[j], nil)
			if string(key) == "credential_id" {
				continue
			}
			if n > 0 {
				out = append(out, ',')
			}
			n++
			out = append(out, d.raw(kids[j])...)
			out = append(out, ':')
			f := slices.IndexFunc(fields, func(f secretField) bool { return f.name == string(key) })
			if f < 0 {
				out = d.appendCompact(out, kids[j+1])
				continue
			}
			injected[f] = true
			out = appendCanonicalString(out, fields[f].value)
			pointers = append(pointers, prefix+escapePointerToken(fields[f].name))
		}
		for f, field := range fields {
			if injected[f] {
				continue
			}
			if n > 0 {
				out = append(out, ',')
			}
			n++
			out = appendCanonicalString(out, field.name)
			out = append(out, ':')
			out = appendCanonicalString(out, field.value)
			pointers = append(pointers, prefix+escapePointerToken(field.name))
		}
		out = append(out, '}')
	}
	out = append(out, ']')
	if !rewritten {
		return collectors, nil, nil
	}
	slices.Sort(pointers)
	return out, pointers, nil
}

// InlineSecrets returns the paths of the secret fields (SecretFields) written inline in a stored
// collectors config, e.g. "collectors[0].password", in document order. Validate refuses such configs;
// the backend uses this to refuse delivering rows stored before it did, and to find the rows to move
// into credentials. A missing config has none; a config that is not an array of objects is an error.
func InlineSecrets(collectors json.RawMessage) ([]string, error) {
	var paths []string
	err := eachCollector(collectors, "inline secrets", func(d *document, pos int, c int32) error {
		if d.nodes[c].kind != kindObject {
			return nil
		}
		kids := d.kidsOf(c)
		for j := 0; j < len(kids); j += 2 {
			if name := string(d.text(kids[j], nil)); IsSecretField(name) {
				paths = append(paths, Collectors+"["+strconv.Itoa(pos)+"]."+name)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return paths, nil
}
