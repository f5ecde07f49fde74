package gitdirs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// Head is what a worktree's HEAD says: the branch it is on (Ref, "" when
// detached) and the commit it names (OID, "" on a branch not born yet).
type Head struct {
	Ref string `json:"ref,omitempty"`
	OID string `json:"oid,omitempty"`
}

// String says it as git would: "refs/heads/main at 1a2b3c4".
func (h Head) String() string {
	oid := h.OID
	if len(oid) > 12 {
		oid = oid[:12]
	}
	switch {
	case h.Ref == "":
		return "detached at " + oid
	case oid == "":
		return h.Ref + " (no commit yet)"
	}
	return h.Ref + " at " + oid
}

// maxSymrefDepth bounds a chain of symbolic refs, as git does.
const maxSymrefDepth = 5

// ReadHead reads the worktree's HEAD and the commit it resolves to,
// through the loose ref or packed-refs.
func (r *Repo) ReadHead() (Head, error) {
	b, err := fsutil.ReadFileLimit(filepath.Join(r.GitDir, "HEAD"), maxLineFile)
	if err != nil {
		return Head{}, fmt.Errorf("read HEAD: %w", err)
	}
	line := oneLine(b)
	if ValidOID(line) {
		return Head{OID: line}, nil
	}
	ref, ok := strings.CutPrefix(line, "ref: ")
	if !ok || !ValidRefName(ref) {
		return Head{}, fmt.Errorf("%s: %w: neither a ref nor an object id", filepath.Join(r.GitDir, "HEAD"), ErrBadGitFile)
	}
	h := Head{Ref: ref}
	for i := 0; ; i++ {
		oid, next, err := r.readRef(ref)
		if err != nil || next == "" {
			h.OID = oid
			return h, err
		}
		if i == maxSymrefDepth {
			return Head{}, fmt.Errorf("ref %s: %w: symbolic refs nested too deep", h.Ref, ErrBadGitFile)
		}
		ref = next
	}
}

// readRef returns a ref's object id, or the ref it points to (a
// symbolic ref); neither for a ref that does not exist.
func (r *Repo) readRef(name string) (oid, symref string, err error) {
	if _, err := os.Lstat(filepath.Join(r.CommonDir, "reftable")); err == nil {
		return "", "", fmt.Errorf("%s: %w", r.CommonDir, ErrReftable)
	}
	p := filepath.Join(r.refDir(name), filepath.FromSlash(name))
	b, err := fsutil.ReadFileLimit(p, maxLineFile)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR), errors.Is(err, fsutil.ErrNotRegular) && isDir(p):
		return r.packedRef(name)
	case err != nil:
		return "", "", fmt.Errorf("read ref %s: %w", name, err)
	}
	line := oneLine(b)
	if ValidOID(line) {
		return line, "", nil
	}
	if next, ok := strings.CutPrefix(line, "ref: "); ok && ValidRefName(next) {
		return "", next, nil
	}
	return "", "", fmt.Errorf("%s: %w: not an object id", p, ErrBadGitFile)
}

// refDir is where a ref lives: a worktree's own refs (bisect, worktree,
// rewritten) in its git dir, every other in the common dir.
func (r *Repo) refDir(name string) string {
	if worktreeRef(name) {
		return r.GitDir
	}
	return r.CommonDir
}

// packedRef looks a ref up in packed-refs, reading it a line at a time.
func (r *Repo) packedRef(name string) (oid, symref string, err error) {
	p := filepath.Join(r.CommonDir, "packed-refs")
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read packed-refs: %w", err)
	}
	defer f.Close() // read-only
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", "", fmt.Errorf("%s: %w", p, fsutil.ErrNotRegular)
	}
	s := scanner(f, maxPackedRef)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue // the header, and peeled tags
		}
		id, ref, ok := strings.Cut(line, " ")
		if ok && ref == name {
			if !ValidOID(id) {
				return "", "", fmt.Errorf("%s: %w: %s: not an object id", p, ErrBadGitFile, name)
			}
			return id, "", nil
		}
	}
	if err := s.Err(); err != nil {
		return "", "", fmt.Errorf("read %s: %w", p, err)
	}
	return "", "", nil
}

func isDir(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.IsDir()
}

// ValidOID reports whether s is a full object id: 40 (SHA-1) or 64
// (SHA-256) lowercase hex digits.
func ValidOID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidRefName reports whether s is a ref name this package will look
// up: under refs/, with git's rules that matter for a path (no "..", no
// empty or dot-led component, no control character, backslash or
// space), so that it can never name a file outside the git dir.
func ValidRefName(s string) bool {
	if !strings.HasPrefix(s, "refs/") || len(s) > 1024 || strings.HasSuffix(s, ".lock") || strings.Contains(s, "..") || strings.Contains(s, "@{") {
		return false
	}
	for _, part := range strings.Split(s, "/") {
		if part == "" || part[0] == '.' {
			return false
		}
	}
	for _, c := range []byte(s) {
		if c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\", c) >= 0 {
			return false
		}
	}
	return true
}
