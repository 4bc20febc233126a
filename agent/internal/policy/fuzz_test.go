package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCheckRead throws arbitrary paths at the matcher over a tree with symlinks pointing inside,
// outside and into a denied directory. Whenever the real file system can resolve a path (EvalSymlinks,
// the oracle), Resolve must agree with it, and an allowed path must really lie under the allowed root
// and outside the denied one. Nothing may panic, patterns included.
func FuzzCheckRead(f *testing.F) {
	dir, err := os.MkdirTemp("", "policy-fuzz-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	dir, _ = filepath.EvalSymlinks(dir)
	allowed := filepath.Join(dir, "allowed")
	denied := filepath.Join(allowed, "private")
	for _, p := range []string{"allowed/a/file", "allowed/private/key", "outside/secret", "file"} {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(full, nil, 0o600); err != nil {
			f.Fatal(err)
		}
	}
	links := map[string]string{
		"allowed/up":      "..",
		"allowed/out":     "../outside",
		"allowed/abs":     filepath.Join(dir, "outside"),
		"allowed/priv":    "private",
		"allowed/a/back":  "../../allowed",
		"allowed/a/self":  ".",
		"allowed/loop":    "loop",
		"allowed/dangle":  "nowhere/else",
		"allowed/rootlnk": "/",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			f.Fatal(err)
		}
	}
	p, err := New(Config{ReadPaths: []string{allowed}, DenyPaths: []string{denied}}, Secrets{})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"a/file", "../outside/secret", "up/outside/secret", "out/secret", "abs/../file",
		"priv/key", "a/back/private/key", "a/self/self/file", "loop", "dangle", "rootlnk/etc/shadow",
		"a/../../file", "out/../allowed/a/file", "./a//file/", "a/file/..", "*/key", "pri?ate/[k]ey"} {
		f.Add(s)
	}
	under := func(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 || len(s) > 512 {
			return
		}
		name := allowed + "/" + s
		err := p.CheckRead(name)
		_ = p.CheckReadPattern(name)
		got, rerr := Resolve(name)
		real, eerr := filepath.EvalSymlinks(name)
		if eerr != nil {
			return
		}
		if rerr != nil || got != real {
			t.Fatalf("Resolve(%q) = %q, %v; EvalSymlinks says %q", name, got, rerr, real)
		}
		if err == nil && (!under(real, allowed) || under(real, denied)) {
			t.Fatalf("%q allowed but it is %q", name, real)
		}
		if err != nil && under(real, allowed) && !under(real, denied) {
			t.Fatalf("%q refused but it is %q, inside the allowed root: %v", name, real, err)
		}
	})
}
