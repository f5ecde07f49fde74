package snapshot

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// Kinds of damage [Reader.Check] reports.
const (
	DamageObject   = "object"   // a content: missing, or not what its name says
	DamageManifest = "manifest" // a snapshot's manifest: missing, not its hash, or not decodable
	DamageRecord   = "record"   // a snapshot record (snapshots/<id>.json) that cannot be read
	DamageRun      = "run"      // a pending run's record (runs/<id>/run.json) that cannot be read
	DamagePayload  = "payload"  // a target payload a record or run names: missing or unreadable
	DamageIndex    = "index"    // the stat cache (a cache: rebuilt by the next snap)
	DamagePack     = "pack"     // a pack (packs/<hash>.pack) whose index cannot be read: its contents are missing
	DamageFile     = "file"     // something in objects/ that is no object
	DamageJournal  = "journal"  // a journal snapback will not follow (unreadable, or leading out of the store)
)

// Damage is one damaged thing in the store.
type Damage struct {
	Kind    string `json:"kind"`
	ID      string `json:"id"` // object or manifest id, record or run id, payload or file path
	Problem string `json:"problem"`
	// Snapshots are the records it touches: those whose manifests name a
	// damaged object, those a damaged manifest belongs to, a damaged
	// record itself.
	Snapshots []string `json:"snapshots"`
	// Repair says what --repair did about it ("" when not asked).
	Repair string `json:"repair,omitempty"`
}

// CheckReport is what [Reader.Check] and [Repo.Repair] found.
type CheckReport struct {
	ObjectsChecked   int      `json:"objects_checked"`
	BytesRead        int64    `json:"bytes_read"`
	SnapshotsChecked int      `json:"snapshots_checked"`
	RunsChecked      int      `json:"runs_checked"`
	Damaged          []Damage `json:"damaged"`
}

// CheckOptions choose how far Check goes.
type CheckOptions struct {
	// ReadData re-hashes every object (else: only that each one exists).
	ReadData bool
}

// Check verifies the whole store, in the manner of restic's `check
// --read-data`: every object's SHA-256, every manifest's decoding, the
// objects of every state a record returns to (what undo, redo and restore
// write back; not those of an after-state, only compared by hash), every
// snapshot and run record and what it refers to (manifests, target
// payloads), and the stat cache. It returns an error
// only when it cannot do its work; damage is in the report.
func (r *Reader) Check(o CheckOptions) (*CheckReport, error) {
	c, err := r.check(o)
	if err != nil {
		return nil, err
	}
	return c.rep, nil
}

// Repair checks the store as [Reader.Check] does, then moves damaged
// records, run records and objects aside into damaged/ (never deleting
// anything), removes a damaged stat cache, and stores again, from the
// tree, contents that are missing or damaged where a file of the tree
// still holds them. Each Damage says what was done about it.
func (r *Repo) Repair(o CheckOptions) (*CheckReport, error) {
	c, err := r.check(o)
	if err != nil {
		return nil, err
	}
	return c.rep, c.repair(r)
}

func (r *Reader) check(o CheckOptions) (*checker, error) {
	c := &checker{r: r, rep: &CheckReport{Damaged: []Damage{}}}
	metas, bad, err := r.records()
	if err != nil {
		return nil, err
	}
	c.rep.SnapshotsChecked = len(metas) + len(bad)
	if _, err := r.readJournal(); err != nil {
		c.add(Damage{Kind: DamageJournal, ID: r.journalPath(), Problem: err.Error(), Snapshots: []string{}})
	}
	for _, d := range bad {
		c.add(Damage{Kind: DamageRecord, ID: d.ID, Problem: fmt.Sprintf("%s: %v", d.Path, d.Err), Snapshots: []string{d.ID}})
	}
	runs, err := c.runs()
	if err != nil {
		return nil, err
	}
	if err := c.objects(o.ReadData); err != nil {
		return nil, err
	}
	c.order = map[string]int{}
	for i, m := range metas {
		c.order[m.ID] = i
	}
	c.manifests(metas)
	c.payloads(metas, runs)
	if _, err := r.decodeCache(); err != nil {
		c.add(Damage{Kind: DamageIndex, ID: r.path("index"), Problem: err.Error()})
	}
	sort.SliceStable(c.rep.Damaged, func(i, j int) bool {
		a, b := c.rep.Damaged[i], c.rep.Damaged[j]
		if a.Kind != b.Kind {
			return kindOrder(a.Kind) < kindOrder(b.Kind)
		}
		return a.ID < b.ID
	})
	return c, nil
}

func kindOrder(k string) int {
	return strings.Index("journal record run manifest object pack payload index file", k)
}

type checker struct {
	r   *Reader
	rep *CheckReport

	present   map[record.ObjectID]bool   // every object, loose by its file's name or packed
	packOf    map[record.ObjectID]string // the pack a content is read from (not loose)
	packAside map[string]string          // packs --repair set aside, and where
	damaged   map[record.ObjectID]string // objects whose content is not their name, and why
	// badCopy: contents packed twice whose copy in the pack named is damaged
	// while a later pack's is intact (the one read): no state is lost,
	// but the damaged copy is reported, and --repair sets its pack aside.
	badCopy  map[record.ObjectID]string
	reported map[record.ObjectID]bool // damaged objects already reported (as a manifest)
	// moveRecords: records --repair moves aside because the state they
	// return to is gone (their manifest missing or damaged).
	moveRecords map[string]bool
	order       map[string]int // a record's place in creation order
}

func (c *checker) add(d Damage) {
	if d.Snapshots == nil {
		d.Snapshots = []string{}
	}
	c.rep.Damaged = append(c.rep.Damaged, d)
}

// runs reads every pending run's record; damaged ones are reported.
func (c *checker) runs() ([]*ViewRun, error) {
	ents, err := os.ReadDir(c.r.path("runs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	var out []*ViewRun
	for _, e := range ents {
		path := c.r.pendingPath(e.Name())
		b, err := readLimited(path, maxRunSize)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a copy-mode run's lock directory
		}
		c.rep.RunsChecked++
		var p ViewRun
		if err == nil {
			err = json.Unmarshal(b, &p)
		}
		if err == nil && (p.ID != e.Name() || !record.ValidID(p.ID)) {
			err = fmt.Errorf("it names run %q", p.ID)
		}
		if err != nil {
			c.add(Damage{Kind: DamageRun, ID: e.Name(), Problem: fmt.Sprintf("%s: %v", path, err)})
			continue
		}
		out = append(out, &p)
	}
	return out, nil
}

// objects lists every object file and, with readData, hashes each.
func (c *checker) objects(readData bool) error {
	c.present, c.damaged, c.reported = map[record.ObjectID]bool{}, map[record.ObjectID]string{}, map[record.ObjectID]bool{}
	dir := c.r.path("objects")
	subs, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	var names []string
	for _, sub := range subs {
		if !sub.IsDir() || len(sub.Name()) != 2 {
			c.add(Damage{Kind: DamageFile, ID: filepath.Join(dir, sub.Name()), Problem: "not an object directory (left in place)"})
			continue
		}
		ents, err := os.ReadDir(filepath.Join(dir, sub.Name()))
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		for _, e := range ents {
			names = append(names, filepath.Join(sub.Name(), e.Name()))
		}
	}
	if readData {
		defer c.r.working(fmt.Sprintf("reading %d objects", len(names)))()
	}
	for _, n := range names {
		id, ok := record.ParseObjectID(strings.Replace(n, string(filepath.Separator), "", 1))
		if !ok {
			c.add(Damage{Kind: DamageFile, ID: filepath.Join(dir, n), Problem: "not an object name (left in place)"})
			continue
		}
		c.present[id] = true
		c.rep.ObjectsChecked++
		if !readData {
			continue
		}
		sum, size, err := hashObject(filepath.Join(dir, n))
		c.rep.BytesRead += size
		switch {
		case err != nil:
			c.damaged[id] = err.Error()
		case sum != id:
			c.damaged[id] = "content does not match its hash"
		}
	}
	return c.packs(readData)
}

// packs lists the contents of every pack (those a loose object or an
// earlier pack holds too are not read from it, unless the earlier pack's
// copy is damaged: the store reads an intact copy then) and, with
// readData, hashes each; a pack whose index cannot be read is damage.
func (c *checker) packs(readData bool) error {
	c.packOf = map[record.ObjectID]string{}
	r := c.r
	names, err := r.packNames()
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	for _, name := range names {
		ents, err := r.packIndex(name)
		if err != nil {
			c.add(Damage{Kind: DamagePack, ID: r.path(packsDir, name), Problem: err.Error()})
			continue
		}
		for _, e := range ents {
			again := c.present[e.id]
			if again && (!readData || c.packOf[e.id] == "" || c.damaged[e.id] == "") {
				continue // read from where it was met first
			}
			if !again {
				c.present[e.id] = true
				c.packOf[e.id] = name
				c.rep.ObjectsChecked++
			}
			if !readData {
				continue
			}
			b, err := r.readEntry(name, e)
			c.rep.BytesRead += int64(len(b))
			switch {
			case again:
				// The copy first met is damaged: the store reads this one
				// when it is intact.
				if err == nil && sha256.Sum256(b) == e.id {
					if c.badCopy == nil {
						c.badCopy = map[record.ObjectID]string{}
					}
					c.badCopy[e.id] = c.packOf[e.id]
					c.add(Damage{Kind: DamageObject, ID: e.id.String(), Problem: fmt.Sprintf("%s; pack %s holds an intact copy, which is read", c.damaged[e.id], name), Snapshots: []string{}})
					delete(c.damaged, e.id)
					c.packOf[e.id] = name
				}
			case err != nil:
				c.damaged[e.id] = fmt.Sprintf("pack %s: %v", name, err)
			case sha256.Sum256(b) != e.id:
				c.damaged[e.id] = fmt.Sprintf("content does not match its hash (in pack %s)", name)
			}
		}
	}
	return nil
}

// hashObject hashes a stored object, refusing anything but a regular file.
func hashObject(path string) ([32]byte, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return [32]byte{}, 0, fmt.Errorf("%w (a symlink)", errNotRegular)
	}
	if err != nil {
		return [32]byte{}, 0, err
	}
	defer f.Close() // read-only
	st, err := f.Stat()
	if err != nil {
		return [32]byte{}, 0, err
	}
	if !st.Mode().IsRegular() {
		return [32]byte{}, 0, fmt.Errorf("%w (%s)", errNotRegular, st.Mode().Type())
	}
	return fsutil.HashFile(f)
}

// manifests checks the manifest and after-state of every record, and
// that every object a record's manifest names is there and intact: what
// undo, redo and restore put back. An after-state is only compared with
// the tree by hash (it is what a commit moved into the tree, without a
// copy), so its manifest must be readable but its contents need not be
// stored; those that are and are damaged are still reported.
func (c *checker) manifests(metas []*record.Meta) {
	c.moveRecords = map[string]bool{}
	users := map[string][]string{} // manifest id -> records
	returnsTo := map[string][]string{}
	for _, m := range metas {
		users[m.Manifest] = append(users[m.Manifest], m.ID)
		returnsTo[m.Manifest] = append(returnsTo[m.Manifest], m.ID)
		if m.After != "" && m.After != m.Manifest {
			users[m.After] = append(users[m.After], m.ID)
		}
	}
	objUsers := map[record.ObjectID]map[string]bool{}
	ids := make([]string, 0, len(users))
	for id := range users {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		oid, _ := record.ParseObjectID(id) // validated with the record
		problem := ""
		var mf record.Manifest
		switch {
		case !c.present[oid]:
			problem = "missing"
		case c.damaged[oid] != "":
			problem = c.damaged[oid]
			c.reported[oid] = true
		default:
			if mf, problem = c.loadManifest(oid); problem != "" {
				c.reported[oid] = true
			}
		}
		if problem != "" {
			c.add(Damage{Kind: DamageManifest, ID: id, Problem: problem, Snapshots: c.sorted(users[id])})
			for _, s := range returnsTo[id] {
				c.moveRecords[s] = true
			}
			continue
		}
		mf.Objects(func(o record.ObjectID) {
			if objUsers[o] == nil {
				objUsers[o] = map[string]bool{}
			}
			for _, s := range returnsTo[id] {
				objUsers[o][s] = true
			}
		})
	}
	for o, us := range objUsers {
		if len(us) == 0 {
			continue // named by after-states alone
		}
		var snaps []string
		for s := range us {
			snaps = append(snaps, s)
		}
		switch {
		case !c.present[o]:
			c.add(Damage{Kind: DamageObject, ID: o.String(), Problem: "missing", Snapshots: c.sorted(snaps)})
		case c.damaged[o] != "":
			c.add(Damage{Kind: DamageObject, ID: o.String(), Problem: c.damaged[o], Snapshots: c.sorted(snaps)})
			c.reported[o] = true
		}
	}
	for o, why := range c.damaged {
		if !c.reported[o] { // no state to return to needs it
			c.add(Damage{Kind: DamageObject, ID: o.String(), Problem: why})
		}
	}
}

// loadManifest reads a manifest as LoadManifest does, saying what is
// wrong in check's terms.
func (c *checker) loadManifest(oid record.ObjectID) (record.Manifest, string) {
	b, err := c.r.readObject(oid, maxManifestSize)
	if err != nil {
		return nil, err.Error()
	}
	if sha256.Sum256(b) != oid {
		return nil, "content does not match its hash"
	}
	mf, err := c.r.decodeManifest(b)
	if err != nil {
		return nil, err.Error()
	}
	return mf, ""
}

// payloads checks that every target payload a record or a run names is
// there with readable settings and its data directory.
func (c *checker) payloads(metas []*record.Meta, runs []*ViewRun) {
	users := map[string][]string{}
	for _, m := range metas {
		for _, t := range m.Targets {
			users[t.Payload] = append(users[t.Payload], m.ID)
		}
	}
	for _, p := range runs {
		for _, t := range p.Targets {
			users[t.Payload] = append(users[t.Payload], p.ID)
		}
	}
	rels := make([]string, 0, len(users))
	for rel := range users {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	for _, rel := range rels {
		if problem := c.payloadProblem(rel); problem != "" {
			c.add(Damage{Kind: DamagePayload, ID: rel, Problem: problem, Snapshots: c.sorted(users[rel])})
		}
	}
}

func (c *checker) payloadProblem(rel string) string {
	if !payloadPath().MatchString(rel) {
		return "not a payload path of the store"
	}
	b, err := readLimited(c.r.path(rel, "target.json"), maxPayloadSize)
	if err != nil {
		return "target.json: " + err.Error()
	}
	var t config.Target
	if err := json.Unmarshal(b, &t); err != nil {
		return "target.json: " + err.Error()
	}
	st, err := os.Lstat(c.r.path(rel, "data"))
	if err != nil {
		return "data: " + err.Error()
	}
	if !st.IsDir() {
		return "data: not a directory"
	}
	return ""
}

// sorted puts record ids in creation order (runs' ids sort after).
func (c *checker) sorted(s []string) []string {
	out := append([]string{}, s...)
	sort.Slice(out, func(i, j int) bool {
		oi, iok := c.order[out[i]]
		oj, jok := c.order[out[j]]
		if iok != jok || !iok {
			return iok && !jok || !iok && !jok && out[i] < out[j]
		}
		return oi < oj
	})
	return out
}

// repair acts on what check found; each Damage says what was done.
func (c *checker) repair(r *Repo) error {
	// The last checkpoint's state, which the next begin patches, may
	// name contents set aside here.
	if err := r.dropWatchBase(); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	for i := range c.rep.Damaged {
		if d := &c.rep.Damaged[i]; d.Kind == DamageJournal {
			to, err := r.SetAsideBadJournal()
			if err != nil {
				return err
			}
			d.Repair = "moved to " + to + "; the operation it describes is not finished"
		}
	}
	moved := map[string]string{} // record id -> where it went
	moveRecord := func(id string) (string, error) {
		if to, ok := moved[id]; ok {
			return to, nil
		}
		to, err := r.moveAside(r.recordPath(id), id+".json")
		if err != nil {
			return "", err
		}
		moved[id] = to
		return to, nil
	}
	want := map[record.ObjectID]*Damage{} // contents to store again from the tree
	for i := range c.rep.Damaged {
		d := &c.rep.Damaged[i]
		switch d.Kind {
		case DamageRecord:
			to, err := moveRecord(d.ID)
			if err != nil {
				return err
			}
			d.Repair = "moved to " + to
		case DamageRun:
			to, err := r.moveAside(r.pendingPath(d.ID), "run-"+d.ID+".json")
			if err != nil {
				return err
			}
			d.Repair = fmt.Sprintf("moved to %s; the run's changes stay in %s", to, r.UpperDir(d.ID))
		case DamageManifest:
			var notes []string
			oid, _ := record.ParseObjectID(d.ID)
			if c.present[oid] {
				to, err := c.setAside(oid)
				if err != nil {
					return err
				}
				notes = append(notes, "moved to "+to)
			}
			var recs []string
			for _, s := range d.Snapshots {
				if c.moveRecords[s] {
					to, err := moveRecord(s)
					if err != nil {
						return err
					}
					recs = append(recs, filepath.Base(to))
				}
			}
			if len(recs) > 0 {
				notes = append(notes, fmt.Sprintf("the records returning to it moved to %s (%s)", r.path(DamagedDir), strings.Join(recs, ", ")))
			}
			if len(notes) == 0 {
				notes = append(notes, "cannot be repaired")
			}
			d.Repair = strings.Join(notes, "; ")
		case DamageObject:
			oid, _ := record.ParseObjectID(d.ID)
			if pack, ok := c.badCopy[oid]; ok {
				to, err := c.setAsidePack(pack)
				if err != nil {
					return err
				}
				d.Repair = "moved to " + to
				continue
			}
			d.Repair = "missing"
			if c.present[oid] {
				// Aside, it no longer passes for the content: the next
				// snapshot of a file holding it stores it again.
				to, err := c.setAside(oid)
				if err != nil {
					return err
				}
				d.Repair = "moved to " + to
			}
			want[oid] = d
		case DamagePack:
			to, err := r.moveAside(d.ID, "pack-"+filepath.Base(d.ID))
			if err != nil {
				return err
			}
			d.Repair = "moved to " + to + "; the contents snapshots need from it are reported missing"
		case DamageIndex:
			if err := os.Remove(r.path("index")); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("check: %w", err)
			}
			d.Repair = "removed (a cache: the next snap rebuilds it)"
		case DamagePayload:
			d.Repair = "cannot be repaired: restoring these snapshots' targets will fail"
		case DamageFile:
			d.Repair = "left in place: not snapback's"
		}
	}
	r.forgetPacks() // packs were set aside or written
	if len(want) == 0 {
		return nil
	}
	// The stat cache may vouch for a content that is now gone: a snapshot
	// must read every file again rather than name it.
	if err := os.Remove(r.path("index")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("check: %w", err)
	}
	found, err := r.restoreFromTree(want)
	if err != nil {
		return err
	}
	for oid, d := range want {
		if p, ok := found[oid]; ok {
			d.Repair += "; stored again from the tree's " + p
		} else {
			d.Repair += "; no file in the tree holds this content: these snapshots cannot restore it"
		}
	}
	return nil
}

// setAside moves a damaged object out of the way, into damaged/: a loose
// one's file, or, for a packed one, its whole pack, once the pack's
// intact contents are packed again. It says where it went.
func (c *checker) setAside(oid record.ObjectID) (string, error) {
	pack := c.packOf[oid]
	if pack == "" {
		return c.r.moveAside(c.r.objectPath(oid), "object-"+oid.String())
	}
	return c.setAsidePack(pack)
}

// setAsidePack moves the pack that holds a damaged content into damaged/,
// once its intact contents are packed again, and says where it went.
func (c *checker) setAsidePack(pack string) (string, error) {
	if to, ok := c.packAside[pack]; ok {
		return to, nil
	}
	went, _, _, err := c.r.repack([]string{pack}, func(id record.ObjectID, b []byte) bool {
		return sha256.Sum256(b) == id
	}, true)
	if err != nil {
		return "", fmt.Errorf("check: %w", err)
	}
	if c.packAside == nil {
		c.packAside = map[string]string{}
	}
	c.packAside[pack] = went[pack] + " (its pack; the intact contents packed again)"
	return c.packAside[pack], nil
}

// restoreFromTree stores again the wanted contents that a file of the
// tree still holds, and returns, for each, the path it was read from.
func (r *Repo) restoreFromTree(want map[record.ObjectID]*Damage) (map[record.ObjectID]string, error) {
	m, err := r.ScanTree(false)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	found := map[record.ObjectID]string{}
	for i := range m {
		e := &m[i]
		if e.Type != record.File || want[e.Object] == nil || found[e.Object] != "" {
			continue
		}
		d, err := r.treeDir.OpenDir(record.Parent(e.Path))
		if err != nil {
			continue // gone since the scan: another file may hold it
		}
		f, err := d.Open(record.Base(e.Path), unix.O_RDONLY|unix.O_NONBLOCK, 0)
		d.Close()
		if err != nil {
			continue
		}
		id, _, err := r.PutFile(f)
		f.Close() // read-only
		if err != nil {
			return nil, fmt.Errorf("check: store %s: %w", e.Path, err)
		}
		if id == e.Object {
			found[id] = e.Path
		}
	}
	return found, r.Flush()
}

// payloadPath is the form of a target payload's directory in the store.
var payloadPath = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^targets/[0-9]{8}-[0-9]{6}-[0-9a-f]{6}/[0-9]+$`)
})
