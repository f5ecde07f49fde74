package snapshot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"time"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// layerStamp is what a step's changes are seen by in the upper layer: a
// path the step writes is copied up or changed, so its ctime moves; one
// it removes leaves the layer or becomes a whiteout (a new ctime too).
type layerStamp struct {
	mode  uint32
	ino   uint64
	ctime int64
	size  int64
}

// stampLayer reads the upper layer's paths and their stamps.
func (r *Repo) stampLayer(id string) (map[string]layerStamp, error) {
	out := map[string]layerStamp{}
	upper, err := fsutil.OpenRoot(r.UpperDir(id))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	} else if err != nil {
		return nil, fmt.Errorf("read upper layer of run %s: %w", id, err)
	}
	defer upper.Close() // read-only
	err = upper.Walk(func(_ *fsutil.Dir, _, rel string, st *unix.Stat_t) (bool, error) {
		if rel == StoreDir {
			// What hides the store in the view (and whatever a command made
			// under its name) is never a change of the run.
			return false, nil
		}
		si := statOf(st)
		out[rel] = layerStamp{si.Mode, si.Ino, si.Ctime, si.Size}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read upper layer of run %s: %w", id, err)
	}
	return out, nil
}

// stepPaths lists what changed between two stamps of a layer. A directory
// counts when it appears, goes or changes type: its ctime moves with any
// child, which is listed itself.
func stepPaths(before, after map[string]layerStamp) []string {
	var out []string
	for p, a := range after {
		b, ok := before[p]
		switch {
		case !ok, a.mode&unix.S_IFMT != b.mode&unix.S_IFMT:
			out = append(out, p)
		case a.mode&unix.S_IFMT == unix.S_IFDIR:
		case a != b:
			out = append(out, p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// BeginStep records that command starts in the run's view now (the run
// holds its lock: [Repo.StartViewRun] or [Repo.Resume]).
func (r *Repo) BeginStep(p *ViewRun, command []string) error {
	var err error
	if p.stamp, err = r.stampLayer(p.ID); err != nil {
		return err
	}
	p.Steps = append(p.Steps, record.Step{Command: command, StartedAt: time.Now()})
	return r.SaveViewRun(p)
}

// endStep completes the run's last step, begun by BeginStep.
func (r *Repo) endStep(p *ViewRun, status int) error {
	if len(p.Steps) == 0 || p.stamp == nil {
		return nil // a run resumed by an older snapback: no step begun
	}
	s := &p.Steps[len(p.Steps)-1]
	s.ExitStatus = &status
	s.DurationMS = time.Since(s.StartedAt).Milliseconds()
	after, err := r.stampLayer(p.ID)
	if err != nil {
		return err
	}
	paths := stepPaths(p.stamp, after)
	s.Changes = len(paths)
	if len(paths) > record.MaxStepPaths {
		paths = paths[:record.MaxStepPaths]
	}
	s.Paths, p.stamp = paths, nil
	return nil
}

// LayerEmpty reports whether the run's upper layer holds nothing (what
// its commands wrote to ignored paths has written through already).
func (r *Repo) LayerEmpty(p *ViewRun) (bool, error) {
	f, err := os.Open(r.UpperDir(p.ID))
	if err != nil {
		return false, fmt.Errorf("run %s: %w", p.ID, err)
	}
	defer f.Close() // read-only
	for {
		names, err := f.Readdirnames(16)
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		for _, n := range names {
			if n != StoreDir { // what hides the store in the view
				return false, nil
			}
		}
	}
}
