//go:build !linux

package metrics

import "errors"

func statfs(string) (total, free, avail uint64, err error) {
	return 0, 0, 0, errors.New("disk statistics are only collected on Linux")
}
