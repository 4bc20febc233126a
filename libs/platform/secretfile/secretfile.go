// Package secretfile reads and creates the files that hold a service's key material (cipher keys,
// signing keys, NATS seeds), refusing a file that other users could read: a key readable by other
// users is a leaked key. Errors name the file and its mode, never its content; callers prefix them
// with their own package name.
package secretfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ReadOwnerOnly reads path, which must be a regular file that neither group nor others can access
// (mode 0600 or stricter). The caller clears the returned bytes when done with them.
func ReadOwnerOnly(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o; it must not be accessible by group or others (chmod 600 %s)", path, perm, path)
	}
	return os.ReadFile(path)
}

// Load reads path as ReadOwnerOnly does and returns what parse makes of its content, clearing the
// bytes read. A read error is prefixed with name ("<name>: ..."); a parse error, which names its
// package already, gets the file appended ("... (in <path>)").
func Load[T any](name, path string, parse func(string) (T, error)) (T, error) {
	var zero T
	data, err := ReadOwnerOnly(path)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", name, err)
	}
	defer clear(data)
	v, err := parse(string(data))
	if err != nil {
		return zero, fmt.Errorf("%w (in %s)", err, path)
	}
	return v, nil
}

// ReadGroupShared reads path, which others must not be able to read; its group may (a Kubernetes
// Secret mounted for a non-root pod is 0440 via fsGroup). The caller clears the returned bytes when
// done with them.
func ReadGroupShared(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("%s is readable by everyone (mode %v); chmod 600 or 640 it", path, info.Mode().Perm())
	}
	return os.ReadFile(path)
}

// Create writes data to a new file at path with mode 0600 unless a file is already there, and reports
// whether it wrote one. A failed write removes the partial file. Errors say which step failed
// ("create <path>: ..." or "write <path>: ...").
func Create(path string, data []byte) (bool, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create %s: %w", path, err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(path)
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}
