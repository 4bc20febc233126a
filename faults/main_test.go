package faults_test

import (
	"go.uber.org/goleak"

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
	// goleak.VerifyTestMain would exit before the cleanup below; check for leaked goroutines here.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "faults: leaked goroutines:", err)
			code = 1
		}
	}
	<-buildDone
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
