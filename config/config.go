// Package config reads snapback.toml, the project's settings:
//
//	[snapshot]
//	ignore = ["trace.jsonl", "*.log"]    # gitignore syntax: never rolled back
//	exclude = ["node_modules"]           # out of snapshots, isolated by runs
//	mode = "auto"
//	store = "~/.local/state/snapback/projects/app"  # the store outside the tree
//
//	[[target]]
//	backend = "sqlite"
//	path = "app.db"
//
//	[archive]
//	destination = "/srv/snapback-archives"
//	keep = 10
//
// Every error names snapback.toml and the line: a TOML syntax error, an
// unknown key, a value of the wrong type or a value out of range.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/isolation"
	"github.com/snapback/snapback/internal/suggest"
)

// FileName is the config file's name in the project root.
const FileName = "snapback.toml"

// Config is a parsed snapback.toml.
type Config struct {
	Snapshot Snapshot `toml:"snapshot"`
	Targets  []Target `toml:"target"`
	Archive  Archive  `toml:"archive"`

	path    string
	matcher gitignore.Matcher
	exclude gitignore.Matcher
	inTree  []string // target paths inside the tree, slash-separated
}

// Snapshot is the [snapshot] table.
type Snapshot struct {
	// Ignore: paths that are never snapshotted and never rolled back; an
	// overlay run writes them through to the tree at once (audit logs).
	Ignore []string `toml:"ignore"`
	// Exclude: paths that are never snapshotted either (big, regenerable
	// directories), but that an overlay run isolates like any other:
	// committed with it (not undoably), dropped by its discard.
	Exclude []string `toml:"exclude"`
	Mode    string   `toml:"mode"`
	// Keep and KeepDays bound the store (0: unset): after each snap or
	// run, snapshots past the Keep newest or older than KeepDays days
	// are collected, but never what undo and redo need next.
	Keep     int `toml:"keep"`
	KeepDays int `toml:"keep_days"`
	// Store, when set, is where the project's store lives instead of
	// .snapback in the tree: an absolute path (a leading ~/ is the home
	// directory, expanded at load), never inside the project.
	Store string `toml:"store"`
}

// Target is one [[target]]: state outside the tree.
type Target struct {
	Name           string `toml:"name"`
	Backend        string `toml:"backend"`
	Path           string `toml:"path"`
	DSN            string `toml:"dsn"`
	Volume         string `toml:"volume"`
	Dataset        string `toml:"dataset"`
	StopContainers bool   `toml:"stop_containers"`
}

// ErrTarget marks an error in a target's settings or in the thing it names
// (unreachable server, missing file, not a database): reported before
// anything runs, as one line naming the target.
var ErrTarget = errors.New("bad target")

// Archive is the [archive] table.
type Archive struct {
	Destination string `toml:"destination"`
	Keep        int    `toml:"keep"`
}

// Error is a problem in the config file, with its line when known.
type Error struct {
	Path string
	Line int
	Msg  string
	Err  error // the cause, when the file could not be read
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Path, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// MaxSize bounds snapback.toml: a settings file is a few hundred bytes,
// and a bound keeps a huge file (or /dev/zero) from exhausting memory.
const MaxSize = 1 << 20

// Load reads root/snapback.toml; a missing file is the default config.
// A symbolic link is followed (a user may keep the file elsewhere), but
// what it leads to must be a regular file of at most MaxSize bytes: a
// FIFO, a device or a directory is refused rather than read.
func Load(root string) (*Config, error) {
	p := filepath.Join(root, FileName)
	b, err := fsutil.ReadFileLimitFollow(p, MaxSize)
	if errors.Is(err, fs.ErrNotExist) {
		c := &Config{path: p}
		c.Snapshot.Mode = isolation.Auto
		return c, c.compile()
	}
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = pe.Err.Error() // Error adds the path
		}
		return nil, &Error{Path: p, Msg: msg, Err: err}
	}
	return Parse(p, b)
}

// Parse parses the content of a config file named path.
func Parse(path string, b []byte) (*Config, error) {
	c := &Config{path: path}
	dec := toml.NewDecoder(bytes.NewReader(b)).DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		var de *toml.DecodeError
		var sm *toml.StrictMissingError
		switch {
		case errors.As(err, &sm) && len(sm.Errors) > 0:
			e := sm.Errors[0]
			row, _ := e.Position()
			msg := fmt.Sprintf("unknown key %q", strings.Join(e.Key(), "."))
			if s := suggestKey(e.Key()); s != "" {
				msg += " (did you mean " + s + "?)"
			}
			return nil, &Error{Path: path, Line: row, Msg: msg}
		case errors.As(err, &de):
			row, _ := de.Position()
			return nil, &Error{Path: path, Line: row, Msg: typeMessage(de)}
		}
		return nil, &Error{Path: path, Msg: err.Error()}
	}
	if c.Snapshot.Mode == "" {
		c.Snapshot.Mode = isolation.Auto
	}
	if err := c.validate(b); err != nil {
		return nil, err
	}
	return c, c.compile()
}

// typeMessage words a decoding error in TOML's terms, not Go's:
// "snapshot.ignore must be an array of strings, not a string" rather
// than go-toml's "cannot decode TOML string into struct field
// config.Snapshot.Ignore of type []string".
func typeMessage(de *toml.DecodeError) string {
	key := strings.Join(de.Key(), ".")
	msg := strings.TrimPrefix(de.Error(), "toml: ")
	if key == "" {
		return "invalid TOML: " + msg // a syntax error
	}
	want := tomlType(fieldType(de.Key()))
	// go-toml says "cannot decode TOML string into …": the found type.
	found := ""
	if rest, ok := strings.CutPrefix(msg, "cannot decode TOML "); ok {
		found, _, _ = strings.Cut(rest, " ")
		if found == "inline" {
			found = "table" // "inline table"
		}
	}
	switch {
	case want != "" && found != "":
		return fmt.Sprintf("%s must be %s, not %s", key, want, article(found))
	case want != "":
		return fmt.Sprintf("%s must be %s (%s)", key, want, msg)
	}
	return fmt.Sprintf("%s: %s", key, msg)
}

// fieldType is the Go type of the field a key names, or nil.
func fieldType(key []string) reflect.Type {
	t := reflect.TypeOf(Config{})
	for _, k := range key {
		for t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
		var next reflect.Type
		for i := 0; i < t.NumField(); i++ {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ","); name == k {
				next = t.Field(i).Type
			}
		}
		if next == nil {
			return nil
		}
		t = next
	}
	return t
}

// tomlType names a field's Go type as TOML does, with an article.
func tomlType(t reflect.Type) string {
	if t == nil {
		return ""
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Struct:
		return "a table"
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String:
			return "an array of strings"
		case reflect.Struct:
			return "an array of tables"
		}
	}
	return ""
}

// article puts "a" or "an" before one of go-toml's type words (string,
// integer, float, boolean, array, table, datetime…).
func article(w string) string {
	if w != "" && strings.ContainsRune("aeiou", rune(w[0])) {
		return "an " + w
	}
	return "a " + w
}

// keys lists snapback.toml's tables and their keys ("" is the top level).
func keys() map[string][]string {
	out := map[string][]string{}
	var walk func(table string, t reflect.Type)
	walk = func(table string, t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "" || name == "-" {
				continue
			}
			ft := f.Type
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && table == "" {
				walk(name, ft)
			}
			out[table] = append(out[table], name)
		}
	}
	walk("", reflect.TypeOf(Config{}))
	return out
}

// suggestKey names the key an unknown one was probably meant to be: the
// same name in another table ("ignore" at the top level is [snapshot]
// ignore), or a key of the same table a letter or two away ("paht").
func suggestKey(key []string) string {
	if len(key) == 0 {
		return ""
	}
	table, name := "", key[len(key)-1]
	if len(key) > 1 {
		table = key[len(key)-2]
	}
	all := keys()
	tables := make([]string, 0, len(all))
	for t := range all {
		tables = append(tables, t)
	}
	sort.Strings(tables) // the same suggestion every time
	var in []string
	for _, t := range tables {
		if t == table || t == "" {
			continue
		}
		for _, k := range all[t] {
			if k == name {
				in = append(in, "["+t+"] "+k)
			}
		}
	}
	if len(in) > 0 {
		return strings.Join(in, " or ")
	}
	best := suggest.Closest(name, all[table])
	if best == "" {
		return ""
	}
	if table == "" {
		return best
	}
	return table + "." + best
}

// Backends lists the target backend names snapback.toml may use.
var Backends = []string{"sqlite", "postgres", "mysql", "docker-volume", "btrfs", "zfs", "apfs"}

// targetKeys lists the keys each backend takes, the one it needs first.
var targetKeys = map[string][]string{
	"sqlite":        {"path"},
	"postgres":      {"dsn"},
	"mysql":         {"dsn"},
	"docker-volume": {"volume", "stop_containers"},
	"btrfs":         {"path"},
	"zfs":           {"dataset"},
	"apfs":          {"path"},
}

func (c *Config) validate(src []byte) error {
	bad := func(table string, index int, key, format string, a ...any) error {
		return &Error{Path: c.path, Line: keyLine(src, table, index, key), Msg: fmt.Sprintf(format, a...)}
	}
	if modes := isolation.Names(); !contains(modes, c.Snapshot.Mode) {
		return bad("snapshot", -1, "mode", "snapshot.mode: unknown mode %q (one of %s)", c.Snapshot.Mode, strings.Join(modes, ", "))
	}
	for i, p := range c.Snapshot.Ignore {
		if strings.TrimSpace(p) == "" || strings.ContainsAny(p, "\x00\n") {
			return bad("snapshot", -1, "ignore", "snapshot.ignore[%d]: invalid pattern %q", i, p)
		}
	}
	for i, p := range c.Snapshot.Exclude {
		if strings.TrimSpace(p) == "" || strings.ContainsAny(p, "\x00\n") {
			return bad("snapshot", -1, "exclude", "snapshot.exclude[%d]: invalid pattern %q", i, p)
		}
	}
	if c.Snapshot.Keep < 0 || c.Snapshot.Keep > 1000000 {
		return bad("snapshot", -1, "keep", "snapshot.keep: must be 1 to 1000000 (0: unset), not %d", c.Snapshot.Keep)
	}
	if c.Snapshot.KeepDays < 0 || c.Snapshot.KeepDays > 36500 {
		return bad("snapshot", -1, "keep_days", "snapshot.keep_days: must be 1 to 36500 (0: unset), not %d", c.Snapshot.KeepDays)
	}
	if c.Snapshot.Store != "" {
		p, err := storePath(c.Snapshot.Store, filepath.Dir(c.path))
		if err != nil {
			return bad("snapshot", -1, "store", "snapshot.store: %v", err)
		}
		c.Snapshot.Store = p
	}
	for i, t := range c.Targets {
		if t.Backend == "" {
			return bad("target", i, "", "target %d: no backend", i+1)
		}
		if !contains(Backends, t.Backend) {
			return bad("target", i, "backend", "target %d: unknown backend %q (one of %s)", i+1, t.Backend, strings.Join(Backends, ", "))
		}
		name := t.Name
		if name == "" {
			name = fmt.Sprint(i + 1)
		}
		need := targetKeys[t.Backend]
		set := map[string]bool{"path": t.Path != "", "dsn": t.DSN != "", "volume": t.Volume != "", "dataset": t.Dataset != "", "stop_containers": t.StopContainers}
		if !set[need[0]] {
			return bad("target", i, "", "target %s: backend %s needs %s", name, t.Backend, need[0])
		}
		for _, k := range []string{"path", "dsn", "volume", "dataset", "stop_containers"} {
			if set[k] && !contains(need, k) {
				return bad("target", i, k, "target %s: %s does not apply to backend %s", name, k, t.Backend)
			}
		}
		for j := 0; j < i; j++ {
			if t.Name != "" && c.Targets[j].Name == t.Name {
				return bad("target", i, "name", "target %s: the name is used twice", t.Name)
			}
		}
		if t.Path != "" && strings.ContainsRune(t.Path, 0) {
			return bad("target", i, "path", "target %s: invalid path %q", name, t.Path)
		}
	}
	if c.Archive.Keep < 0 || c.Archive.Keep > 1000 {
		return bad("archive", -1, "keep", "archive.keep: must be 1 to 1000 (0: unset), not %d", c.Archive.Keep)
	}
	return nil
}

// storePath expands and checks [snapshot] store: absolute or ~/-relative,
// and neither inside the project at root (a snapshot would hold it) nor
// holding it.
func storePath(p, root string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("invalid path %q", p)
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		p = filepath.Join(home, p[1:])
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path (nor ~/…)", p)
	}
	p = filepath.Clean(p)
	if abs, err := filepath.Abs(root); err == nil {
		if rel, err := filepath.Rel(abs, p); err == nil && (rel == "." || !strings.HasPrefix(rel, "..")) {
			return "", fmt.Errorf("%s is inside the project: a store there would be in its snapshots (name a directory outside it)", p)
		}
		if rel, err := filepath.Rel(p, abs); err == nil && !strings.HasPrefix(rel, "..") {
			return "", fmt.Errorf("%s holds the project: name a directory of its own outside it", p)
		}
	}
	return p, nil
}

func splitPath(p string) (dir, base string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

func parentPath(p string) string { d, _ := splitPath(p); return d }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// keyLine finds the line of key in table (the index-th [[table]] when
// index >= 0; the table header itself when key is empty), or 0. A table
// may also be written inline: snapshot = {mode = "x"}, or
// target = [{backend = "x"}] for an array of tables.
func keyLine(src []byte, table string, index int, key string) int {
	var p unstable.Parser
	p.Reset(src)
	f := &lineFinder{p: &p, table: table, index: index, key: key, n: -1}
	cur := ""
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			cur = joinKey(e.Key())
			if e.Kind == unstable.ArrayTable && cur == table {
				f.n++
			}
			if key == "" && cur == table && f.n == index {
				return line(&p, e)
			}
		case unstable.KeyValue:
			if l := f.keyValue(cur, e); l > 0 {
				return l
			}
		}
	}
	return 0
}

// lineFinder is keyLine's search state: n counts the instances of an
// array of tables seen so far.
type lineFinder struct {
	p          *unstable.Parser
	table, key string
	index, n   int
}

// keyValue searches the key-value e, found in table cur.
func (f *lineFinder) keyValue(cur string, e *unstable.Node) int {
	k := joinKey(e.Key())
	if cur != "" {
		k = cur + "." + k
	}
	if k == f.table+"."+f.key && (f.index < 0 || cur == f.table && f.n == f.index) {
		return line(f.p, e)
	}
	if k != f.table {
		return 0
	}
	v := e.Value()
	switch {
	case f.index < 0 && v.Kind == unstable.InlineTable:
		return f.inline(v, e)
	case f.index >= 0 && v.Kind == unstable.Array:
		for it := v.Children(); it.Next(); {
			if t := it.Node(); t.Kind == unstable.InlineTable {
				if f.n++; f.n == f.index {
					return f.inline(t, e)
				}
			}
		}
	}
	return 0
}

// inline searches the inline table t, the value of the key-value e. The
// table itself (key "") is at its first key; a key not in t is reported at
// e's line, the nearest there is.
func (f *lineFinder) inline(t, e *unstable.Node) int {
	for it := t.Children(); it.Next(); {
		kv := it.Node()
		if kv.Kind != unstable.KeyValue {
			continue
		}
		if f.key == "" {
			return line(f.p, kv)
		}
		if l := f.keyValue(f.table, kv); l > 0 {
			return l
		}
	}
	return line(f.p, e)
}

func line(p *unstable.Parser, e *unstable.Node) int {
	it := e.Key()
	if it.Next() {
		if r := it.Node().Raw; r.Length > 0 {
			return p.Shape(r).Start.Line
		}
	}
	if v := e.Value(); v != nil && v.Raw.Length > 0 {
		return p.Shape(v.Raw).Start.Line
	}
	return 0
}

func joinKey(it unstable.Iterator) string {
	var parts []string
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return strings.Join(parts, ".")
}

func (c *Config) compile() error {
	var ps []gitignore.Pattern
	for _, p := range c.Snapshot.Ignore {
		ps = append(ps, gitignore.ParsePattern(p, nil))
	}
	c.matcher = gitignore.NewMatcher(ps)
	var xs []gitignore.Pattern
	for _, p := range c.Snapshot.Exclude {
		xs = append(xs, gitignore.ParsePattern(p, nil))
	}
	c.exclude = gitignore.NewMatcher(xs)
	root := filepath.Dir(c.path)
	for _, t := range c.Targets {
		if t.Path == "" {
			continue
		}
		p := t.Path
		if filepath.IsAbs(p) {
			rel, err := filepath.Rel(root, p)
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				continue // outside the tree
			}
			p = rel
		}
		if p = filepath.ToSlash(filepath.Clean(p)); p != "." && !strings.HasPrefix(p, "../") {
			c.inTree = append(c.inTree, p)
		}
	}
	return nil
}

// Ignored reports whether a relative, slash-separated path matches the
// ignore or the exclude patterns (gitignore semantics, matched from the
// root): no snapshot holds it, no restore touches it; or whether it is
// a target's (with SQLite's journal files): its backend saves it, the tree
// snapshot must not also restore it underneath.
func (c *Config) Ignored(path string, isDir bool) bool {
	for _, tp := range c.inTree {
		if path == tp || strings.HasPrefix(path, tp+"/") {
			return true
		}
		if rest, ok := strings.CutPrefix(path, tp); ok && (rest == "-wal" || rest == "-shm" || rest == "-journal") {
			return true
		}
		// What the btrfs and apfs backends keep beside a target.
		if dir, base := splitPath(path); dir == parentPath(tp) && (base == ".snapback-snapshots" || strings.HasPrefix(base, ".snapback-restore-")) {
			return true
		}
	}
	if c.Excluded(path, isDir) {
		return true
	}
	if len(c.Snapshot.Ignore) == 0 {
		return false
	}
	return c.matcher.Match(strings.Split(path, "/"), isDir)
}

// Excluded reports whether a path matches the exclude patterns: left out
// of snapshots like an ignored one, but isolated by an overlay run, not
// written through.
func (c *Config) Excluded(path string, isDir bool) bool {
	if len(c.Snapshot.Exclude) == 0 {
		return false
	}
	return c.exclude.Match(strings.Split(path, "/"), isDir)
}
