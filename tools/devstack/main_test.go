package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine started by them is still running at the end. Run
// as `<test binary> -nats-only ...` it is devstack's nats-server process instead (startNATSProcess
// starts its own executable that way, which in a test is the test binary).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-nats-only" {
		main()
		return
	}
	goleak.VerifyTestMain(m)
}
