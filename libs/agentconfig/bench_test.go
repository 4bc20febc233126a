package agentconfig

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchCollectors returns a realistic collectors pair: an environment list of 20 collectors (~4 KB)
// and a host override that replaces one, disables one and adds one.
func benchCollectors() (env, host json.RawMessage) {
	var b strings.Builder
	b.WriteString("[\n")
	for i := range 20 {
		if i > 0 {
			b.WriteString(",\n")
		}
		switch i % 5 {
		case 0:
			fmt.Fprintf(&b, `  {"type": "http", "name": "api-gateway-%02d", "url": "https://service-%02d.prod.eu-west-1.internal.example.com/api/v2/healthz?probe=deep", "method": "GET", "expect_status": 200, "interval": "30s", "timeout": "5s", "enabled": true}`, i, i)
		case 1:
			fmt.Fprintf(&b, `  {"type": "tcp", "name": "ingress-port-%02d", "address": "10.0.%d.%d:%d", "interval": "15s", "timeout": "3s", "enabled": true}`, i, i, i*3, 8000+i)
		case 2:
			fmt.Fprintf(&b, `  {"type": "postgres", "name": "pg-%02d", "host": "pg-%02d.prod.eu-west-1.db.internal", "port": 5432, "database": "app_%02d", "sslmode": "require", "credential_id": "0c7d2f4a-5b1e-4c3d-9e8f-0000000000%02d", "interval": "1m", "timeout": "10s", "enabled": true}`, i, i, i, i)
		case 3:
			fmt.Fprintf(&b, `  {"type": "mysql", "name": "mysql-%02d", "host": "mysql-%02d.prod.eu-west-1.db.internal", "port": 3306, "database": "orders", "credential_id": "6a1f0b3c-2d4e-4f5a-8b6c-7d8e9f0a1b2c", "interval": "1m", "timeout": "10s"}`, i, i)
		case 4:
			fmt.Fprintf(&b, `  {"type": "redis", "name": "cache-%02d", "host": "redis-%02d.prod.eu-west-1.cache.internal", "port": 6379, "database": "0", "credential_id": "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d", "interval": "20s", "timeout": "2s"}`, i, i)
		}
	}
	b.WriteString("\n]")
	env = json.RawMessage(b.String())
	host = json.RawMessage(`[
  {"type": "postgres", "name": "pg-07", "host": "pg-07-replica.db.internal", "port": 5433, "database": "app_07", "credential_id": "0c7d2f4a-5b1e-4c3d-9e8f-000000000007", "interval": "30s"},
  {"type": "redis", "name": "cache-09", "enabled": false},
  {"type": "tcp", "name": "local-ssh", "address": "127.0.0.1:22", "interval": "1m"}
]`)
	return env, host
}

// benchMerged is benchCollectors' environment list merged with its host override.
func benchMerged(tb testing.TB) json.RawMessage {
	tb.Helper()
	env, host := benchCollectors()
	merged, _, err := Merge(Collectors, env, host)
	if err != nil {
		tb.Fatal(err)
	}
	return merged
}

func BenchmarkMergeCanonicalHash(b *testing.B) {
	env, host := benchCollectors()
	if err := Validate(Collectors, env); err != nil {
		b.Fatal(err)
	}
	if err := Validate(Collectors, host); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(env) + len(host)))
	b.ReportAllocs()
	for b.Loop() {
		merged, _, err := Merge(Collectors, env, host)
		if err != nil {
			b.Fatal(err)
		}
		c, err := Canonicalize(merged)
		if err != nil {
			b.Fatal(err)
		}
		if h := ConfigHash([]CacheEntry{{ConfigType: Collectors, ConfigData: c, Version: 1}}); len(h) != 64 {
			b.Fatal(h)
		}
	}
}

func BenchmarkMerge(b *testing.B) {
	env, host := benchCollectors()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Merge(Collectors, env, host); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResolveEnvOnly(b *testing.B) {
	env, _ := benchCollectors()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Resolve(Collectors, Layer{Data: env, Version: 1}, Layer{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	env, _ := benchCollectors()
	b.SetBytes(int64(len(env)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(Collectors, env); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkConfigHash(b *testing.B) {
	env, _ := benchCollectors()
	entries := []CacheEntry{{ConfigType: Collectors, ConfigData: env}}
	for _, typ := range TypeNames()[1:] {
		entries = append(entries, CacheEntry{ConfigType: typ, ConfigData: json.RawMessage(validConfigs[typ][0])})
	}
	b.ReportAllocs()
	for b.Loop() {
		ConfigHash(entries)
	}
}

func TestBenchCollectorsSize(t *testing.T) {
	env, host := benchCollectors()
	if len(env) < 3500 || len(env) > 4800 {
		t.Errorf("benchmark env is %d bytes, want about 4 KB", len(env))
	}
	if err := Validate(Collectors, env); err != nil {
		t.Fatal(err)
	}
	if err := Validate(Collectors, host); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkCanonicalize(b *testing.B) {
	merged := benchMerged(b)
	b.SetBytes(int64(len(merged)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Canonicalize(merged); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConfigHashCanonical hashes what the agent caches after a merge: canonical data.
func BenchmarkConfigHashCanonical(b *testing.B) {
	c, err := Canonicalize(benchMerged(b))
	if err != nil {
		b.Fatal(err)
	}
	entries := []CacheEntry{{ConfigType: Collectors, ConfigData: c, Version: 1}}
	b.SetBytes(int64(len(c)))
	b.ReportAllocs()
	for b.Loop() {
		ConfigHash(entries)
	}
}
