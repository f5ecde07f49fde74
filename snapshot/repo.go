package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
)

// ErrTargetsPending: an interrupted operation has changed the tree but
// could not restore its targets yet (a server down): the journal stays
// until a later recover succeeds.
var ErrTargetsPending = errors.New("targets still to restore")

// Errors for operations that are refused with nothing changed.
var (
	ErrNothingToUndo = errors.New("nothing to undo")
	ErrNothingToRedo = errors.New("nothing to redo")
)

// ConflictError lists paths changed by someone else since the change that
// an undo, redo or commit would revert.
type ConflictError struct {
	Op    string
	Paths []string
	// Turns, for the undo of a checkpoint, name the later turns of other
	// sessions that changed those paths ("ID (session S)"): never
	// reverted without --force.
	Turns []string
}

// Error names how many paths; the CLI lists them, one a line (a list of
// quoted names on one line is unreadable past a few).
func (e *ConflictError) Error() string {
	n := "1 path"
	if len(e.Paths) != 1 {
		n = fmt.Sprintf("%d paths", len(e.Paths))
	}
	who := "someone else"
	if len(e.Turns) > 0 {
		who = "another session's turn " + strings.Join(e.Turns, ", ")
	}
	return fmt.Sprintf("%s refused: %s changed since by %s (use --force to overwrite; what is overwritten is saved)", e.Op, n, who)
}

// Reader is a project's store opened to look ([OpenReader]): the
// history, pending runs, diffs, check. It has no method that changes the
// tree; what it adds to the store (contents a scan stores, the stat
// cache) is the store's own business. [Repo], the writer, embeds it.
type Reader struct {
	*Store
	treeDir *fsutil.Dir // the tree at Root, held open: every path below it is resolved beneath it
	ign     Ignorer

	// LastScan says what the most recent scan of the tree had to read.
	LastScan ScanStats

	// Config is the project's snapback.toml.
	Config *config.Config
	// Targets are the [[target]]s of snapback.toml: snap and run save
	// them along with the tree.
	Targets []config.Target
	// Ctx bounds the work of target backends and scans of the tree (nil:
	// no bound): once done, they stop with an error wrapping its Err.
	Ctx context.Context
	// Working, when set, hears of work that may take a while (a target's
	// snapshot or restore) and returns the call that marks its end.
	Working func(what string) (done func())
	// Progress, when set, hears how far a scan of the tree or an apply
	// has got (see [Progress]); nil: no one listens.
	Progress func(Progress)
}

// Repo is a project's store opened to change the project ([Open]): the
// object the CLI's changing verbs drive. Operations that change anything
// expect the store lock held, which Open takes.
type Repo struct {
	*Reader
	// RecoverNote says what the last [Repo.Recover] did, for the user.
	RecoverNote string
	// LastWatched says whether the last checkpoint begin or end read
	// only the paths the tree's watcher named (watch.go), not the whole
	// tree.
	LastWatched bool
	// writers: watch.Writers's answer on its way ([Options.HeldAhead]).
	writers chan []string
}

// openRepo opens the project at root with its store at dir ("": in the
// tree), unlocked: [Open] is the way in.
func openRepo(root, dir string, ign Ignorer, create bool) (*Repo, error) {
	s, err := openStore(root, dir, create)
	if err != nil {
		return nil, err
	}
	d, err := fsutil.OpenRoot(s.Root)
	if err != nil {
		return nil, err
	}
	return &Repo{Reader: &Reader{Store: s, treeDir: d, ign: ign}}, nil
}

// Close releases the root and the lock.
func (r *Reader) Close() {
	r.Unlock()
	r.treeDir.Close()
	r.forgetPacks()
}

// ScanTree reads the whole tree; with store set, contents not yet in the
// store are added to it.
func (r *Reader) ScanTree(store bool) (record.Manifest, error) {
	return r.scan(store, (*scanner).scanTree)
}

// ScanPaths reads the listed paths; below each path for which deep says
// so, everything is read too.
func (r *Reader) ScanPaths(paths []string, store bool, deep bool) (record.Manifest, error) {
	return r.scan(store, func(sc *scanner) (record.Manifest, error) { return sc.scanPaths(paths, deep) })
}

// scan runs one scan of the tree, notes what it read, and keeps what it
// learned in the stat cache when it stored contents.
func (r *Reader) scan(store bool, fn func(*scanner) (record.Manifest, error)) (record.Manifest, error) {
	sc := r.newScanner(r.treeDir, r.ign, store)
	sc.progress = r.Progress
	sc.ctx = r.Ctx
	m, err := fn(sc)
	report(r.Progress, Progress{Step: StepScan, Paths: int64(len(m)), Bytes: sc.bytesHashed.Load(), Done: true})
	if err != nil {
		return nil, err
	}
	r.LastScan = sc.stats
	if store {
		if err := r.saveCache(sc.cache); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// record stores a manifest and returns its id as a string.
func (r *Repo) record(m record.Manifest) (string, error) {
	id, err := r.PutManifest(m)
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

func counts(m record.Manifest) (files int, bytes int64) {
	for i := range m {
		if m[i].Type == record.File {
			files++
			if m[i].Link == "" {
				bytes += m[i].Size
			}
		}
	}
	return
}

// Snap records a tree snapshot of the current state.
func (r *Repo) Snap(kind record.Kind, message string) (*record.Meta, error) {
	// In the middle of a checkpoint, a tree snapshot would come after it
	// in the history while its stretch goes on: undo would take it first.
	if err := r.refuseOpen("snap"); err != nil {
		return nil, err
	}
	meta, err := r.newMeta(kind, record.ScopeTree)
	if err != nil {
		return nil, err
	}
	meta.Message = message
	if meta.Targets, err = r.snapTargets(meta.ID, r.withGitTarget(r.Targets)); err != nil {
		return nil, err
	}
	if err := r.snapInto(meta); err != nil {
		r.releasePayloads(meta.ID)
		return nil, err
	}
	return meta, nil
}

// snapInto scans the tree into m's manifest and writes m.
func (r *Repo) snapInto(meta *record.Meta) error {
	m, err := r.ScanTree(true)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	meta.Files, meta.Bytes = counts(m)
	if meta.Manifest, err = r.record(m); err != nil {
		return err
	}
	if err := r.Flush(); err != nil {
		return err
	}
	return r.WriteMeta(meta)
}

// current reads the tree's present state of what target governs.
func (r *Reader) current(target record.Manifest, scope record.Scope, store bool) (record.Manifest, error) {
	if scope == record.ScopeTree {
		return r.ScanTree(store)
	}
	deep := map[string]bool{}
	for i := range target {
		if target[i].Type != record.Dir {
			deep[target[i].Path] = true
		}
	}
	paths := target.Paths()
	scan := func() (record.Manifest, error) {
		return r.scan(store, func(sc *scanner) (record.Manifest, error) {
			return sc.scanPathsDeep(paths, func(p string) bool { return deep[p] })
		})
	}
	m, err := scan()
	if err != nil {
		return nil, err
	}
	// A file with other names: find them (a walk of the tree, only when
	// hard links are involved), so the manifest keeps them as links and a
	// restore links them again instead of making separate copies.
	linked := map[[2]uint64]bool{}
	for i := range m {
		if m[i].Type == record.File && m[i].Nlink > 1 {
			linked[m[i].Inode] = true
		}
	}
	if len(linked) == 0 {
		return m, nil
	}
	all, err := r.scan(false, (*scanner).scanTree)
	if err != nil {
		return nil, err
	}
	n := len(paths)
	for i := range all {
		if all[i].Type == record.File && linked[all[i].Inode] && m.Find(all[i].Path) == nil {
			paths = append(paths, all[i].Path)
		}
	}
	if len(paths) == n {
		return m, nil
	}
	return scan()
}
