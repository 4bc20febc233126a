package agentconfig

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

func fuzzType(i uint8) string { return typeNames[int(i)%len(typeNames)] }

func seedTypeIndex(typ string) uint8 { return uint8(slices.Index(typeNames, typ)) }

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %q: %v", raw, err)
	}
	return b.String()
}

func FuzzMerge(f *testing.F) {
	for typ, docs := range validConfigs {
		for _, env := range docs {
			for _, host := range docs {
				f.Add(seedTypeIndex(typ), []byte(env), []byte(host))
			}
		}
	}
	f.Add(seedTypeIndex(Collectors), []byte(`[{"type":"tcp","name":"a"},{"type":"tcp","name":"b"}]`),
		[]byte(`[{"type":"tcp","name":"a","enabled":false},{"type":"tcp","name":"c"},{"type":"tcp","name":"b","address":"x:1"}]`))
	f.Add(seedTypeIndex(Intervals), []byte(`{"a":{"x":1},"b":2}`), []byte(`{"a":{"y":1}}`))
	f.Fuzz(func(t *testing.T, ti uint8, env, host []byte) {
		typ := fuzzType(ti)
		merged, prov, err := Merge(typ, env, host)

		// A missing layer leaves the other as-is.
		if onlyHost, _, err := Merge(typ, nil, host); err == nil && !bytes.Equal(onlyHost, host) && !IsNull(host) {
			t.Fatalf("host only: got %q, want %q", onlyHost, host)
		}
		if onlyEnv, _, err := Merge(typ, env, nil); err == nil && !bytes.Equal(onlyEnv, env) && !IsNull(env) {
			t.Fatalf("env only: got %q, want %q", onlyEnv, env)
		}
		if err != nil || IsNull(env) || IsNull(host) {
			return
		}
		if !json.Valid(merged) {
			t.Fatalf("merge output is not valid JSON: %q", merged)
		}
		if prov.Entries == nil {
			t.Fatal("nil provenance entries")
		}

		// Shallow types: host keys win, env-only keys stay, nothing else appears.
		if registry[typ].strategy == MergeShallow {
			var e, h, m map[string]json.RawMessage
			if json.Unmarshal(env, &e) != nil || json.Unmarshal(host, &h) != nil || json.Unmarshal(merged, &m) != nil {
				t.Fatalf("undecodable objects: %q %q %q", env, host, merged)
			}
			for k, hv := range h {
				if compact(t, m[k]) != compact(t, hv) {
					t.Fatalf("host key %q: merged %s, host %s", k, m[k], hv)
				}
			}
			for k, ev := range e {
				if _, inHost := h[k]; !inHost && compact(t, m[k]) != compact(t, ev) {
					t.Fatalf("env key %q: merged %s, env %s", k, m[k], ev)
				}
			}
			for k := range m {
				if _, inEnv := e[k]; !inEnv {
					if _, inHost := h[k]; !inHost {
						t.Fatalf("key %q from nowhere", k)
					}
				}
			}
		}

		// Applying the same (valid) override twice is the same as once.
		if Validate(typ, env) == nil && Validate(typ, host) == nil {
			again, _, err := Merge(typ, merged, host)
			if err != nil || !bytes.Equal(again, merged) {
				t.Fatalf("merge not idempotent:\nonce  %s\ntwice %s (%v)", merged, again, err)
			}
		}
	})
}

func FuzzValidate(f *testing.F) {
	for typ, docs := range validConfigs {
		for _, doc := range docs {
			f.Add(seedTypeIndex(typ), []byte(doc))
		}
	}
	for _, tt := range invalidConfigs {
		f.Add(seedTypeIndex(tt.typ), []byte(tt.doc))
	}
	schemas := loadSchemas(f)
	f.Fuzz(func(t *testing.T, ti uint8, raw []byte) {
		typ := fuzzType(ti)
		err := Validate(typ, raw)
		if err == nil && len(raw) > MaxConfigSize {
			t.Fatal("oversized config accepted")
		}
		if err != nil {
			if _, ok := err.(*ValidationError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		// What Validate accepts, every consumer accepts: canonical form, typed shape, JSON Schema.
		if _, err := Canonicalize(raw); err != nil {
			t.Fatalf("valid config does not canonicalize: %v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(shapeOf(typ)); err != nil {
			t.Fatalf("valid config does not decode into its shape: %v", err)
		}
		if ok, why := schemaValid(t, schemas[typ], string(raw)); !ok {
			t.Fatalf("valid config rejected by its JSON Schema: %s", why)
		}
	})
}

func FuzzCanonicalize(f *testing.F) {
	for _, docs := range validConfigs {
		for _, doc := range docs {
			f.Add([]byte(doc))
		}
	}
	for _, s := range []string{`1e21`, `0.000001`, `-0`, `{"\ud83d\ude00":1,"\ufb33":2}`, `"\u0000\u001f\""`, `[1.5e300,-1e-300]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Canonicalize(raw)
		if err != nil {
			return
		}
		again, err := Canonicalize(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", raw, c, again, err)
		}
		var a, b any
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatalf("accepted input encoding/json rejects: %v", err)
		}
		if err := json.Unmarshal(c, &b); err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("canonical form changed the value: %q -> %q (%v)", raw, c, err)
		}
	})
}
