//go:build !linux

package e2e

import "os/exec"

// startCmd starts cmd. Outside Linux there is no Pdeathsig: only the test's cleanups stop children.
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
