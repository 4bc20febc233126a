//go:build !linux

package policy

import "os"

// fdPath is unknown on this platform: the resolve-then-open-with-O_NOFOLLOW check stands alone.
func fdPath(*os.File) (string, bool) { return "", false }
