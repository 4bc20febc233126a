package secretfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/testinfra"
)

func TestReadOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	testinfra.WriteFile(t, path, []byte("secret"), 0o600)
	if got, err := ReadOwnerOnly(path); err != nil || string(got) != "secret" {
		t.Fatalf("ReadOwnerOnly = %q, %v", got, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604} {
		testinfra.WriteFile(t, path, []byte("secret"), mode)
		want := fmt.Sprintf("%s has mode %04o; it must not be accessible by group or others (chmod 600 %s)", path, mode, path)
		if _, err := ReadOwnerOnly(path); err == nil || err.Error() != want {
			t.Fatalf("mode %04o: err = %v, want %q", mode, err, want)
		}
	}
	if _, err := ReadOwnerOnly(dir); err == nil || err.Error() != dir+" is not a regular file" {
		t.Fatalf("directory: err = %v", err)
	}
	if _, err := ReadOwnerOnly(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Fatalf("missing file: err = %v", err)
	}
}

func TestReadGroupShared(t *testing.T) {
	path := testinfra.WriteFile(t, filepath.Join(t.TempDir(), "seeds.json"), []byte("{}"), 0o640)
	if got, err := ReadGroupShared(path); err != nil || string(got) != "{}" {
		t.Fatalf("group-readable: ReadGroupShared = %q, %v", got, err)
	}
	testinfra.WriteFile(t, path, []byte("{}"), 0o644)
	want := path + " is readable by everyone (mode -rw-r--r--); chmod 600 or 640 it"
	if _, err := ReadGroupShared(path); err == nil || err.Error() != want {
		t.Fatalf("world-readable: err = %v, want %q", err, want)
	}
}

func TestCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	wrote, err := Create(path, []byte("first\n"))
	if err != nil || !wrote {
		t.Fatalf("Create = %v, %v", wrote, err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, %v; want 0600", info.Mode(), err)
	}
	wrote, err = Create(path, []byte("second\n"))
	if err != nil || wrote {
		t.Fatalf("second Create = %v, %v; want false, nil", wrote, err)
	}
	if got, _ := os.ReadFile(path); string(got) != "first\n" {
		t.Fatalf("file = %q; an existing file must be kept", got)
	}
	missing := filepath.Join(t.TempDir(), "no", "key")
	if _, err := Create(missing, nil); err == nil || !strings.HasPrefix(err.Error(), "create "+missing+": ") {
		t.Fatalf("Create in a missing directory: err = %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	parse := func(s string) (int, error) {
		if s != "42" {
			return 0, errors.New("thing: not 42")
		}
		return 42, nil
	}
	good := testinfra.WriteFile(t, filepath.Join(dir, "good"), []byte("42"), 0o600)
	if v, err := Load("thing", good, parse); err != nil || v != 42 {
		t.Fatalf("Load = %d, %v", v, err)
	}
	bad := testinfra.WriteFile(t, filepath.Join(dir, "bad"), []byte("41"), 0o600)
	if _, err := Load("thing", bad, parse); err == nil || err.Error() != "thing: not 42 (in "+bad+")" {
		t.Fatalf("parse error = %v", err)
	}
	open := testinfra.WriteFile(t, filepath.Join(dir, "open"), []byte("42"), 0o644)
	want := fmt.Sprintf("thing: %s has mode 0644; it must not be accessible by group or others (chmod 600 %s)", open, open)
	if _, err := Load("thing", open, parse); err == nil || err.Error() != want {
		t.Fatalf("open file: err = %v, want %q", err, want)
	}
}
