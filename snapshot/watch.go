package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/watch"
)

// A checkpoint's end reads only what changed, when the tree's watcher
// (package internal/watch) vouches for the stretch: [Repo.BeginCheckpoint]
// asks it for a token, starting one when none runs, and keeps it in
// watch/since/ID with the files that had several names (hard links: a
// change made through another name is reported under that name only, or
// not at all from outside the tree); [Repo.EndCheckpoint] asks for the
// paths changed since the token and reads those, the directories they
// are in, everything below a directory that appeared, and those files,
// then patches the tree's state at the begin with what it read. Where
// the watcher cannot vouch (it was not running at the begin, it restarted
// or lost events since, a watch could not be added, a new hard link's
// other names are unknown), the end reads the whole tree, as without a
// watcher, and says why when the begin had a token.

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

// saveWatchToken keeps checkpoint id's token and the files of tree (its
// state at the begin) that have several names.
func (r *Repo) saveWatchToken(id string, t watch.Token, tree Manifest) error {
	var b strings.Builder
	b.WriteString(t.String() + "\n")
	for i := range tree {
		if e := &tree[i]; e.Type == File && e.Nlink > 1 {
			fmt.Fprintf(&b, "%d:%d:%s\x00", e.Inode[0], e.Inode[1], e.Path)
		}
	}
	fsutil.Mutating()
	if err := os.MkdirAll(r.path("watch", "since"), 0o700); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(r.watchTokenPath(id), []byte(b.String()), 0o600)
}

// loadWatchToken reads checkpoint id's token file: the token, and the
// inode of each file that had several names at the begin.
func (r *Repo) loadWatchToken(id string) (watch.Token, map[string][2]uint64, error) {
	b, err := r.readFile(r.watchTokenPath(id), maxManifestSize)
	if err != nil {
		return watch.Token{}, nil, err
	}
	bad := func(what string) error { return fmt.Errorf("%s: %w: %s", r.watchTokenPath(id), ErrCorrupt, what) }
	line, rest, ok := strings.Cut(string(b), "\n")
	if !ok {
		return watch.Token{}, nil, bad("no token line")
	}
	t, err := watch.ParseToken(line)
	if err != nil {
		return watch.Token{}, nil, bad(err.Error())
	}
	links := map[string][2]uint64{}
	for rest != "" {
		var rec string
		if rec, rest, ok = strings.Cut(rest, "\x00"); !ok {
			return watch.Token{}, nil, bad("a record cut short")
		}
		dev, rec, ok1 := strings.Cut(rec, ":")
		ino, p, ok2 := strings.Cut(rec, ":")
		d, err1 := strconv.ParseUint(dev, 10, 64)
		n, err2 := strconv.ParseUint(ino, 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || !ValidPath(p) {
			return watch.Token{}, nil, bad(fmt.Sprintf("record %.60q", rec))
		}
		links[p] = [2]uint64{d, n}
	}
	return t, links, nil
}

// dropWatchToken removes checkpoint id's token file.
func (r *Repo) dropWatchToken(id string) {
	fsutil.Mutating()
	os.Remove(r.watchTokenPath(id)) // none (no watcher at the begin) is fine; a leftover is never read again
}

// errUnvouched: the changes the watcher named do not say everything
// about the stretch; the tree is read whole.
type errUnvouched struct{ why string }

func (e *errUnvouched) Error() string { return e.why }

// narrowCheckpoint narrows the open checkpoint m to the paths changed
// since it began (see above): those the watcher names, else every path.
func (r *Repo) narrowCheckpoint(m *Meta) error {
	why := ""
	r.LastWatched = false
	t, links, err := r.loadWatchToken(m.ID)
	switch {
	case errors.Is(err, fs.ErrNotExist) || !watchOn():
		return r.narrowRun(m) // no watcher vouched at the begin: nothing to say
	case err != nil:
		why = err.Error()
	default:
		changes, err := watch.Since(r.Dir, t)
		if err == nil {
			err = r.narrowWatched(m, changes, links)
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
// named (changes) and the files that had several names at the begin
// (links): it reads them, and everything below a deep change, and
// patches the tree's state at the begin with what it read into the
// state now, as a scan of the whole tree would have read it.
func (r *Repo) narrowWatched(m *Meta, changes []watch.Change, links map[string][2]uint64) error {
	before, err := r.LoadManifest(m.Manifest)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	listed, deep := map[string]bool{}, map[string]bool{}
	var paths []string
	add := func(p string, d bool) {
		if !listed[p] {
			listed[p] = true
			paths = append(paths, p)
		}
		deep[p] = deep[p] || d
	}
	for _, c := range changes {
		switch {
		case c.Path == "" && c.Deep:
			return &errUnvouched{"the watcher saw the whole tree change"}
		case c.Path == "":
			continue // the root itself: no entry of its own
		case !ValidPath(c.Path):
			return &errUnvouched{fmt.Sprintf("the watcher named a path no tree has: %.60q", c.Path)}
		case r.visible(c.Path):
			add(c.Path, c.Deep)
		}
	}
	for p := range links {
		add(p, false)
	}
	sort.Strings(paths)
	read, err := r.readChanged(paths, deep)
	if err != nil {
		return fmt.Errorf("finish run %s: %w", m.ID, err)
	}
	// What a scan of the tree would not hold: a listed path that is gone
	// (absent), a socket or device (absent too), an ignored one.
	fresh := read[:0:0]
	for _, e := range read {
		if e.Type == Absent || listed[e.Path] && r.ign != nil && r.ign.Ignored(e.Path, e.Type == Dir) {
			continue
		}
		fresh = append(fresh, e)
	}
	if err := regroupLinks(fresh, links); err != nil {
		return err
	}
	// The state now: the begin's, less what was read again and all that
	// was below a deep change, plus what was read.
	touched := map[string]bool{}
	for _, p := range paths {
		touched[p] = true
	}
	for i := range fresh {
		touched[fresh[i].Path] = true
	}
	drop := make([]bool, len(before))
	for p, d := range deep {
		if !d {
			continue
		}
		lo := sort.Search(len(before), func(i int) bool { return before[i].Path > p+"/" })
		for i := lo; i < len(before) && strings.HasPrefix(before[i].Path, p+"/"); i++ {
			drop[i] = true
			touched[before[i].Path] = true
		}
	}
	// Both in order: merged, not sorted again (a sort of the whole
	// tree's entries cost more than the rest of the end).
	after := make(Manifest, 0, len(before)+len(fresh))
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

// readChanged reads paths (and everything below those deep says), storing
// the contents, without the stat cache: the files the watcher named have
// changed, so it would rarely vouch for one, and parsing it costs more
// than reading them (an entry for every file of the tree: 100 ms at
// 100,000 files). It is left as it is (it vouches for none of these
// files now, and the next scan reads them again).
func (r *Repo) readChanged(paths []string, deep map[string]bool) (Manifest, error) {
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
	for a := Parent(p); a != ""; a = Parent(a) {
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
func regroupLinks(fresh Manifest, links map[string][2]uint64) error {
	names := map[[2]uint64][]int{}
	for i := range fresh {
		e := &fresh[i]
		e.Link = ""
		if e.Type == File && e.Nlink > 1 {
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
