package agentconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTypeNamesAndKnown(t *testing.T) {
	want := []string{AgentSettings, ChangeDetection, Collectors, Healthcheck, Intervals, Labels, LogCollection, LogShipping, Tracing, WatchFiles}
	if got := TypeNames(); !reflect.DeepEqual(got, want) {
		t.Fatalf("TypeNames() = %v", got)
	}
	for _, name := range want {
		if !Known(name) {
			t.Errorf("Known(%q) = false", name)
		}
	}
	for _, name := range []string{"", "Collectors", "metrics", "collectors "} {
		if Known(name) {
			t.Errorf("Known(%q) = true", name)
		}
	}
	names := TypeNames()
	names[0] = "mutated"
	if TypeNames()[0] != AgentSettings {
		t.Error("TypeNames returned shared storage")
	}
}

func TestTypes(t *testing.T) {
	types := Types()
	if len(types) != 10 {
		t.Fatalf("%d types", len(types))
	}
	strategies := map[string]string{
		Collectors: MergeCollectors, Labels: MergeLabels, LogCollection: MergeLogCollection,
		Intervals: MergeShallow, AgentSettings: MergeShallow, ChangeDetection: MergeShallow, WatchFiles: MergeShallow,
		Healthcheck: MergeShallow, Tracing: MergeShallow, LogShipping: MergeShallow,
	}
	for i, ti := range types {
		if ti.Name != TypeNames()[i] {
			t.Errorf("Types()[%d] = %s, not sorted", i, ti.Name)
		}
		if ti.MergeStrategy != strategies[ti.Name] || ti.Description == "" {
			t.Errorf("%s: strategy %q description %q", ti.Name, ti.MergeStrategy, ti.Description)
		}
		var s map[string]any
		if err := json.Unmarshal(ti.Schema, &s); err != nil {
			t.Fatalf("%s schema: %v", ti.Name, err)
		}
		if s["$schema"] != "https://json-schema.org/draft/2020-12/schema" || s["$id"] != "urn:configsync:agentconfig:"+ti.Name {
			t.Errorf("%s schema: $schema %v $id %v", ti.Name, s["$schema"], s["$id"])
		}
		// Every $ref must resolve.
		for _, ref := range regexp.MustCompile(`"\$ref":\s*"([^"]+)"`).FindAllStringSubmatch(string(ti.Schema), -1) {
			if _, err := resolveRef(s, ref[1]); err != nil {
				t.Errorf("%s: %v", ti.Name, err)
			}
		}
	}
	types[0].Schema[0] = 'X'
	if Types()[0].Schema[0] != '{' {
		t.Error("Types returned shared schema storage")
	}
}

// TestSchemasAgreeWithValidate runs the embedded JSON Schemas (with a small draft 2020-12 evaluator
// covering the keywords they use) over the validation fixtures: everything Validate accepts, the schema
// accepts; everything Validate rejects for a reason a schema can express, the schema rejects.
func TestSchemasAgreeWithValidate(t *testing.T) {
	schemas := loadSchemas(t)
	for typ, docs := range validConfigs {
		for i, doc := range docs {
			if ok, why := schemaValid(t, schemas[typ], doc); !ok {
				t.Errorf("%s valid #%d: schema rejects: %s", typ, i, why)
			}
		}
	}
	for _, tt := range invalidConfigs {
		if !tt.schema {
			continue
		}
		if ok, _ := schemaValid(t, schemas[tt.typ], tt.doc); ok {
			t.Errorf("%s %s: Validate rejects (%s) but the schema accepts", tt.typ, tt.doc, tt.msg)
		}
	}
}

// Every member a rule allows appears in some valid fixture, so the agreement test covers it.
func TestFixturesCoverEveryField(t *testing.T) {
	for _, typ := range TypeNames() {
		all := strings.Join(validConfigs[typ], "\n")
		for _, name := range ruleFieldNames(registry[typ].root) {
			if !strings.Contains(all, `"`+name+`"`) {
				t.Errorf("%s: no valid fixture uses %q", typ, name)
			}
		}
	}
}

func ruleFieldNames(r *rule) []string {
	var names []string
	if r.items != nil {
		names = append(names, ruleFieldNames(r.items)...)
	}
	if o := r.object; o != nil {
		for name, f := range o.fields {
			names = append(names, name)
			names = append(names, ruleFieldNames(f)...)
		}
		for _, v := range o.variants {
			for name, f := range v {
				names = append(names, name)
				names = append(names, ruleFieldNames(f)...)
			}
		}
	}
	sort.Strings(names)
	return slices.Compact(names)
}

// loadSchemas decodes every type's JSON Schema.
func loadSchemas(tb testing.TB) map[string]map[string]any {
	tb.Helper()
	schemas := map[string]map[string]any{}
	for _, ti := range Types() {
		var s map[string]any
		if err := json.Unmarshal(ti.Schema, &s); err != nil {
			tb.Fatalf("%s schema: %v", ti.Name, err)
		}
		schemas[ti.Name] = s
	}
	return schemas
}

func schemaValid(t *testing.T, root map[string]any, doc string) (bool, string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("fixture %s: %v", doc, err)
	}
	e := &schemaEvaluator{root: root}
	ok, _ := e.eval(root, v, "")
	return ok, e.why
}

func resolveRef(root map[string]any, ref string) (any, error) {
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	defs, _ := root["$defs"].(map[string]any)
	if !ok || defs[name] == nil {
		return nil, fmt.Errorf("unresolvable $ref %q", ref)
	}
	return defs[name], nil
}

// schemaEvaluator implements the draft 2020-12 keywords the embedded schemas use.
type schemaEvaluator struct {
	root map[string]any
	why  string
}

func (e *schemaEvaluator) no(path, format string, args ...any) (bool, map[string]bool) {
	if e.why == "" {
		e.why = path + ": " + fmt.Sprintf(format, args...)
	}
	return false, nil
}

// eval reports whether v is valid against schema s, and which object members s evaluated.
func (e *schemaEvaluator) eval(s any, v any, path string) (bool, map[string]bool) {
	if b, ok := s.(bool); ok {
		if !b {
			return e.no(path, "false schema")
		}
		return true, nil
	}
	sm := s.(map[string]any)
	known := map[string]bool{"$schema": true, "$id": true, "$defs": true, "title": true, "description": true,
		"$ref": true, "type": true, "enum": true, "const": true, "minimum": true, "maximum": true, "minLength": true,
		"pattern": true, "minItems": true, "items": true, "prefixItems": true, "properties": true, "required": true,
		"additionalProperties": true, "unevaluatedProperties": true, "propertyNames": true, "allOf": true, "if": true, "then": true}
	for k := range sm {
		if !known[k] {
			panic("schema evaluator does not implement keyword " + k)
		}
	}
	evaluated := map[string]bool{}
	merge := func(m map[string]bool) {
		for k := range m {
			evaluated[k] = true
		}
	}
	if ref, ok := sm["$ref"].(string); ok {
		target, err := resolveRef(e.root, ref)
		if err != nil {
			panic(err)
		}
		ok, ev := e.eval(target, v, path)
		if !ok {
			return false, nil
		}
		merge(ev)
	}
	if typ, ok := sm["type"].(string); ok && !hasJSONType(v, typ) {
		return e.no(path, "not of type %s", typ)
	}
	if enum, ok := sm["enum"].([]any); ok && !slices.ContainsFunc(enum, func(x any) bool { return jsonEqual(x, v) }) {
		return e.no(path, "not in enum")
	}
	if c, ok := sm["const"]; ok && !jsonEqual(c, v) {
		return e.no(path, "not const")
	}
	if n, ok := v.(json.Number); ok {
		f, _ := n.Float64()
		if lo, ok := sm["minimum"].(float64); ok && f < lo {
			return e.no(path, "below minimum")
		}
		if hi, ok := sm["maximum"].(float64); ok && f > hi {
			return e.no(path, "above maximum")
		}
	}
	if str, ok := v.(string); ok {
		if n, ok := sm["minLength"].(float64); ok && float64(utf8.RuneCountInString(str)) < n {
			return e.no(path, "too short")
		}
		if p, ok := sm["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return e.no(path, "does not match pattern")
		}
	}
	if arr, ok := v.([]any); ok {
		if n, ok := sm["minItems"].(float64); ok && float64(len(arr)) < n {
			return e.no(path, "too few items")
		}
		prefix, _ := sm["prefixItems"].([]any)
		for i, item := range arr {
			p := fmt.Sprintf("%s[%d]", path, i)
			if i < len(prefix) {
				if ok, _ := e.eval(prefix[i], item, p); !ok {
					return false, nil
				}
			} else if items, ok := sm["items"]; ok {
				if ok, _ := e.eval(items, item, p); !ok {
					return false, nil
				}
			}
		}
	}
	if obj, ok := v.(map[string]any); ok {
		props, _ := sm["properties"].(map[string]any)
		for k, pv := range obj {
			p := path + "." + k
			if ps, ok := props[k]; ok {
				evaluated[k] = true
				if ok, _ := e.eval(ps, pv, p); !ok {
					return false, nil
				}
			} else if ap, ok := sm["additionalProperties"]; ok {
				evaluated[k] = true
				if ok, _ := e.eval(ap, pv, p); !ok {
					return false, nil
				}
			}
			if pn, ok := sm["propertyNames"]; ok {
				if ok, _ := e.eval(pn, k, p); !ok {
					return false, nil
				}
			}
		}
		if req, ok := sm["required"].([]any); ok {
			for _, r := range req {
				if _, ok := obj[r.(string)]; !ok {
					return e.no(path, "missing required %s", r)
				}
			}
		}
	}
	if all, ok := sm["allOf"].([]any); ok {
		for _, sub := range all {
			ok, ev := e.eval(sub, v, path)
			if !ok {
				return false, nil
			}
			merge(ev)
		}
	}
	if cond, ok := sm["if"]; ok {
		probe := &schemaEvaluator{root: e.root}
		if ok, ev := probe.eval(cond, v, path); ok {
			merge(ev)
			if then, ok := sm["then"]; ok {
				ok, ev := e.eval(then, v, path)
				if !ok {
					return false, nil
				}
				merge(ev)
			}
		}
	}
	if uv, ok := sm["unevaluatedProperties"].(bool); ok && !uv {
		if obj, ok := v.(map[string]any); ok {
			for k := range obj {
				if !evaluated[k] {
					return e.no(path+"."+k, "unevaluated property")
				}
			}
		}
	}
	return true, evaluated
}

func hasJSONType(v any, typ string) bool {
	switch typ {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		f, err := n.Float64()
		return err == nil && f == float64(int64(f))
	}
	panic("unknown type " + typ)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	cx, err1 := Canonicalize(x)
	cy, err2 := Canonicalize(y)
	return err1 == nil && err2 == nil && bytes.Equal(cx, cy)
}
