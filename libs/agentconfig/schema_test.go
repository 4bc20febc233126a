package agentconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
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
		if bad := unknownKeywords(s, ""); len(bad) > 0 {
			t.Errorf("%s schema: keywords no JSON Schema draft 2020-12 vocabulary defines (a typo is ignored by validators): %v", ti.Name, bad)
		}
	}
	types[0].Schema[0] = 'X'
	if Types()[0].Schema[0] != '{' {
		t.Error("Types returned shared schema storage")
	}
}

// TestSchemasAgreeWithValidate runs the embedded JSON Schemas, compiled by a full draft 2020-12
// implementation (santhosh-tekuri/jsonschema, which also checks each schema against the meta-schema and
// resolves every $ref), over the validation fixtures: everything Validate accepts, the schema accepts;
// everything Validate rejects for a reason a schema can express, the schema rejects.
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

// loadSchemas compiles every type's embedded JSON Schema with a draft 2020-12 implementation. Compiling
// validates the schema against the draft's meta-schema and resolves its $refs.
func loadSchemas(tb testing.TB) map[string]*jsonschema.Schema {
	tb.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noRemoteLoader{}) // the meta-schemas are built in; nothing else may be fetched
	for _, ti := range Types() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(ti.Schema))
		if err != nil {
			tb.Fatalf("%s schema: %v", ti.Name, err)
		}
		if err := c.AddResource(schemaURL(ti.Name), doc); err != nil {
			tb.Fatalf("%s schema: %v", ti.Name, err)
		}
	}
	schemas := map[string]*jsonschema.Schema{}
	for _, ti := range Types() {
		s, err := c.Compile(schemaURL(ti.Name))
		if err != nil {
			tb.Fatalf("%s schema does not compile: %v", ti.Name, err)
		}
		schemas[ti.Name] = s
	}
	return schemas
}

// schemaURL is the $id every embedded schema declares (TestTypes checks it).
func schemaURL(typ string) string { return "urn:configsync:agentconfig:" + typ }

type noRemoteLoader struct{}

func (noRemoteLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s: remote references are not allowed", url)
}

// schemaValid reports whether doc is valid against s, and if not the validator's explanation.
func schemaValid(t *testing.T, s *jsonschema.Schema, doc string) (bool, string) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("fixture %s: %v", doc, err)
	}
	if err := s.Validate(v); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// draft202012Keywords are the keywords of the draft 2020-12 vocabularies (core, applicator,
// unevaluated, validation, meta-data, format-annotation, content) plus the annotations the schemas use.
var draft202012Keywords = map[string]bool{
	"$schema": true, "$id": true, "$ref": true, "$anchor": true, "$dynamicRef": true, "$dynamicAnchor": true,
	"$vocabulary": true, "$comment": true, "$defs": true,
	"allOf": true, "anyOf": true, "oneOf": true, "not": true, "if": true, "then": true, "else": true,
	"dependentSchemas": true, "prefixItems": true, "items": true, "contains": true, "properties": true,
	"patternProperties": true, "additionalProperties": true, "propertyNames": true,
	"unevaluatedItems": true, "unevaluatedProperties": true,
	"type": true, "enum": true, "const": true, "multipleOf": true, "maximum": true, "exclusiveMaximum": true,
	"minimum": true, "exclusiveMinimum": true, "maxLength": true, "minLength": true, "pattern": true,
	"maxItems": true, "minItems": true, "uniqueItems": true, "maxContains": true, "minContains": true,
	"maxProperties": true, "minProperties": true, "required": true, "dependentRequired": true,
	"title": true, "description": true, "default": true, "deprecated": true, "readOnly": true,
	"writeOnly": true, "examples": true, "format": true,
	"contentEncoding": true, "contentMediaType": true, "contentSchema": true,
}

// schemaMaps are the keywords whose value maps names to subschemas (the names are not keywords).
var schemaMaps = map[string]bool{"$defs": true, "properties": true, "patternProperties": true, "dependentSchemas": true}

// unknownKeywords returns the keywords of schema s (and its subschemas) that draft 2020-12 does not
// define, with their locations.
func unknownKeywords(s any, at string) []string {
	var bad []string
	switch s := s.(type) {
	case map[string]any:
		for k, v := range s {
			if !draft202012Keywords[k] {
				bad = append(bad, at+"/"+k)
			}
			switch sub := v.(type) {
			case map[string]any:
				if schemaMaps[k] {
					for name, ss := range sub {
						bad = append(bad, unknownKeywords(ss, at+"/"+k+"/"+name)...)
					}
				} else if k != "const" && k != "default" {
					bad = append(bad, unknownKeywords(sub, at+"/"+k)...)
				}
			case []any:
				if k == "allOf" || k == "anyOf" || k == "oneOf" || k == "prefixItems" {
					for i, ss := range sub {
						bad = append(bad, unknownKeywords(ss, fmt.Sprintf("%s/%s/%d", at, k, i))...)
					}
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}
