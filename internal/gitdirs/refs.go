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

// ErrRefsUnsure: Refs met something whose reading git's rules decide in
// a way this package does not copy (a name git may refuse, content that
// is neither an object id nor a symbolic ref, a file that is not a
// regular one, a per-worktree ref in packed-refs); the caller asks git.
var ErrRefsUnsure = errors.New("refs not read here: ask git")

// worktreeRefDirs are the refs each worktree keeps of its own (in its git
// dir), under refs/.
var worktreeRefDirs = []string{"bisect", "worktree", "rewritten"}

// maxRefs bounds how many refs Refs reads (a repository with more is
// left to git).
const maxRefs = 1 << 20

// Refs lists the refs the worktree sees, name to object id, as `git
// for-each-ref` lists them with the files backend: the loose refs (the
// worktree's own refs/bisect, refs/worktree and refs/rewritten from its
// git dir, every other from the common dir) over packed-refs. Symbolic
// refs are left out (they move with what they name). It reads what git
// reads, without starting git (a few milliseconds each time, twice in
// each checkpoint of a linked worktree); where git's own rules would
// decide what to list, it returns [ErrRefsUnsure] or [ErrReftable], and
// the caller runs git.
func (r *Repo) Refs() (map[string]string, error) {
	if _, err := os.Lstat(filepath.Join(r.CommonDir, "reftable")); err == nil {
		return nil, fmt.Errorf("%s: %w", r.CommonDir, ErrReftable)
	}
	refs := map[string]string{}
	linked := filepath.Clean(r.GitDir) != filepath.Clean(r.CommonDir)
	skip := map[string]bool{}
	if linked {
		for _, d := range worktreeRefDirs {
			skip[d] = true // the main worktree's: not this one's
		}
	}
	// Loose refs first, packed-refs after: `git pack-refs` writes
	// packed-refs before it removes the loose files, so a ref moving
	// from one to the other meanwhile is seen in one of them.
	if err := r.looseRefs(filepath.Join(r.CommonDir, "refs"), "refs/", skip, refs); err != nil {
		return nil, err
	}
	if linked {
		for _, d := range worktreeRefDirs {
			if err := r.looseRefs(filepath.Join(r.GitDir, "refs", d), "refs/"+d+"/", nil, refs); err != nil {
				return nil, err
			}
		}
	}
	if err := r.packedRefs(refs); err != nil {
		return nil, err
	}
	for name, oid := range refs {
		if oid == "" {
			delete(refs, name) // a symbolic ref: it only held its packed namesake back
		}
	}
	return refs, nil
}

// looseRefs adds the loose refs below dir (named prefix...) to refs; a
// symbolic ref is added with no object id (it hides a packed ref of its
// name, as in git), and top-level names in skip are passed over.
func (r *Repo) looseRefs(dir, prefix string, skip map[string]bool, refs map[string]string) error {
	d, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read refs: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close() // read-only
	if err != nil {
		return fmt.Errorf("read refs %s: %w", dir, err)
	}
	for _, n := range names {
		if skip[n] || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".lock") {
			continue // as git: hidden files and locks are no refs
		}
		p, name := filepath.Join(dir, n), prefix+n
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); errors.Is(err, unix.ENOENT) {
			continue // gone meanwhile: as if read a moment earlier or later
		} else if err != nil {
			return fmt.Errorf("read refs: %s: %w", p, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := r.looseRefs(p, name+"/", nil, refs); err != nil {
				return err
			}
			continue
		case unix.S_IFREG:
		default:
			return fmt.Errorf("%s: %w", p, ErrRefsUnsure) // a symbolic link (an old symbolic ref), or stranger
		}
		if !gitRefName(name) {
			return fmt.Errorf("%s: %w", name, ErrRefsUnsure)
		}
		b, err := fsutil.ReadFileLimit(p, maxLineFile)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read ref %s: %w", name, err)
		}
		line := strings.TrimSuffix(string(b), "\n")
		switch {
		case ValidOID(line):
			refs[name] = line
		case strings.HasPrefix(line, "ref: ") && ValidRefName(line[len("ref: "):]):
			refs[name] = "" // symbolic
		default:
			return fmt.Errorf("%s: %w", p, ErrRefsUnsure) // git would warn and pass over it
		}
		if len(refs) > maxRefs {
			return fmt.Errorf("%s: more than %d refs: %w", r.CommonDir, maxRefs, ErrRefsUnsure)
		}
	}
	return nil
}

// packedRefs adds packed-refs' refs that no loose ref has named.
func (r *Repo) packedRefs(refs map[string]string) error {
	p := filepath.Join(r.CommonDir, "packed-refs")
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read packed-refs: %w", err)
	}
	defer f.Close() // read-only
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%s: %w", p, fsutil.ErrNotRegular)
	}
	s := scanner(f, maxPackedRef)
	for first := true; s.Scan(); first = false {
		line := s.Text()
		switch {
		case first && strings.HasPrefix(line, "# pack-refs with:"):
			continue
		case strings.HasPrefix(line, "^") && ValidOID(line[1:]):
			continue // the object a tag above peels to
		}
		id, name, ok := strings.Cut(line, " ")
		if !ok || !ValidOID(id) || !gitRefName(name) || worktreeRef(name) {
			return fmt.Errorf("%s: %q: %w", p, line, ErrRefsUnsure)
		}
		if _, loose := refs[name]; !loose {
			refs[name] = id
		}
		if len(refs) > maxRefs {
			return fmt.Errorf("%s: more than %d refs: %w", r.CommonDir, maxRefs, ErrRefsUnsure)
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	return nil
}

// worktreeRef reports whether name is one of a worktree's own refs.
func worktreeRef(name string) bool {
	for _, d := range worktreeRefDirs {
		if strings.HasPrefix(name, "refs/"+d+"/") {
			return true
		}
	}
	return false
}

// gitRefName reports whether git itself takes name as a ref's
// (check_refname_format's rules, stricter where in doubt): ValidRefName,
// and no component ending in a dot, no "@" alone, no character outside
// printable ASCII (whose handling varies with git's settings).
func gitRefName(name string) bool {
	if !ValidRefName(name) || name == "@" {
		return false
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasSuffix(part, ".") || strings.HasSuffix(part, ".lock") {
			return false
		}
	}
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x7f {
			return false
		}
	}
	return true
}
