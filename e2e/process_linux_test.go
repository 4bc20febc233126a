package e2e

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

var (
	spawnOnce sync.Once
	spawns    = make(chan func())
)

// startCmd starts cmd so that the kernel kills it when the test process goes away without running its
// cleanups (a go test -timeout panic, a crash): no service outlives the test. Pdeathsig fires when the
// starting *thread* exits, so every child is started from one goroutine locked to its thread for the
// life of the process.
func startCmd(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	spawnOnce.Do(func() {
		go func() {
			runtime.LockOSThread()
			for f := range spawns {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawns <- func() { errc <- cmd.Start() }
	return <-errc
}
