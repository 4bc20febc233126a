package policy

import (
	"os"
	"strconv"
)

// fdPath names the file f really is, from /proc/self/fd (false when /proc is not mounted).
func fdPath(f *os.File) (string, bool) {
	rc, err := f.SyscallConn()
	if err != nil {
		return "", false
	}
	var p string
	var rerr error
	if err := rc.Control(func(fd uintptr) {
		p, rerr = os.Readlink("/proc/self/fd/" + strconv.FormatUint(uint64(fd), 10))
	}); err != nil || rerr != nil || len(p) == 0 || p[0] != '/' {
		return "", false
	}
	return p, true
}
