package agentconfig

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ValidationError says why a config document was rejected. Path locates the offending value, e.g.
// "collectors[2].interval", "static.env" or `static["app.kubernetes.io/name"]`; it is empty for errors
// about the whole document. Messages never repeat the offending value, which may be a secret.
type ValidationError struct {
	Type    string
	Path    string
	Message string
}

func (e *ValidationError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("invalid %s config: %s", e.Type, e.Message)
	}
	return fmt.Sprintf("invalid %s config: %s: %s", e.Type, e.Path, e.Message)
}

// Validate checks a stored or operator-written config (what the API accepts, an agent's local defaults)
// against the rules of configType. It returns nil, a *ValidationError, or an error wrapping
// ErrUnknownType. Environment configs and host overrides are checked by the same rules: no field is
// required except those that identify list entries (collector type and name, dynamic label name and
// source, log file name), because a host override is a partial document.
//
// A stored collector never holds a secret inline: username and password are refused
// ("collectors[0].password: ..."), and come only from a credential through credential_id. A config as
// the agent receives it, with the credential's fields injected, is checked by ValidateDelivered.
func Validate(configType string, raw json.RawMessage) error {
	return validate(configType, raw, nil)
}

// ValidateDelivered checks a config as an agent receives it from the backend: the rules of Validate,
// except that secret fields (SecretFields) are accepted exactly at secretFields, the RFC 6901 pointers
// the backend reports it injected (protocol's secret_fields, e.g. "/0/password"), and nowhere else. A
// secret field at any other place is refused as Validate refuses it: the backend only ever delivers
// secrets it injected from a credential.
func ValidateDelivered(configType string, raw json.RawMessage, secretFields []string) error {
	return validate(configType, raw, secretFields)
}

// validate is Validate (no secretFields: no secret field anywhere) and ValidateDelivered.
func validate(configType string, raw json.RawMessage, secretFields []string) error {
	t, ok := registry[configType]
	if !ok {
		return unknownType(configType)
	}
	if len(raw) > MaxConfigSize {
		return &ValidationError{Type: configType, Message: fmt.Sprintf("config is larger than %d bytes", MaxConfigSize)}
	}
	d := getDocument()
	defer putDocument(d)
	root, err := d.parse(raw)
	if err != nil {
		return &ValidationError{Type: configType, Message: err.Error()}
	}
	var segs [8]pathSeg
	v := validator{d: d, typ: configType, path: segs[:0], secretFields: secretFields}
	if t.root.kind == ruleList {
		v.pushName(configType) // "collectors[2].interval" rather than "[2].interval"
	}
	if e := v.check(t.root, root); e != nil {
		return e
	}
	return nil
}

// ruleKind selects what a rule checks.
type ruleKind uint8

const (
	ruleString    ruleKind = iota // a string; nonEmpty: at least one character
	ruleEnum                      // a string from enum
	ruleDuration                  // a time.ParseDuration string from MinDuration to MaxDuration
	ruleBool                      // true or false
	ruleInteger                   // an integer token (no fraction or exponent) in [min, max]
	ruleNumber                    // any number in [min, max]
	ruleURL                       // an absolute http or https URL
	ruleAddress                   // host:port, port 1..65535
	ruleGlob                      // a non-empty path.Match pattern
	ruleList                      // an array of items; nonEmpty: at least one; identity: unique entries
	ruleArgv                      // an array of strings, at least one, the first non-empty
	ruleStringMap                 // an object of non-empty keys to string values
	ruleObject                    // an object checked by object
	ruleUUID                      // a canonical lowercase UUID string (8-4-4-4-12 hex digits)
	ruleForbidden                 // a member that may not appear here; message says why
	ruleSecret                    // a string a credential supplies: refused unless delivered (see ValidateDelivered)
)

// rule is one node of a type's validation tree. The JSON Schema files say the same thing for tools;
// TestSchemasAgreeWithValidate keeps the two in step.
type rule struct {
	kind     ruleKind
	nonEmpty bool
	min, max float64
	enum     []string
	items    *rule
	object   *objectRule
	identity []string // ruleList of objects: members that identify an entry, unique within the list
	message  string   // ruleForbidden: the error message
	maxItems int      // ruleList, ruleArgv, ruleStringMap: the most items (members) allowed; 0: no cap
}

// objectRule lists the members an object may have. With a discriminator, the value of that member
// (itself listed in fields) selects extra members from variants.
type objectRule struct {
	noun          string // what one object is, for messages: "collector", "dynamic label"
	fields        map[string]*rule
	required      []string
	discriminator string
	variants      map[string]map[string]*rule
}

// pathSeg is one step of a validation path: an object key (decoded from the document, or a fixed
// name such as the type of a list root) or an array index.
type pathSeg struct {
	key   []byte
	name  string
	index int
	step  uint8 // stepKey, stepName or stepIndex
}

const (
	stepKey = iota
	stepName
	stepIndex
)

type validator struct {
	d    *document
	typ  string
	path []pathSeg
	// secretFields are the pointers at which a secret field is accepted (ValidateDelivered); none for
	// Validate.
	secretFields []string
}

func (v *validator) push(key []byte) {
	v.path = append(v.path, pathSeg{key: key, step: stepKey})
}

func (v *validator) pushName(name string) {
	v.path = append(v.path, pathSeg{name: name, step: stepName})
}

func (v *validator) pushIndex(i int) {
	v.path = append(v.path, pathSeg{index: i, step: stepIndex})
}

func (v *validator) pop() { v.path = v.path[:len(v.path)-1] }

func (v *validator) fail(msg string) *ValidationError {
	return &ValidationError{Type: v.typ, Path: v.pathString(), Message: msg}
}

func (v *validator) pathString() string {
	var b []byte
	for _, s := range v.path {
		switch s.step {
		case stepIndex:
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(s.index), 10)
			b = append(b, ']')
		case stepKey:
			b = appendPathKey(b, s.key, len(b) == 0)
		default:
			b = appendPathKey(b, []byte(s.name), len(b) == 0)
		}
	}
	return string(b)
}

// pointer is the RFC 6901 pointer of the current value within the document: the path without the
// name of a list root ("collectors[2].password" is "/2/password").
func (v *validator) pointer() string {
	var b []byte
	for k, s := range v.path {
		switch s.step {
		case stepIndex:
			b = append(b, '/')
			b = strconv.AppendInt(b, int64(s.index), 10)
		case stepKey:
			b = append(append(b, '/'), escapePointerToken(string(s.key))...)
		case stepName:
			if k > 0 { // at 0: the list root's name, not part of the document
				b = append(append(b, '/'), escapePointerToken(s.name)...)
			}
		}
	}
	return string(b)
}

// appendPathKey appends one object key to a path: ".key", or `["key"]` when the key holds characters
// that would make the path ambiguous. first omits the dot.
func appendPathKey(dst, key []byte, first bool) []byte {
	plain := len(key) > 0
	for _, c := range key {
		if c <= ' ' || c == '.' || c == '[' || c == ']' || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if !plain {
		dst = append(dst, '[')
		dst = appendCanonicalString(dst, key)
		return append(dst, ']')
	}
	if !first {
		dst = append(dst, '.')
	}
	return append(dst, key...)
}

// uuidMessage is what a credential_id must be. Only the canonical spelling is accepted because the
// backend finds the configs that reference a credential by exact match on it.
const uuidMessage = `must be a lowercase UUID (8-4-4-4-12 hexadecimal digits, such as "3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c")`

var durationMessage = fmt.Sprintf(`must be a duration from %s to %s, such as "30s" or "5m"`, MinDuration, formatHours(MaxDuration))

// formatHours writes a whole number of hours as "24h" rather than time.Duration's "24h0m0s".
func formatHours(d time.Duration) string { return strconv.Itoa(int(d/time.Hour)) + "h" }

// inlineSecretMessage is why Validate refuses a secret field.
const inlineSecretMessage = "inline secrets are not accepted: store the value in a credential and reference it with credential_id"

func (v *validator) check(r *rule, i int32) *ValidationError {
	n := &v.d.nodes[i]
	var kids []int32
	if n.kind == kindArray || n.kind == kindObject {
		kids = v.d.kidsOf(i)
	}
	switch r.kind {
	case ruleBool:
		if n.kind != kindTrue && n.kind != kindFalse {
			return v.fail("must be a boolean")
		}
	case ruleString:
		if n.kind != kindString {
			return v.fail("must be a string")
		}
		if r.nonEmpty && len(v.d.raw(i)) == 2 {
			return v.fail("must be a non-empty string")
		}
	case ruleEnum:
		if n.kind != kindString || !slices.Contains(r.enum, string(v.d.text(i, nil))) {
			return v.fail("must be one of: " + strings.Join(r.enum, ", "))
		}
	case ruleDuration:
		if n.kind != kindString {
			return v.fail(durationMessage)
		}
		if d, err := time.ParseDuration(string(v.d.text(i, nil))); err != nil || d < MinDuration || d > MaxDuration {
			return v.fail(durationMessage)
		}
	case ruleSecret:
		if n.kind != kindString {
			return v.fail("must be a string")
		}
		if !slices.Contains(v.secretFields, v.pointer()) {
			return v.fail(inlineSecretMessage)
		}
	case ruleInteger:
		if n.kind == kindNumber {
			if x, err := strconv.ParseInt(string(v.d.raw(i)), 10, 64); err == nil && float64(x) >= r.min && float64(x) <= r.max {
				return nil
			}
		}
		return v.fail(fmt.Sprintf("must be an integer from %.0f to %.0f", r.min, r.max))
	case ruleNumber:
		if n.kind == kindNumber {
			if f, err := strconv.ParseFloat(string(v.d.raw(i)), 64); err == nil && f >= r.min && f <= r.max {
				return nil
			}
		}
		return v.fail(fmt.Sprintf("must be a number from %g to %g", r.min, r.max))
	case ruleURL:
		if n.kind != kindString || !validURL(string(v.d.text(i, nil))) {
			return v.fail("must be an absolute http or https URL")
		}
	case ruleAddress:
		if n.kind != kindString || !validAddress(string(v.d.text(i, nil))) {
			return v.fail("must be host:port with a port from 1 to 65535")
		}
	case ruleUUID:
		if n.kind != kindString || !canonicalUUID(v.d.text(i, nil)) {
			return v.fail(uuidMessage)
		}
	case ruleForbidden:
		return v.fail(r.message)
	case ruleGlob:
		if n.kind != kindString || len(v.d.raw(i)) == 2 {
			return v.fail("must be a non-empty glob pattern")
		}
		if _, err := path.Match(string(v.d.text(i, nil)), ""); err != nil {
			return v.fail("must be a valid glob pattern")
		}
	case ruleList:
		if n.kind != kindArray {
			return v.fail("must be an array")
		}
		if r.nonEmpty && len(kids) == 0 {
			return v.fail("must have at least one item")
		}
		if r.maxItems > 0 && len(kids) > r.maxItems {
			return v.fail(fmt.Sprintf("must have at most %d items", r.maxItems))
		}
		for j, item := range kids {
			v.pushIndex(j)
			if e := v.check(r.items, item); e != nil {
				return e
			}
			v.pop()
		}
		if r.identity != nil {
			return v.unique(r, kids)
		}
	case ruleArgv:
		if n.kind != kindArray || len(kids) == 0 {
			return v.fail("must be a non-empty array of strings (program and arguments)")
		}
		if r.maxItems > 0 && len(kids) > r.maxItems {
			return v.fail(fmt.Sprintf("must have at most %d items (program and arguments)", r.maxItems))
		}
		for j, item := range kids {
			v.pushIndex(j)
			if v.d.nodes[item].kind != kindString {
				return v.fail("must be a string")
			}
			if j == 0 && len(v.d.raw(item)) == 2 {
				return v.fail("must name the program to run")
			}
			v.pop()
		}
	case ruleStringMap:
		if n.kind != kindObject {
			return v.fail("must be an object of string values")
		}
		if r.maxItems > 0 && len(kids)/2 > r.maxItems {
			return v.fail(fmt.Sprintf("must have at most %d members", r.maxItems))
		}
		for j := 0; j < len(kids); j += 2 {
			v.push(v.d.text(kids[j], nil))
			if len(v.d.raw(kids[j])) == 2 {
				return v.fail("key must not be empty")
			}
			if v.d.nodes[kids[j+1]].kind != kindString {
				return v.fail("must be a string")
			}
			v.pop()
		}
	case ruleObject:
		return v.object(r.object, i)
	}
	return nil
}

func (v *validator) object(o *objectRule, i int32) *ValidationError {
	if v.d.nodes[i].kind != kindObject {
		if o.noun != "" {
			return v.fail("must be a " + o.noun + " object")
		}
		return v.fail("must be an object")
	}
	kids := v.d.kidsOf(i)
	var variant map[string]*rule
	if o.discriminator != "" {
		// The discriminator decides which other members are allowed, so it is checked first.
		v.pushName(o.discriminator)
		d := v.d.member(i, o.discriminator)
		if d < 0 {
			return v.fail("required")
		}
		if e := v.check(o.fields[o.discriminator], d); e != nil {
			return e
		}
		v.pop()
		variant = o.variants[string(v.d.text(d, nil))]
	}
	for j := 0; j < len(kids); j += 2 {
		key := v.d.text(kids[j], nil)
		r := o.fields[string(key)]
		if r == nil {
			r = variant[string(key)]
		}
		v.push(key)
		if r == nil {
			if variant != nil {
				return v.fail(fmt.Sprintf("unknown key for a %s with %s %s", o.noun, o.discriminator,
					v.d.raw(v.d.member(i, o.discriminator))))
			}
			return v.fail("unknown key")
		}
		if e := v.check(r, kids[j+1]); e != nil {
			return e
		}
		v.pop()
	}
	for _, name := range o.required {
		if v.d.member(i, name) < 0 {
			v.pushName(name)
			return v.fail("required")
		}
	}
	return nil
}

// unique reports the first list entry whose identity repeats an earlier one.
func (v *validator) unique(r *rule, items []int32) *ValidationError {
	type identity struct {
		index int
		parts [2]int32 // value nodes of the identity members
	}
	ids := make([]identity, 0, len(items))
	var seen map[string]int
	if len(items) > 32 {
		seen = make(map[string]int, len(items))
	}
	for j, item := range items {
		id := identity{index: j, parts: [2]int32{-1, -1}}
		for p, name := range r.identity {
			id.parts[p] = v.d.member(item, name)
		}
		first := -1
		if seen != nil {
			var key []byte
			for _, part := range id.parts[:len(r.identity)] {
				key = append(v.d.appendText(key, part), 0)
			}
			if prev, ok := seen[string(key)]; ok {
				first = prev
			} else {
				seen[string(key)] = j
			}
		} else {
			for _, prev := range ids {
				if v.d.sameString(v.d, prev.parts[0], id.parts[0]) &&
					(len(r.identity) < 2 || v.d.sameString(v.d, prev.parts[1], id.parts[1])) {
					first = prev.index
					break
				}
			}
			ids = append(ids, id)
		}
		if first >= 0 {
			v.pushIndex(j)
			return v.fail(fmt.Sprintf("duplicate %s: same %s as entry %d", r.items.object.noun, strings.Join(r.identity, " and "), first))
		}
	}
	return nil
}

// canonicalUUID reports whether s is a UUID in its canonical form: 36 characters, hyphens at 8, 13, 18
// and 23, lowercase hexadecimal digits everywhere else.
func canonicalUUID(s []byte) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

func validURL(s string) bool {
	if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Host != ""
}

func validAddress(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && p >= 1
}
