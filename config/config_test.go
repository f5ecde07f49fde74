package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const testFile = "/proj/snapback.toml"

// parseErr parses src, requires it to fail with a *Error, and returns it.
func parseErr(t *testing.T, src string) *Error {
	t.Helper()
	c, err := Parse(testFile, []byte(src))
	if err == nil {
		t.Fatalf("Parse(%q) = %+v, want an error", src, c)
	}
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("Parse(%q) error %T %v, want *config.Error", src, err, err)
	}
	if ce.Path != testFile || !strings.HasPrefix(err.Error(), testFile+":") {
		t.Errorf("error %q does not name %s (Path %q)", err, testFile, ce.Path)
	}
	return ce
}

func TestParseGood(t *testing.T) {
	src := `# a project
[snapshot]
ignore = ["node_modules", "*.log", "trace.jsonl"]   # gitignore syntax
mode = "fuse"

[[target]]
backend = "sqlite"
path = "app.db"

[[target]]
name = "main db"
backend = "postgres"
dsn = "postgres://localhost/app"

[[target]]
backend = "docker-volume"
volume = "pgdata"
stop_containers = true

[archive]
destination = "/srv/snapback-archives"
keep = 10
`
	c, err := Parse(testFile, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"node_modules", "*.log", "trace.jsonl"}; !slices.Equal(c.Snapshot.Ignore, want) {
		t.Errorf("ignore = %q, want %q", c.Snapshot.Ignore, want)
	}
	if c.Snapshot.Mode != "fuse" {
		t.Errorf("mode = %q, want fuse", c.Snapshot.Mode)
	}
	want := []Target{
		{Backend: "sqlite", Path: "app.db"},
		{Name: "main db", Backend: "postgres", DSN: "postgres://localhost/app"},
		{Backend: "docker-volume", Volume: "pgdata", StopContainers: true},
	}
	if !slices.Equal(c.Targets, want) {
		t.Errorf("targets = %+v, want %+v", c.Targets, want)
	}
	if c.Archive != (Archive{Destination: "/srv/snapback-archives", Keep: 10}) {
		t.Errorf("archive = %+v", c.Archive)
	}
}

func TestParseEmptyIsDefault(t *testing.T) {
	c, err := Parse(testFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Snapshot.Mode != "auto" || len(c.Targets) != 0 || c.Ignored("anything", false) {
		t.Errorf("empty config = %+v, want mode auto, no targets, nothing ignored", c)
	}
}

func TestParseErrorLines(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		msg       string // a substring of the message
	}{
		{"unknown key", "[snapshot]\nmode = \"auto\"\n\nbogus = 1\n", 4, `unknown key "snapshot.bogus"`},
		{"unknown top-level key", "# c\nexclude = []\n", 2, `unknown key "exclude" (did you mean [snapshot] exclude?)`},
		{"a key of another table", "[archive]\nignore = []\n", 2, `unknown key "archive.ignore" (did you mean [snapshot] ignore?)`},
		{"a misspelt key", "[snapshot]\nmdoe = \"auto\"\n", 2, `unknown key "snapshot.mdoe" (did you mean snapshot.mode?)`},
		{"unknown key in second target", "[[target]]\nbackend = \"sqlite\"\n[[target]]\nbackend = \"sqlite\"\npaht = \"x\"\n", 5, `unknown key "target.paht" (did you mean target.path?)`},
		{"bad mode", "[snapshot]\nignore = []\n\nmode = \"docker\"\n", 4, `unknown mode "docker"`},
		{"syntax error", "[snapshot]\nmode = \"auto\"\nignore = [\"a\",\n", 3, "incomplete"},
		{"unterminated string", "[archive]\n\ndestination = \"/srv\n", 3, ""},
		{"bad type", "[snapshot]\nmode = \"auto\"\n\nignore = 3\n", 4, "snapshot.ignore"},
		{"bad type in list", "[snapshot]\nignore = [\"a\", 3]\n", 2, "snapshot.ignore"},
		{"empty pattern", "[snapshot]\nmode = \"auto\"\nignore = [\"a\", \" \"]\n", 3, "snapshot.ignore[1]"},
		{"empty exclude pattern", "[snapshot]\nmode = \"auto\"\nexclude = [\"a\", \"\"]\n", 3, "snapshot.exclude[1]"},
		{"unknown backend", "[[target]]\nbackend = \"sqlite\"\npath = \"a.db\"\n\n[[target]]\npath = \"b.db\"\nbackend = \"oracle\"\n", 7, `target 2: unknown backend "oracle"`},
		{"no backend", "[[target]]\nbackend = \"sqlite\"\npath = \"a.db\"\n[[target]]\npath = \"b.db\"\n", 4, "target 2: no backend"},
		{"missing dsn", "[[target]]\nname = \"db\"\nbackend = \"postgres\"\n", 1, "target db: backend postgres needs dsn"},
		{"key for another backend", "[[target]]\nbackend = \"sqlite\"\npath = \"a.db\"\nvolume = \"v\"\n", 4, "target 1: volume does not apply to backend sqlite"},
		{"same name twice", "[[target]]\nname = \"x\"\nbackend = \"sqlite\"\npath = \"a.db\"\n[[target]]\nname = \"x\"\nbackend = \"sqlite\"\npath = \"b.db\"\n", 6, "target x: the name is used twice"},
		{"negative keep", "[archive]\ndestination = \"/a\"\nkeep = -1\n", 3, "archive.keep"},
		{"negative snapshot keep", "[snapshot]\nmode = \"copy\"\nkeep = -1\n", 3, "snapshot.keep"},
		{"keep_days past 100 years", "[snapshot]\nkeep_days = 36501\n", 2, "snapshot.keep_days"},
		{"keep past 1000", "[archive]\ndestination = \"/a\"\nkeep = 1001\n", 3, "archive.keep"},
		{"dotted key", "snapshot.mode = \"nope\"\n", 1, `unknown mode "nope"`},
		{"inline table", "\nsnapshot = { mode = \"nope\" }\n", 2, `unknown mode "nope"`},
		{"inline array of tables", "target = [\n  { backend = \"sqlite\", path = \"a\" },\n  { backend = \"oracle\" },\n]\n", 3, `target 2: unknown backend "oracle"`},
		{"inline target without backend", "target = [\n  { backend = \"sqlite\", path = \"a\" },\n  { path = \"x\" },\n]\n", 3, "target 2: no backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := parseErr(t, tc.src)
			if e.Line != tc.line {
				t.Errorf("line %d, want %d (%v)", e.Line, tc.line, e)
			}
			if !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("message %q does not contain %q", e.Msg, tc.msg)
			}
		})
	}
}

func TestIgnored(t *testing.T) {
	c, err := Parse(testFile, []byte(`[snapshot]
ignore = ["node_modules", "*.log", "/build", "docs/**/*.tmp", "!keep.log"]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path  string
		isDir bool
		want  bool
	}{
		// A bare name matches at any depth, and everything below it.
		{"node_modules", true, true},
		{"web/node_modules", true, true},
		{"web/node_modules/left-pad/index.js", false, true},
		{"node_modules_old", true, false},
		{"src/node_modules.go", false, false},
		// A glob without a slash matches the name at any depth.
		{"debug.log", false, true},
		{"a/b/c.log", false, true},
		{"log", false, false},
		{"a.log.txt", false, false},
		// Negation re-includes what an earlier pattern excluded.
		{"keep.log", false, false},
		{"sub/keep.log", false, false},
		// A leading slash anchors at the root.
		{"build", true, true},
		{"build/out.o", false, true},
		{"src/build", true, false},
		{"src/build/out.o", false, false},
		// ** spans zero or more directories; a middle slash anchors.
		{"docs/a.tmp", false, true},
		{"docs/x/y/a.tmp", false, true},
		{"docs/a.txt", false, false},
		{"src/docs/a.tmp", false, false},
		{"a.tmp", false, false},
		{"main.go", false, false},
	} {
		if got := c.Ignored(tc.path, tc.isDir); got != tc.want {
			t.Errorf("Ignored(%q, %v) = %v, want %v", tc.path, tc.isDir, got, tc.want)
		}
	}
}

// A target's file inside the tree (and SQLite's journal files) is left to
// its backend: the tree's snapshots ignore it. One outside is no concern.
func TestTargetPathsAreIgnored(t *testing.T) {
	src := "[[target]]\nbackend = \"sqlite\"\npath = \"data/app.db\"\n[[target]]\nbackend = \"sqlite\"\npath = \"/proj/abs.db\"\n[[target]]\nbackend = \"sqlite\"\npath = \"/elsewhere/x.db\"\n"
	c, err := Parse("/proj/snapback.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"data/app.db": true, "data/app.db-wal": true, "data/app.db-shm": true, "data/app.db-journal": true,
		"abs.db": true, "data/app.dbx": false, "data": false, "elsewhere/x.db": false, "x.db": false,
		"data/.snapback-snapshots": true, "data/.snapback-restore-1a2b": true, ".snapback-snapshots": true /* beside abs.db */, "data/sub/.snapback-restore-x": false,
	} {
		if got := c.Ignored(p, false); got != want {
			t.Errorf("Ignored(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestWrongTypes: a value of the wrong type is named in TOML's words
// (never Go's: no []string, no "toml: cannot decode"), with its line, for
// every key snapback.toml has.
func TestWrongTypes(t *testing.T) {
	cases := map[string]struct{ src, want string }{
		"snapshot":               {"snapshot = 1\n", ":1: snapshot must be a table, not an integer"},
		"snapshot.ignore":        {"[snapshot]\nignore = \"x.log\"\n", ":2: snapshot.ignore must be an array of strings, not a string"},
		"snapshot.exclude":       {"[snapshot]\n\nexclude = [1]\n", ":3: snapshot.exclude must be an array of strings, not an integer"},
		"snapshot.mode":          {"[snapshot]\nmode = true\n", ":2: snapshot.mode must be a string, not a boolean"},
		"snapshot.keep":          {"[snapshot]\nkeep = \"10\"\n", ":2: snapshot.keep must be an integer, not a string"},
		"snapshot.keep_days":     {"[snapshot]\nkeep_days = 1.5\n", ":2: snapshot.keep_days must be an integer, not a float"},
		"snapshot.store":         {"[snapshot]\nstore = 1\n", ":2: snapshot.store must be a string, not an integer"},
		"target":                 {"target = 1\n", ":1: target must be an array of tables, not an integer"},
		"target.name":            {"[[target]]\nname = 1\n", ":2: target.name must be a string, not an integer"},
		"target.backend":         {"[[target]]\nbackend = [\"sqlite\"]\n", ":2: target.backend must be a string, not an array"},
		"target.path":            {"[[target]]\nbackend = \"sqlite\"\npath = 1\n", ":3: target.path must be a string, not an integer"},
		"target.dsn":             {"[[target]]\ndsn = {host = \"x\"}\n", ":2: target.dsn must be a string, not a table"},
		"target.volume":          {"[[target]]\nvolume = 2\n", ":2: target.volume must be a string, not an integer"},
		"target.dataset":         {"[[target]]\ndataset = false\n", ":2: target.dataset must be a string, not a boolean"},
		"target.stop_containers": {"[[target]]\nstop_containers = \"yes\"\n", ":2: target.stop_containers must be a boolean (true or false), not a string"},
		"archive":                {"archive = \"x\"\n", ":1: archive must be a table, not a string"},
		"archive.destination":    {"[archive]\ndestination = 4\n", ":2: archive.destination must be a string, not an integer"},
		"archive.keep":           {"[archive]\nkeep = \"all\"\n", ":2: archive.keep must be an integer, not a string"},
	}
	// Every key of the file has its case: a key added later needs one.
	for table, names := range keys() {
		for _, k := range names {
			if table != "" {
				k = table + "." + k
			}
			if _, ok := cases[k]; !ok {
				t.Errorf("no wrong-type case for %s", k)
			}
		}
	}
	for key, c := range cases {
		err := parseErr(t, c.src)
		msg := err.Error()
		if !strings.HasSuffix(msg, c.want) {
			t.Errorf("%s: error %q, want it to end %q", key, msg, c.want)
		}
		for _, goWord := range []string{"[]", "toml: ", "decode", "config.", "struct"} {
			if strings.Contains(msg, goWord) {
				t.Errorf("%s: error %q speaks Go (%q)", key, msg, goWord)
			}
		}
	}
}

// TestStore: [snapshot] store is absolute or ~/-relative (expanded at
// load), and never inside the project or holding it.
func TestStore(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	for src, want := range map[string]string{
		`"/srv/stores/p"`: "/srv/stores/p", `"~/stores/p/"`: "/home/u/stores/p", `"/proj2"`: "/proj2",
	} {
		c, err := Parse(testFile, []byte("[snapshot]\nstore = "+src+"\n"))
		if err != nil || c.Snapshot.Store != want {
			t.Errorf("store = %s: %q, %v; want %q", src, c.Snapshot.Store, err, want)
		}
	}
	for src, want := range map[string]string{
		`"hist"`:         `:2: snapshot.store: "hist" is not an absolute path`,
		`"/proj/.hist"`:  ":2: snapshot.store: /proj/.hist is inside the project",
		`"/proj"`:        ":2: snapshot.store: /proj is inside the project",
		`"/"`:            ":2: snapshot.store: / holds the project",
		"\"/a\\u0000b\"": ":2: snapshot.store: invalid path",
		`"~other/x"`:     `:2: snapshot.store: "~other/x" is not an absolute path`,
	} {
		if err := parseErr(t, "[snapshot]\nstore = "+src+"\n"); !strings.Contains(err.Error(), want) {
			t.Errorf("store = %s: %v, want %q", src, err, want)
		}
	}
}
