package configcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/configsync/configsync/libs/agentconfig"
)

// FuzzLoad opens a cache over an arbitrary cache file: nothing panics; the file either loads into
// entries of registered types with non-negative versions and JSON values, or is set aside as corrupt
// and the cache starts empty; and the cache keeps working: a write after the load reloads unchanged.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		`[{"config_type":"labels","config_data":{"static":{"env":"prod"}},"version":3}]`,
		`[{"config_type":"collectors","config_data":[{"type":"postgres","name":"db","password":"[REDACTED]"}],"version":7,"redacted":true,"secret_fields":["/0/password"]}]`,
		`[{"config_type":"labels","config_data":{},"version":1},{"config_type":"labels","config_data":{},"version":2}]`,
		`[{"config_type":"bogus","config_data":{},"version":1}]`,
		`[{"config_type":"labels","config_data":null,"version":1}]`,
		`[{"config_type":"labels","config_data":{},"version":-1}]`,
		`[{"config_type":"labels","config_data":{},"version":"1"}]`,
		`[]`, `{}`, `null`, ``, `[`, "\x00\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		if err := os.WriteFile(path, data, fileMode); err != nil {
			t.Fatal(err)
		}
		c := open(t, dir)
		entries := c.Entries()
		_, asideErr := os.Stat(path + ".corrupt")
		setAside := asideErr == nil
		if setAside && len(entries) != 0 {
			t.Fatalf("file set aside but %d entries loaded", len(entries))
		}
		if !setAside {
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("cache file neither loaded nor set aside: %v", err)
			}
		}
		seen := map[string]bool{}
		for _, e := range entries {
			if !agentconfig.Known(e.ConfigType) || e.Version < 0 || !json.Valid(e.ConfigData) || seen[e.ConfigType] {
				t.Fatalf("loaded entry %+v", e)
			}
			seen[e.ConfigType] = true
			got, ok := c.Get(e.ConfigType)
			if !ok || got.Redacted != e.Redacted {
				t.Fatalf("Get(%s) = %+v, %v for loaded %+v", e.ConfigType, got, ok, e)
			}
		}

		// The cache keeps working after whatever it loaded.
		err := c.Put("healthcheck", json.RawMessage(`{"interval_seconds":30}`), 1<<40, nil)
		var stale *StaleError
		if err != nil && !errors.As(err, &stale) {
			t.Fatalf("put after load: %v", err)
		}
		want, _ := json.Marshal(c.Entries())
		got, _ := json.Marshal(open(t, dir).Entries())
		if !bytes.Equal(want, got) {
			t.Fatalf("cache reloads as %s, was %s", got, want)
		}
	})
}
