// Package backends snapshots and restores state that lives outside the
// project tree — databases, volumes, subvolumes — declared as [[target]]
// in snapback.toml.
//
// Every backend implements one small interface, [Backend]; the list of
// backends is written out once, in [All]; one conformance suite
// (conformance_test.go) runs every backend against the real thing.
//
// A payload is a directory: Snapshot fills a fresh one, Restore reads it
// back. The store keeps payloads beside the snapshot that owns them.
package backends

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/snapback/snapback/config"
)

// Target is one [[target]] of snapback.toml.
type Target = config.Target

// Backend is one kind of state outside the tree.
//
// Contract:
//   - Available is cheap and side-effect free; it says why not when false.
//   - Check validates a target against the real thing, changing nothing.
//   - Snapshot writes into dir (empty, owned by the caller) everything
//     Restore needs, and captures exactly one committed state even while a
//     writer keeps working.
//   - Restore brings that state back. It never leaves the target missing or
//     half-restored: on error the target is as it was before the call. It
//     is idempotent: running it again after a crash finishes the job.
//   - Release frees whatever a payload holds outside dir (a database copy
//     on the server, a read-only subvolume) when the snapshot owning it is
//     collected; dir is removed by the caller afterwards. It is idempotent
//     and succeeds when there is nothing left to free.
//   - Different targets may be snapshotted or restored concurrently; one
//     target never is by two calls at once (the store lock sees to it).
type Backend interface {
	Name() string
	Available() (bool, string)
	Check(ctx context.Context, t Target, root string) error
	Snapshot(ctx context.Context, t Target, root, dir string) error
	Restore(ctx context.Context, t Target, root, dir string) error
	Release(ctx context.Context, t Target, root, dir string) error
}

// All lists every backend, usable here or not. Adding a backend means one
// line here.
func All() []Backend {
	list := []Backend{
		&SQLite{},
		&Postgres{},
		&MySQL{},
		&DockerVolume{},
		&Btrfs{},
		&ZFS{},
		&APFS{},
	}
	seen := map[string]bool{}
	for _, b := range list {
		if seen[b.Name()] {
			panic("backends: duplicate backend " + b.Name())
		}
		seen[b.Name()] = true
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name() < list[j].Name() })
	return list
}

// Get finds a backend by name.
func Get(name string) (Backend, error) {
	for _, b := range All() {
		if b.Name() == name {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: unknown backend %q", config.ErrTarget, name)
}

// Status is a backend's availability, for `snapback backends`.
type Status struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Reason    string `json:"reason"`
}

// Statuses reports every backend, in the order of config.Backends (the
// names snapback.toml accepts, each of which has its backend in All: a
// test checks it).
func Statuses() []Status {
	var out []Status
	for _, name := range config.Backends {
		b, err := Get(name)
		if err != nil {
			out = append(out, Status{Name: name, Reason: err.Error()})
			continue
		}
		ok, why := b.Available()
		out = append(out, Status{Name: name, Available: ok, Reason: why})
	}
	return out
}

// TargetPath resolves the path setting of a target whose backend takes a
// path: relative to the project root, cleaned. It is the one resolution
// of a target path. Backends write there, so it never leads through a
// symbolic link that snapback did not make (and snapback makes none): the
// path itself must not be one, nor, for a path inside the root, any
// directory on the way below the root (a repository can commit a link
// that would take a restore out of the project). A path outside the root
// is the user's own choice in snapback.toml; its directories are the
// system's.
func TargetPath(t Target, root string) (string, error) {
	if t.Path == "" {
		return "", targetErr(t, "no path")
	}
	p := t.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(root, p)
	}
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	top := filepath.Dir(p)
	if r, err := filepath.Abs(root); err == nil {
		if rel, err := filepath.Rel(r, p); err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") {
			top = r
		}
	}
	for q := p; q != top && q != filepath.Dir(q); q = filepath.Dir(q) {
		if st, err := os.Lstat(q); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			return "", targetErr(t, "%s is a symbolic link: a target is never reached through one", q)
		}
	}
	return p, nil
}

// targetErr makes a one-line error naming the target.
func targetErr(t Target, format string, a ...any) error {
	name := t.Name
	if name == "" {
		name = t.Backend
		if t.Path != "" {
			name += " " + t.Path
		}
	}
	return &targetError{fmt.Sprintf("target %s: %s", name, fmt.Sprintf(format, a...))}
}

// targetError is an config.ErrTarget whose message names the target once
// ("target shop: …", not "bad target: target shop: …").
type targetError struct{ msg string }

func (e *targetError) Error() string        { return e.msg }
func (e *targetError) Is(target error) bool { return target == config.ErrTarget }
