package agentconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestConfigHash_Definition(t *testing.T) {
	entries := []CacheEntry{
		{ConfigType: WatchFiles, ConfigData: json.RawMessage(`{"paths": ["/etc"]}`), Version: 3},
		{ConfigType: Healthcheck, ConfigData: json.RawMessage(`{"interval_seconds": 60}`), Version: 1},
	}
	want := sha(`[{"config_data":{"interval_seconds":60},"config_type":"healthcheck"},{"config_data":{"paths":["/etc"]},"config_type":"watch_files"}]`)
	if got := ConfigHash(entries); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestConfigHash_Empty(t *testing.T) {
	want := sha("[]")
	for _, entries := range [][]CacheEntry{nil, {}, {{ConfigType: Labels}, {ConfigType: Tracing, ConfigData: json.RawMessage("null"), Version: 4}}} {
		if got := ConfigHash(entries); got != want {
			t.Errorf("%v: got %s, want hash of []", entries, got)
		}
	}
}

func TestConfigHash_StableAndOrderIndependent(t *testing.T) {
	a := []CacheEntry{
		{ConfigType: Labels, ConfigData: json.RawMessage(`{"static":{"b":"2","a":"1"}}`), Version: 1},
		{ConfigType: Collectors, ConfigData: json.RawMessage(`[{"type":"tcp","name":"a","port":1.0}]`), Version: 2},
		{ConfigType: Intervals, ConfigData: json.RawMessage(`{"metrics":"1m"}`), Version: 3},
	}
	// Same content: other entry order, other formatting and key order, other versions, an extra empty entry.
	b := []CacheEntry{
		{ConfigType: Intervals, ConfigData: json.RawMessage("{\n  \"metrics\": \"1m\"\n}"), Version: 30},
		{ConfigType: Tracing, ConfigData: nil, Version: 99},
		{ConfigType: Labels, ConfigData: json.RawMessage(`{"static":{"a":"1","b":"2"}}`), Version: 10},
		{ConfigType: Collectors, ConfigData: json.RawMessage(`[{"port":1,"name":"a","type":"tcp"}]`), Version: 20},
	}
	ha := ConfigHash(a)
	if ha != ConfigHash(a) || ha != ConfigHash(b) {
		t.Fatalf("hash depends on order or formatting: %s vs %s", ha, ConfigHash(b))
	}
	if len(ha) != 64 {
		t.Fatalf("hash %q is not hex SHA-256", ha)
	}
	// Content changes move the hash.
	c := append([]CacheEntry(nil), a...)
	c[2] = CacheEntry{ConfigType: Intervals, ConfigData: json.RawMessage(`{"metrics":"2m"}`), Version: 3}
	if ConfigHash(c) == ha {
		t.Error("changed data, same hash")
	}
	d := append([]CacheEntry(nil), a...)
	d[2].ConfigType = Healthcheck
	if ConfigHash(d) == ha {
		t.Error("changed type, same hash")
	}
}

func TestConfigHash_InvalidDataStillCounts(t *testing.T) {
	valid := []CacheEntry{{ConfigType: Labels, ConfigData: json.RawMessage(`{}`)}}
	corrupt := []CacheEntry{{ConfigType: Labels, ConfigData: json.RawMessage(`{"a":`)}}
	if ConfigHash(corrupt) == ConfigHash(valid) || ConfigHash(corrupt) == ConfigHash(nil) {
		t.Error("corrupt data does not change the hash")
	}
	want := sha(`[{"config_data":"{\"a\":","config_type":"labels"}]`)
	if got := ConfigHash(corrupt); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestConfigHash_DuplicateTypesOrderIndependent(t *testing.T) {
	x := CacheEntry{ConfigType: Labels, ConfigData: json.RawMessage(`{"a":1}`)}
	y := CacheEntry{ConfigType: Labels, ConfigData: json.RawMessage(`{"a":2}`)}
	if ConfigHash([]CacheEntry{x, y}) != ConfigHash([]CacheEntry{y, x}) {
		t.Error("duplicate types: hash depends on order")
	}
}

func TestMaxVersion(t *testing.T) {
	if MaxVersion(nil) != 0 {
		t.Error("empty")
	}
	entries := []CacheEntry{{Version: 3}, {Version: 9, ConfigData: nil}, {Version: 5}}
	if got := MaxVersion(entries); got != 9 {
		t.Errorf("got %d", got)
	}
}
