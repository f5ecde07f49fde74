package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
)

// Backend is a target's backend as the store drives it: package backends
// implements it (its contract is backends.Backend's), and cmd/snapback
// hands the store those backends with [UseBackends], so that the store
// (and what imports it) is built without their database and docker
// drivers. The implicit git target's backend is the store's own.
type Backend interface {
	Available() (bool, string)
	Check(ctx context.Context, t config.Target, root string) error
	Snapshot(ctx context.Context, t config.Target, root, dir string) error
	Restore(ctx context.Context, t config.Target, root, dir string) error
	Release(ctx context.Context, t config.Target, root, dir string) error
}

// findBackend finds a backend of snapback.toml by name (UseBackends).
var findBackend func(name string) (Backend, error)

// UseBackends gives the store the target backends, found by name: the
// program calls it once, before it opens a store. Until then a declared
// target has no backend (a config.ErrTarget).
func UseBackends(find func(name string) (Backend, error)) { findBackend = find }

// backendOf is the backend of a target: the implicit git one, or one of
// snapback.toml's.
func backendOf(name string) (Backend, error) {
	if name == gitBackendName {
		return gitBackend{}, nil
	}
	if findBackend == nil {
		return nil, fmt.Errorf("%w: unknown backend %q", config.ErrTarget, name)
	}
	return findBackend(name)
}

// TargetName is how errors and listings name a target.
func TargetName(t config.Target) string {
	switch {
	case t.Name != "":
		return t.Name
	case t.Path != "":
		return t.Backend + " " + t.Path
	case t.Volume != "":
		return t.Backend + " " + t.Volume
	case t.Dataset != "":
		return t.Backend + " " + t.Dataset
	case t.DSN != "":
		return t.Backend + " " + redactDSN(t.DSN)
	}
	return t.Backend
}

// redactDSN hides a password in a DSN shown to the user.
func redactDSN(dsn string) string {
	if at := strings.LastIndex(dsn, "@"); at >= 0 {
		if i := strings.Index(dsn, "://"); i >= 0 && i < at {
			dsn = dsn[:i+3] + "…" + dsn[at:]
		} else if i < 0 {
			dsn = "…" + dsn[at:]
		}
	}
	return dsn
}

// working tells the user what takes time (Working, when set) and returns
// the call that says it is over.
func (r *Reader) working(what string) func() {
	if r.Working == nil {
		return func() {}
	}
	return r.Working(what)
}

// ctx is the context targets are snapshotted and restored in.
func (r *Reader) ctx() context.Context {
	if r.Ctx != nil {
		return r.Ctx
	}
	return context.Background()
}

// CheckTargets checks every target snapback.toml declares against the real
// thing, changing nothing: the first bad one is the error (config.ErrTarget).
func (r *Repo) CheckTargets() error {
	return r.checkTargets(r.Targets)
}

func (r *Repo) checkTargets(ts []config.Target) error {
	for _, t := range ts {
		b, err := backendOf(t.Backend)
		if err != nil {
			return err
		}
		if ok, why := b.Available(); !ok {
			return fmt.Errorf("%w: target %s: the %s backend is not usable here: %s", config.ErrTarget, TargetName(t), t.Backend, why)
		}
		if err := b.Check(r.ctx(), t, r.Root); err != nil {
			return err
		}
	}
	return nil
}

func (r *Repo) targetsDir(owner string) string { return r.path("targets", owner) }

// snapTargets saves the state of each target into payloads owned by the
// record owner. On error nothing is left behind.
func (r *Repo) snapTargets(owner string, ts []config.Target) ([]record.TargetState, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	if err := r.checkTargets(ts); err != nil {
		return nil, err
	}
	fsutil.Mutating()
	if err := os.MkdirAll(r.targetsDir(owner), 0o700); err != nil {
		return nil, fmt.Errorf("targets: %w", err)
	}
	var out []record.TargetState
	fail := func(err error) ([]record.TargetState, error) {
		r.releasePayloads(owner)
		return nil, err
	}
	for i, t := range ts {
		rel := filepath.Join("targets", owner, strconv.Itoa(i))
		dir := r.path(rel)
		fsutil.Mutating()
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fail(fmt.Errorf("target %s: %w", TargetName(t), err))
		}
		b, err := json.Marshal(t)
		if err != nil {
			return fail(err)
		}
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, "target.json"), b, 0o600); err != nil {
			return fail(fmt.Errorf("target %s: %w", TargetName(t), err))
		}
		data := filepath.Join(dir, "data")
		fsutil.Mutating()
		if err := os.Mkdir(data, 0o700); err != nil {
			return fail(fmt.Errorf("target %s: %w", TargetName(t), err))
		}
		be, err := backendOf(t.Backend)
		if err != nil {
			return fail(err)
		}
		start := time.Now()
		done := r.working("saving target " + TargetName(t) + " (" + t.Backend + ")")
		err = be.Snapshot(r.ctx(), t, r.Root, data)
		done()
		if err != nil {
			return fail(fmt.Errorf("snapshot of target %s: %w", TargetName(t), err))
		}
		if err := fsutil.SyncDir(data); err != nil {
			return fail(err)
		}
		if err := fsutil.SyncDir(dir); err != nil { // target.json's rename and data's entry
			return fail(err)
		}
		out = append(out, record.TargetState{Name: TargetName(t), Backend: t.Backend, Payload: rel, Bytes: duBytes(data), Millis: time.Since(start).Milliseconds()})
	}
	if err := fsutil.SyncDir(r.targetsDir(owner)); err != nil {
		return fail(err)
	}
	// And the owner's directory's own entry, made by MkdirAll above.
	if err := fsutil.SyncDir(filepath.Dir(r.targetsDir(owner))); err != nil {
		return fail(err)
	}
	return out, nil
}

// payloadTarget reads the settings a payload was taken with.
func (r *Reader) payloadTarget(rel string) (config.Target, error) {
	var t config.Target
	b, err := r.readFile(r.path(rel, "target.json"), maxPayloadSize)
	if err != nil {
		return t, fmt.Errorf("target payload %s: target.json: %w", rel, err)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("target payload %s: %w: %v", rel, record.ErrCorrupt, err)
	}
	return t, nil
}

// declaredTarget is the target of snapback.toml a saved state stands
// for. A payload's target.json, like all of the store, is input from
// outside (a cloned repository's committed .snapback/ included): it is
// never acted on as it stands. It only selects the target snapback.toml
// declares now with the same backend and the same identity (resolved
// path, dsn, volume, dataset), and that declared target is what is
// restored; a payload that names anything else is refused (ErrUntrusted),
// naming the record and the field. The implicit git target is not
// declared: its backend checks that it names the git dir found from the
// root (repoFor).
func (r *Repo) declaredTarget(s record.TargetState) (config.Target, error) {
	t, err := r.payloadTarget(s.Payload)
	if err != nil {
		return t, err
	}
	if t.Backend != s.Backend {
		return t, r.undeclared(s, "backend", fmt.Sprintf("%q differs from its record's (%q)", t.Backend, s.Backend))
	}
	if t.Backend == gitBackendName {
		return t, nil
	}
	for _, c := range r.Targets {
		if sameTarget(c, t, r.Root) {
			return c, nil
		}
	}
	field, val := "backend", strconv.Quote(t.Backend)
	switch {
	case t.Path != "":
		field, val = "path", strconv.Quote(t.Path)
	case t.DSN != "":
		field, val = "dsn", strconv.Quote(redactDSN(t.DSN))
	case t.Volume != "":
		field, val = "volume", strconv.Quote(t.Volume)
	case t.Dataset != "":
		field, val = "dataset", strconv.Quote(t.Dataset)
	}
	return t, r.undeclared(s, field, fmt.Sprintf("%s (%s) is not a [[target]] of snapback.toml", val, t.Backend))
}

// undeclared is declaredTarget's refusal of state s.
func (r *Repo) undeclared(s record.TargetState, field, what string) error {
	owner := s.Payload
	if parts := strings.Split(s.Payload, "/"); len(parts) == 3 {
		owner = parts[1]
	}
	return fmt.Errorf("%w: record %s: %s: %s %s; not restored", ErrUntrusted, owner, r.path(s.Payload, "target.json"), field, what)
}

// sameTarget reports whether a and b name the same thing: the same
// backend and the same path (resolved against root), dsn, volume and
// dataset. Names and options do not count.
func sameTarget(a, b config.Target, root string) bool {
	if a.Backend != b.Backend || a.DSN != b.DSN || a.Volume != b.Volume || a.Dataset != b.Dataset || (a.Path == "") != (b.Path == "") {
		return false
	}
	if a.Path == "" {
		return true
	}
	abs := func(p string) string {
		if !filepath.IsAbs(p) {
			p = filepath.Join(root, p)
		}
		return filepath.Clean(p)
	}
	return abs(a.Path) == abs(b.Path)
}

// stateTargets lists the declared targets states were taken of
// (declaredTarget).
func (r *Repo) stateTargets(states []record.TargetState) ([]config.Target, error) {
	var ts []config.Target
	for _, s := range states {
		t, err := r.declaredTarget(s)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// restoreTargets brings each target back to its saved state. Backends'
// restores are idempotent: recover runs this again after a crash. It
// runs once the tree has moved, so a Ctrl-C (r.Ctx cancelled) does not
// stop it: the operation completes rather than leave the tree restored
// and its targets not.
func (r *Repo) restoreTargets(states []record.TargetState) error {
	ctx := context.WithoutCancel(r.ctx())
	for _, s := range states {
		t, err := r.declaredTarget(s)
		if err != nil {
			return err
		}
		b, err := backendOf(t.Backend)
		if err != nil {
			return err
		}
		fsutil.CrashPoint("target-restore")
		done := r.working("restoring target " + s.Name + " (" + t.Backend + ")")
		fsutil.Mutating() // a target's restore is one kill point of the crash tests (its backend makes it atomic)
		err = b.Restore(ctx, t, r.Root, r.path(s.Payload, "data"))
		done()
		if err != nil {
			return fmt.Errorf("restore of target %s: %w", s.Name, err)
		}
	}
	return nil
}

// releasePayloads frees and removes every payload under targets/<owner>.
func (r *Repo) releasePayloads(owner string) error {
	dir := r.targetsDir(owner)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		rel := filepath.Join("targets", owner, e.Name())
		// Only a declared target's payload is released through its
		// backend (which may drop a copy on a server): one naming
		// anything else is only removed.
		if t, err := r.payloadTarget(rel); err == nil {
			t, err = r.declaredTarget(record.TargetState{Backend: t.Backend, Payload: rel})
			if b, berr := backendOf(t.Backend); err == nil && berr == nil {
				if err := b.Release(r.ctx(), t, r.Root, r.path(rel, "data")); err != nil {
					return fmt.Errorf("release target %s: %w", TargetName(t), err)
				}
			}
		}
		if err := fsutil.RemoveAll(r.path(rel)); err != nil {
			return err
		}
	}
	fsutil.Mutating()
	return os.Remove(dir)
}

// owners lists the records whose payloads a list of states lives in.
func owners(states []record.TargetState) map[string]bool {
	out := map[string]bool{}
	for _, s := range states {
		parts := strings.Split(filepath.ToSlash(s.Payload), "/")
		if len(parts) == 3 && parts[0] == "targets" {
			out[parts[1]] = true
		}
	}
	return out
}

// SweepPayloads releases payloads no record, pending run or journal
// refers to: leftovers of an operation that died before writing its
// record (a snapshot database on a server included). Recover calls it
// after finishing an interrupted operation, gc every time.
func (r *Repo) SweepPayloads() error {
	ents, err := os.ReadDir(r.path("targets"))
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(ents) == 0 {
		return nil
	}
	all, _, err := r.records() // (livePayloads keeps what damaged ones may name)
	if err != nil {
		return err
	}
	keep, err := r.livePayloads(all)
	if err != nil {
		return err
	}
	return r.sweepPayloads(keep)
}

// sweepPayloads releases the payload directories whose owners keep does
// not name. One that cannot be released now (its server is down) stays,
// for the next sweep, and is reported; the others go on.
func (r *Repo) sweepPayloads(keep map[string]bool) error {
	ents, err := os.ReadDir(r.path("targets"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if !keep[e.Name()] {
			errs = append(errs, r.releasePayloads(e.Name()))
		}
	}
	return errors.Join(errs...)
}

// livePayloads lists the owners of payloads referred to by records in all,
// damaged records, run directories and the journal.
func (r *Repo) livePayloads(all []*record.Meta) (map[string]bool, error) {
	_, keep, err := r.salvage()
	if err != nil {
		return nil, err
	}
	for _, m := range all {
		for o := range owners(m.Targets) {
			keep[o] = true
		}
	}
	// Every run directory, its record readable or not: a pending run owns
	// the payloads named by its id.
	runs, err := os.ReadDir(r.path("runs"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range runs {
		keep[e.Name()] = true
	}
	if b, err := os.ReadFile(r.journalPath()); err == nil {
		var j journal
		if json.Unmarshal(b, &j) == nil {
			for o := range owners(j.Targets) {
				keep[o] = true
			}
			if j.Record != nil {
				for o := range owners(j.Record.Targets) {
					keep[o] = true
				}
			}
		}
	}
	return keep, nil
}

func duBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// PayloadDir is the directory of a target payload (a TargetState's
// Payload), for archiving it.
func (r *Repo) PayloadDir(rel string) string { return r.path(rel) }

// TargetWrite is a target a run saved, with the paths of the tree that
// are the target's own (a SQLite database in the tree and its journal
// files) and that the run wrote: in an overlay run they write through to
// the tree, like ignored paths, but the target's backend restores them on
// discard and undo.
type TargetWrite struct {
	record.TargetState
	Paths []string
}

// TargetWrites sorts the paths a run wrote through (WroteThrough) into
// those of the targets states saved, one TargetWrite per state (its Paths
// empty when it wrote none), and the rest: ignored paths, which nothing
// rolls back. A state's settings come from its payload, else (a payload
// released by a discard) from the target of the same name in
// snapback.toml.
func (r *Reader) TargetWrites(states []record.TargetState, paths []string) (writes []TargetWrite, ignored []string) {
	prefixes := make([]string, len(states))
	for i, s := range states {
		writes = append(writes, TargetWrite{TargetState: s})
		t, err := r.payloadTarget(s.Payload)
		if err != nil {
			for _, c := range r.Targets {
				if TargetName(c) == s.Name && c.Backend == s.Backend {
					t, err = c, nil
				}
			}
		}
		if err == nil {
			prefixes[i] = r.treePath(t.Path)
		}
	}
next:
	for _, p := range paths {
		for i, tp := range prefixes {
			if tp != "" && ownedBy(p, tp) {
				writes[i].Paths = append(writes[i].Paths, p)
				continue next
			}
		}
		ignored = append(ignored, p)
	}
	return writes, ignored
}

// treePath is a target's path relative to the root, slash-separated, or
// "" when it has none or lies outside the tree.
func (r *Reader) treePath(p string) string {
	if p == "" {
		return ""
	}
	if filepath.IsAbs(p) {
		rel, err := filepath.Rel(r.Root, p)
		if err != nil {
			return ""
		}
		p = rel
	}
	p = filepath.ToSlash(filepath.Clean(p))
	if p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return ""
	}
	return p
}

// ownedBy reports whether path is a target's at tp: tp itself, below it,
// or one of SQLite's journal files beside it.
func ownedBy(path, tp string) bool {
	if path == tp || strings.HasPrefix(path, tp+"/") {
		return true
	}
	rest, ok := strings.CutPrefix(path, tp)
	return ok && (rest == "-wal" || rest == "-shm" || rest == "-journal")
}
