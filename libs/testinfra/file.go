package testinfra

import (
	"os"
	"testing"
)

// WriteFile writes data to path and gives the file exactly mode (whatever the umask), for tests of
// the permission checks on key and seed files. It returns path.
func WriteFile(t testing.TB, path string, data []byte, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}
