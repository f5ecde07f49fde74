package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/watch"
	"github.com/snapback/snapback/snapshot/record"
)

// A checkpoint reads only what changed, when the tree's watcher (package
// internal/watch) vouches for the stretch. Its begin asks for a token
// (starting a watcher when none runs) and keeps it in watch/since/ID
// with the id of the tree's state it recorded and the files that had
// several names (hard links: a change made through another name is
// reported under that name only, or not at all from outside the tree).
// Its end asks for the paths changed since the token and reads those,
// the directories they are in, everything below a directory that
// appeared, and those files ([Repo.readTouched]), and compares them with
// the begin's state at those paths: what a scan of the whole tree would
// have found changed. The token file then becomes watch/base, from which
// the next begin does the same: the state of the previous begin patched
// with what changed since, instead of a scan of the whole tree. The
// state is kept blocked (blocked.go), so that a begin writes and an end
// reads only the blocks of the paths named; a plain one (an older
// store's) is patched whole ([Repo.patched]).
//
// Where the watcher cannot vouch (it was not running at the begin, it
// restarted or lost events since, a watch could not be added, a new
// hard link's other names are unknown, snapback.toml changed), the tree
// is read whole, as without a watcher, and an end says why when its
// begin had a token. gc and check --repair drop watch/base: its state
// names contents no record may keep.

// WatchTree says whether checkpoints use the tree's watcher. A program
// sets it when it runs [watch.Serve] for watch.ServeVerb (the snapback
// command does); SNAPBACK_WATCH=off turns it off.
var WatchTree bool

func watchOn() bool { return WatchTree && os.Getenv("SNAPBACK_WATCH") != "off" }

// watchTokenPath is checkpoint id's token file.
func (r *Reader) watchTokenPath(id string) string { return r.path("watch", "since", id) }

// watchMark returns the watcher's token, if a watcher vouches from now
// on; when none runs, it starts one for the checkpoints to come.
func (r *Repo) watchMark() (watch.Token, bool) {
	if !watchOn() {
		return watch.Token{}, false
	}
	t, err := watch.Mark(r.Dir)
	if errors.Is(err, watch.ErrNotRunning) {
		// Best effort: without a watcher, ends read the whole tree.
		_ = watch.Start(r.Root, r.Dir)
	}
	return t, err == nil
}

// watchToken is what watch/since/ID and watch/base hold: a token, the
// id of the tree's state at that token, and the inode of each file that
// had several names then.
type watchToken struct {
	token    watch.Token
	manifest string
	links    map[string][2]uint64
}

// saveWatchToken keeps checkpoint id's token, the id of the tree's state
// it recorded, and the files of tree (that state) that have several names.
func (r *Repo) saveWatchToken(id string, t watch.Token, manifest string, tree record.Manifest) error {
	var b strings.Builder
	b.WriteString(t.String() + "\n" + manifest + "\n")
	for i := range tree {
		if e := &tree[i]; e.Type == record.File && e.Nlink > 1 {
			fmt.Fprintf(&b, "%d:%d:%s\x00", e.Inode[0], e.Inode[1], e.Path)
		}
	}
	fsutil.Mutating()
	if err := os.MkdirAll(r.path("watch", "since"), 0o700); err != nil {
		return err
	}
	// Whole or absent after a crash (absent: the end reads the whole
	// tree), so its directory is not synced.
	return fsutil.WriteFileWhole(r.watchTokenPath(id), []byte(b.String()), 0o600)
}

// loadWatchToken reads a token file (watch/since/ID or watch/base).
func (r *Repo) loadWatchToken(path string) (*watchToken, error) {
	b, err := r.readFile(path, maxManifestSize)
	if err != nil {
		return nil, err
	}
	bad := func(what string) error { return fmt.Errorf("%s: %w: %s", path, record.ErrCorrupt, what) }
	line, rest, ok := strings.Cut(string(b), "\n")
	if !ok {
		return nil, bad("no token line")
	}
	t, err := watch.ParseToken(line)
	if err != nil {
		return nil, bad(err.Error())
	}
	w := &watchToken{token: t, links: map[string][2]uint64{}}
	if w.manifest, rest, ok = strings.Cut(rest, "\n"); !ok {
		return nil, bad("no manifest line")
	}
	if _, ok := record.ParseObjectID(w.manifest); !ok {
		return nil, bad(fmt.Sprintf("manifest %.70q", w.manifest))
	}
	for rest != "" {
		var rec string
		if rec, rest, ok = strings.Cut(rest, "\x00"); !ok {
			return nil, bad("a record cut short")
		}
		dev, rec, ok1 := strings.Cut(rec, ":")
		ino, p, ok2 := strings.Cut(rec, ":")
		d, err1 := strconv.ParseUint(dev, 10, 64)
		n, err2 := strconv.ParseUint(ino, 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || !record.ValidPath(p) {
			return nil, bad(fmt.Sprintf("record %.60q", rec))
		}
		w.links[p] = [2]uint64{d, n}
	}
	return w, nil
}

// writersNow lists the files of the tree a process holds for writing
// now (watch.Writers), as paths a scan may hold: what was written through
// a shared mapping is no event until the file's last descriptor and
// mapping are gone (that is an event: IN_CLOSE_WRITE), so a file held
// still is read again whatever the watcher says.
func (r *Repo) writersNow() []string {
	var held []string
	if r.writers != nil {
		held, r.writers = <-r.writers, nil
	} else {
		held = watch.Writers(r.Root)
	}
	var out []string
	for _, p := range held {
		if record.ValidPath(p) && r.visible(p) {
			out = append(out, p)
		}
	}
	return out
}

// writersAhead starts reading /proc for the writersNow of the project
// at root (a few ms, on a core of its own where the machine has one)
// while the verb opens the store and does the rest of its work: see
// [Options.HeldAhead]. What was held for writing when the verb began is
// held still when the answer comes, or its close was an event for the
// watcher: the answer is as good as one read later. Nil when the
// watcher is off.
func writersAhead(root string) chan []string {
	abs, err := filepath.Abs(root)
	if !watchOn() || err != nil {
		return nil
	}
	ch := make(chan []string, 1)
	go func() { ch <- watch.Writers(abs) }()
	return ch
}

// watchBasePath: the last begin's token file, kept by its end.
func (r *Reader) watchBasePath() string { return r.path("watch", "base") }

// keepWatchBase makes checkpoint id's token file the base of the next
// begin (none: nothing to keep).
func (r *Repo) keepWatchBase(id string) {
	fsutil.Mutating()
	if err := os.Rename(r.watchTokenPath(id), r.watchBasePath()); err != nil {
		r.dropWatchBase() // none: the next begin reads the whole tree
	}
}

// dropWatchBase removes watch/base: gc and repair, which delete
// contents its state may name.
func (r *Repo) dropWatchBase() error {
	fsutil.Mutating()
	if err := os.Remove(r.watchBasePath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("drop %s: %w", r.watchBasePath(), err)
	}
	return nil
}

// treeNow records the tree's state now as m's manifest (m is not
// written) and returns what the watcher's token file is to keep of it
// (its files with several names are taken from these entries) with the
// watcher's token for it (watched false: none vouches): the last begin's
// state patched with what changed since, when the watcher vouches for
// that; else a scan of the whole tree. A state the watcher vouches for
// is recorded blocked (blocked.go), so that the next begin and the end
// rewrite and read only the blocks of the paths that changed.
func (r *Repo) treeNow(m *record.Meta) (entries record.Manifest, t watch.Token, watched bool, err error) {
	r.LastWatched = false
	if watchOn() {
		var ok bool
		if entries, t, ok, err = r.treeFromBase(m); err != nil {
			return nil, t, false, err
		}
		if ok {
			r.LastWatched = true
			return entries, t, true, r.Flush()
		}
		t, watched = r.watchMark() // before the scan: what changes during it is named at the end
	}
	tree, err := r.ScanTree(true)
	if err != nil {
		return nil, t, false, fmt.Errorf("snapshot: %w", err)
	}
	m.Files, m.Bytes = counts(tree)
	if watched {
		m.Manifest, err = r.recordBlocked(tree)
	} else {
		m.Manifest, err = r.record(tree)
	}
	if err != nil {
		return nil, t, false, err
	}
	return tree, t, watched, r.Flush()
}

// treeFromBase records as m's manifest the tree's state now: watch/base's
// (blocked) patched with what the watcher says changed since. It returns
// what it read again, and the watcher's token for the state; ok is false
// where it cannot (no base, or a plain one, the watcher cannot vouch,
// snapback.toml changed: the ignored paths may be others).
func (r *Repo) treeFromBase(m *record.Meta) (fresh record.Manifest, t watch.Token, ok bool, err error) {
	base, err := r.loadWatchToken(r.watchBasePath())
	if err != nil {
		return nil, t, false, nil // none, or not readable: the whole tree is read, and the next end writes a new one
	}
	changes, t, err := watch.Since(r.Dir, base.token)
	if err != nil {
		return nil, t, false, nil
	}
	for _, c := range changes {
		if c.Path == config.FileName {
			return nil, t, false, nil
		}
	}
	bt, blocked, err := r.openBlocked(base.manifest)
	if err != nil || !blocked {
		return nil, t, false, nil // gone, damaged (check says more), or plain: read the whole tree
	}
	fresh, listed, deep, err := r.readTouched(changes, base.links, r.writersNow())
	var no *errUnvouched
	if errors.As(err, &no) {
		return nil, t, false, nil
	}
	if err != nil {
		return nil, t, false, err
	}
	if m.Manifest, m.Files, m.Bytes, err = bt.patch(r, listed, deep, fresh); err != nil {
		return nil, t, false, err
	}
	return fresh, t, true, nil
}

// packBlind sets PackBlind until the function it returns is called: for
// the few contents a watched checkpoint reads (see PackBlind).
func (r *Repo) packBlind() func() {
	was := r.PackBlind
	r.PackBlind = true
	return func() { r.PackBlind = was }
}

// errUnvouched: the changes the watcher named do not say everything
// about the stretch; the tree is read whole.
type errUnvouched struct{ why string }

func (e *errUnvouched) Error() string { return e.why }

// narrowCheckpoint narrows the open checkpoint m to the paths changed
// since it began (see above): those the watcher names, else every path.
func (r *Repo) narrowCheckpoint(m *record.Meta) error {
	why := ""
	r.LastWatched = false
	w, err := r.loadWatchToken(r.watchTokenPath(m.ID))
	switch {
	case errors.Is(err, fs.ErrNotExist) || !watchOn():
		return r.narrowRun(m) // no watcher vouched at the begin: nothing to say
	case err != nil:
		why = err.Error()
	default:
		changes, _, err := watch.Since(r.Dir, w.token)
		if err == nil {
			err = r.narrowWatched(m, changes, w.links, r.writersNow())
		}
		var no *errUnvouched
		var nv *watch.NotVouchedError
		switch {
		case err == nil:
			r.LastWatched = true
			return nil
		case errors.Is(err, watch.ErrNotRunning):
			why = "the watcher that vouched at the begin has stopped"
		case errors.As(err, &no), errors.As(err, &nv):
			why = err.Error()
		default:
			return err
		}
	}
	r.warn(fmt.Sprintf("checkpoint %s: the whole tree was read (%s)", m.ID, why))
	return r.narrowRun(m)
}

// narrowWatched narrows m to the paths changed among those the watcher
// named (changes), the files that had several names at the begin (links)
// and those held for writing now (writers). The state at the begin is
// read a block at a time where it is blocked: only the blocks of those
// paths.
func (r *Repo) narrowWatched(m *record.Meta, changes []watch.Change, links map[string][2]uint64, writers []string) error {
	bt, blocked, err := r.openBlocked(m.Manifest)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	if blocked {
		return r.narrowBlocked(m, bt, changes, links, writers)
	}
	before, err := r.LoadManifest(m.Manifest)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	after, touched, err := r.patched(before, changes, links, writers)
	if err != nil {
		return err
	}
	changed := map[string]bool{}
	for p := range touched {
		x, y := before.Find(p), after.Find(p)
		switch {
		case x == nil && y == nil:
		case x == nil || y == nil || !x.SameContent(y) || !x.SameMeta(y):
			changed[p] = true
		}
	}
	return r.recordNarrowed(m, before, after, changed)
}

// narrowBlocked is narrowWatched of a checkpoint whose begin's state bt
// is blocked: what the begin held of the paths read again, and of the
// first names of its hard links among them, is all that is read of it.
func (r *Repo) narrowBlocked(m *record.Meta, bt *blockedTree, changes []watch.Change, links map[string][2]uint64, writers []string) error {
	defer r.packBlind()() // (the narrowed manifests are stored as loose objects: no pack index to read)
	fresh, listed, deep, err := r.readTouched(changes, links, writers)
	if err != nil {
		return err
	}
	was := map[string]record.Entry{}
	touched, looked := map[string]bool{}, map[string]bool{}
	look := func(p string) error {
		if looked[p] {
			return nil
		}
		looked[p] = true
		e, err := bt.find(p)
		if e != nil {
			was[p] = *e
		}
		return err
	}
	for _, p := range listed {
		touched[p] = true
		if err := look(p); err != nil {
			return err
		}
		if deep[p] {
			below, err := bt.below(p)
			if err != nil {
				return err
			}
			for _, e := range below {
				touched[e.Path], looked[e.Path] = true, true
				was[e.Path] = e
			}
		}
	}
	for i := range fresh {
		touched[fresh[i].Path] = true
		if err := look(fresh[i].Path); err != nil {
			return err
		}
	}
	// The first names of the hard links held then (Subset keeps them).
	for grew := true; grew; {
		grew = false
		for _, e := range was {
			if e.Link != "" && !looked[e.Link] {
				if err := look(e.Link); err != nil {
					return err
				}
				grew = true
			}
		}
	}
	before := make(record.Manifest, 0, len(was))
	for _, e := range was {
		before = append(before, e)
	}
	before.Sort()
	changed := map[string]bool{}
	for p := range touched {
		x, y := before.Find(p), fresh.Find(p)
		switch {
		case x == nil && y == nil:
		case x == nil || y == nil || !x.SameContent(y) || !x.SameMeta(y):
			changed[p] = true
		}
	}
	return r.recordNarrowed(m, before, fresh, changed)
}

// readTouched reads what the watcher named (changes), the files that had
// several names (links), those held for writing (writers: a write
// through a shared mapping is no event) and everything below a deep
// change: fresh holds what a scan of the tree would hold of it (sorted),
// listed the paths named (sorted), and deep those read deep.
func (r *Repo) readTouched(changes []watch.Change, links map[string][2]uint64, writers []string) (fresh record.Manifest, listed []string, deep map[string]bool, err error) {
	seen := map[string]bool{}
	deep = map[string]bool{}
	add := func(p string, d bool) {
		if !seen[p] {
			seen[p] = true
			listed = append(listed, p)
		}
		deep[p] = deep[p] || d
	}
	for _, c := range changes {
		switch {
		case c.Path == "" && c.Deep:
			return nil, nil, nil, &errUnvouched{"the watcher saw the whole tree change"}
		case c.Path == "":
			continue // the root itself: no entry of its own
		case !record.ValidPath(c.Path):
			return nil, nil, nil, &errUnvouched{fmt.Sprintf("the watcher named a path no tree has: %.60q", c.Path)}
		case r.visible(c.Path):
			add(c.Path, c.Deep)
		}
	}
	for p := range links {
		add(p, false)
	}
	for _, p := range writers {
		add(p, false)
	}
	for p, d := range deep {
		if !d {
			delete(deep, p)
		}
	}
	sort.Strings(listed)
	read, err := r.readChanged(listed, deep)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the changed paths: %w", err)
	}
	// What a scan of the tree would not hold: a listed path that is gone
	// (absent), a socket or device (absent too), an ignored one, and what
	// is below an ignored directory (a listed one, read deep).
	fresh = read[:0:0]
	for _, e := range read {
		if e.Type == record.Absent || !r.visible(e.Path) || r.ign != nil && r.ign.Ignored(e.Path, e.Type == record.Dir) {
			continue
		}
		fresh = append(fresh, e)
	}
	if err := regroupLinks(fresh, links); err != nil {
		return nil, nil, nil, err
	}
	return fresh, listed, deep, nil
}

// patched patches the tree's state then (before) with what readTouched
// read into the state now, as a scan of the whole tree would have read
// it; touched are the paths whose entries may differ between the two.
func (r *Repo) patched(before record.Manifest, changes []watch.Change, links map[string][2]uint64, writers []string) (after record.Manifest, touched map[string]bool, err error) {
	fresh, paths, deep, err := r.readTouched(changes, links, writers)
	if err != nil {
		return nil, nil, err
	}
	// The state now: the state then, less what was read again and all
	// that was below a deep change, plus what was read.
	touched = map[string]bool{}
	for _, p := range paths {
		touched[p] = true
	}
	for i := range fresh {
		touched[fresh[i].Path] = true
	}
	drop := make([]bool, len(before))
	for p := range deep {
		lo := sort.Search(len(before), func(i int) bool { return before[i].Path > p+"/" })
		for i := lo; i < len(before) && strings.HasPrefix(before[i].Path, p+"/"); i++ {
			drop[i] = true
			touched[before[i].Path] = true
		}
	}
	// Both in order: merged, not sorted again (a sort of the whole
	// tree's entries cost more than the rest of the end).
	after = make(record.Manifest, 0, len(before)+len(fresh))
	j := 0
	for i := range before {
		if drop[i] || touched[before[i].Path] {
			continue
		}
		for ; j < len(fresh) && fresh[j].Path < before[i].Path; j++ {
			after = append(after, fresh[j])
		}
		after = append(after, before[i])
	}
	after = append(after, fresh[j:]...)
	return after, touched, nil
}

// readChanged reads paths (and everything below those deep says), storing
// the contents, without the stat cache: the files the watcher named have
// changed, so it would rarely vouch for one, and parsing it costs more
// than reading them (an entry for every file of the tree: 100 ms at
// 100,000 files). It is left as it is (it vouches for none of these
// files now, and the next scan reads them again).
func (r *Repo) readChanged(paths []string, deep map[string]bool) (record.Manifest, error) {
	defer r.packBlind()() // mostly new contents: not looked up in every pack's index
	sc := r.newScanner(r.treeDir, r.ign, true)
	sc.cache = &statCache{load: emptyTable}
	sc.ctx = r.Ctx
	m, err := sc.scanPathsDeep(paths, func(p string) bool { return deep[p] })
	if err != nil {
		return nil, err
	}
	r.LastScan = sc.stats
	return m, nil
}

// visible reports whether a scan of the tree can hold p: neither p nor a
// directory above it is excluded, nor is such a directory ignored.
func (r *Repo) visible(p string) bool {
	if excluded(p) {
		return false
	}
	for a := record.Parent(p); a != ""; a = record.Parent(a) {
		if excluded(a) || r.ign != nil && r.ign.Ignored(a, true) {
			return false
		}
	}
	return true
}

// regroupLinks sets the hard-link grouping of the files read again
// (sorted), as a scan of the tree would: each inode's first name holds
// the content, the others name it. All of an inode's names in the tree
// must be among them: they are when the inode had them all at the begin
// (links), so that the names missing are outside the tree, or when none
// is missing; otherwise a name that was another file's at the begin has
// become a link to it, and the watcher heard nothing of that file.
func regroupLinks(fresh record.Manifest, links map[string][2]uint64) error {
	names := map[[2]uint64][]int{}
	for i := range fresh {
		e := &fresh[i]
		e.Link = ""
		if e.Type == record.File && e.Nlink > 1 {
			names[e.Inode] = append(names[e.Inode], i)
		}
	}
	for ino, idx := range names {
		first := &fresh[idx[0]]
		if uint64(len(idx)) < first.Nlink {
			for _, i := range idx {
				if links[fresh[i].Path] != ino {
					return &errUnvouched{fmt.Sprintf("%q is a new hard link, and its other names are not known", fresh[i].Path)}
				}
			}
		}
		for _, i := range idx[1:] {
			fresh[i].Link = first.Path
		}
	}
	return nil
}
