package localstack

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadPIDFile: devstack's nats-server pid is read when the file holds one, and 0 (no separate
// process) when it is missing or holds no pid.
func TestReadPIDFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"ok": "4242\n", "garbage": "nats\n", "negative": "-3\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]int{"ok": 4242, "garbage": 0, "negative": 0, "missing": 0} {
		if got := readPIDFile(filepath.Join(dir, name)); got != want {
			t.Errorf("%s: pid %d, want %d", name, got, want)
		}
	}
}

// TestStackPIDs: the stack's processes are devstack and, when it runs one, its nats-server process.
func TestStackPIDs(t *testing.T) {
	if got := (&Stack{PID: 10}).PIDs(); len(got) != 1 || got[0] != 10 {
		t.Errorf("without a nats-server process: %v, want [10]", got)
	}
	if got := (&Stack{PID: 10, NATSPID: 11}).PIDs(); len(got) != 2 || got[0] != 10 || got[1] != 11 {
		t.Errorf("with one: %v, want [10 11]", got)
	}
}
