package agentconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// validConfigs are accepted by Validate, by the JSON Schemas and by the typed shapes.
var validConfigs = map[string][]string{
	Collectors: {
		`[]`,
		`[{"type": "mysql", "name": "primary"}, {"type": "redis", "name": "cache"}]`,
		`[{"type":"mysql","name":"primary","enabled":false}]`,
		`[{"type":"http","name":"api","url":"https://api.example.com/health","method":"GET","expect_status":200,"interval":"30s","timeout":"5s"},
		  {"type":"tcp","name":"ssh","address":"localhost:22","enabled":true},
		  {"type":"tcp","name":"v6","address":"[::1]:65535"},
		  {"type":"postgres","name":"main","host":"db.internal","port":5432,"database":"app","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c"},
		  {"type":"mysql","name":"main","host":"db","port":1},
		  {"type":"redis","name":"cache","host":"127.0.0.1","port":6379,"database":"0"}]`,
		`[{"type":"http","name":"a","interval":"1h2m3.5s"},{"type":"http","name":"b","interval":"1s"},{"type":"http","name":"c","interval":"24h","timeout":"1000ms"}]`,
		`[{"type":"redis","name":"a","credential_id":"00000000-0000-4000-8000-00000000000\u0061"}]`,
		`[{"type":"http","name":"basic","url":"http://127.0.0.1:8080/status","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c"},
		  {"type":"mysql","name":"m","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c"}]`,
		// As delivered: secret fields injected from a credential (deliveredPointers lists where).
		`[{"type":"http","name":"basic","url":"http://127.0.0.1:8080/status","username":"monitor","password":""},
		  {"type":"mysql","name":"main","host":"db","port":1,"password":"x"},
		  {"type":"postgres","name":"pg","username":"u","password":"p"},{"type":"redis","name":"r","password":"p"}]`,
		`[{"type":"postgres","name":"off","sslmode":"disable"},{"type":"postgres","name":"opt","sslmode":"prefer"},
		  {"type":"postgres","name":"tls","host":"db.internal","sslmode":"require"},
		  {"type":"postgres","name":"checked","host":"db.internal","port":5432,"sslmode":"verify-full","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c"}]`,
	},
	Intervals: {
		`{}`,
		`{"metrics":"60s","inventory":"1h","heartbeat":"30s","processes":"5m"}`,
		`{"metrics":"+10s"}`,
	},
	Labels: {
		`{"static":{"env":"prod","team":"core","app.kubernetes.io/name":"api","empty":""}}`,
		`{"dynamic":[{"name":"hostname","source":"command","command":["hostname","-f"],"interval":"1h"},
		             {"name":"az","source":"file","path":"/etc/az"},
		             {"name":"region","source":"env","env":"AWS_REGION"},
		             {"name":"args","source":"command","command":["printf",""]}]}`,
		`{"static":{},"dynamic":[]}`,
	},
	ChangeDetection: {
		`{"enabled":true,"paths":["/etc","/usr/local/bin"],"interval":"5m"}`,
		`{"enabled":false}`,
	},
	LogCollection: {
		`{"files":[{"name":"syslog","path":"/var/log/syslog"},{"name":"app","path":"/opt/app/*.log","exclude_paths":["/opt/app/debug.log"],"parser":"json","tag":"app","read_from_head":true}],
		  "journald":{"enabled":true,"units":["sshd.service","cron.service"],"read_from_tail":false},
		  "enabled":true,"flush_interval":"5s","mem_buf_limit_mb":0}`,
		`{"files":[{"name":"syslog"}]}`,
	},
	AgentSettings: {
		`{"collector_timeout":"10s","memory_limit_mb":512,"log_level":"debug"}`,
		`{"memory_limit_mb":0,"log_level":"error"}`,
	},
	WatchFiles: {
		`{"paths": ["/etc", "/opt"], "exclude_patterns": ["*.swp", "*.log", "[a-z]?.tmp"], "sensitive_files":["/etc/shadow","*.key"], "max_file_size": 10485760}`,
		`{"max_file_size": 16777216}`, `{"max_file_size": 1}`,
	},
	Healthcheck: {
		`{"interval_seconds": 60, "timeout_seconds": 5}`,
		`{"timeout_seconds": 1}`, `{"interval_seconds": 86400, "timeout_seconds": 3600}`,
	},
	Tracing: {
		`{"enabled":true,"sample_ratio":0.25}`,
		`{"sample_ratio":0}`, `{"sample_ratio":1}`, `{"sample_ratio":1e-3}`,
	},
	LogShipping: {
		`{"enabled":true,"level":"warn"}`,
		`{"level":"error"}`, `{"level":"info"}`, `{"level":"debug"}`,
	},
}

// deliveredPointers returns the pointers of the secret fields a fixture holds inline: a fixture with
// any is a config as delivered, with those fields injected from a credential.
func deliveredPointers(t *testing.T, typ, doc string) []string {
	t.Helper()
	if typ != Collectors {
		return nil
	}
	var cs []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(doc), &cs); err != nil {
		t.Fatalf("fixture %s: %v", doc, err)
	}
	var pointers []string
	for i, c := range cs {
		for _, name := range SecretFields() {
			if _, ok := c[name]; ok {
				pointers = append(pointers, fmt.Sprintf("/%d/%s", i, name))
			}
		}
	}
	return pointers
}

// Fixtures without secret fields pass Validate (as stored) and ValidateDelivered with no pointers (as
// delivered without injection). Fixtures with secret fields are configs as delivered: Validate refuses
// them, naming the first inline secret, and ValidateDelivered accepts them with their pointers.
func TestValidate_AcceptsValidConfigs(t *testing.T) {
	for typ, docs := range validConfigs {
		for i, doc := range docs {
			pointers := deliveredPointers(t, typ, doc)
			if err := ValidateDelivered(typ, json.RawMessage(doc), pointers); err != nil {
				t.Errorf("%s #%d delivered with %v: %v", typ, i, pointers, err)
			}
			err := Validate(typ, json.RawMessage(doc))
			if len(pointers) == 0 {
				if err != nil {
					t.Errorf("%s #%d: %v", typ, i, err)
				}
				continue
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !strings.Contains(ve.Message, "inline secrets are not accepted") {
				t.Errorf("%s #%d with inline secrets: Validate returned %v", typ, i, err)
			}
		}
	}
}

func TestValidate_EveryTypeHasFixtures(t *testing.T) {
	for _, typ := range TypeNames() {
		if len(validConfigs[typ]) == 0 {
			t.Errorf("no valid fixture for %s", typ)
		}
	}
}

// invalidConfig is rejected by Validate with Path and a Message containing msg. schema says whether
// the JSON Schema rejects it too; the rest are rules a schema cannot express (identity uniqueness,
// zero durations, integer spelling, URL and address syntax).
type invalidConfig struct {
	typ, doc, path, msg string
	schema              bool
}

var invalidConfigs = []invalidConfig{
	// whole document
	{Intervals, `[]`, "", "must be an object", true},
	{Collectors, `{}`, "collectors", "must be an array", true},
	{Intervals, `null`, "", "must be an object", true},
	{Intervals, `{"metrics":"1s"`, "", "invalid JSON", false},
	{Intervals, `{"metrics":"1s","metrics":"2s"}`, "", "duplicate object key", false},
	{Intervals, ``, "", "invalid JSON", false},
	// unknown keys
	{Intervals, `{"metric":"1s"}`, "metric", "unknown key", true},
	{Labels, `{"statics":{}}`, "statics", "unknown key", true},
	{LogCollection, `{"journald":{"unit":["a"]}}`, "journald.unit", "unknown key", true},
	{LogCollection, `{"files":[{"name":"a","paths":"/x"}]}`, "files[0].paths", "unknown key", true},
	{Collectors, `[{"type":"mysql","name":"a","url":"http://x"}]`, "collectors[0].url", `unknown key for a collector with type "mysql"`, true},
	{Collectors, `[{"type":"tcp","name":"a"},{"type":"http","name":"b","address":"x:1"}]`, "collectors[1].address", "unknown key", true},
	{Collectors, `[{"type":"http","name":"a","intervall":"1s"}]`, "collectors[0].intervall", "unknown key", true},
	// sslmode is a postgres field only, with libpq's names
	{Collectors, `[{"type":"mysql","name":"a","sslmode":"require"}]`, "collectors[0].sslmode", `unknown key for a collector with type "mysql"`, true},
	{Collectors, `[{"type":"postgres","name":"a"},{"type":"redis","name":"b","sslmode":"disable"}]`, "collectors[1].sslmode", `unknown key for a collector with type "redis"`, true},
	{Collectors, `[{"type":"tcp","name":"a","sslmode":"disable"}]`, "collectors[0].sslmode", `unknown key for a collector with type "tcp"`, true},
	{Collectors, `[{"type":"postgres","name":"a","sslmode":"verify-ca"}]`, "collectors[0].sslmode", "must be one of: disable, prefer, require, verify-full", true},
	{Collectors, `[{"type":"postgres","name":"a","sslmode":"Require"}]`, "collectors[0].sslmode", "must be one of", true},
	{Collectors, `[{"type":"postgres","name":"a","sslmode":""}]`, "collectors[0].sslmode", "must be one of", true},
	{Collectors, `[{"type":"postgres","name":"a","sslmode":true}]`, "collectors[0].sslmode", "must be one of", true},
	{Labels, `{"dynamic":[{"name":"a","source":"env","path":"/x"}]}`, "dynamic[0].path", "unknown key", true},
	{Labels, `{"static":{"a.b":"1"},"x":{}}`, "x", "unknown key", true},
	// identity fields
	{Collectors, `[{"name":"a"}]`, "collectors[0].type", "required", true},
	{Collectors, `[{"name":"a","url":"http://x"}]`, "collectors[0].type", "required", true},
	{Collectors, `[{"type":"tcp"}]`, "collectors[0].name", "required", true},
	{Collectors, `[{"type":"smtp","name":"a"}]`, "collectors[0].type", "must be one of: http, mysql, postgres, redis, tcp", true},
	{Collectors, `[{"type":"tcp","name":""}]`, "collectors[0].name", "non-empty", true},
	{Collectors, `[{"type":7,"name":"a"}]`, "collectors[0].type", "must be one of", true},
	{Collectors, `["tcp"]`, "collectors[0]", "must be a collector object", true},
	{Labels, `{"dynamic":[{"source":"env"}]}`, "dynamic[0].name", "required", true},
	{Labels, `{"dynamic":[{"name":"a"}]}`, "dynamic[0].source", "required", true},
	{Labels, `{"dynamic":[{"name":"a","source":"http"}]}`, "dynamic[0].source", "must be one of: command, env, file", true},
	{LogCollection, `{"files":[{"path":"/x"}]}`, "files[0].name", "required", true},
	// uniqueness within one list
	{Collectors, `[{"type":"tcp","name":"a"},{"type":"http","name":"a"},{"type":"tcp","name":"a"}]`, "collectors[2]", "duplicate collector: same type and name as entry 0", false},
	{Collectors, `[{"type":"tcp","name":"a"},{"type":"tcp","name":"\u0061"}]`, "collectors[1]", "duplicate collector", false},
	{Labels, `{"dynamic":[{"name":"a","source":"env"},{"name":"a","source":"file"}]}`, "dynamic[1]", "duplicate dynamic label: same name as entry 0", false},
	{LogCollection, `{"files":[{"name":"a"},{"name":"b"},{"name":"b"}]}`, "files[2]", "duplicate log file", false},
	// wrong JSON types
	{Collectors, `[{"type":"tcp","name":"a","enabled":"false"}]`, "collectors[0].enabled", "must be a boolean", true},
	{Collectors, `[{"type":"postgres","name":"a","port":"5432"}]`, "collectors[0].port", "integer from 1 to 65535", true},
	{Collectors, `[{"type":"postgres","name":"a","host":5}]`, "collectors[0].host", "must be a string", true},
	{Collectors, `[{"type":"http","name":"a","credential_id":""}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"redis","name":"a","credential_id":7}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"http","name":"a","username":1}]`, "collectors[0].username", "must be a string", true},
	{Collectors, `[{"type":"http","name":"a","password":null}]`, "collectors[0].password", "must be a string", true},
	// secrets come only from credentials: a stored collector holds none inline (the schema describes
	// configs as delivered too, so it cannot say this)
	{Collectors, `[{"type":"http","name":"a","username":"monitor"}]`, "collectors[0].username", "inline secrets are not accepted", false},
	{Collectors, `[{"type":"tcp","name":"t"},{"type":"postgres","name":"a","host":"db","password":""}]`, "collectors[1].password", "reference it with credential_id", false},
	{Collectors, `[{"type":"mysql","name":"a","password":"pw","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c"}]`, "collectors[0].password", "inline secrets", false},
	{Collectors, `[{"type":"redis","name":"a","username":"u"}]`, "collectors[0].username", "inline secrets", false},
	// credential_id only where every secret field is valid: a tcp check takes none
	{Collectors, `[{"type":"http","name":"a"},{"type":"redis","name":"b"},{"type":"tcp","name":"c","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c"}]`, "collectors[2].credential_id", "tcp collectors take no credentials", true},
	{Collectors, `[{"type":"tcp","name":"a","credential_id":"cred-1"}]`, "collectors[0].credential_id", "tcp collectors take no credentials", true},
	{Collectors, `[{"type":"tcp","name":"a","password":"x"}]`, "collectors[0].password", `unknown key for a collector with type "tcp"`, true},
	{Collectors, `[{"type":"http","name":"a","api_key":"x"}]`, "collectors[0].api_key", `unknown key for a collector with type "http"`, true},
	// credential_id: only the canonical spelling, which the backend matches exactly when it re-announces
	{Collectors, `[{"type":"tcp","name":"a"},{"type":"mysql","name":"b","credential_id":"3F2B8C1E-9D4A-4E7B-A1C2-5D6E7F8A9B0C"}]`, "collectors[1].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"mysql","name":"b","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9B0c"}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"mysql","name":"b","credential_id":"cred-1"}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"mysql","name":"b","credential_id":"3f2b8c1e9d4a4e7ba1c25d6e7f8a9b0c"}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"mysql","name":"b","credential_id":"{3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c}"}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"mysql","name":"b","credential_id":"urn:uuid:3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c"}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"mysql","name":"b","credential_id":" 3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c"}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"mysql","name":"b","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0g"}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"mysql","name":"b","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2_5d6e7f8a9b0c"}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{Collectors, `[{"type":"mysql","name":"b","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0\u0043"}]`, "collectors[0].credential_id", "must be a lowercase UUID", true},
	{ChangeDetection, `{"paths":"/etc"}`, "paths", "must be an array", true},
	{ChangeDetection, `{"paths":["/etc",3]}`, "paths[1]", "must be a string", true},
	{ChangeDetection, `{"paths":[""]}`, "paths[0]", "non-empty", true},
	{Labels, `{"static":{"env":1}}`, "static.env", "must be a string", true},
	{Labels, `{"static":{"app.kubernetes.io/name":true}}`, `static["app.kubernetes.io/name"]`, "must be a string", true},
	{Labels, `{"static":{"":"x"}}`, `static[""]`, "key must not be empty", true},
	{Labels, `{"static":[]}`, "static", "must be an object", true},
	{Tracing, `{"enabled":1}`, "enabled", "must be a boolean", true},
	{Tracing, `{"sample_ratio":"0.5"}`, "sample_ratio", "number from 0 to 1", true},
	// durations
	{Intervals, `{"metrics":"60"}`, "metrics", "duration from 1s to 24h", true},
	{Intervals, `{"metrics":60}`, "metrics", "duration", true},
	{Intervals, `{"heartbeat":"-5s"}`, "heartbeat", "duration", true},
	{Intervals, `{"processes":"5 m"}`, "processes", "duration", true},
	{Intervals, `{"inventory":"0s"}`, "inventory", "duration from 1s to 24h", false},
	{Collectors, `[{"type":"tcp","name":"a","timeout":"fast"}]`, "collectors[0].timeout", "duration", true},
	{Labels, `{"dynamic":[{"name":"a","source":"env","env":"A","interval":"1d"}]}`, "dynamic[0].interval", "duration", true},
	{LogCollection, `{"flush_interval":""}`, "flush_interval", "duration", true},
	{AgentSettings, `{"collector_timeout":"0"}`, "collector_timeout", "duration", true},
	{ChangeDetection, `{"interval":"0.0h"}`, "interval", "duration", false},
	// floors and caps of every duration field: at least MinDuration, at most MaxDuration
	{Intervals, `{"heartbeat":"1ms"}`, "heartbeat", "duration from 1s to 24h", false},
	{Intervals, `{"metrics":"999ms"}`, "metrics", "duration from 1s", false},
	{Intervals, `{"inventory":"0.5s"}`, "inventory", "duration from 1s", false},
	{Intervals, `{"processes":"1.5us"}`, "processes", "duration from 1s", false},
	{Intervals, `{"heartbeat":"24h1s"}`, "heartbeat", "to 24h", false},
	{Intervals, `{"metrics":"30s","heartbeat":"100ms"}`, "heartbeat", "duration from 1s", false},
	{Collectors, `[{"type":"tcp","name":"a","interval":"250ms"}]`, "collectors[0].interval", "duration from 1s", false},
	{Collectors, `[{"type":"tcp","name":"a"},{"type":"http","name":"b","timeout":"10ms"}]`, "collectors[1].timeout", "duration from 1s", false},
	{Collectors, `[{"type":"http","name":"b","interval":"25h"}]`, "collectors[0].interval", "to 24h", false},
	{Labels, `{"dynamic":[{"name":"a","source":"env","env":"A","interval":"1ms"}]}`, "dynamic[0].interval", "duration from 1s", false},
	{ChangeDetection, `{"interval":"100ms"}`, "interval", "duration from 1s", false},
	{ChangeDetection, `{"interval":"48h"}`, "interval", "to 24h", false},
	{LogCollection, `{"flush_interval":"200ms"}`, "flush_interval", "duration from 1s", false},
	{AgentSettings, `{"collector_timeout":"1ns"}`, "collector_timeout", "duration from 1s", false},
	// ranges and enums
	{Tracing, `{"sample_ratio":1.01}`, "sample_ratio", "number from 0 to 1", true},
	{Tracing, `{"sample_ratio":-0.1}`, "sample_ratio", "number from 0 to 1", true},
	{LogShipping, `{"level":"warning"}`, "level", "must be one of: error, warn, info, debug", true},
	{LogShipping, `{"level":"INFO"}`, "level", "must be one of", true},
	{AgentSettings, `{"log_level":"trace"}`, "log_level", "must be one of: debug, info, warn, error", true},
	{AgentSettings, `{"memory_limit_mb":-1}`, "memory_limit_mb", "integer from 0", true},
	{AgentSettings, `{"memory_limit_mb":1.5}`, "memory_limit_mb", "integer", true},
	{AgentSettings, `{"memory_limit_mb":2147483648}`, "memory_limit_mb", "integer from 0 to 2147483647", true},
	{AgentSettings, `{"memory_limit_mb":5e2}`, "memory_limit_mb", "integer", false},
	{Healthcheck, `{"interval_seconds":0}`, "interval_seconds", "integer from 1", true},
	{Healthcheck, `{"timeout_seconds":-5}`, "timeout_seconds", "integer from 1", true},
	{Healthcheck, `{"timeout_seconds":5.0}`, "timeout_seconds", "integer", false},
	{Healthcheck, `{"interval_seconds":86401}`, "interval_seconds", "integer from 1 to 86400", true},
	{Healthcheck, `{"timeout_seconds":3601}`, "timeout_seconds", "integer from 1 to 3600", true},
	{WatchFiles, `{"max_file_size":0}`, "max_file_size", "integer from 1", true},
	{WatchFiles, `{"max_file_size":16777217}`, "max_file_size", "integer from 1 to 16777216", true},
	{WatchFiles, `{"max_file_size":9007199254740991}`, "max_file_size", "integer from 1 to 16777216", true},
	{WatchFiles, `{"exclude_patterns":["[a-"]}`, "exclude_patterns[0]", "valid glob", false},
	{WatchFiles, `{"sensitive_files":[""]}`, "sensitive_files[0]", "non-empty glob", true},
	{Collectors, `[{"type":"postgres","name":"a","port":0}]`, "collectors[0].port", "integer from 1 to 65535", true},
	{Collectors, `[{"type":"redis","name":"a","port":65536}]`, "collectors[0].port", "integer from 1 to 65535", true},
	{Collectors, `[{"type":"tcp","name":"a","address":"localhost:0"}]`, "collectors[0].address", "port from 1 to 65535", false},
	{Collectors, `[{"type":"tcp","name":"a","address":"localhost:70000"}]`, "collectors[0].address", "port from 1 to 65535", false},
	{Collectors, `[{"type":"tcp","name":"a","address":"localhost"}]`, "collectors[0].address", "host:port", true},
	{Collectors, `[{"type":"http","name":"a","url":"ftp://x"}]`, "collectors[0].url", "http or https URL", true},
	{Collectors, `[{"type":"http","name":"a","url":"/health"}]`, "collectors[0].url", "http or https URL", true},
	{Collectors, `[{"type":"http","name":"a","method":"get"}]`, "collectors[0].method", "must be one of", true},
	{Collectors, `[{"type":"http","name":"a","expect_status":99}]`, "collectors[0].expect_status", "integer from 100 to 599", true},
	{Labels, `{"dynamic":[{"name":"a","source":"command","command":[]}]}`, "dynamic[0].command", "non-empty array", true},
	{Labels, `{"dynamic":[{"name":"a","source":"command","command":"hostname"}]}`, "dynamic[0].command", "non-empty array", true},
	{Labels, `{"dynamic":[{"name":"a","source":"command","command":[""]}]}`, "dynamic[0].command[0]", "program", true},
	{Labels, `{"dynamic":[{"name":"a","source":"command","command":["ls",1]}]}`, "dynamic[0].command[1]", "must be a string", true},
	{Labels, `{"dynamic":[{"name":"a","source":"file","path":""}]}`, "dynamic[0].path", "non-empty", true},
	{LogCollection, `{"mem_buf_limit_mb":-1}`, "mem_buf_limit_mb", "integer from 0", true},
	{LogCollection, `{"mem_buf_limit_mb":4097}`, "mem_buf_limit_mb", "integer from 0 to 4096", true},
	{LogCollection, `{"journald":{"units":[""]}}`, "journald.units[0]", "non-empty", true},
}

// countCap is a cap on a list length or member count: doc(n) builds a document with n items.
type countCap struct {
	typ, path, msg string
	max            int
	doc            func(n int) string
}

// countCaps are the caps on list lengths and member counts. The schemas describe them but do not
// enforce them.
var countCaps = func() []countCap {
	list := func(n int, item func(i int) string) string {
		items := make([]string, n)
		for i := range items {
			items[i] = item(i)
		}
		return strings.Join(items, ",")
	}
	quoted := func(i int) string { return fmt.Sprintf(`"/p%d"`, i) }
	wrap := func(before string, item func(i int) string, after string) func(n int) string {
		return func(n int) string { return before + list(n, item) + after }
	}
	return []countCap{
		{Collectors, "collectors", "at most 256 items", MaxCollectors, wrap("[", func(i int) string { return fmt.Sprintf(`{"type":"tcp","name":"c%d"}`, i) }, "]")},
		{Labels, "static", "at most 256 members", MaxStaticLabels, wrap(`{"static":{`, func(i int) string { return fmt.Sprintf(`"k%d":""`, i) }, `}}`)},
		{Labels, "dynamic", "at most 64 items", MaxDynamicLabels, wrap(`{"dynamic":[`, func(i int) string { return fmt.Sprintf(`{"name":"l%d","source":"env","env":"E"}`, i) }, `]}`)},
		{Labels, "dynamic[0].command", "at most 64 items", MaxArgs, wrap(`{"dynamic":[{"name":"a","source":"command","command":[`, quoted, `]}]}`)},
		{ChangeDetection, "paths", "at most 128 items", MaxPaths, wrap(`{"paths":[`, quoted, `]}`)},
		{WatchFiles, "paths", "at most 128 items", MaxPaths, wrap(`{"paths":[`, quoted, `]}`)},
		{WatchFiles, "exclude_patterns", "at most 128 items", MaxPaths, wrap(`{"exclude_patterns":[`, quoted, `]}`)},
		{WatchFiles, "sensitive_files", "at most 128 items", MaxPaths, wrap(`{"sensitive_files":[`, quoted, `]}`)},
		{LogCollection, "files", "at most 128 items", MaxLogFiles, wrap(`{"files":[`, func(i int) string { return fmt.Sprintf(`{"name":"f%d"}`, i) }, `]}`)},
		{LogCollection, "files[0].exclude_paths", "at most 128 items", MaxPaths, wrap(`{"files":[{"name":"a","exclude_paths":[`, quoted, `]}]}`)},
		{LogCollection, "journald.units", "at most 128 items", MaxPaths, wrap(`{"journald":{"units":[`, quoted, `]}}`)},
	}
}()

// Each count cap: exactly at the cap is fine, one more is refused naming the list.
func TestValidate_CountCaps(t *testing.T) {
	for _, c := range countCaps {
		if err := Validate(c.typ, json.RawMessage(c.doc(c.max))); err != nil {
			t.Errorf("%s.%s with %d items: %v", c.typ, c.path, c.max, err)
		}
		err := Validate(c.typ, json.RawMessage(c.doc(c.max+1)))
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Path != c.path || !strings.Contains(ve.Message, c.msg) {
			t.Errorf("%s.%s with %d items: got %v, want path %q message containing %q", c.typ, c.path, c.max+1, err, c.path, c.msg)
		}
	}
}

func TestValidate_ErrorPaths(t *testing.T) {
	for _, tt := range invalidConfigs {
		t.Run(tt.typ+"/"+tt.doc, func(t *testing.T) {
			err := Validate(tt.typ, json.RawMessage(tt.doc))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v (%T), want *ValidationError", err, err)
			}
			if ve.Type != tt.typ || ve.Path != tt.path || !strings.Contains(ve.Message, tt.msg) {
				t.Errorf("got type %q path %q message %q; want path %q message containing %q", ve.Type, ve.Path, ve.Message, tt.path, tt.msg)
			}
			if tt.path != "" && !strings.Contains(ve.Error(), tt.path) {
				t.Errorf("Error() %q does not name the path", ve.Error())
			}
		})
	}
}

func TestValidate_UnknownType(t *testing.T) {
	err := Validate("metrics", json.RawMessage(`{}`))
	if !errors.Is(err, ErrUnknownType) {
		t.Fatalf("got %v", err)
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		t.Error("unknown type must not be a ValidationError")
	}
}

func TestValidate_SizeLimit(t *testing.T) {
	pad := strings.Repeat("x", MaxConfigSize)
	err := Validate(Labels, json.RawMessage(`{"static":{"k":"`+pad+`"}}`))
	var ve *ValidationError
	if !errors.As(err, &ve) || !strings.Contains(ve.Message, "larger than 262144 bytes") {
		t.Fatalf("got %v", err)
	}
	// Just under the limit is fine.
	doc := `{"static":{"k":""}}`
	doc = `{"static":{"k":"` + strings.Repeat("x", MaxConfigSize-len(doc)) + `"}}`
	if err := Validate(Labels, json.RawMessage(doc)); err != nil {
		t.Fatalf("%d bytes: %v", len(doc), err)
	}
}

// Messages never echo values: a password typed into the wrong field must not surface in errors.
func TestValidate_MessagesDoNotEchoValues(t *testing.T) {
	secret := "hunter2-s3cret"
	for _, doc := range []string{
		`[{"type":"postgres","name":"a","port":"` + secret + `"}]`,
		`[{"type":"http","name":"a","url":"` + secret + `"}]`,
		`[{"type":"tcp","name":"a","address":"` + secret + `"}]`,
		`[{"type":"tcp","name":"a","interval":"` + secret + `"}]`,
		`[{"type":"http","name":"a","method":"` + secret + `"}]`,
		`[{"type":"postgres","name":"a","sslmode":"` + secret + `"}]`,
	} {
		if err := Validate(Collectors, json.RawMessage(doc)); err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("error %v for %s", err, doc)
		}
	}
}

// Large lists switch to a map for identity checks; both paths must find the same duplicate.
func TestValidate_UniqueLargeList(t *testing.T) {
	var b strings.Builder
	b.WriteString("[")
	for i := range 100 {
		fmt.Fprintf(&b, `{"type":"tcp","name":"c%d"},`, i)
	}
	b.WriteString(`{"type":"tcp","name":"c42"}]`)
	err := Validate(Collectors, json.RawMessage(b.String()))
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Path != "collectors[100]" || !strings.Contains(ve.Message, "entry 42") {
		t.Fatalf("got %v", err)
	}
}

// Every field a credential may hold is a string field of every collector type that takes a
// credential_id, and only tcp refuses one: a credential accepted by the backend never makes the agent
// reject the collector it is injected into.
func TestSecretFieldsValidWhereCredentialsAre(t *testing.T) {
	fields := SecretFields()
	if len(fields) == 0 || !slices.IsSorted(fields) {
		t.Fatalf("SecretFields() = %v, want a sorted non-empty list", fields)
	}
	fields[0] = "mutated"
	if IsSecretField("mutated") || !IsSecretField(SecretFields()[0]) {
		t.Fatal("SecretFields returned shared storage")
	}
	for _, name := range []string{"", "api_key", "token", "Password", "credential_id", "type"} {
		if IsSecretField(name) {
			t.Errorf("IsSecretField(%q) = true", name)
		}
	}
	var takers []string
	for typ, variant := range collectorVariants {
		switch r := variant["credential_id"]; {
		case r == nil:
			t.Errorf("%s: credential_id neither accepted nor refused by name", typ)
		case r.kind == ruleForbidden:
			if typ != CollectorTCP {
				t.Errorf("%s refuses credential_id", typ)
			}
		case r.kind == ruleUUID:
			takers = append(takers, typ)
			for _, name := range SecretFields() {
				if f := variant[name]; f == nil || f.kind != ruleSecret {
					t.Errorf("%s takes credential_id but not secret field %q as a secret (any string, delivered only)", typ, name)
				}
			}
		default:
			t.Errorf("%s: credential_id rule of kind %d", typ, r.kind)
		}
	}
	slices.Sort(takers)
	if want := []string{CollectorHTTP, CollectorMySQL, CollectorPostgres, CollectorRedis}; !slices.Equal(takers, want) {
		t.Errorf("types taking credential_id: %v, want %v", takers, want)
	}
}

// What the backend delivers after injection passes the agent's validation: an http collector gets basic
// auth from a credential, and every type that takes a credential_id takes every secret field.
func TestInjectSecrets_ResultValidates(t *testing.T) {
	const id = "3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c"
	in := json.RawMessage(`[{"type":"http","name":"api","url":"https://api.example.com/health","credential_id":"` + id + `"}]`)
	if err := Validate(Collectors, in); err != nil {
		t.Fatalf("before injection: %v", err)
	}
	got, pointers, err := InjectSecrets(in, map[string]map[string]string{id: {"username": "monitor", "password": "s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateDelivered(Collectors, got, pointers); err != nil {
		t.Fatalf("after injection: %v\n%s", err, got)
	}
	var cs CollectorsConfig
	if err := json.Unmarshal(got, &cs); err != nil || len(cs) != 1 || cs[0].Username != "monitor" || cs[0].Password != "s3cret" || cs[0].CredentialID != "" {
		t.Fatalf("decoded %+v (%v) from %s", cs, err, got)
	}
	if !slices.Equal(pointers, []string{"/0/password", "/0/username"}) {
		t.Errorf("pointers %v", pointers)
	}

	all := map[string]string{}
	for _, name := range SecretFields() {
		all[name] = "v-" + name
	}
	for typ, variant := range collectorVariants {
		if variant["credential_id"].kind != ruleUUID {
			continue
		}
		in := json.RawMessage(`[{"type":"` + typ + `","name":"a","credential_id":"` + id + `"}]`)
		if err := Validate(Collectors, in); err != nil {
			t.Fatalf("%s before injection: %v", typ, err)
		}
		got, pointers, err := InjectSecrets(in, map[string]map[string]string{id: all})
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateDelivered(Collectors, got, pointers); err != nil {
			t.Errorf("%s after injecting every secret field: %v", typ, err)
		}
		if err := Validate(Collectors, got); err == nil {
			t.Errorf("%s after injection passes Validate: a stored config could hold the secrets inline", typ)
		}
	}
}

// ValidateDelivered accepts secret fields exactly at the pointers given: a pointer elsewhere, a
// missing pointer or a pointer to another field of the same collector does not let one through.
func TestValidateDelivered_SecretFieldsOnlyAtPointers(t *testing.T) {
	doc := json.RawMessage(`[{"type":"tcp","name":"t"},{"type":"postgres","name":"pg","host":"db","username":"u","password":"p"},{"type":"http","name":"h","password":"q"}]`)
	all := []string{"/1/password", "/1/username", "/2/password"}
	if err := ValidateDelivered(Collectors, doc, all); err != nil {
		t.Fatalf("with every pointer: %v", err)
	}
	for _, tt := range []struct {
		pointers []string
		path     string
	}{
		{nil, "collectors[1].username"},
		{[]string{}, "collectors[1].username"},
		{[]string{"/1/username", "/2/password"}, "collectors[1].password"},
		{[]string{"/1/password", "/1/username"}, "collectors[2].password"},
		{[]string{"/1/password", "/1/username", "/2/username"}, "collectors[2].password"},
		{[]string{"/0/password", "/1/username", "/2/password"}, "collectors[1].password"},
		{[]string{"/1/password", "/1/username", "2/password"}, "collectors[2].password"},
	} {
		err := ValidateDelivered(Collectors, doc, tt.pointers)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Path != tt.path || !strings.Contains(ve.Message, "inline secrets are not accepted") {
			t.Errorf("pointers %q: got %v, want the inline secret at %s refused", tt.pointers, err, tt.path)
		}
	}
	// Every other rule still applies to a delivered config.
	err := ValidateDelivered(Collectors, json.RawMessage(`[{"type":"http","name":"h","password":"q","interval":"1ms"}]`), []string{"/0/password"})
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Path != "collectors[0].interval" {
		t.Errorf("delivered config with a 1ms interval: %v", err)
	}
	if err := ValidateDelivered(Intervals, json.RawMessage(`{"heartbeat":"30s"}`), nil); err != nil {
		t.Errorf("delivered intervals: %v", err)
	}
	if err := ValidateDelivered("metrics", json.RawMessage(`{}`), nil); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type: %v", err)
	}
}

func TestInlineSecrets(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		want []string
	}{
		{``, nil},
		{`null`, nil},
		{`[]`, nil},
		{`[{"type":"tcp","name":"t"},{"type":"mysql","name":"m","credential_id":"3f2b8c1e-9d4a-4e7b-a1c2-5d6e7f8a9b0c"}]`, nil},
		{`[{"type":"tcp","name":"t"},{"type":"postgres","name":"pg","password":"p","username":"u"},{"type":"http","name":"h","username":"x"}]`,
			[]string{"collectors[1].password", "collectors[1].username", "collectors[2].username"}},
		{`["odd",{"type":"redis","name":"r","password":""}]`, []string{"collectors[1].password"}},
	} {
		got, err := InlineSecrets(json.RawMessage(tt.doc))
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("InlineSecrets(%s) = %v, %v; want %v", tt.doc, got, err, tt.want)
		}
	}
	for _, doc := range []string{`{}`, `[`} {
		if _, err := InlineSecrets(json.RawMessage(doc)); err == nil {
			t.Errorf("InlineSecrets(%s): no error", doc)
		}
	}
}
