package changedetect

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/configsync/configsync/agent/internal/policy"
)

func TestScanReportsChanges(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	other, _ := filepath.EvalSymlinks(t.TempDir())
	a, b := filepath.Join(dir, "a.conf"), filepath.Join(dir, "sub", "b.conf")
	os.MkdirAll(filepath.Dir(b), 0o700)
	os.WriteFile(a, []byte("one"), 0o600)
	os.WriteFile(b, []byte("two"), 0o600)
	var reps []Report
	pol, err := policy.New(policy.Config{ReadPaths: []string{dir, other}, Limits: policy.Limits{MinInterval: time.Second}}, policy.Secrets{})
	if err != nil {
		t.Fatal(err)
	}
	s := NewScanner(slog.New(slog.NewTextHandler(io.Discard, nil)), pol, func(r Report) { reps = append(reps, r) })

	cfg, every, err := Parse(json.RawMessage(`{"enabled":false,"paths":["` + dir + `"],"interval":"1s"}`))
	if err != nil || every != 0 {
		t.Fatalf("disabled: %v %v", every, err)
	}
	if err := s.UpdateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	s.Scan(context.Background())
	if s.Scans() != 0 {
		t.Fatal("disabled scanner scanned")
	}

	cfg, every, _ = Parse(json.RawMessage(`{"enabled":true,"paths":["` + dir + `"],"interval":"1s"}`))
	if every != time.Second {
		t.Fatalf("interval %v", every)
	}
	if err := s.UpdateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	s.Scan(context.Background()) // baseline
	if len(reps) != 0 {
		t.Fatalf("baseline reported %+v", reps)
	}
	os.WriteFile(a, []byte("ONE"), 0o600) // same size, new content
	os.Remove(b)
	os.WriteFile(filepath.Join(dir, "c.conf"), []byte("three"), 0o600)
	s.Scan(context.Background())
	if len(reps) != 1 {
		t.Fatalf("reports %+v", reps)
	}
	got := map[string]string{}
	for _, c := range reps[0].Changes {
		got[filepath.Base(c.Path)] = c.Change
	}
	if got["a.conf"] != "modified" || got["b.conf"] != "deleted" || got["c.conf"] != "created" || len(got) != 3 {
		t.Fatalf("changes %v", got)
	}
	s.Scan(context.Background())
	if len(reps) != 1 {
		t.Fatal("no-change scan reported")
	}
	// New paths start a new baseline.
	os.WriteFile(filepath.Join(other, "x"), []byte("x"), 0o600)
	cfg, _, _ = Parse(json.RawMessage(`{"enabled":true,"paths":["` + other + `"]}`))
	if err := s.UpdateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	s.Scan(context.Background())
	if len(reps) != 1 {
		t.Fatal("files coming into scope reported as created")
	}
	if _, d, _ := Parse(json.RawMessage(`{"enabled":true}`)); d != DefaultInterval {
		t.Fatalf("default interval %v", d)
	}
}

// A file over the policy's max_hash_size is never read: it is watched by size and modification time.
func TestLargeFilesAreNotHashed(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	small, big := filepath.Join(dir, "small.conf"), filepath.Join(dir, "big.log")
	os.WriteFile(small, []byte("tiny"), 0o600)
	os.WriteFile(big, []byte("more than sixteen bytes"), 0o600)
	pol, err := policy.New(policy.Config{ReadPaths: []string{dir}, Limits: policy.Limits{MinInterval: time.Second, MaxHashSize: 16}}, policy.Secrets{})
	if err != nil {
		t.Fatal(err)
	}
	var reps []Report
	s := NewScanner(slog.New(slog.NewTextHandler(io.Discard, nil)), pol, func(r Report) { reps = append(reps, r) })
	cfg, _, _ := Parse(json.RawMessage(`{"enabled":true,"paths":["` + dir + `"]}`))
	if err := s.UpdateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	s.Scan(context.Background()) // baseline
	os.WriteFile(big, []byte("more than sixteen bytes, and longer now"), 0o600)
	os.WriteFile(filepath.Join(dir, "new.log"), []byte("also more than sixteen bytes"), 0o600)
	s.Scan(context.Background())
	if len(reps) != 1 {
		t.Fatalf("reports %+v", reps)
	}
	got := map[string]Change{}
	for _, c := range reps[0].Changes {
		got[filepath.Base(c.Path)] = c
	}
	if c := got["big.log"]; c.Change != "modified" || c.SHA256 != "" || c.ModTime == nil || c.Size != 39 {
		t.Fatalf("big file change %+v", c)
	}
	if c := got["new.log"]; c.Change != "created" || c.SHA256 != "" || c.ModTime == nil {
		t.Fatalf("new big file %+v", c)
	}
	if _, ok := got["small.conf"]; ok || len(got) != 2 {
		t.Fatalf("changes %+v", got)
	}
}

// TestPolicy: refused by default, allowed under a read root, refused again through .. or a symlink or
// below the interval floor; denied files inside an allowed root are never hashed.
func TestPolicy(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	root := filepath.Join(dir, "root")
	os.MkdirAll(filepath.Join(root, "private"), 0o700)
	os.WriteFile(filepath.Join(root, "a"), []byte("a"), 0o600)
	os.WriteFile(filepath.Join(root, "private", "key"), []byte("k"), 0o600)
	os.Symlink(dir, filepath.Join(root, "up"))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	parse := func(s string) Config {
		c, _, err := Parse(json.RawMessage(s))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	def, _ := policy.New(policy.DefaultConfig(), policy.Secrets{})
	var pe *policy.Error
	if err := NewScanner(quiet, def, nil).UpdateConfig(parse(`{"enabled":true,"paths":["` + root + `"]}`)); !errors.As(err, &pe) {
		t.Fatalf("default policy: %v", err)
	}
	pol, _ := policy.New(policy.Config{ReadPaths: []string{root}, DenyPaths: []string{filepath.Join(root, "private")}}, policy.Secrets{})
	var reps []Report
	s := NewScanner(quiet, pol, func(r Report) { reps = append(reps, r) })
	for _, bad := range []string{`{"enabled":true,"paths":["` + root + `/.."]}`, `{"enabled":true,"paths":["` + root + `/up"]}`,
		`{"enabled":true,"paths":["` + root + `"],"interval":"1s"}`} {
		if err := s.UpdateConfig(parse(bad)); !errors.As(err, &pe) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
	if err := s.UpdateConfig(parse(`{"enabled":true,"paths":["` + root + `"]}`)); err != nil {
		t.Fatal(err)
	}
	s.Scan(context.Background())
	os.WriteFile(filepath.Join(root, "private", "key"), []byte("changed"), 0o600)
	os.WriteFile(filepath.Join(root, "a"), []byte("changed"), 0o600)
	s.Scan(context.Background())
	if len(reps) != 1 || len(reps[0].Changes) != 1 || reps[0].Changes[0].Path != filepath.Join(root, "a") || reps[0].Files != 1 {
		t.Fatalf("reports %+v", reps)
	}
}
