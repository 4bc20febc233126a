//go:build unix

package policy

import (
	"os"
	"syscall"
)

// openNonBlocking opens for reading with O_NONBLOCK (a FIFO opens at once instead of waiting for a
// writer) and O_NOFOLLOW (a final component replaced by a symlink fails instead of being followed).
func openNonBlocking(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOCTTY, 0)
}
