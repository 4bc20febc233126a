//go:build !unix

package policy

import "os"

// openNonBlocking opens for reading; the caller refuses anything but a regular file.
func openNonBlocking(name string) (*os.File, error) { return os.Open(name) }
