package faults_test

import (
	"fmt"
	"os"
	"testing"
)

// TestMain builds the binaries of the process-based scenarios in the background while the in-process
// ones run, and removes them afterwards.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "configsync-faults-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults: temp dir for binaries:", err)
		os.Exit(1)
	}
	binDir = dir
	go buildBinaries()
	code := m.Run()
	<-buildDone
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
