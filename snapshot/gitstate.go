package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/gitdirs"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// The git state outside the root.
//
// Where a linked worktree's or a submodule's HEAD lives outside the root
// (package gitdirs) and the root is its work tree's top, every step (a
// run in any mode, a checkpoint, a snap) saves this worktree's git state
// as an implicit target when it begins: HEAD, the index, every ref the
// worktree sees and the keys of the common config. When the step closes
// (sealGit) it notes what it changed: the refs and config keys that
// differ, and the values it left them at (moves.json). Undo, redo and
// restore put HEAD and the index back and move back exactly those refs
// and keys, each by compare-and-swap through git itself: `git update-ref
// REF SAVED LEFT` under git's lock of that one ref (git rewrites
// packed-refs itself when it must), `git config` per key under git's
// lock of the file. Nothing is written whole, so what another worktree
// does meanwhile is never overwritten; one it did to the same ref or key
// is a conflict (planGit). Reflogs are left to git (update-ref appends
// one entry) and objects are only ever added. It is not a backend of
// snapback.toml: it has no settings a user could give, and what a record
// says of it is checked against the git dir found from the root, never
// taken as a place to write.

// gitBackendName is the implicit target's backend name in records.
const gitBackendName = "git"

// maxGitState bounds the payload's state.json and moves.json, which list
// every ref (a repository with many tags has tens of thousands: about
// 100 bytes each).
const maxGitState = 64 << 20

// gitState is what the payload says of the saved state (state.json).
type gitState struct {
	GitDir string       `json:"git_dir"`
	Head   gitdirs.Head `json:"head"`
	// HeadFile is HEAD's content, as git wrote it.
	HeadFile string `json:"head_file"`
	// Index is set when the worktree had an index (saved as data/index).
	Index bool `json:"index"`
	// Refs are every ref the worktree sees (gitRefs), name to object id.
	Refs map[string]string `json:"refs,omitempty"`
}

// The common config file is saved as it is, as data/config (read as keys
// by configKeys only where it changed: a step need not run git for it).
const maxGitConfig = 1 << 20

// gitMoves is what the step moved (moves.json), written when it closes:
// each ref whose value it changed, to the value it left ("" for deleted),
// and each key of the common config whose values it changed, to the
// values it left (none: removed).
type gitMoves struct {
	Moves  map[string]string   `json:"moves"`
	Config map[string][]string `json:"config,omitempty"`
}

// gitAfter is a git dir's refs and common config keys as a step left
// them, or as an undo, redo or restore will (planGit); Config nil: the
// config as the payload saved it.
type gitAfter struct {
	Refs   map[string]string
	Config map[string][]string
}

// gitTarget is the implicit target for the git dir HEAD lives in, when it
// is outside the root.
func gitTarget(gitDir string) config.Target {
	return config.Target{Name: "git " + gitDir, Backend: gitBackendName, Path: gitDir}
}

// withGitTarget is ts and, where HEAD lives outside the root, the
// implicit git target. Only where the root is the top of git's work tree:
// below it, HEAD and the index also speak for files outside the root,
// which an undo must not revert (there undo refuses instead: checkGit).
func (r *Repo) withGitTarget(ts []config.Target) []config.Target {
	g, err := gitdirs.Find(r.Root, os.Getenv)
	if err != nil || g == nil || !g.HeadUncovered(r.Root) || !g.TopIsRoot(r.Root) {
		return ts
	}
	if _, err := g.ReadHead(); err != nil {
		return ts // (reftable, say): seeGit warns
	}
	if ok, _ := (gitBackend{}).Available(); !ok {
		return ts // no git to restore with: undo refuses instead (checkGit)
	}
	return append(append([]config.Target(nil), ts...), gitTarget(g.GitDir))
}

// gitBackend saves and restores a worktree's git state outside the root.
type gitBackend struct{}

var _ Backend = gitBackend{}

func (gitBackend) Name() string { return gitBackendName }

// Available: saving needs no git; restoring runs git update-ref.
func (gitBackend) Available() (bool, string) {
	if _, err := exec.LookPath("git"); err != nil {
		return false, "git is not installed (restoring a ref runs git update-ref)"
	}
	return true, ""
}

// repoFor finds the repository from root and checks that t (from a
// record: outside input) names its git dir.
func (gitBackend) repoFor(t config.Target, root string) (*gitdirs.Repo, error) {
	g, err := gitdirs.Find(root, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", config.ErrTarget, t.Name, err)
	}
	if g == nil || g.GitDir != t.Path {
		return nil, fmt.Errorf("%w: %s: the git dir of %s is not %s any more", config.ErrTarget, t.Name, root, t.Path)
	}
	return g, nil
}

func (b gitBackend) Check(_ context.Context, t config.Target, root string) error {
	g, err := b.repoFor(t, root)
	if err != nil {
		return err
	}
	if _, err := g.ReadHead(); err != nil {
		return fmt.Errorf("%w: %s: %v", config.ErrTarget, t.Name, err)
	}
	return nil
}

// Snapshot saves HEAD (its file and what it resolves to) and the index:
// a hard link where the store is on the git dir's filesystem (git never
// rewrites an index in place, it renames a new one over it), else a copy.
func (b gitBackend) Snapshot(_ context.Context, t config.Target, root, dir string) error {
	g, err := b.repoFor(t, root)
	if err != nil {
		return err
	}
	st := gitState{GitDir: g.GitDir}
	head, err := fsutil.ReadFileLimit(filepath.Join(g.GitDir, "HEAD"), 4<<10)
	if err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	st.HeadFile = string(head)
	if st.Head, err = g.ReadHead(); err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	if st.Refs, err = gitRefs(g, root); err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	if cfg, err := fsutil.ReadFileLimit(filepath.Join(g.CommonDir, "config"), maxGitConfig); err == nil {
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, "config"), cfg, 0o600); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: config: %w", t.Name, err)
	}
	if st.Index, err = saveIndex(filepath.Join(g.GitDir, "index"), filepath.Join(dir, "index")); err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	js, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, "state.json"), js, 0o600)
}

// saveIndex links or copies the index to dst; false when there is none.
func saveIndex(src, dst string) (bool, error) {
	f, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("index: %w", err)
	}
	defer f.Close() // read-only
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return false, fmt.Errorf("index %s: %w", src, fsutil.ErrNotRegular)
	}
	fsutil.Mutating()
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW); err == nil {
		return true, nil // the very file opened: not one renamed in since
	}
	fsutil.Mutating()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("index: %w", err)
	}
	if err := fsutil.CopyFile(out, f); err != nil {
		out.Close()
		return false, fmt.Errorf("index: %w", err)
	}
	fsutil.Mutating()
	if err := out.Sync(); err != nil {
		out.Close()
		return false, fmt.Errorf("index: %w", err)
	}
	return true, out.Close()
}

// readState reads and checks a payload's state.json.
func readGitState(t config.Target, dir string) (gitState, error) {
	var st gitState
	b, err := fsutil.ReadFileLimit(filepath.Join(dir, "state.json"), maxGitState)
	if err != nil {
		return st, fmt.Errorf("%s: payload: %w", t.Name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("%s: payload: %w: %v", t.Name, record.ErrCorrupt, err)
	}
	h := st.Head
	if st.GitDir != t.Path || h.Ref != "" && !gitdirs.ValidRefName(h.Ref) || h.OID != "" && !gitdirs.ValidOID(h.OID) || h.Ref == "" && h.OID == "" || !validRefs(st.Refs, false) {
		return st, fmt.Errorf("%s: payload: %w: bad git dir, ref or object id", t.Name, record.ErrCorrupt)
	}
	return st, nil
}

// validRefs checks a map of refs read from a payload; deleted allows an
// empty object id.
func validRefs(m map[string]string, deleted bool) bool {
	for ref, oid := range m {
		if !gitdirs.ValidRefName(ref) || !strings.HasPrefix(ref, "refs/") || !(gitdirs.ValidOID(oid) || deleted && oid == "") {
			return false
		}
	}
	return true
}

// validConfig checks config keys and values read from a payload: a key
// is section.name or section.subsection.name, on one line, and nothing
// holds a NUL (git config could not take it back as an argument).
func validConfig(m map[string][]string) bool {
	for k, vs := range m {
		if len(k) > 1024 || !strings.Contains(k, ".") || strings.HasPrefix(k, "-") || strings.ContainsAny(k, "\x00\n") {
			return false
		}
		for _, v := range vs {
			if strings.ContainsRune(v, 0) {
				return false
			}
		}
	}
	return true
}

// readGitMoves reads a payload's moves.json; sealed is false when it has
// none (the step is not closed).
func readGitMoves(t config.Target, dir string) (m gitMoves, sealed bool, err error) {
	b, err := fsutil.ReadFileLimit(filepath.Join(dir, "moves.json"), maxGitState)
	if errors.Is(err, fs.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, fmt.Errorf("%s: payload: %w", t.Name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil || !validRefs(m.Moves, true) || !validConfig(m.Config) {
		return m, false, fmt.Errorf("%s: payload: %w: moves.json: bad ref, object id or config key", t.Name, record.ErrCorrupt)
	}
	return m, true, nil
}

// gitRefs lists every ref g's worktree sees (the shared ones and its own
// per-worktree refs), name to object id; symbolic refs (origin/HEAD) are
// left out: they move with what they name. They are read from the files
// (gitdirs.Repo.Refs: starting git took a few milliseconds of each
// checkpoint verb in a linked worktree); where those say git's own rules
// must decide, git lists them.
func gitRefs(g *gitdirs.Repo, root string) (map[string]string, error) {
	if refs, err := g.Refs(); err == nil {
		return refs, nil
	}
	out, err := runGit(g, root, "for-each-ref", "--format=%(refname) %(objectname) %(symref)")
	if err != nil {
		return nil, err
	}
	refs := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && gitdirs.ValidRefName(f[0]) && gitdirs.ValidOID(f[1]) {
			refs[f[0]] = f[1]
		}
	}
	return refs, nil
}

// configKeys reads a config file's keys (not the files it includes,
// nor the user's or the system's: those are not the repository's), each
// with its values in the file's order; a key named with no value reads
// as "true", as git takes it. No file has no keys.
func configKeys(g *gitdirs.Repo, root, file string) (map[string][]string, error) {
	if _, err := os.Lstat(file); errors.Is(err, fs.ErrNotExist) {
		return map[string][]string{}, nil
	}
	out, err := runGit(g, root, "config", "--file", file, "--no-includes", "--list", "-z")
	if err != nil {
		return nil, err
	}
	cfg := map[string][]string{}
	for _, e := range strings.Split(out, "\x00") {
		if e == "" {
			continue
		}
		k, v, ok := strings.Cut(e, "\n")
		if !ok {
			v = "true" // a name alone: git reads it as true, and cannot write it
		}
		cfg[k] = append(cfg[k], v)
	}
	if !validConfig(cfg) {
		return nil, fmt.Errorf("%s: %w: a key git config cannot take back", file, record.ErrCorrupt)
	}
	return cfg, nil
}

// commonConfig is the keys of g's common config file.
func commonConfig(g *gitdirs.Repo, root string) (map[string][]string, error) {
	return configKeys(g, root, filepath.Join(g.CommonDir, "config"))
}

// configChanged reports whether g's common config file differs from the
// one the payload in dir saved (byte for byte).
func configChanged(g *gitdirs.Repo, dir string) (bool, error) {
	now, err := fsutil.ReadFileLimit(filepath.Join(g.CommonDir, "config"), maxGitConfig)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("config: %w", err)
	}
	saved, serr := fsutil.ReadFileLimit(filepath.Join(dir, "config"), maxGitConfig)
	if serr != nil && !errors.Is(serr, fs.ErrNotExist) {
		return false, fmt.Errorf("saved config: %w", serr)
	}
	return (err == nil) != (serr == nil) || !bytes.Equal(now, saved), nil
}

// sealGit writes, into each git payload of a closing step that has none
// yet, what the step moved: the refs now that differ from those saved.
func (r *Repo) sealGit(states []record.TargetState) error {
	for _, s := range states {
		if s.Backend != gitBackendName {
			continue
		}
		t, err := r.payloadTarget(s.Payload)
		if err != nil {
			return err
		}
		dir := r.path(s.Payload, "data")
		if _, sealed, err := readGitMoves(t, dir); err != nil || sealed {
			continue // (a bad one: the undo says)
		}
		g, err := gitBackend{}.repoFor(t, r.Root)
		if err != nil {
			continue // gone: nothing moved can be seen
		}
		now, err := gitRefs(g, r.Root)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		st, err := readGitState(t, dir)
		if err != nil {
			return err
		}
		for ref, oid := range now {
			if st.Refs[ref] != oid && movedElsewhere(g, ref, oid) {
				now[ref] = st.Refs[ref] // another worktree's move: not the step's
				if now[ref] == "" {
					delete(now, ref)
				}
			}
		}
		after := gitAfter{Refs: now}
		if changed, err := configChanged(g, dir); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		} else if changed {
			if after.Config, err = commonConfig(g, r.Root); err != nil {
				return fmt.Errorf("%s: %w", t.Name, err)
			}
		}
		if err := writeGitMoves(g, r.Root, t, dir, after); err != nil {
			return err
		}
	}
	return nil
}

// writeGitMoves writes a payload's moves.json: the refs and config keys
// of after that differ from those the payload saved.
func writeGitMoves(g *gitdirs.Repo, root string, t config.Target, dir string, after gitAfter) error {
	st, err := readGitState(t, dir)
	if err != nil {
		return err
	}
	moves := map[string]string{}
	for ref, oid := range after.Refs {
		if st.Refs[ref] != oid {
			moves[ref] = oid
		}
	}
	for ref := range st.Refs {
		if _, ok := after.Refs[ref]; !ok {
			moves[ref] = ""
		}
	}
	cfg := map[string][]string{}
	if after.Config != nil {
		saved, err := configKeys(g, root, filepath.Join(dir, "config"))
		if err != nil {
			return fmt.Errorf("%s: payload: %w", t.Name, err)
		}
		for k, vs := range after.Config {
			if !slices.Equal(saved[k], vs) {
				cfg[k] = vs
			}
		}
		for k := range saved {
			if _, ok := after.Config[k]; !ok {
				cfg[k] = []string{}
			}
		}
	}
	js, err := json.Marshal(gitMoves{Moves: moves, Config: cfg})
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, "moves.json"), js, 0o600)
}

// sealGitAs writes the moves of the git payloads among states (the
// pre-undo, pre-redo or pre-restore record's, taken just now) as the
// operation will leave the refs (planGit's result).
func (r *Repo) sealGitAs(states []record.TargetState, after map[string]*gitAfter) error {
	for _, s := range states {
		if s.Backend != gitBackendName {
			continue
		}
		t, err := r.payloadTarget(s.Payload)
		if err != nil {
			return err
		}
		g, err := gitBackend{}.repoFor(t, r.Root)
		if err != nil {
			return err
		}
		a, ok := after[g.GitDir]
		if !ok {
			continue // nothing of it moves: no moves.json, HEAD's ref alone
		}
		if err := writeGitMoves(g, r.Root, t, r.path(s.Payload, "data"), *a); err != nil {
			return err
		}
	}
	return nil
}

// Restore puts back the saved HEAD and index, and moves back each ref
// the step moved (moves.json, see sealGit) that is still where the step
// left it: `git update-ref REF SAVED LEFT`, git's compare-and-swap under
// its own lock of that one ref, never a rewrite of packed-refs as a
// whole. A ref moved since by someone else is left as it is (checked
// before anything moved, and refused unless forced: planGit). Each step
// sets a value or finds it set, so running it again finishes it (recover
// does, after a crash). A payload with no moves.json (a step not closed
// yet) puts back the ref HEAD names only.
func (b gitBackend) Restore(_ context.Context, t config.Target, root, dir string) error {
	g, st, err := b.restorable(t, root, dir)
	if err != nil {
		return err
	}
	mv, sealed, err := readGitMoves(t, dir)
	if err != nil {
		return err
	}
	moves := mv.Moves
	h := st.Head
	if !sealed && h.Ref != "" {
		moves = map[string]string{h.Ref: ""} // set whatever it is: the old rule
	}
	var now map[string]string
	if sealed && len(moves) > 0 {
		if now, err = gitRefs(g, root); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	for _, ref := range sortedKeys(moves) {
		want, left := st.Refs[ref], moves[ref]
		if !sealed {
			want = h.OID
		} else if cur := now[ref]; cur == want || cur != left {
			continue // back already, or moved by someone else since: left as it is
		}
		args := []string{"update-ref", "-m", "snapback: restore", ref, want}
		if sealed {
			args = append(args, orZero(left, want))
		}
		if want == "" {
			args = []string{"update-ref", "-m", "snapback: restore", "-d", ref}
			if sealed {
				args = append(args, left)
			}
		}
		fsutil.Mutating()
		if _, err := runGit(g, root, args...); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	if err := restoreConfig(g, root, dir, mv.Config); err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	if h.Ref != "" {
		fsutil.Mutating()
		if _, err := runGit(g, root, "symbolic-ref", "HEAD", h.Ref); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	} else {
		fsutil.Mutating()
		if _, err := runGit(g, root, "update-ref", "--no-deref", "-m", "snapback: restore", "HEAD", h.OID); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	if err := restoreIndex(g.GitDir, dir, st.Index); err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	return nil
}

// restoreConfig sets back each key of the common config the step changed
// (moves) that is still as the step left it, one key at a time through
// git config, under git's own lock of the file (config.lock): whatever
// else the file holds, another worktree's change to another key
// meanwhile, stays. A key changed by someone else since is left as it is
// (checked before anything moved, and refused unless forced: planGit).
// A key of several values is set in steps, the first value then each
// next one added: a key found part-way (its values a beginning of the
// saved ones, after a crash) is finished.
func restoreConfig(g *gitdirs.Repo, root, dir string, moves map[string][]string) error {
	if len(moves) == 0 {
		return nil
	}
	saved, err := configKeys(g, root, filepath.Join(dir, "config"))
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	now, err := commonConfig(g, root)
	if err != nil {
		return err
	}
	file := filepath.Join(g.CommonDir, "config")
	for _, k := range sortedKeys(moves) {
		want, left, cur := saved[k], moves[k], now[k]
		from := 0
		switch {
		case slices.Equal(cur, want):
			continue
		case slices.Equal(cur, left):
		case len(cur) > 0 && len(cur) < len(want) && slices.Equal(cur, want[:len(cur)]):
			from = len(cur)
		default:
			continue // changed by someone else since: left as it is
		}
		if len(want) == 0 {
			fsutil.Mutating()
			if _, err := runGit(g, root, "config", "--file", file, "--unset-all", "--", k); err != nil {
				return err
			}
			continue
		}
		if from == 0 {
			fsutil.Mutating()
			if _, err := runGit(g, root, "config", "--file", file, "--replace-all", "--", k, want[0]); err != nil {
				return err
			}
			from = 1
		}
		for _, v := range want[from:] {
			fsutil.Mutating()
			if _, err := runGit(g, root, "config", "--file", file, "--add", "--", k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// orZero is oid, or for none (a ref that must not exist) git's null id
// as long as like.
func orZero(oid, like string) string {
	if oid != "" {
		return oid
	}
	return strings.Repeat("0", len(like))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// restorable checks, changing nothing, that a payload can be restored:
// it names the git dir found from root, the commit HEAD goes back to
// still exists, its branch is not checked out by another worktree, and
// git does not hold the index's lock. (What its refs go back to is
// planGit's.)
func (b gitBackend) restorable(t config.Target, root, dir string) (*gitdirs.Repo, gitState, error) {
	g, err := b.repoFor(t, root)
	if err != nil {
		return nil, gitState{}, err
	}
	st, err := readGitState(t, dir)
	if err != nil {
		return nil, st, err
	}
	h := st.Head
	if h.OID != "" {
		if _, err := runGit(g, root, "cat-file", "-e", h.OID+"^{commit}"); err != nil {
			return nil, st, fmt.Errorf("%w: %s: commit %s is not in the repository any more (pruned?): HEAD cannot go back to it", config.ErrTarget, t.Name, h.OID)
		}
	}
	if h.Ref != "" {
		if other, err := checkedOutElsewhere(g, h.Ref); err != nil {
			return nil, st, fmt.Errorf("%s: %w", t.Name, err)
		} else if other != "" {
			return nil, st, fmt.Errorf("%w: %s: %s is checked out in the worktree of %s: its ref is left as it is", config.ErrTarget, t.Name, h.Ref, other)
		}
	}
	if _, err := os.Lstat(filepath.Join(g.GitDir, "index.lock")); err == nil && !ownIndexLock(g.GitDir) {
		return nil, st, fmt.Errorf("%w: %s: %s exists: git is working on the index (or crashed: remove it)", config.ErrTarget, t.Name, filepath.Join(g.GitDir, "index.lock"))
	}
	return g, st, nil
}

// GitRefsError refuses an undo, redo or restore that would move back a
// ref or a common config key someone else changed since the step
// (another worktree's commit on a branch the step also moved, say):
// nothing changed.
type GitRefsError struct {
	Op     string
	GitDir string
	// Refs are "REF is X, left at Y" or "config KEY is X, left at Y" for
	// each.
	Refs []string
}

func (e *GitRefsError) Error() string {
	return fmt.Sprintf("%s refused: in %s, %s since the step moved it: someone else moved it; %s --force leaves them as they are", e.Op, e.GitDir, strings.Join(e.Refs, "; "), e.Op)
}

// planGit checks, changing nothing, the git payloads among states as
// restoreTargets will apply them, in order: each payload's moved refs
// must be where it left them (or back already) once the payloads before
// it are applied, and every object a ref goes back to must exist (a ref
// never names a missing object). A ref moved by someone else is a
// conflict (refs). It returns, per git dir, the refs as they will be
// after (the opposite operation's moves: see sealGitAs).
func (r *Repo) planGit(op string, states []record.TargetState) (sims map[string]*gitAfter, refs []*GitRefsError, err error) {
	sims = map[string]*gitAfter{}
	for _, s := range states {
		if s.Backend != gitBackendName {
			continue
		}
		t, err := r.payloadTarget(s.Payload)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", op, err)
		}
		dir := r.path(s.Payload, "data")
		g, st, err := (gitBackend{}).restorable(t, r.Root, dir)
		if err != nil {
			return nil, nil, fmt.Errorf("%s refused: %w", op, err)
		}
		mv, sealed, err := readGitMoves(t, dir)
		if err != nil {
			return nil, nil, fmt.Errorf("%s refused: %w", op, err)
		}
		if !sealed {
			continue
		}
		a := sims[g.GitDir]
		if a == nil {
			a = &gitAfter{}
			if a.Refs, err = gitRefs(g, r.Root); err != nil {
				return nil, nil, fmt.Errorf("%s: %s: %w", op, t.Name, err)
			}
			sims[g.GitDir] = a
		}
		sim := a.Refs
		var moved, need []string
		for _, ref := range sortedKeys(mv.Moves) {
			want, left, cur := st.Refs[ref], mv.Moves[ref], sim[ref]
			switch {
			case cur == want:
			case cur != left:
				moved = append(moved, fmt.Sprintf("%s is %s, left at %s", ref, short(cur), short(left)))
			case want == "":
				delete(sim, ref)
			default:
				if other, err := checkedOutElsewhere(g, ref); err == nil && other != "" {
					return nil, nil, fmt.Errorf("%s refused: %w: %s: %s is checked out in the worktree of %s: its ref is left as it is", op, config.ErrTarget, t.Name, ref, other)
				}
				sim[ref] = want
				need = append(need, want)
			}
		}
		var saved map[string][]string
		if len(mv.Config) > 0 {
			if saved, err = configKeys(g, r.Root, filepath.Join(dir, "config")); err == nil && a.Config == nil {
				a.Config, err = commonConfig(g, r.Root)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %s: %w", op, t.Name, err)
			}
		}
		for _, k := range sortedKeys(mv.Config) {
			want, left, cur := saved[k], mv.Config[k], a.Config[k]
			switch {
			case slices.Equal(cur, want):
			case !slices.Equal(cur, left):
				moved = append(moved, fmt.Sprintf("config %s is %s, left at %s", k, configValues(cur), configValues(left)))
			case len(want) == 0:
				delete(a.Config, k)
			default:
				a.Config[k] = want
			}
		}
		if len(moved) > 0 {
			refs = append(refs, &GitRefsError{Op: op, GitDir: g.CommonDir, Refs: moved})
		}
		if missing := missingObjects(g, r.Root, need); len(missing) > 0 {
			return nil, nil, fmt.Errorf("%s refused: %w: %s: object %s is not in the repository any more (pruned?): a ref cannot go back to it", op, config.ErrTarget, t.Name, strings.Join(missing, ", "))
		}
	}
	return sims, refs, nil
}

// configValues is a config key's values as a conflict names them.
func configValues(vs []string) string {
	if len(vs) == 0 {
		return "(unset)"
	}
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ",")
}

func short(oid string) string {
	if oid == "" {
		return "(none)"
	}
	if len(oid) > 12 {
		return oid[:12]
	}
	return oid
}

// missingObjects lists the object ids of oids the repository lacks.
func missingObjects(g *gitdirs.Repo, root string, oids []string) []string {
	if len(oids) == 0 {
		return nil
	}
	cmd := exec.Command("git", "-c", "core.hooksPath=/dev/null", "--git-dir="+g.GitDir, "cat-file", "--batch-check=%(objectname)")
	cmd.Dir, cmd.Env = root, gitEnv()
	cmd.Stdin = strings.NewReader(strings.Join(oids, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		return oids // cannot tell: none is taken as there
	}
	var missing []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[1] == "missing" {
			missing = append(missing, f[0])
		}
	}
	return missing
}

// checkGitTargets refuses, before anything moves, an undo, redo or
// restore whose git state cannot be restored: the files would move and
// the refs not.
// A ref someone else moved since is refused unless force, then warned
// of and left as it is.
func (r *Repo) checkGitTargets(op string, states []record.TargetState, force bool) error {
	_, refs, err := r.planGit(op, states)
	if err != nil {
		return err
	}
	for _, e := range refs {
		if !force {
			return e
		}
		r.warn(fmt.Sprintf("%s --force: in %s, %s: left as it is", op, e.GitDir, strings.Join(e.Refs, "; ")))
	}
	return nil
}

// indexTmp is where, in the git dir, restoreIndex writes the index it
// puts back before it takes git's lock with it.
const indexTmp = "snapback-index.tmp"

// ownIndexLock reports whether the git dir's index.lock is one a restore
// took and did not finish (killed): the very file of indexTmp.
func ownIndexLock(gitDir string) bool {
	lock, err1 := os.Lstat(filepath.Join(gitDir, "index.lock"))
	tmp, err2 := os.Lstat(filepath.Join(gitDir, indexTmp))
	return err1 == nil && err2 == nil && os.SameFile(lock, tmp)
}

// restoreIndex writes the saved index back through git's lock protocol:
// the whole index is written and synced to indexTmp first, then taken as
// index.lock by a link (which fails while git holds the lock), renamed
// over index, and indexTmp removed. A restore killed part-way is known
// by what it left: indexTmp alone is dropped and written again, an
// index.lock that is indexTmp's very file is ours, whole, and is renamed
// into place (see ownIndexLock).
func restoreIndex(gitDir, dir string, had bool) error {
	idx, lock, tmp := filepath.Join(gitDir, "index"), filepath.Join(gitDir, "index.lock"), filepath.Join(gitDir, indexTmp)
	if ownIndexLock(gitDir) {
		return finishIndex(gitDir)
	}
	if _, err := os.Lstat(tmp); err == nil {
		fsutil.Mutating()
		if err := os.Remove(tmp); err != nil {
			return fmt.Errorf("index: %w", err)
		}
	}
	if !had {
		fsutil.Mutating()
		if err := os.Remove(idx); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("index: %w", err)
		}
		return nil
	}
	src, err := os.OpenFile(filepath.Join(dir, "index"), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("saved index: %w", err)
	}
	defer src.Close() // read-only
	if fi, err := src.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("saved index: %w", fsutil.ErrNotRegular)
	}
	var sig [4]byte
	if _, err := src.ReadAt(sig[:], 0); err != nil || string(sig[:]) != "DIRC" {
		return fmt.Errorf("saved index: %w: not a git index", record.ErrCorrupt)
	}
	fsutil.Mutating()
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	fail := func(err error) error {
		out.Close()
		os.Remove(tmp) // ours, made above: nothing else can be lost
		return fmt.Errorf("index: %w", err)
	}
	if err := fsutil.CopyFile(out, src); err != nil {
		return fail(err)
	}
	fsutil.Mutating()
	if err := out.Sync(); err != nil {
		return fail(err)
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp) // as above
		return fmt.Errorf("index: %w", err)
	}
	fsutil.Mutating()
	if err := os.Link(tmp, lock); err != nil {
		os.Remove(tmp) // as above
		return fmt.Errorf("index: git holds %s: %w", lock, err)
	}
	return finishIndex(gitDir)
}

// finishIndex renames the index.lock a restore took over index and
// removes indexTmp.
func finishIndex(gitDir string) error {
	fsutil.Mutating()
	if err := os.Rename(filepath.Join(gitDir, "index.lock"), filepath.Join(gitDir, "index")); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	fsutil.Mutating()
	if err := os.Remove(filepath.Join(gitDir, indexTmp)); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return fsutil.SyncDir(gitDir)
}

// movedElsewhere reports whether ref's move to oid, seen at the end of a
// step, was another worktree's: ref is checked out there, or oid is what
// that worktree's HEAD reflog says its HEAD became (a commit made there).
func movedElsewhere(g *gitdirs.Repo, ref, oid string) bool {
	if other, err := checkedOutElsewhere(g, ref); err != nil || other != "" {
		return true
	}
	for _, d := range worktreeGitDirs(g) {
		if d == g.GitDir {
			continue
		}
		b, err := readTail(filepath.Join(d, "logs", "HEAD"), 256<<10)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[1] == oid {
				return true
			}
		}
	}
	return false
}

// readTail reads up to the last n bytes of a file.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close() // read-only
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", path, fsutil.ErrNotRegular)
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	_, err = f.ReadAt(b, off)
	return b, err
}

// worktreeGitDirs lists the git dirs of g's repository's worktrees: the
// main one's (the common dir) and each linked one's.
func worktreeGitDirs(g *gitdirs.Repo) []string {
	dirs := []string{g.CommonDir}
	ents, _ := os.ReadDir(filepath.Join(g.CommonDir, "worktrees"))
	for _, e := range ents {
		dirs = append(dirs, filepath.Join(g.CommonDir, "worktrees", e.Name()))
	}
	return dirs
}

// checkedOutElsewhere names the worktree, other than g's, whose HEAD is
// on ref, if one is.
func checkedOutElsewhere(g *gitdirs.Repo, ref string) (string, error) {
	if _, err := os.ReadDir(filepath.Join(g.CommonDir, "worktrees")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	for _, d := range worktreeGitDirs(g) {
		if d == g.GitDir {
			continue
		}
		b, err := fsutil.ReadFileLimit(filepath.Join(d, "HEAD"), 4<<10)
		if err != nil {
			continue // not a worktree's git dir (or a broken one): git ignores it too
		}
		if strings.TrimSpace(string(b)) == "ref: "+ref {
			return d, nil
		}
	}
	return "", nil
}

// runGit runs git on g's git dir with none of the caller's GIT_*
// settings and no hooks (update-ref runs reference-transaction hooks).
func runGit(g *gitdirs.Repo, root string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-c", "core.hooksPath=/dev/null", "--git-dir=" + g.GitDir}, args...)...)
	cmd.Dir, cmd.Env = root, gitEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// gitEnv is the environment without the caller's GIT_* settings.
func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return env
}

func (gitBackend) Release(context.Context, config.Target, string, string) error { return nil }

// gitUnchanged reports whether the git state a payload saved is the
// state now: HEAD, its ref and the index (the very file, or the same
// bytes).
func gitUnchanged(t config.Target, root, dir string) bool {
	g, err := gitBackend{}.repoFor(t, root)
	if err != nil {
		return false
	}
	st, err := readGitState(t, dir)
	if err != nil {
		return false
	}
	if h, err := g.ReadHead(); err != nil || h != st.Head {
		return false
	}
	if mv, sealed, err := readGitMoves(t, dir); err != nil {
		return false
	} else if sealed { // what the step moved, known already
		if len(mv.Moves) > 0 || len(mv.Config) > 0 {
			return false
		}
	} else if now, err := gitRefs(g, root); err != nil || !sameRefs(now, st.Refs) {
		return false
	} else if changed, err := configChanged(g, dir); err != nil || changed {
		return false
	}
	idx := filepath.Join(g.GitDir, "index")
	now, nerr := os.Lstat(idx)
	if !st.Index {
		return errors.Is(nerr, fs.ErrNotExist)
	}
	saved, serr := os.Lstat(filepath.Join(dir, "index"))
	if nerr != nil || serr != nil {
		return false
	}
	if os.SameFile(now, saved) {
		return true
	}
	if now.Size() != saved.Size() {
		return false
	}
	a, err1 := readLimited(idx, maxGitIndex)
	b, err2 := readLimited(filepath.Join(dir, "index"), maxGitIndex)
	return err1 == nil && err2 == nil && bytes.Equal(a, b)
}

func sameRefs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// UnchangedGitOnly reports whether states are none, or only git states
// that are the state now: a run that left them so changed nothing of
// what they save.
func (r *Repo) UnchangedGitOnly(states []record.TargetState) bool {
	for _, s := range states {
		if s.Backend != gitBackendName {
			return false
		}
		t, err := r.payloadTarget(s.Payload)
		if err != nil || !gitUnchanged(t, r.Root, r.path(s.Payload, "data")) {
			return false
		}
	}
	return true
}

// dropUnchangedGit drops from a closing step the git state it saved when
// that state is unchanged: a step that changed neither files nor git
// leaves no record, and undo has nothing of git's to put back.
func (r *Repo) dropUnchangedGit(m *record.Meta) error {
	kept, dropped := m.Targets[:0], false
	for _, s := range m.Targets {
		if s.Backend == gitBackendName {
			t, err := r.payloadTarget(s.Payload)
			if err == nil && gitUnchanged(t, r.Root, r.path(s.Payload, "data")) {
				if err := fsutil.RemoveAll(r.path(s.Payload)); err != nil {
					return err
				}
				dropped = true
				continue
			}
		}
		kept = append(kept, s)
	}
	m.Targets = kept
	if dropped && len(kept) == 0 {
		m.Targets = nil
		fsutil.Mutating()
		if err := os.Remove(r.targetsDir(m.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("targets: %w", err)
		}
	}
	return nil
}

// coveredGit reports whether the step s saved the git state of gitDir
// (its undo puts HEAD back).
func coveredGit(s *record.Meta, gitDir string) bool {
	for _, t := range s.Targets {
		if t.Backend == gitBackendName && t.Name == gitTarget(gitDir).Name {
			return true
		}
	}
	return false
}

// SavesGit reports whether step m saved the git state outside the root
// (so that its undo puts HEAD, the index and the refs back).
func SavesGit(m *record.Meta) bool { return GitSaved(m.Targets) }

// GitSaved reports whether states hold the git state outside the root.
func GitSaved(states []record.TargetState) bool {
	for _, t := range states {
		if t.Backend == gitBackendName {
			return true
		}
	}
	return false
}
