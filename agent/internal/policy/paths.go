package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// Resolve returns the real absolute path that p names: "." and ".." applied after each symlink is
// followed, exactly as the kernel walks it (a lexical Clean before resolving would let
// "/allowed/link/../x" escape). The part of p below the first component that does not exist, or that
// the agent may not look into, is appended lexically: nothing can be opened through it, and the path
// is resolved again when the agent actually opens something.
func Resolve(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errors.New("path contains a NUL byte")
	}
	dest := "/"
	rest := p
	links := 0
	for {
		rest = strings.TrimLeft(rest, "/")
		if rest == "" {
			return dest, nil
		}
		comp, tail, _ := strings.Cut(rest, "/")
		rest = tail
		switch comp {
		case ".":
			continue
		case "..":
			dest = filepath.Dir(dest)
			continue
		}
		next := filepath.Join(dest, comp)
		fi, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrPermission) ||
				errors.Is(err, syscall.ENAMETOOLONG) {
				return filepath.Clean(next + "/" + rest), nil
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			dest = next
			continue
		}
		links++
		if links > 255 {
			return "", errors.New("too many levels of symbolic links")
		}
		link, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(link) {
			dest = "/"
		}
		rest = link + "/" + rest
	}
}

// pattern is a path of segments, each a literal or a path.Match pattern. A pattern covers a path
// when the path's first segments match all of the pattern's: the entry and everything under it.
type pattern struct {
	raw  string
	segs []string
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

func joinSegs(segs []string) string { return "/" + strings.Join(segs, "/") }

// resolvedPatterns turns a policy entry into patterns: its literal leading segments are resolved
// through symlinks (the entry as written is kept too, so a link named in a deny list stays denied
// under its own name as well).
func resolvedPatterns(entry string) ([]pattern, error) {
	if !filepath.IsAbs(entry) {
		return nil, fmt.Errorf("%q is not an absolute path", entry)
	}
	clean := filepath.Clean(entry)
	segs := splitPath(clean)
	for _, s := range segs {
		if _, err := path.Match(s, ""); err != nil {
			return nil, fmt.Errorf("%q: bad pattern: %w", entry, err)
		}
	}
	k := 0
	for k < len(segs) && !hasMeta(segs[k]) {
		k++
	}
	out := []pattern{{raw: clean, segs: segs}}
	realPrefix, err := Resolve(joinSegs(segs[:k]))
	if err != nil {
		return nil, fmt.Errorf("%q: %w", entry, err)
	}
	resolved := append(splitPath(realPrefix), segs[k:]...)
	if joinSegs(resolved) != joinSegs(segs) {
		out = append(out, pattern{raw: clean, segs: resolved})
	}
	return out, nil
}

func segMatch(pat, s string) bool {
	if !hasMeta(pat) {
		return pat == s
	}
	ok, err := path.Match(pat, s)
	return err == nil && ok
}

// covers reports whether pat covers the path of segs (the path itself or an ancestor matches).
func (pat pattern) covers(segs []string) bool {
	if len(segs) < len(pat.segs) {
		return false
	}
	for i, ps := range pat.segs {
		if !segMatch(ps, segs[i]) {
			return false
		}
	}
	return true
}

// CheckRead resolves p and refuses it unless it lies under a read root and under no deny entry.
func (p *Policy) CheckRead(name string) error {
	if !filepath.IsAbs(name) {
		return refuse(RuleReadPaths, "%q is not an absolute path", name)
	}
	real, err := Resolve(name)
	if err != nil {
		return refuse(RuleReadPaths, "%s: cannot resolve: %v", name, err)
	}
	return p.check(name, real)
}

// CheckResolved is CheckRead for a path known to be resolved already (a file met while walking a
// resolved root, which does not follow symlinks).
func (p *Policy) CheckResolved(real string) error { return p.check(real, real) }

// Resolved resolves name and checks it: the path to open, or the refusal.
func (p *Policy) Resolved(name string) (string, error) {
	if !filepath.IsAbs(name) {
		return "", refuse(RuleReadPaths, "%q is not an absolute path", name)
	}
	real, err := Resolve(name)
	if err != nil {
		return "", refuse(RuleReadPaths, "%s: cannot resolve: %v", name, err)
	}
	return real, p.check(name, real)
}

func (p *Policy) check(name, real string) error {
	shown := name
	if real != name {
		shown = fmt.Sprintf("%s (resolved to %s)", name, real)
	}
	segs := splitPath(real)
	for _, d := range p.deny {
		if d.pat.covers(segs) {
			return refuse(RuleReadPaths, "%s is denied (%s)", shown, d.source)
		}
	}
	for _, r := range p.read {
		if r.covers(segs) {
			return nil
		}
	}
	if len(p.read) == 0 {
		return refuse(RuleReadPaths, "%s: file reads are off (policy.read_paths is empty)", shown)
	}
	return refuse(RuleReadPaths, "%s is outside policy.read_paths", shown)
}

// CheckReadPattern checks a glob of files (log_collection tails them through Fluent Bit, which the
// agent does not control): it has no "..", its literal leading directories are resolved, every path it
// can match must lie under a read root, it must not be able to match anything denied, and every file it
// matches now must pass CheckRead (a symlink below a wildcard, which Fluent Bit would follow, cannot
// lead out). Files appearing later are Fluent Bit's to open: run it unprivileged too.
func (p *Policy) CheckReadPattern(glob string) error {
	if !filepath.IsAbs(glob) {
		return refuse(RuleReadPaths, "%q is not an absolute path", glob)
	}
	for _, s := range strings.Split(glob, "/") {
		// Below a wildcard, ".." would be resolved by whatever directory matched, symlinks included,
		// which no check made here can see: a pattern has no "..".
		if s == ".." {
			return refuse(RuleReadPaths, "%s: \"..\" is not allowed in a file pattern", glob)
		}
	}
	segs := splitPath(filepath.Clean(glob))
	for _, s := range segs {
		if _, err := path.Match(s, ""); err != nil {
			return refuse(RuleReadPaths, "%s: bad pattern", glob)
		}
	}
	k := 0
	for k < len(segs) && !hasMeta(segs[k]) {
		k++
	}
	real, err := Resolve(joinSegs(segs[:k]))
	if err != nil {
		return refuse(RuleReadPaths, "%s: cannot resolve: %v", glob, err)
	}
	lit := splitPath(real)
	full := append(append([]string{}, lit...), segs[k:]...)
	shown := glob
	if joinSegs(full) != filepath.Clean(glob) {
		shown = fmt.Sprintf("%s (resolved to %s)", glob, joinSegs(full))
	}
	for _, d := range p.deny {
		if overlaps(full, d.pat.segs) {
			return refuse(RuleReadPaths, "%s could match %s, which is denied (%s)", shown, d.pat.raw, d.source)
		}
	}
	covered := false
	for _, r := range p.read {
		if coversAll(r.segs, full, len(lit)) {
			covered = true
			break
		}
	}
	if !covered {
		if len(p.read) == 0 {
			return refuse(RuleReadPaths, "%s: file reads are off (policy.read_paths is empty)", shown)
		}
		return refuse(RuleReadPaths, "%s is outside policy.read_paths", shown)
	}
	// What the glob matches now, through symlinks below its wildcards (Fluent Bit follows them): each
	// match must pass as a plain read would.
	matches, _ := filepath.Glob(joinSegs(full))
	for _, m := range matches {
		if err := p.CheckRead(m); err != nil {
			detail := err.Error()
			var pe *Error
			if errors.As(err, &pe) {
				detail = pe.Detail
			}
			return refuse(RuleReadPaths, "%s matches %s: %s", glob, m, detail)
		}
	}
	return nil
}

// coversAll reports whether the root covers every path the glob full can match: each root segment must
// match a literal segment of full (the first nlit are literal), or equal full's pattern segment.
func coversAll(root, full []string, nlit int) bool {
	if len(full) < len(root) {
		return false
	}
	for i, rs := range root {
		if i < nlit || !hasMeta(full[i]) {
			if !segMatch(rs, full[i]) {
				return false
			}
		} else if rs != full[i] {
			return false
		}
	}
	return true
}

// overlaps reports whether a path matched by the glob full can be covered by the deny pattern d.
// Two pattern segments are taken to overlap (no attempt to intersect globs: refusing is safe).
func overlaps(full, d []string) bool {
	if len(full) < len(d) {
		return false
	}
	for i, ds := range d {
		fs := full[i]
		switch {
		case !hasMeta(fs) && !hasMeta(ds):
			if fs != ds {
				return false
			}
		case !hasMeta(fs):
			if !segMatch(ds, fs) {
				return false
			}
		case !hasMeta(ds):
			if !segMatch(fs, ds) {
				return false
			}
		}
	}
	return true
}
