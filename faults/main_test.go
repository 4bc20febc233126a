package faults_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
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
	// The background build is not a leak: wait for it first (a -run that picks only in-process scenarios
	// ends before it does). goleak.VerifyTestMain would exit before the cleanup below; check here.
	<-buildDone
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "faults: leaked goroutines:", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
