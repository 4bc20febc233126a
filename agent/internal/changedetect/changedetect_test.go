package changedetect

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestScanReportsChanges(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.conf"), filepath.Join(dir, "sub", "b.conf")
	os.MkdirAll(filepath.Dir(b), 0o700)
	os.WriteFile(a, []byte("one"), 0o600)
	os.WriteFile(b, []byte("two"), 0o600)
	var reps []Report
	s := NewScanner(slog.New(slog.NewTextHandler(io.Discard, nil)), func(r Report) { reps = append(reps, r) })

	cfg, every, err := Parse(json.RawMessage(`{"enabled":false,"paths":["` + dir + `"],"interval":"1s"}`))
	if err != nil || every != 0 {
		t.Fatalf("disabled: %v %v", every, err)
	}
	s.UpdateConfig(cfg)
	s.Scan(context.Background())
	if s.Scans() != 0 {
		t.Fatal("disabled scanner scanned")
	}

	cfg, every, _ = Parse(json.RawMessage(`{"enabled":true,"paths":["` + dir + `"],"interval":"1s"}`))
	if every != time.Second {
		t.Fatalf("interval %v", every)
	}
	s.UpdateConfig(cfg)
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
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "x"), []byte("x"), 0o600)
	cfg, _, _ = Parse(json.RawMessage(`{"enabled":true,"paths":["` + other + `"]}`))
	s.UpdateConfig(cfg)
	s.Scan(context.Background())
	if len(reps) != 1 {
		t.Fatal("files coming into scope reported as created")
	}
	if _, d, _ := Parse(json.RawMessage(`{"enabled":true}`)); d != DefaultInterval {
		t.Fatalf("default interval %v", d)
	}
}
