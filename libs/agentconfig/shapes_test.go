package agentconfig

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// shapes holds the typed shape of each config type.
var shapes = map[string]reflect.Type{
	Collectors:      reflect.TypeFor[CollectorsConfig](),
	Intervals:       reflect.TypeFor[IntervalsConfig](),
	Labels:          reflect.TypeFor[LabelsConfig](),
	ChangeDetection: reflect.TypeFor[ChangeDetectionConfig](),
	LogCollection:   reflect.TypeFor[LogCollectionConfig](),
	AgentSettings:   reflect.TypeFor[AgentSettingsConfig](),
	WatchFiles:      reflect.TypeFor[WatchFilesConfig](),
	Healthcheck:     reflect.TypeFor[HealthcheckConfig](),
	Tracing:         reflect.TypeFor[TracingConfig](),
	LogShipping:     reflect.TypeFor[LogShippingConfig](),
}

// shapeOf returns a pointer to a new value of the typed shape of a config type, nil for an unknown type.
func shapeOf(typ string) any {
	shape, ok := shapes[typ]
	if !ok {
		return nil
	}
	return reflect.New(shape).Interface()
}

// Every valid config decodes into its typed shape with no unknown field: shapes and rules agree.
func TestShapesDecodeValidConfigs(t *testing.T) {
	for _, typ := range TypeNames() {
		for i, doc := range validConfigs[typ] {
			v := shapeOf(typ)
			if v == nil {
				t.Fatalf("no shape for %s", typ)
			}
			dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				t.Errorf("%s #%d: %v", typ, i, err)
			}
		}
	}
}

func TestShapes_Values(t *testing.T) {
	var cs CollectorsConfig
	if err := json.Unmarshal([]byte(validConfigs[Collectors][3]), &cs); err != nil {
		t.Fatal(err)
	}
	if cs[0].Interval.Std() != 30*time.Second || cs[0].ExpectStatus != 200 || !cs[0].IsEnabled() {
		t.Errorf("http collector %+v", cs[0])
	}
	if cs[3].Port != 5432 || cs[3].CredentialID != "3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c" {
		t.Errorf("postgres collector %+v", cs[3])
	}
	var off CollectorsConfig
	_ = json.Unmarshal([]byte(`[{"type":"tcp","name":"a","enabled":false}]`), &off)
	if off[0].IsEnabled() {
		t.Error("enabled:false reads as enabled")
	}
	var tr TracingConfig
	_ = json.Unmarshal([]byte(`{"sample_ratio":0}`), &tr)
	if tr.SampleRatio == nil || *tr.SampleRatio != 0 || tr.Enabled != nil {
		t.Errorf("tracing %+v", tr)
	}
}

func TestDuration_JSON(t *testing.T) {
	var d Duration
	if err := json.Unmarshal([]byte(`"1m30s"`), &d); err != nil || d.Std() != 90*time.Second {
		t.Fatalf("got %v, %v", d, err)
	}
	b, err := json.Marshal(d)
	if err != nil || string(b) != `"1m30s"` {
		t.Fatalf("got %s, %v", b, err)
	}
	for _, bad := range []string{`90`, `"soon"`, `null1`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}
