package snapshot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
)

// ErrDamaged: a snapshot record cannot be read. Verbs that only look skip
// it with a warning; verbs that change things refuse until `snapback check
// --repair` (or `recover`) has moved it aside.
var ErrDamaged = errors.New("damaged")

// DamagedRecord is a snapshot record that cannot be read.
type DamagedRecord struct {
	ID   string // from its file name
	Path string
	Err  error // what is wrong with it
}

// DamagedDir holds, inside the store, what check --repair and recover move
// aside: nothing there is deleted by snapback, and gc keeps every content
// a record there may name.
const DamagedDir = "damaged"

func damagedError(d []DamagedRecord) error {
	more := ""
	if len(d) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(d)-1)
	}
	return fmt.Errorf("%w: snapshot record %s%s: %w; `snapback check --repair` moves damaged records aside", ErrDamaged, d[0].Path, more, d[0].Err)
}

// damagedRun handles a pending run's record that cannot be read (why):
// skipped with a warning where damaged records may be, else the error.
func (r *Reader) damagedRun(id string, why error) error {
	if why == nil {
		why = fmt.Errorf("%w: it names another run", record.ErrCorrupt)
	} else if !errors.Is(why, record.ErrCorrupt) {
		why = fmt.Errorf("%w: %w", record.ErrCorrupt, why)
	}
	if r.SkipDamaged {
		r.warn(fmt.Sprintf("skipping damaged run record %s (%v); `snapback check --repair` moves it aside", r.pendingPath(id), why))
		return nil
	}
	return fmt.Errorf("%w: run record %s: %w; `snapback check --repair` moves it aside", ErrDamaged, r.pendingPath(id), why)
}

func damagedWarning(d []DamagedRecord) string {
	parts := make([]string, len(d))
	for i, r := range d {
		parts[i] = fmt.Sprintf("%s (%v)", r.Path, r.Err)
	}
	return fmt.Sprintf("skipping %d damaged snapshot record(s): %s; `snapback check --repair` moves them aside", len(d), strings.Join(parts, ", "))
}

// DamagedRecords lists the snapshot records that cannot be read.
func (s *Store) DamagedRecords() ([]DamagedRecord, error) {
	_, d, err := s.records()
	return d, err
}

// MoveDamagedAside moves every snapshot record and pending run record
// that cannot be read into the store's damaged/ directory, and says where
// each went (nothing is deleted; a run's changes stay where they are).
func (r *Repo) MoveDamagedAside() ([]string, error) {
	d, err := r.DamagedRecords()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rec := range d {
		to, err := r.moveAside(rec.Path, rec.ID+".json")
		if err != nil {
			return out, err
		}
		out = append(out, fmt.Sprintf("moved damaged snapshot record %s to %s (%v)", rec.Path, to, rec.Err))
	}
	c := &checker{r: r.Reader, rep: &CheckReport{}}
	if _, err := c.runs(); err != nil {
		return out, err
	}
	for _, dm := range c.rep.Damaged {
		to, err := r.moveAside(r.pendingPath(dm.ID), "run-"+dm.ID+".json")
		if err != nil {
			return out, err
		}
		out = append(out, fmt.Sprintf("moved damaged run record %s to %s; the run's changes stay in %s", r.pendingPath(dm.ID), to, r.UpperDir(dm.ID)))
	}
	return out, nil
}

// moveAside renames a store file into damaged/ under name (numbered when
// taken) and returns its new path.
func (s *Store) moveAside(path, name string) (string, error) {
	dir := s.path(DamagedDir)
	fsutil.Mutating()
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("move aside %s: %w", path, err)
	}
	to := filepath.Join(dir, name)
	for n := 1; ; n++ {
		if _, err := os.Lstat(to); errors.Is(err, fs.ErrNotExist) {
			break
		}
		to = filepath.Join(dir, fmt.Sprintf("%s.%d", name, n))
	}
	fsutil.Mutating()
	if err := os.Rename(path, to); err != nil {
		return "", fmt.Errorf("move aside %s: %w", path, err)
	}
	if err := syncDirs(filepath.Dir(path), dir); err != nil {
		return "", fmt.Errorf("move aside %s: %w", path, err)
	}
	return to, nil
}

var (
	hexIDPattern   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[0-9a-f]{64}`) })
	payloadPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`targets/([0-9]{8}-[0-9]{6}-[0-9a-f]{6})/`) })
)

// salvage reads what damaged records (those still among the records and
// those moved aside) may refer to: every object id and payload owner that
// appears in their bytes, and their own ids. gc and the payload sweep keep
// all of it: a damaged record's contents are deleted only when the user
// deletes the record from damaged/.
func (s *Store) salvage() (objects map[record.ObjectID]bool, owners map[string]bool, err error) {
	objects, owners = map[record.ObjectID]bool{}, map[string]bool{}
	var paths []string
	d, err := s.DamagedRecords()
	if err != nil {
		return nil, nil, err
	}
	for _, r := range d {
		paths = append(paths, r.Path)
	}
	ents, err := os.ReadDir(s.path(DamagedDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("read %s: %w", s.path(DamagedDir), err)
	}
	for _, e := range ents {
		paths = append(paths, s.path(DamagedDir, e.Name()))
	}
	for _, p := range paths {
		name := filepath.Base(p)
		if i := strings.IndexByte(name, '.'); i >= 0 && record.ValidID(name[:i]) {
			owners[name[:i]] = true
		}
		b, err := s.readFile(p, maxRunSize)
		if err != nil {
			continue // a FIFO, a huge file: nothing in it can be read anyway
		}
		for _, h := range hexIDPattern().FindAll(b, -1) {
			if id, ok := record.ParseObjectID(string(h)); ok {
				objects[id] = true
			}
		}
		for _, m := range payloadPattern().FindAllSubmatch(b, -1) {
			owners[string(m[1])] = true
		}
	}
	return objects, owners, nil
}

func syncDirs(dirs ...string) error {
	for _, d := range dirs {
		if err := fsutil.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// isManifest reports whether a stored object starts as a manifest does
// (without reading the rest: it may be a large content).
func (s *Store) isManifest(id record.ObjectID) bool {
	f, err := s.OpenObject(id) // no symlink followed, no FIFO waited on
	if err != nil {
		return false
	}
	defer f.Close() // read-only
	b := make([]byte, len(record.BlocksMagic))
	n, _ := io.ReadFull(f, b)
	return string(b[:min(n, len(record.ManifestMagic))]) == record.ManifestMagic || isBlocked(b[:n])
}
