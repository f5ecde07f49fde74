// Package gitdirs finds the git directories a project's state lives in,
// and says which of them lie outside the project's root.
//
// A plain repository keeps its git dir at <root>/.git, inside the tree
// snapback protects. A linked worktree (`git worktree add`) and a
// submodule do not: their `.git` is a file naming a git dir elsewhere
// (<main>/.git/worktrees/<name>, <super>/.git/modules/<name>), whose
// `commondir` names the repository's common dir (branches, tags,
// objects). GIT_DIR, GIT_COMMON_DIR, GIT_WORK_TREE and core.worktree move
// them anywhere, and a root below the top of a work tree leaves the whole
// git dir above it. A `git commit` run there changes HEAD, the index and
// the branch outside the root: [Find] locates those directories and
// [Repo.Uncovered] lists the ones a snapshot of the root does not hold.
//
// # Reading, not running git
//
// Find reads `.git`, `commondir`, `HEAD` and the refs itself, as git's
// own setup does, instead of running `git rev-parse`: it works where git
// is not installed, runs nothing a repository's config names, costs a few
// system calls where a git process costs milliseconds (twice per run and
// per checkpoint), and treats every file as outside input: each read is
// bounded, a FIFO or device is refused unread, and the files it parses
// are checked (a ref name, an object id). What it does not read: config
// includes, per-worktree config (extensions.worktreeConfig) and the
// reftable ref format ([ErrReftable]).
package gitdirs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// Bounds on what is read: a `.git` file, `commondir`, `HEAD` or a loose
// ref is one short line; a config is small; packed-refs is streamed.
const (
	maxLineFile  = 4 << 10
	maxConfig    = 1 << 20
	maxPackedRef = 4 << 10 // one line of packed-refs
)

// Errors of Find and ReadHead.
var (
	// ErrBadGitFile: a `.git` file, `commondir` or HEAD does not say what
	// git expects there.
	ErrBadGitFile = errors.New("not a git file")
	// ErrReftable: the repository keeps its refs in the reftable format,
	// which this package does not read.
	ErrReftable = errors.New("refs in the reftable format are not read")
)

// How a git dir was found.
const (
	ViaDir    = ".git directory"
	ViaFile   = ".git file"
	ViaGitDir = "GIT_DIR"
)

// Repo is where git keeps the state of one work tree.
type Repo struct {
	// GitDir is the per-worktree git dir: HEAD, the index, logs/HEAD.
	GitDir string
	// CommonDir holds what the worktrees of a repository share:
	// branches, tags, packed-refs, objects, config. It is GitDir itself
	// for a repository's main worktree.
	CommonDir string
	// WorkTree is the top of the work tree git uses, "" for a bare one.
	WorkTree string
	// Via says how GitDir was found (ViaDir, ViaFile, ViaGitDir).
	Via string
}

// Find finds the repository whose work tree holds dir, as git would
// from there with the environment getenv gives (os.Getenv, in
// production): GIT_DIR and GIT_COMMON_DIR first, else the nearest `.git`
// (a directory or a file naming one) in dir or its ancestors, stopping at
// GIT_CEILING_DIRECTORIES and, as git does by default, at a filesystem
// boundary. It returns nil and no error when dir is in no repository.
// Paths in the result are absolute and clean; symbolic links in them are
// not resolved.
func Find(dir string, getenv func(string) string) (*Repo, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("find git dir: %w", err)
	}
	var r *Repo
	if gd := getenv("GIT_DIR"); gd != "" {
		r = &Repo{GitDir: absFrom(dir, gd), Via: ViaGitDir, WorkTree: dir}
		if err := checkGitDir(r.GitDir); err != nil {
			return nil, fmt.Errorf("GIT_DIR %s: %w", r.GitDir, err)
		}
	} else if r, err = discover(dir, getenv); err != nil || r == nil {
		return nil, err
	}
	if r.CommonDir, err = commonDir(r.GitDir, getenv); err != nil {
		return nil, err
	}
	if err := r.setWorkTree(dir, getenv); err != nil {
		return nil, err
	}
	return r, nil
}

// Open describes the repository of a known git dir (one a snapshot
// record names), finding its common dir as Find does.
func Open(gitDir string) (*Repo, error) {
	if !filepath.IsAbs(gitDir) {
		return nil, fmt.Errorf("git dir %q: %w: not an absolute path", gitDir, ErrBadGitFile)
	}
	r := &Repo{GitDir: filepath.Clean(gitDir)}
	if err := checkGitDir(r.GitDir); err != nil {
		return nil, fmt.Errorf("git dir %s: %w", r.GitDir, err)
	}
	var err error
	if r.CommonDir, err = commonDir(r.GitDir, func(string) string { return "" }); err != nil {
		return nil, err
	}
	return r, nil
}

// discover walks up from dir to the nearest `.git`.
func discover(dir string, getenv func(string) string) (*Repo, error) {
	ceilings := map[string]bool{}
	for _, c := range filepath.SplitList(getenv("GIT_CEILING_DIRECTORIES")) {
		if filepath.IsAbs(c) {
			ceilings[filepath.Clean(c)] = true
		}
	}
	across := getenv("GIT_DISCOVERY_ACROSS_FILESYSTEM")
	crossFS := across == "1" || strings.EqualFold(across, "true") || strings.EqualFold(across, "yes")
	var startDev uint64
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, fmt.Errorf("find git dir: %s: %w", dir, err)
	}
	startDev = uint64(st.Dev)
	for d := dir; ; {
		r, err := gitAt(d)
		if err != nil || r != nil {
			return r, err
		}
		up := filepath.Dir(d)
		if up == d || ceilings[up] {
			return nil, nil
		}
		if !crossFS {
			if err := unix.Stat(up, &st); err != nil || uint64(st.Dev) != startDev {
				return nil, nil // git stops here too (GIT_DISCOVERY_ACROSS_FILESYSTEM)
			}
		}
		d = up
	}
}

// gitAt reports the git dir that d/.git is or names, if it is one.
func gitAt(d string) (*Repo, error) {
	p := filepath.Join(d, ".git")
	// Followed, as git follows it: a `.git` that is a symbolic link to a
	// git dir elsewhere puts that dir outside the root.
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("find git dir: %w", err)
	case st.IsDir():
		if checkGitDir(p) != nil {
			return nil, nil // not a repository: git walks on past it too
		}
		return &Repo{GitDir: p, Via: ViaDir, WorkTree: d}, nil
	}
	target, err := readGitFile(p)
	if err != nil {
		return nil, err
	}
	gd := absFrom(d, target)
	if err := checkGitDir(gd); err != nil {
		return nil, fmt.Errorf("%s names %s: %w", p, gd, err)
	}
	return &Repo{GitDir: gd, Via: ViaFile, WorkTree: d}, nil
}

// readGitFile reads a `.git` file: "gitdir: PATH".
func readGitFile(p string) (string, error) {
	b, err := fsutil.ReadFileLimitFollow(p, maxLineFile)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	line := oneLine(b)
	target, ok := strings.CutPrefix(line, "gitdir: ")
	if !ok || target == "" || strings.ContainsRune(target, 0) {
		return "", fmt.Errorf("%s: %w: it does not say \"gitdir: PATH\"", p, ErrBadGitFile)
	}
	return target, nil
}

// checkGitDir applies git's test for a git dir: a HEAD, and objects and
// refs (in it or in its common dir).
func checkGitDir(gd string) error {
	st, err := os.Stat(gd)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: not a directory", ErrBadGitFile)
	}
	if _, err := os.Lstat(filepath.Join(gd, "HEAD")); err != nil {
		return fmt.Errorf("%w: no HEAD", ErrBadGitFile)
	}
	return nil
}

// commonDir reads GIT_COMMON_DIR, else the git dir's `commondir` file
// (relative to the git dir), else takes the git dir itself.
func commonDir(gd string, getenv func(string) string) (string, error) {
	if c := getenv("GIT_COMMON_DIR"); c != "" {
		return absFrom(gd, c), nil
	}
	p := filepath.Join(gd, "commondir")
	b, err := fsutil.ReadFileLimit(p, maxLineFile)
	if errors.Is(err, fs.ErrNotExist) {
		return gd, nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	c := oneLine(b)
	if c == "" || strings.ContainsRune(c, 0) {
		return "", fmt.Errorf("%s: %w: empty", p, ErrBadGitFile)
	}
	cd := absFrom(gd, c)
	if st, err := os.Stat(cd); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%s names %s: %w: not a directory", p, cd, ErrBadGitFile)
	}
	return cd, nil
}

// setWorkTree applies GIT_WORK_TREE, core.worktree and core.bare. A
// linked worktree ignores the common config's core.worktree, as git does.
func (r *Repo) setWorkTree(dir string, getenv func(string) string) error {
	if wt := getenv("GIT_WORK_TREE"); wt != "" {
		r.WorkTree = absFrom(dir, wt)
		return nil
	}
	if r.CommonDir != r.GitDir {
		return nil
	}
	core, err := readCore(filepath.Join(r.GitDir, "config"))
	if err != nil {
		return err
	}
	switch {
	case core["worktree"] != "":
		// Relative to the git dir, as git takes it.
		r.WorkTree = absFrom(r.GitDir, core["worktree"])
	case strings.EqualFold(core["bare"], "true") && r.Via != ViaGitDir:
		r.WorkTree = ""
	}
	return nil
}

// readCore reads the [core] keys of a git config: enough for worktree
// and bare (no includes, no per-worktree config).
func readCore(p string) (map[string]string, error) {
	out := map[string]string{}
	b, err := fsutil.ReadFileLimit(p, maxConfig)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	inCore := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "["), "]")
			inCore = strings.EqualFold(strings.TrimSpace(name), "core")
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !inCore || !ok {
			continue
		}
		out[strings.ToLower(strings.TrimSpace(k))] = configValue(v)
	}
	return out, nil
}

// configValue undoes a config value's quoting and drops its comment.
func configValue(v string) string {
	var b strings.Builder
	quoted := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			quoted = !quoted
		case c == '\\' && i+1 < len(v):
			i++
			b.WriteByte(unescape(v[i]))
		case (c == '#' || c == ';') && !quoted:
			return strings.TrimSpace(b.String())
		default:
			b.WriteByte(c)
		}
	}
	return strings.TrimSpace(b.String())
}

// unescape is what git makes of a backslash and c in a config value.
func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	}
	return c
}

// absFrom makes p absolute, relative to base, and clean.
func absFrom(base, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	return filepath.Clean(p)
}

// oneLine is the first line of b, without its line end.
func oneLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return string(bytes.TrimRight(line, "\r"))
}

// scanner streams a file in lines of at most max bytes.
func scanner(f *os.File, max int) *bufio.Scanner {
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 512), max)
	return s
}
