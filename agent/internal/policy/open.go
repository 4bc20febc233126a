package policy

import (
	"fmt"
	"io/fs"
	"os"
)

// OpenFile resolves name, checks it against the read rules and opens it for reading without blocking
// and without following a symlink swapped in since the check. Anything but a regular file (a FIFO, a
// device, a directory) is closed and refused, so a remote config cannot make the agent hang on a pipe.
// Where the platform tells which file a descriptor really is (Linux: /proc/self/fd), that path is
// checked again, so a directory swapped for a symlink between the check and the open is caught too.
func (p *Policy) OpenFile(name string) (*os.File, fs.FileInfo, error) {
	real, err := p.Resolved(name)
	if err != nil {
		return nil, nil, err
	}
	return p.open(name, real)
}

// OpenResolved is OpenFile for a path that is already resolved (a file met while walking a resolved
// root): it is checked as is, then opened and verified like OpenFile.
func (p *Policy) OpenResolved(real string) (*os.File, fs.FileInfo, error) {
	if err := p.CheckResolved(real); err != nil {
		return nil, nil, err
	}
	return p.open(real, real)
}

func (p *Policy) open(name, real string) (*os.File, fs.FileInfo, error) {
	f, err := openNonBlocking(real)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is not a regular file (%s)", name, st.Mode().Type())
	}
	if opened, ok := fdPath(f); ok && opened != real {
		if err := p.CheckResolved(opened); err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	return f, st, nil
}
