package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/layout"
	"github.com/snapback/snapback/overlay/zfs"
	"github.com/snapback/snapback/snapshot/record"
)

// A run in the zfs view (package overlay/zfs) keeps the command's writes
// in a clone of the project's dataset while the command runs; once it has
// ended they become the run's upper layer, and the clones go, so that from
// then on it is a pending run like any view's. The clones' names are in
// the run's record before they are made ([ViewRun.ZFS]): a run whose
// snapback died is settled by recover, which writes the layer (again:
// a crash may have left half of one) from the clones while the view clone
// is there, then destroys what is left of them.

// MakeZFSView snapshots the project's dataset for run p and clones it,
// and returns the directory the view helper mounts over the root: the
// project in the view clone, without the store's copy.
func (r *Repo) MakeZFSView(p *ViewRun) (string, error) {
	c, err := zfs.Names(r.Root, p.ID)
	if err != nil {
		return "", fmt.Errorf("run %s: %w", p.ID, err)
	}
	p.ZFS = c
	if err := r.SaveViewRun(p); err != nil {
		return "", err
	}
	if err := c.Make(); err != nil {
		if derr := c.Destroy(); derr != nil {
			return "", fmt.Errorf("run %s: %w (and %v)", p.ID, err, derr)
		}
		p.ZFS = nil
		if serr := r.SaveViewRun(p); serr != nil {
			return "", serr
		}
		return "", fmt.Errorf("run %s: %w", p.ID, err)
	}
	if r.InTree() {
		// Absent from the view, as in the overlay modes: the command
		// cannot read the history, and finds no stale copy of it.
		if err := fsutil.RemoveAll(filepath.Join(c.ViewRoot(), layout.StoreDir)); err != nil {
			return "", fmt.Errorf("run %s: remove the store from the view: %w", p.ID, err)
		}
	}
	return c.ViewRoot(), nil
}

// SettleZFSView turns what the command changed in run p's view clone into
// the run's upper layer (while the clone is there), then destroys clones
// and snapshot; a run with none is left as it is.
func (r *Repo) SettleZFSView(p *ViewRun) error {
	c := p.ZFS
	if c == nil {
		return nil
	}
	there, err := c.Complete()
	if err != nil {
		return fmt.Errorf("run %s: %w", p.ID, err)
	}
	if there {
		upper := r.UpperDir(p.ID)
		if err := emptyDir(upper); err != nil {
			return fmt.Errorf("run %s: %w", p.ID, err)
		}
		if err := zfs.WriteLayer(c.BaseRoot(), c.ViewRoot(), upper, c.Taken); err != nil {
			return fmt.Errorf("run %s: %w", p.ID, err)
		}
		if err := fsutil.SyncDir(upper); err != nil {
			return err
		}
	}
	if err := c.Destroy(); err != nil {
		return fmt.Errorf("run %s: %w", p.ID, err)
	}
	p.ZFS = nil
	return r.SaveViewRun(p)
}

// emptyDir removes what dir holds.
func emptyDir(dir string) error {
	d, err := fsutil.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.ReadDirNames()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := d.RemoveAll(n); err != nil {
			return err
		}
	}
	return nil
}

// settleDeadZFSViews settles the zfs views of runs whose processes are
// all gone (recover), and returns how many it settled. A run record that
// cannot be read is passed over: the verbs that list runs report it.
func (r *Repo) settleDeadZFSViews() (int, error) {
	ents, err := os.ReadDir(r.path("runs"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list runs: %w", err)
	}
	n := 0
	for _, e := range ents {
		b, err := r.readFile(r.pendingPath(e.Name()), maxRunSize)
		if err != nil {
			continue // none (a tree run's lock), or damaged
		}
		var p ViewRun
		if json.Unmarshal(b, &p) != nil || p.ID != e.Name() || !record.ValidID(p.ID) || p.ZFS == nil {
			continue
		}
		if r.alive(p.ID) {
			continue // a process of the run still works in its clone
		}
		if p.State == record.StateRunning {
			p.State = record.StatePending // its snapback died (as PendingRuns says)
		}
		if err := r.SettleZFSView(&p); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
