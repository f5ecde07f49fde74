package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapback/snapback/snapshot/record"
)

// Where a store lives. The store is <root>/.snapback unless it lives
// outside the tree: where snapback.toml's [snapshot] store says, or, for a
// project whose store was made by the agent hooks, in the user's state
// directory ([StateStore]). Outside, `git clean -fdx` (which removes an
// in-tree store as an ignored directory) cannot reach it.
//
// No pointer is kept in the tree: the location follows from the config
// and the root's path, so every verb, from any subdirectory, finds the
// same store ([Locate]; the CLI finds the root by [Marked]). An outside
// store is trusted as an in-tree one is: its identity record ties it to
// the root's inode, so a store copied, or named by two projects' configs,
// is refused.

// Location is where a project's store is, or is to be made.
type Location struct {
	Dir string // absolute
	// InTree: Dir is <root>/.snapback.
	InTree bool
	// Exists: there is something at Dir (a store, or what Open refuses).
	Exists bool
}

// StateStore is where the agent hooks make a project's store outside the
// tree: $XDG_STATE_HOME/snapback/projects/<name>-<hash> (~/.local/state
// when XDG_STATE_HOME is unset or relative), the name the root's base
// name, the hash that of its path with symbolic links resolved, so that
// two projects never share one and each finds its own.
func StateStore(root string) (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(base) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("the store's place in the state directory: %w", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	sum := sha256.Sum256([]byte(abs))
	name := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, filepath.Base(abs))
	if len(name) > 64 || name == "." || name == ".." || name == "/" {
		name = "project"
	}
	return filepath.Join(base, "snapback", "projects", name+"-"+hex.EncodeToString(sum[:8])), nil
}

// Marked reports whether dir is a project root by its store: it holds
// .snapback, or a store for it exists in the state directory.
func Marked(dir string) bool {
	if _, err := os.Lstat(filepath.Join(dir, StoreDir)); err == nil {
		return true
	}
	p, err := StateStore(dir)
	if err != nil {
		return false
	}
	_, err = os.Lstat(p)
	return err == nil
}

// Locate says where the store of the project at root is: configured (the
// expanded [snapshot] store of snapback.toml) when set; else .snapback in
// the tree when it exists; else the state directory's store when it
// exists; else where a new one goes: the state directory with outside
// (the agent hooks), the tree otherwise. It is the one place that says
// so: every verb opens the store it names.
func Locate(root, configured string, outside bool) (Location, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return Location{}, fmt.Errorf("locate the store: %w", err)
	}
	inTree := filepath.Join(abs, StoreDir)
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	if configured != "" {
		if err := outsideTree(abs, configured); err != nil {
			return Location{}, err
		}
		return Location{Dir: configured, Exists: exists(configured)}, nil
	}
	if exists(inTree) {
		return Location{Dir: inTree, InTree: true, Exists: true}, nil
	}
	state, err := StateStore(abs)
	if err == nil && outsideTree(abs, state) != nil {
		err = errStoreInTree // a state directory in the project: the store stays in the tree
	}
	if err != nil {
		return Location{Dir: inTree, InTree: true}, nil // no state directory: the tree it is
	}
	if exists(state) || outside {
		return Location{Dir: state, Exists: exists(state)}, nil
	}
	return Location{Dir: inTree, InTree: true}, nil
}

// outsideTree refuses a configured store inside the tree at root, or
// holding it, comparing the paths with symbolic links resolved (config
// compares them as written).
func outsideTree(root, dir string) error {
	real := func(p string) string {
		// The nearest existing ancestor resolved, the rest as written.
		rest := ""
		for q := p; ; q = filepath.Dir(q) {
			if r, err := filepath.EvalSymlinks(q); err == nil {
				return filepath.Join(r, rest)
			}
			if filepath.Dir(q) == q {
				return p
			}
			rest = filepath.Join(filepath.Base(q), rest)
		}
	}
	r, d := real(root), real(dir)
	if record.Under(strings.TrimPrefix(r, "/"), strings.TrimPrefix(d, "/")) || record.Under(strings.TrimPrefix(d, "/"), strings.TrimPrefix(r, "/")) {
		return fmt.Errorf("snapback.toml: [snapshot] store %s: %w", dir, errStoreInTree)
	}
	return nil
}

var errStoreInTree = errors.New("inside the project or holding it (a snapshot would hold the store): name a directory outside it")
