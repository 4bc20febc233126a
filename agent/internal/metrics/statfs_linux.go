package metrics

import "syscall"

func statfs(path string) (total, free, avail uint64, err error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(path, &s); err != nil {
		return 0, 0, 0, err
	}
	bs := uint64(s.Bsize)
	return s.Blocks * bs, s.Bfree * bs, s.Bavail * bs, nil
}
