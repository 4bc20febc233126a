package configcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/agentconfig"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func open(t *testing.T, dir string) *Cache {
	t.Helper()
	c, err := Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPutPersistsAndReloads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	c := open(t, dir)
	if err := c.Put("watch_files", json.RawMessage(`{"paths": ["/etc"]}`), 3, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Put("healthcheck", json.RawMessage(`{"interval_seconds":60}`), 1, nil); err != nil {
		t.Fatal(err)
	}
	c2 := open(t, dir)
	e, ok := c2.Get("watch_files")
	if !ok || e.Version != 3 || e.Redacted || string(e.Data) != `{"paths":["/etc"]}` {
		t.Fatalf("reloaded entry = %+v, %v", e, ok)
	}
	if got := c2.ConfigVersions(); len(got) != 2 || got["healthcheck"] != 1 {
		t.Fatalf("versions = %v", got)
	}
	if c2.ConfigVersion() != 3 {
		t.Fatalf("config_version = %d", c2.ConfigVersion())
	}
	// The file is the spec's array of entries, sorted by type.
	var onDisk []map[string]any
	b, _ := os.ReadFile(c2.Path())
	if err := json.Unmarshal(b, &onDisk); err != nil {
		t.Fatal(err)
	}
	if len(onDisk) != 2 || onDisk[0]["config_type"] != "healthcheck" || onDisk[1]["version"] != float64(3) {
		t.Fatalf("file = %s", b)
	}
}

func TestPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o755); err != nil { // a pre-existing, too open directory
		t.Fatal(err)
	}
	c := open(t, dir)
	if err := c.Put("labels", json.RawMessage(`{"static":{"env":"prod"}}`), 1, nil); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode = %v, want 0700", st.Mode().Perm())
	}
	st, err = os.Stat(c.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, want 0600", st.Mode().Perm())
	}
}

func TestCorruptOrMissingStartsEmpty(t *testing.T) {
	for name, content := range map[string]string{
		"truncated":    `[{"config_type":"labels","config_data":{"static"`,
		"not an array": `{"config_type":"labels"}`,
		"unknown type": `[{"config_type":"nope","config_data":{},"version":1}]`,
		"null data":    `[{"config_type":"labels","config_data":null,"version":1}]`,
		"duplicate":    `[{"config_type":"labels","config_data":{},"version":1},{"config_type":"labels","config_data":{},"version":2}]`,
		"binary":       "\x00\x01\x02",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			c := open(t, dir)
			if n := len(c.Entries()); n != 0 {
				t.Fatalf("corrupt cache loaded %d entries", n)
			}
			if _, err := os.Stat(filepath.Join(dir, FileName+".corrupt")); err != nil {
				t.Fatalf("corrupt file not set aside: %v", err)
			}
			// And the cache works afterwards.
			if err := c.Put("labels", json.RawMessage(`{}`), 1, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
	c := open(t, t.TempDir())
	if len(c.Entries()) != 0 || c.ConfigVersion() != 0 {
		t.Fatal("missing cache not empty")
	}
}

func TestRedactedSecretsNeverReachDisk(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir)
	live := json.RawMessage(`[{"type":"postgres","name":"main","host":"db","password":"s3cret-value"},{"type":"tcp","name":"t","address":"a:1"}]`)
	if err := c.Put("collectors", live, 5, []string{"/0/password"}); err != nil {
		t.Fatal(err)
	}
	// In memory the live value is kept.
	e, _ := c.Get("collectors")
	if e.Redacted || !bytes.Contains(e.Data, []byte("s3cret-value")) {
		t.Fatalf("live entry = %+v", e)
	}
	b, _ := os.ReadFile(c.Path())
	if bytes.Contains(b, []byte("s3cret-value")) {
		t.Fatalf("secret reached disk: %s", b)
	}
	if !bytes.Contains(b, []byte(`"[REDACTED]"`)) || !bytes.Contains(b, []byte(`"redacted": true`)) {
		t.Fatalf("entry not redacted/flagged: %s", b)
	}
	// After a restart only the redacted form exists.
	e, _ = open(t, dir).Get("collectors")
	if !e.Redacted || bytes.Contains(e.Data, []byte("s3cret")) {
		t.Fatalf("reloaded = %+v", e)
	}
	// A pointer that names nothing refuses the change instead of writing the secret.
	err := c.Put("collectors", json.RawMessage(`[{"type":"postgres","name":"x","host":"h","password":"pw2"}]`), 6, []string{"/0/passwd"})
	if err == nil {
		t.Fatal("bad secret pointer accepted")
	}
	b, _ = os.ReadFile(c.Path())
	if bytes.Contains(b, []byte("pw2")) {
		t.Fatal("secret reached disk")
	}
}

func TestHashMatchesAgentconfig(t *testing.T) {
	c := open(t, t.TempDir())
	_ = c.Put("labels", json.RawMessage(`{"static": {"b":"2","a":"1"}}`), 2, nil)
	_ = c.Put("collectors", json.RawMessage(`[{"type":"redis","name":"r","host":"h","password":"pw"}]`), 7, []string{"/0/password"})
	_ = c.Put("healthcheck", json.RawMessage(`{"timeout_seconds":5,"interval_seconds":60}`), 4, nil)
	want := agentconfig.ConfigHash([]agentconfig.CacheEntry{
		{ConfigType: "healthcheck", ConfigData: json.RawMessage(`{"interval_seconds":60,"timeout_seconds":5}`)},
		{ConfigType: "collectors", ConfigData: json.RawMessage(`[{"type":"redis","name":"r","host":"h","password":"[REDACTED]"}]`)},
		{ConfigType: "labels", ConfigData: json.RawMessage(`{"static":{"a":"1","b":"2"}}`)},
	})
	if got := c.ConfigHash(); got != want {
		t.Fatalf("hash %s, agentconfig computes %s", got, want)
	}
	if got := agentconfig.ConfigHash(c.Entries()); got != want {
		t.Fatalf("entries hash %s", got)
	}
	if c.ConfigVersion() != agentconfig.MaxVersion(c.Entries()) || c.ConfigVersion() != 7 {
		t.Fatalf("version %d", c.ConfigVersion())
	}
}

func TestStaleAndRemove(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir)
	if err := c.Put("labels", json.RawMessage(`{"static":{"v":"5"}}`), 5, nil); err != nil {
		t.Fatal(err)
	}
	err := c.Put("labels", json.RawMessage(`{"static":{"v":"4"}}`), 4, nil)
	var stale *StaleError
	if !errors.As(err, &stale) || stale.Current != 5 || !errors.Is(err, ErrStale) {
		t.Fatalf("older put: %v", err)
	}
	if e, _ := c.Get("labels"); !strings.Contains(string(e.Data), `"5"`) {
		t.Fatalf("stale put changed data: %s", e.Data)
	}
	if err := c.Put("labels", json.RawMessage(`{"static":{"v":"5b"}}`), 5, nil); err != nil {
		t.Fatalf("same version re-delivery: %v", err)
	}
	if err := c.Remove("labels", 3); !errors.Is(err, ErrStale) {
		t.Fatalf("older delete: %v", err)
	}
	if err := c.Remove("labels", 8); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("labels"); ok {
		t.Fatal("removed type still cached")
	}
	if err := c.Put("labels", json.RawMessage(`{}`), 7, nil); !errors.Is(err, ErrStale) {
		t.Fatalf("push older than the deletion accepted: %v", err)
	}
	if len(open(t, dir).Entries()) != 0 {
		t.Fatal("removal not persisted")
	}
	if err := c.Put("", json.RawMessage(`{}`), 1, nil); err == nil {
		t.Fatal("empty type accepted")
	}
}

// TestCrashDuringWrite re-executes the test binary as a child that rewrites the cache in a loop, kills
// it with SIGKILL at random moments and checks the file each time: it must always be one complete
// version (old or new), never torn.
func TestCrashDuringWrite(t *testing.T) {
	if os.Getenv("CACHE_CRASH_CHILD") != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rounds := 25
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(exe, "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CACHE_CRASH_CHILD="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the child is writing, then kill it after a random delay.
		buf := make([]byte, 6)
		if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("child did not start: %q %v", buf, err)
		}
		time.Sleep(time.Duration(rand.IntN(30_000)) * time.Microsecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()

		b, err := os.ReadFile(filepath.Join(dir, FileName))
		if err != nil {
			t.Fatalf("round %d: cache file missing after crash: %v", round, err)
		}
		checkWhole(t, round, b)
		st, _ := os.Stat(filepath.Join(dir, FileName))
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("round %d: mode %v", round, st.Mode().Perm())
		}
		// Reopening cleans up any temp file the crash left behind.
		c := open(t, dir)
		if len(c.Entries()) == 0 {
			t.Fatalf("round %d: reopened cache is empty", round)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, tmpGlob)); len(left) != 0 {
			t.Fatalf("round %d: temp files left: %v", round, left)
		}
	}
}

// checkWhole verifies the file is one complete generation written by the child: every entry carries
// the same generation number, padded so that old and new files differ in size.
func checkWhole(t *testing.T, round int, b []byte) {
	t.Helper()
	var entries []agentconfig.CacheEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		t.Fatalf("round %d: torn cache file (%d bytes): %v", round, len(b), err)
	}
	if len(entries) != 3 {
		t.Fatalf("round %d: %d entries", round, len(entries))
	}
	gen := entries[0].Version
	for _, e := range entries {
		if e.Version != gen {
			t.Fatalf("round %d: mixed generations %d and %d", round, gen, e.Version)
		}
		var d struct {
			Gen int64 `json:"gen"`
		}
		_ = json.Unmarshal(e.ConfigData, &d)
		if d.Gen != gen {
			t.Fatalf("round %d: entry %s data from generation %d in file of generation %d", round, e.ConfigType, d.Gen, gen)
		}
	}
}

// TestCrashChild is the child of TestCrashDuringWrite; it only runs with CACHE_CRASH_CHILD set.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("CACHE_CRASH_CHILD")
	if dir == "" {
		t.Skip("only runs as the child of TestCrashDuringWrite")
	}
	c, err := Open(dir, quiet())
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	start := c.ConfigVersion() + 1
	write := func(gen int64) {
		pad := strings.Repeat("x", int(gen%97)*53) // varying sizes: a torn file cannot pass for whole
		_, err := c.Apply(
			Change{ConfigType: "labels", Data: json.RawMessage(`{"gen":` + strconv.FormatInt(gen, 10) + `,"static":{"p":"` + pad + `"}}`), Version: gen},
			Change{ConfigType: "healthcheck", Data: json.RawMessage(`{"gen":` + strconv.FormatInt(gen, 10) + `}`), Version: gen},
			Change{ConfigType: "tracing", Data: json.RawMessage(`{"gen":` + strconv.FormatInt(gen, 10) + `}`), Version: gen},
		)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	}
	write(start)
	os.Stdout.WriteString("ready\n")
	for gen := start + 1; ; gen++ {
		write(gen)
	}
}
