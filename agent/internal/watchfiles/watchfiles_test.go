package watchfiles

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScanRules(t *testing.T) {
	dir := t.TempDir()
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
	s := NewScanner(slog.New(slog.NewTextHandler(io.Discard, nil)), func(r Report) { reps = append(reps, r) })
	cfg, err := Parse(json.RawMessage(`{"paths":["` + dir + `"],"exclude_patterns":["*.swp"],"sensitive_files":["*.pem"],"max_file_size":1024}`))
	if err != nil {
		t.Fatal(err)
	}
	s.UpdateConfig(cfg)
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
	s.UpdateConfig(cfg)
	s.Scan(context.Background())
	for _, f := range reps[len(reps)-1].Files {
		if f.Content != nil {
			t.Fatalf("content reported for %s", f.Path)
		}
	}
	if cfg.MaxFileSize != DefaultMaxFileSize {
		t.Fatalf("default max size %d", cfg.MaxFileSize)
	}
}
