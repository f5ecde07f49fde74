package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

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
// one kept out of version control, or with shared the committed one. A
// harness without a local file (Gemini CLI) has only its project file.
func (h *Harness) SettingsFile(shared bool) string {
	if shared || h.LocalSettings == "" {
		return h.Settings
	}
	return h.LocalSettings
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

// parseSettings parses a settings file's contents; an empty one is an
// empty object. A malformed one is an error naming the file and line.
func parseSettings(b []byte, name string) (*node, error) {
	doc, _, err := parseSettingsText(b, name, false)
	return doc, err
}

// parseSettingsText is parseSettings for a file that may hold comments
// and trailing commas (JSONC) when comments is set: it returns too the
// bytes parsed, b with those blanked out (b itself when there are none).
func parseSettingsText(b []byte, name string, comments bool) (*node, []byte, error) {
	clean := b
	if comments {
		clean = blankJSONC(b)
	}
	if len(bytes.TrimSpace(clean)) == 0 {
		if len(bytes.TrimSpace(b)) != 0 {
			// Written anew, the comments would go.
			return nil, nil, fmt.Errorf("%s: holds only comments: write {} after them, then install again", name)
		}
		return object(), clean, nil
	}
	doc, err := parseJSON(clean)
	if err != nil {
		return nil, nil, fmt.Errorf("%s:%w", name, err) // err starts with "LINE: "
	}
	if doc.kind != '{' {
		return nil, nil, fmt.Errorf("%s:%d: not a JSON object", name, doc.line)
	}
	return doc, clean, nil
}

// hooksOf returns the settings' "hooks" object (nil when there is none),
// checking the shape the harnesses document: an object of events, each
// an array of groups, each with an array "hooks".
func hooksOf(path string, doc *node) (*node, error) {
	hooks := doc.get("hooks")
	if hooks == nil {
		return nil, nil
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

// entry is the group install adds for one event: its hook carries a
// timeout (Claude Code counts it in seconds, Gemini CLI in
// milliseconds), so that a hook snapback cannot finish is cut short by
// the harness too.
func (h *Harness) entry(event string) *node {
	hook := object()
	if h.NamedHooks {
		hook.set("name", scalar("snapback"))
	}
	hook.set("type", scalar("command"))
	hook.set("command", scalar(h.Command()))
	hook.set("timeout", scalar(h.timeoutValue()))
	g := object()
	if h.Events[event] == OpenLazily {
		g.set("matcher", scalar(strings.Join(h.Tools, "|")))
	}
	g.set("hooks", &node{kind: '[', start: -1, end: -1, elems: []*node{hook}})
	return g
}

// timeoutValue is HookTimeout in the harness's unit.
func (h *Harness) timeoutValue() int64 {
	if h.TimeoutMillis {
		return HookTimeout.Milliseconds()
	}
	return int64(HookTimeout.Seconds())
}

// InstallHooks adds the harness's hooks to the settings file rel (relative to
// root), keeping every other setting and hook, in their order, and every
// byte of the file outside what it adds. An event that already runs
// snapback's hook is left as it is, so a second install changes nothing.
// With write unset it only says what it would do.
func (h *Harness) InstallHooks(root, rel string, write bool) (*Change, error) {
	return h.edit(root, rel, write, h.install)
}

func (h *Harness) install(path string, doc *node, e *editor) ([]string, error) {
	hooks, err := hooksOf(path, doc)
	if err != nil {
		return nil, err
	}
	if hooks == nil {
		hooks = object()
		for _, ev := range h.Install {
			hooks.set(ev, &node{kind: '[', start: -1, end: -1, elems: []*node{h.entry(ev)}})
		}
		e.add(doc, []string{"hooks"}, []*node{hooks})
		return h.Install, nil
	}
	var added, newKeys []string
	var newVals []*node
	for _, ev := range h.Install {
		groups := hooks.get(ev)
		if groups == nil {
			newKeys = append(newKeys, ev)
			newVals = append(newVals, &node{kind: '[', start: -1, end: -1, elems: []*node{h.entry(ev)}})
			added = append(added, ev)
			continue
		}
		if groups.kind != '[' {
			return nil, fmt.Errorf("%s:%d: hooks.%s is not an array", path, groups.line, ev)
		}
		if h.has(groups) {
			continue
		}
		e.add(groups, nil, []*node{h.entry(ev)})
		added = append(added, ev)
	}
	e.add(hooks, newKeys, newVals)
	return added, nil
}

// UninstallHooks removes from the settings file rel the hooks whose
// command is this harness's snapback hook, wherever they are, and
// nothing else; a group or event left empty by the removal goes too, and
// so does "hooks" when it is left empty (an empty one the user had
// before install cannot be told from install's and goes with it). Each
// is cut out of the file's bytes with its separator: after an install,
// the file is back byte for byte.
func (h *Harness) UninstallHooks(root, rel string, write bool) (*Change, error) {
	return h.edit(root, rel, write, h.uninstall)
}

func (h *Harness) uninstall(path string, doc *node, e *editor) ([]string, error) {
	hooks, err := hooksOf(path, doc)
	if hooks == nil || err != nil {
		return nil, err
	}
	var removed []string
	var dropEvents []int
	for i, ev := range hooks.keys {
		groups := hooks.vals[i]
		if groups.kind != '[' || !h.has(groups) {
			continue
		}
		removed = append(removed, ev)
		var dropGroups []int
		for j, g := range groups.elems {
			hs := g.get("hooks")
			if hs == nil {
				continue
			}
			var dropHooks []int
			for k, x := range hs.elems {
				if x.kind == '{' && h.ownCommand(x.get("command").str()) {
					dropHooks = append(dropHooks, k)
				}
			}
			switch {
			case len(dropHooks) == 0:
			case len(dropHooks) == len(hs.elems): // a group that held only snapback's hooks goes
				dropGroups = append(dropGroups, j)
			default:
				e.remove(hs, dropHooks)
			}
		}
		switch {
		case len(dropGroups) < len(groups.elems):
			e.remove(groups, dropGroups)
		case e.hasComments(groups.start, groups.end):
			// The user's (install writes no comment): it stays, with
			// its comments, as it was before install filled it.
			e.emptyCommented(groups)
		default:
			dropEvents = append(dropEvents, i)
		}
	}
	switch {
	case len(dropEvents) == 0:
	case len(dropEvents) < len(hooks.keys):
		e.remove(hooks, dropEvents)
	case e.hasComments(hooks.start, hooks.end): // the user's, as above
		e.emptyCommented(hooks)
	case len(doc.keys) == 1: // "hooks" was all there was
		e.empty(doc)
	default:
		e.remove(doc, []int{slices.Index(doc.keys, "hooks")})
	}
	return removed, nil
}

// edit reads the settings file, applies fn, and (with write) writes the
// file when fn changed something. A symbolic link is followed: the file
// it leads to is the one changed. The file is changed in place, so that
// it keeps its inode (hard links to it stay links), owner, mode and
// attributes: first its old bytes go to a backup beside it, synced; then
// the file is rewritten and synced; then the backup goes. A crash in
// between leaves the backup, which the next install or uninstall names
// and refuses to pass over.
func (h *Harness) edit(root, rel string, write bool, fn func(path string, doc *node, e *editor) ([]string, error)) (*Change, error) {
	path := filepath.Join(root, rel)
	if _, err := os.Lstat(path + BackupSuffix); err == nil {
		return nil, leftBackup(rel)
	}
	f, old, err := openSettings(path, rel, false)
	if err != nil {
		return nil, err
	}
	if f != nil {
		defer f.Close() // read-only
	}
	c, err := h.change(rel, old, fn)
	if err != nil || !c.Changed() || !write {
		return c, err
	}
	if f == nil {
		return c, createSettings(root, path, rel, c.New)
	}
	// Opened for writing only now: a file install finds complete needs
	// no write permission. It must be the file read.
	w, again, err := openSettings(path, rel, true)
	if err != nil {
		return nil, err
	}
	defer w.Close() // closed again after a checked close: harmless
	if !sameFile(f, w) || !bytes.Equal(again, old) {
		return nil, fmt.Errorf("%s: changed while snapback read it: try again", rel)
	}
	return c, rewriteInPlace(w, path, rel, c.Old, c.New)
}

func sameFile(a, b *os.File) bool {
	sa, err1 := a.Stat()
	sb, err2 := b.Stat()
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// openSettings opens a settings file (for writing too with write) and
// reads it: nil, nil, nil when there is none. Anything but a regular file
// is refused before a read, and opening does not wait (a FIFO opens at
// once with O_NONBLOCK), so a FIFO in the file's place cannot hang
// install.
func openSettings(path, rel string, write bool) (*os.File, []byte, error) {
	flags := os.O_RDONLY
	if write {
		flags = os.O_RDWR
	}
	f, err := os.OpenFile(path, flags|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		// A directory will not open for writing: say what it is.
		if st, serr := os.Stat(path); serr == nil && !st.Mode().IsRegular() {
			return nil, nil, fmt.Errorf("%s: not a regular file (%s)", rel, fsutil.TypeName(st.Mode()))
		}
		return nil, nil, fmt.Errorf("%s: %w", rel, errors.Unwrap(err))
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (%s)", fsutil.TypeName(st.Mode()))
	}
	if err == nil && st.Size() > maxSettings {
		err = fmt.Errorf("over %d MiB", maxSettings>>20)
	}
	var b []byte
	if err == nil {
		b, err = io.ReadAll(io.LimitReader(f, maxSettings+1))
	}
	if err == nil && len(b) > maxSettings {
		err = fmt.Errorf("over %d MiB", maxSettings>>20)
	}
	if err != nil {
		f.Close() // failing already
		return nil, nil, fmt.Errorf("%s: %w", rel, err)
	}
	return f, b, nil
}

// BackupSuffix names the copy of a settings file an edit keeps while it
// rewrites the file in place.
const BackupSuffix = ".snapback-backup"

// leftBackup is the refusal when a settings file's backup is there: an
// edit was cut short, and the file may be torn; which of the two is
// right is the user's to say.
func leftBackup(rel string) error {
	return fmt.Errorf("%s: %s is there, left by an install or uninstall that was cut short: compare the two, keep the right one, remove the backup", rel, rel+BackupSuffix)
}

// rewriteInPlace writes data over the open settings file f, after a
// synced backup of its old bytes (see edit).
func rewriteInPlace(f *os.File, path, rel string, old, data []byte) error {
	backup := path + BackupSuffix
	fsutil.Mutating()
	b, err := os.OpenFile(backup, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return leftBackup(rel)
	}
	if err != nil {
		return fmt.Errorf("%s: backup: %w", rel, err)
	}
	fsutil.Mutating()
	_, err = b.Write(old)
	if err == nil {
		fsutil.Mutating()
		err = b.Sync()
	}
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(backup))
	}
	if err != nil {
		_ = os.Remove(backup) // the file itself is untouched yet
		return fmt.Errorf("%s: backup: %w", rel, err)
	}
	fsutil.Mutating()
	_, err = f.WriteAt(data, 0)
	if err == nil {
		fsutil.Mutating()
		err = f.Truncate(int64(len(data)))
	}
	if err == nil {
		fsutil.Mutating()
		err = f.Sync()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		// The file may be half written: the backup stays, and says so.
		return fmt.Errorf("%s: %w (its old contents are in %s)", rel, err, rel+BackupSuffix)
	}
	fsutil.Mutating()
	if err := os.Remove(backup); err != nil {
		return fmt.Errorf("%s: written; remove its backup %s: %w", rel, rel+BackupSuffix, err)
	}
	return fsutil.SyncDir(filepath.Dir(backup))
}

// createSettings writes a new settings file (and its directory), owned
// like the project root: an install run as root in a user's project must
// not leave a file the user cannot change.
func createSettings(root, path, rel string, data []byte) error {
	st, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	uid, gid := -1, -1
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
		uid, gid = int(sys.Uid), int(sys.Gid)
	}
	dir := filepath.Dir(path)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		fsutil.Mutating()
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if uid >= 0 {
			fsutil.Mutating()
			if err := os.Lchown(dir, uid, gid); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
	}
	fsutil.Mutating()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	fsutil.Mutating()
	_, err = f.Write(data)
	if err == nil && uid >= 0 {
		fsutil.Mutating()
		err = f.Chown(uid, gid)
	}
	if err == nil {
		fsutil.Mutating()
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path) // ours, just made, incomplete
		return fmt.Errorf("%s: %w", rel, err)
	}
	return fsutil.SyncDir(dir)
}

// change applies fn to a settings file's contents old (nil: no file).
func (h *Harness) change(rel string, old []byte, fn func(path string, doc *node, e *editor) ([]string, error)) (*Change, error) {
	doc, clean, err := parseSettingsText(old, rel, h.Comments)
	if err != nil {
		return nil, err
	}
	e := newEditor(old, clean, doc)
	events, err := fn(rel, doc, e)
	if err != nil {
		return nil, err
	}
	c := &Change{File: rel, Old: old, New: old, Events: events}
	switch {
	case !c.Changed():
	case doc.start < 0: // an empty file: written anew
		c.New = doc.encode(e.unit)
	default:
		c.New = e.apply()
	}
	return c, nil
}
