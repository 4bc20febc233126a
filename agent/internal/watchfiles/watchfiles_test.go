package watchfiles

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configsync/configsync/agent/internal/policy"
)

func mustPolicy(t *testing.T, c policy.Config) *policy.Policy {
	t.Helper()
	p, err := policy.New(c, policy.Secrets{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestScanRules(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	files := map[string]string{
		"app.conf":        "port=80",
		"app.conf.swp":    "junk",
		"secrets/key.pem": "PRIVATE KEY MATERIAL",
		"big.log":         strings.Repeat("x", 2048),
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		os.WriteFile(p, []byte(content), 0o600)
	}
	var reps []Report
	pol := mustPolicy(t, policy.Config{ReadPaths: []string{dir}, UploadFileContents: true})
	s := NewScanner(quiet(), pol, func(r Report) { reps = append(reps, r) })
	cfg, err := Parse(json.RawMessage(`{"paths":["` + dir + `"],"exclude_patterns":["*.swp"],"sensitive_files":["*.pem"],"max_file_size":1024}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	s.Scan(context.Background())
	if len(reps) != 1 || !reps[0].Full {
		t.Fatalf("reports %+v", reps)
	}
	byName := map[string]File{}
	for _, f := range reps[0].Files {
		byName[filepath.Base(f.Path)] = f
	}
	if _, ok := byName["app.conf.swp"]; ok || len(byName) != 3 {
		t.Fatalf("files %v", byName)
	}
	if f := byName["app.conf"]; f.Content == nil || *f.Content != "port=80" || f.SHA256 == "" {
		t.Fatalf("app.conf %+v", f)
	}
	if f := byName["key.pem"]; f.Content != nil || !f.Sensitive || f.SHA256 == "" {
		t.Fatalf("sensitive file %+v", f)
	}
	b, _ := json.Marshal(reps[0])
	if strings.Contains(string(b), "PRIVATE KEY") {
		t.Fatal("sensitive content in the report")
	}
	if f := byName["big.log"]; !f.TooLarge || f.Content != nil || f.SHA256 != "" {
		t.Fatalf("large file %+v", f)
	}
	// Only changes are reported afterwards.
	s.Scan(context.Background())
	if len(reps) != 1 {
		t.Fatal("unchanged scan reported")
	}
	os.WriteFile(filepath.Join(dir, "app.conf"), []byte("port=8080"), 0o600)
	os.Remove(filepath.Join(dir, "big.log"))
	s.Scan(context.Background())
	if len(reps) != 2 || len(reps[1].Files) != 1 || *reps[1].Files[0].Content != "port=8080" || len(reps[1].Removed) != 1 {
		t.Fatalf("change report %+v", reps[len(reps)-1])
	}
	// A new config: sensitive everything, full report again.
	cfg, _ = Parse(json.RawMessage(`{"paths":["` + dir + `"],"sensitive_files":["*"]}`))
	if err := s.UpdateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	s.Scan(context.Background())
	for _, f := range reps[len(reps)-1].Files {
		if f.Content != nil {
			t.Fatalf("content reported for %s", f.Path)
		}
	}
	if cfg.MaxFileSize != 0 || s.cfg.MaxFileSize != DefaultMaxFileSize {
		t.Fatalf("default max size %d, %d", cfg.MaxFileSize, s.cfg.MaxFileSize)
	}
}

// TestPolicy: paths outside the read roots are refused (by default and through .. or a symlink), the
// deny list wins inside an allowed root, contents are sent only when the policy allows it, the file
// size cap and the per-scan file limit hold, and a refused config keeps the running one.
func TestPolicy(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	root := filepath.Join(dir, "root")
	for name, content := range map[string]string{"a.conf": "a=1", "b.conf": "b=2", "c.conf": "c=3", "private/key": "KEY"} {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		os.WriteFile(p, []byte(content), 0o600)
	}
	os.WriteFile(filepath.Join(dir, "outside.conf"), []byte("o"), 0o600)
	os.Symlink("..", filepath.Join(root, "up"))

	var reps []Report
	def := NewScanner(quiet(), mustPolicy(t, policy.DefaultConfig()), func(r Report) { reps = append(reps, r) })
	cfg, _ := Parse(json.RawMessage(`{"paths":["` + root + `"]}`))
	var pe *policy.Error
	if err := def.UpdateConfig(cfg); !errors.As(err, &pe) || pe.Rule != policy.RuleReadPaths ||
		!strings.HasPrefix(err.Error(), "watch_files: paths[0]: policy: read_paths: ") {
		t.Fatalf("default policy: %v", err)
	}
	def.Scan(context.Background())
	if len(reps) != 0 {
		t.Fatal("a refused config was scanned")
	}

	pol := mustPolicy(t, policy.Config{ReadPaths: []string{root}, DenyPaths: []string{filepath.Join(root, "private")},
		Limits: policy.Limits{MaxFiles: 2, MaxFileSize: 4096}})
	s := NewScanner(quiet(), pol, func(r Report) { reps = append(reps, r) })
	for _, bad := range []string{root + "/../outside.conf", filepath.Join(root, "up"), filepath.Join(root, "private"), "/"} {
		c, _ := Parse(json.RawMessage(`{"paths":["` + bad + `"]}`))
		if err := s.UpdateConfig(c); !errors.As(err, &pe) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
	c, _ := Parse(json.RawMessage(`{"paths":["` + root + `"],"max_file_size":8192}`))
	if err := s.UpdateConfig(c); !errors.As(err, &pe) || pe.Rule != policy.RuleLimits {
		t.Fatalf("max_file_size above the cap: %v", err)
	}
	if err := s.UpdateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	s.Scan(context.Background())
	if len(reps) != 1 || len(reps[0].Files) != 2 {
		t.Fatalf("want 2 files (max_files), got %+v", reps)
	}
	for _, f := range reps[0].Files {
		if f.Content != nil || f.SHA256 == "" || strings.Contains(f.Path, "private") {
			t.Fatalf("file %+v", f)
		}
	}

	// Lift the file limit: every file but the denied one, still by hash only.
	pol = mustPolicy(t, policy.Config{ReadPaths: []string{root}, DenyPaths: []string{filepath.Join(root, "private")}})
	s = NewScanner(quiet(), pol, func(r Report) { reps = append(reps, r) })
	if err := s.UpdateConfig(cfg); err != nil {
		t.Fatal(err)
	}
	s.Scan(context.Background())
	last := reps[len(reps)-1]
	if len(last.Files) != 3 {
		t.Fatalf("files %+v", last.Files)
	}
	b, _ := json.Marshal(last)
	if strings.Contains(string(b), "KEY") || strings.Contains(string(b), "a=1") {
		t.Fatalf("content sent without upload_file_contents: %s", b)
	}
}
