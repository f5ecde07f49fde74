package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapback/snapback/fsutil"
)

// Command is the command line of the hooks install writes. It names
// snapback by its name, not by where this binary lives: a project's
// settings are shared, and each machine finds snapback on its PATH.
func (h *Harness) Command() string { return "snapback agent hook " + h.Name }

// ownCommand says whether a hook's command line is one install wrote for
// this harness (or the same with snapback named by its path).
func (h *Harness) ownCommand(cmd string) bool {
	f := strings.Fields(cmd)
	return len(f) == 4 && filepath.Base(f[0]) == "snapback" && f[1] == "agent" && f[2] == "hook" && f[3] == h.Name
}

// SettingsFile is the settings file install and uninstall change: the
// shared one, or with local the one kept out of version control.
func (h *Harness) SettingsFile(local bool) (string, error) {
	if !local {
		return h.Settings, nil
	}
	if h.LocalSettings == "" {
		return "", fmt.Errorf("%s has no local settings file (only %s)", h.Title, h.Settings)
	}
	return h.LocalSettings, nil
}

// Change is what install or uninstall did, or would do, to a settings
// file.
type Change struct {
	File     string   // the path given (relative to the root)
	Old, New []byte   // the file's contents before and after (Old nil: no file)
	Events   []string // the events whose hooks were added or removed
}

// Changed says whether the file changes.
func (c *Change) Changed() bool { return len(c.Events) > 0 }

// maxSettings bounds a settings file read.
const maxSettings = 16 << 20

// readSettings reads a settings file (nil, nil when there is none).
func readSettings(path, name string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close() // read-only
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSettings+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(b) > maxSettings {
		return nil, fmt.Errorf("%s: over %d MiB", name, maxSettings>>20)
	}
	return b, nil
}

// parseSettings parses a settings file's contents; an empty one is an
// empty object. A malformed one is an error naming the file and line.
func parseSettings(b []byte, name string) (*node, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return object(), nil
	}
	doc, err := parseJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%s:%w", name, err) // err starts with "LINE: "
	}
	if doc.kind != '{' {
		return nil, fmt.Errorf("%s:%d: not a JSON object", name, doc.line)
	}
	return doc, nil
}

// hooksOf returns the settings' "hooks" object (made when make is set),
// checking the shape the harnesses document: an object of events, each
// an array of groups, each with an array "hooks".
func hooksOf(path string, doc *node, make bool) (*node, error) {
	hooks := doc.get("hooks")
	if hooks == nil {
		if !make {
			return nil, nil
		}
		hooks = object()
		doc.set("hooks", hooks)
	}
	if hooks.kind != '{' {
		return nil, fmt.Errorf("%s:%d: \"hooks\" is not an object", path, hooks.line)
	}
	for i, ev := range hooks.keys {
		groups := hooks.vals[i]
		if groups.kind != '[' {
			// Not an event's list (Gemini CLI keeps "enabled" and
			// "disabled" here): leave it as it is.
			continue
		}
		for _, g := range groups.elems {
			if g.kind != '{' {
				return nil, fmt.Errorf("%s:%d: hooks.%s holds something other than an object", path, g.line, ev)
			}
			if hs := g.get("hooks"); hs != nil && hs.kind != '[' {
				return nil, fmt.Errorf("%s:%d: hooks.%s[].hooks is not an array", path, hs.line, ev)
			}
		}
	}
	return hooks, nil
}

// has says whether an event's groups hold one of this harness's hooks.
func (h *Harness) has(groups *node) bool {
	for _, g := range groups.elems {
		if hs := g.get("hooks"); hs != nil {
			for _, e := range hs.elems {
				if e.kind == '{' && h.ownCommand(e.get("command").str()) {
					return true
				}
			}
		}
	}
	return false
}

// entry is the group install adds for one event.
func (h *Harness) entry(event string) *node {
	hook := object()
	if h.NamedHooks {
		hook.set("name", scalar("snapback"))
	}
	hook.set("type", scalar("command"))
	hook.set("command", scalar(h.Command()))
	g := object()
	if h.Events[event] == OpenLazily {
		g.set("matcher", scalar(strings.Join(h.Tools, "|")))
	}
	g.set("hooks", &node{kind: '[', elems: []*node{hook}})
	return g
}

// InstallHooks adds the harness's hooks to the settings file rel (relative to
// root), keeping every other setting and hook, in their order. An event
// that already runs snapback's hook is left as it is, so a second
// install changes nothing. With write unset it only says what it would
// do.
func (h *Harness) InstallHooks(root, rel string, write bool) (*Change, error) {
	return h.edit(root, rel, write, h.install)
}

func (h *Harness) install(path string, doc *node) ([]string, error) {
	hooks, err := hooksOf(path, doc, true)
	if err != nil {
		return nil, err
	}
	var added []string
	for _, ev := range h.Install {
		groups := hooks.get(ev)
		if groups == nil {
			groups = &node{kind: '['}
			hooks.set(ev, groups)
		}
		if groups.kind != '[' {
			return nil, fmt.Errorf("%s:%d: hooks.%s is not an array", path, groups.line, ev)
		}
		if h.has(groups) {
			continue
		}
		groups.elems = append(groups.elems, h.entry(ev))
		added = append(added, ev)
	}
	return added, nil
}

// UninstallHooks removes from the settings file rel the hooks whose
// command is this harness's snapback hook, wherever they are, and
// nothing else; a group or event left empty by the removal goes too, and
// so does "hooks" when it is left empty (an empty one the user had
// before install cannot be told from install's and goes with it).
func (h *Harness) UninstallHooks(root, rel string, write bool) (*Change, error) {
	return h.edit(root, rel, write, h.uninstall)
}

func (h *Harness) uninstall(path string, doc *node) ([]string, error) {
	hooks, err := hooksOf(path, doc, false)
	if hooks == nil || err != nil {
		return nil, err
	}
	var removed []string
	for i := 0; i < len(hooks.keys); i++ {
		ev, groups := hooks.keys[i], hooks.vals[i]
		if groups.kind != '[' || !h.has(groups) {
			continue
		}
		var keep []*node
		for _, g := range groups.elems {
			hs := g.get("hooks")
			if hs == nil {
				keep = append(keep, g)
				continue
			}
			var left []*node
			for _, e := range hs.elems {
				if !(e.kind == '{' && h.ownCommand(e.get("command").str())) {
					left = append(left, e)
				}
			}
			// A group keeps what is left of it; one that held only
			// snapback's hook goes.
			if len(left) == len(hs.elems) || len(left) > 0 {
				hs.elems = left
				keep = append(keep, g)
			}
		}
		removed = append(removed, ev)
		if len(keep) == 0 {
			hooks.del(ev)
			i--
			continue
		}
		groups.elems = keep
	}
	if len(removed) > 0 && len(hooks.keys) == 0 {
		doc.del("hooks")
	}
	return removed, nil
}

// edit reads the settings file, applies fn, and (with write) replaces
// the file atomically when fn changed something. A symbolic link is
// followed: the file it leads to is the one replaced.
func (h *Harness) edit(root, rel string, write bool, fn func(path string, doc *node) ([]string, error)) (*Change, error) {
	path := filepath.Join(root, rel)
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	old, err := readSettings(path, rel)
	if err != nil {
		return nil, err
	}
	c, err := change(rel, old, fn)
	if err != nil || !c.Changed() || !write {
		return c, err
	}
	perm := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		perm = st.Mode().Perm()
	}
	fsutil.Mutating()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	if err := fsutil.WriteFileAtomic(path, c.New, perm); err != nil {
		return nil, err
	}
	return c, nil
}

// change applies fn to a settings file's contents old (nil: no file).
func change(rel string, old []byte, fn func(path string, doc *node) ([]string, error)) (*Change, error) {
	doc, err := parseSettings(old, rel)
	if err != nil {
		return nil, err
	}
	events, err := fn(rel, doc)
	if err != nil {
		return nil, err
	}
	c := &Change{File: rel, Old: old, New: old, Events: events}
	if c.Changed() {
		c.New = doc.encode(indentUnit(old))
	}
	return c, nil
}
