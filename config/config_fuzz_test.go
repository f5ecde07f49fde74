package config

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/isolation"
)

// FuzzParse checks that no snapback.toml makes Parse panic, and that every
// error it returns is a *Error naming the file and a line the file has.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"[snapshot]\nignore = [\"node_modules\", \"*.log\", \"/build\", \"docs/**/*.tmp\", \"!keep.log\"]\nmode = \"auto\"\n",
		"[[target]]\nbackend = \"sqlite\"\npath = \"app.db\"\n\n[[target]]\nbackend = \"postgres\"\ndsn = \"postgres://localhost/app\"\n",
		"[archive]\ndestination = \"/srv/snapback-archives\"\nkeep = 10\n",
		"[snapshot]\nmode = \"docker\"\n",
		"[snapshot]\nignore = 3\n",
		"[snapshot]\nignore = [\"a\",\n",
		"[[target]]\npath = \"x\"\n",
		"[[target]]\nbackend = \"oracle\"\n",
		"snapshot = { mode = \"fuse\", ignore = [\"x\"] }\ntarget = [{ backend = \"zfs\", dataset = \"tank/a\" }, { path = \"y\" }]\n",
		"snapshot.mode = \"copy\"\narchive.keep = -3\n",
		"[snapshot.mode]\n",
		"[snapshot]\nignore = [\"[\", \"\\\\\", \"**/\", \"!\", \"a/**/**/b\"]\n",
		"\ufeff[snapshot]\r\nmode = 'auto'\r\n",
	} {
		f.Add([]byte(s))
	}
	const name = "/proj/snapback.toml"
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := Parse(name, src)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v, want *config.Error", err, err)
			}
			if ce.Path != name || !strings.HasPrefix(err.Error(), name+":") {
				t.Fatalf("error %q does not start with the file name (Path %q)", err, ce.Path)
			}
			if lines := bytes.Count(src, []byte("\n")) + 1; ce.Line < 0 || ce.Line > lines {
				t.Fatalf("error %q: line %d outside the file's %d lines", err, ce.Line, lines)
			}
			return
		}
		if c == nil {
			t.Fatal("Parse returned neither a config nor an error")
		}
		if !contains(isolation.Names(), c.Snapshot.Mode) {
			t.Fatalf("accepted mode %q", c.Snapshot.Mode)
		}
		for _, tg := range c.Targets {
			if !contains(Backends, tg.Backend) {
				t.Fatalf("accepted backend %q", tg.Backend)
			}
		}
		// The compiled patterns must be usable on any path.
		for _, p := range []string{"a", "node_modules/x", "docs/a/b.tmp", "a/b/c.log"} {
			c.Ignored(p, false)
			c.Ignored(p, true)
		}
	})
}
