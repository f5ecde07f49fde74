//go:build linux

package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	_ "modernc.org/sqlite"
)

// TestHostileTargets plays a repository that commits a crafted .snapback/
// (with no identity record, so that it is adopted as an older snapback's
// store): a record whose target payload names, for every backend of the
// registry, something snapback.toml does not declare — a SQLite file
// outside the project, a database, a volume, a subvolume, a dataset —
// or a declared SQLite path reached through a committed symbolic link.
// undo and restore refuse it in one line naming the record and the
// field, exit 2, and change nothing: not the tree, not the file outside.
func TestHostileTargets(t *testing.T) {
	bin := snapbackBinary(t)
	type hostile struct {
		declare string            // [[target]] tables besides the project's own app.db
		target  map[string]string // the crafted target.json
		field   string            // the field the refusal names
		symlink bool              // data/ becomes a link to the outside directory
	}
	cases := map[string]hostile{
		"sqlite-absolute": {target: map[string]string{"backend": "sqlite", "path": "OUT/victim.db"}, field: "path"},
		"sqlite-dotdot":   {target: map[string]string{"backend": "sqlite", "path": "../out/victim.db"}, field: "path"},
		"sqlite-symlink": {declare: "[[target]]\nbackend = \"sqlite\"\npath = \"data/victim.db\"\n",
			target: map[string]string{"backend": "sqlite", "path": "data/victim.db"}, symlink: true},
		"postgres": {declare: "[[target]]\nbackend = \"postgres\"\ndsn = \"postgres://snapback@127.0.0.1:5432/declared\"\n",
			target: map[string]string{"backend": "postgres", "dsn": "postgres://snapback@127.0.0.1:5432/victim"}, field: "dsn"},
		"mysql": {declare: "[[target]]\nbackend = \"mysql\"\ndsn = \"snapback@tcp(127.0.0.1:3306)/declared\"\n",
			target: map[string]string{"backend": "mysql", "dsn": "snapback@tcp(127.0.0.1:3306)/victim"}, field: "dsn"},
		"docker-volume": {declare: "[[target]]\nbackend = \"docker-volume\"\nvolume = \"declared\"\n",
			target: map[string]string{"backend": "docker-volume", "volume": "victim"}, field: "volume"},
		"btrfs": {declare: "[[target]]\nbackend = \"btrfs\"\npath = \"declared\"\n",
			target: map[string]string{"backend": "btrfs", "path": "OUT"}, field: "path"},
		"zfs": {declare: "[[target]]\nbackend = \"zfs\"\ndataset = \"tank/declared\"\n",
			target: map[string]string{"backend": "zfs", "dataset": "tank/victim"}, field: "dataset"},
		"apfs": {declare: "[[target]]\nbackend = \"apfs\"\npath = \"declared\"\n",
			target: map[string]string{"backend": "apfs", "path": "OUT"}, field: "path"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			root, out := filepath.Join(base, "p"), filepath.Join(base, "out")
			treetest.Must(t, os.MkdirAll(filepath.Join(root, "data"), 0o755))
			treetest.Must(t, os.Mkdir(out, 0o755))
			// The victim: a database of the user's, outside the project.
			db, err := sql.Open("sqlite", filepath.Join(out, "victim.db"))
			treetest.Must(t, err)
			_, err = db.Exec("CREATE TABLE t(v TEXT); INSERT INTO t VALUES ('precious')")
			treetest.Must(t, err)
			treetest.Must(t, db.Close())
			write := func(rel, s string) {
				t.Helper()
				treetest.Must(t, os.WriteFile(filepath.Join(root, rel), []byte(s), 0o644))
			}
			// The store as the attacker starts it: a snap of a project
			// whose target (absent) saved the "absent" marker, which a
			// restore makes true by removing the file.
			write("a", "one\n")
			write("snapback.toml", "[[target]]\nbackend = \"sqlite\"\npath = \"app.db\"\n")
			if r := hostileRun(t, bin, root, "snap", "-m", "s1"); r.code != 0 {
				t.Fatalf("snap: exit %d: %s", r.code, r.stderr)
			}
			recs, err := filepath.Glob(filepath.Join(root, ".snapback/snapshots/*.json"))
			treetest.Must(t, err)
			if len(recs) != 1 {
				t.Fatalf("records: %v", recs)
			}
			id := strings.TrimSuffix(filepath.Base(recs[0]), ".json")
			payload := filepath.Join(root, ".snapback/targets", id, "0")
			if _, err := os.Stat(filepath.Join(payload, "data/absent")); err != nil {
				t.Fatalf("the payload holds no absent marker: %v", err)
			}
			// The crafted payload and record.
			tj := map[string]string{}
			for k, v := range c.target {
				tj[k] = strings.ReplaceAll(v, "OUT", out)
			}
			b, err := json.Marshal(tj)
			treetest.Must(t, err)
			treetest.Must(t, os.WriteFile(filepath.Join(payload, "target.json"), b, 0o600))
			var rec map[string]any
			b, err = os.ReadFile(recs[0])
			treetest.Must(t, err)
			treetest.Must(t, json.Unmarshal(b, &rec))
			st := rec["targets"].([]any)[0].(map[string]any)
			st["backend"], st["name"] = tj["backend"], tj["backend"]+" victim"
			b, err = json.Marshal(rec)
			treetest.Must(t, err)
			treetest.Must(t, os.WriteFile(recs[0], b, 0o600))
			treetest.Must(t, os.Remove(filepath.Join(root, ".snapback/identity")))
			write("snapback.toml", "[[target]]\nbackend = \"sqlite\"\npath = \"app.db\"\n"+c.declare)
			if c.symlink {
				treetest.Must(t, os.Remove(filepath.Join(root, "data")))
				treetest.Must(t, os.Symlink("../out", filepath.Join(root, "data")))
			}
			write("a", "two\n")
			outside := treeSum(t, out)

			want := regexp.MustCompile(`^snapback: (undo|restore): untrusted store: record ` + id + `: \S+/target\.json: ` + c.field + ` ".*" \(` + c.target["backend"] + `\) is not a \[\[target\]\] of snapback\.toml; not restored\n$`)
			if c.symlink {
				want = regexp.MustCompile(`^snapback: (undo|restore): target sqlite data/victim\.db: \S+/p/data is a symbolic link: a target is never reached through one\n$`)
			}
			for _, verb := range [][]string{{"undo"}, {"restore", id}} {
				r := hostileRun(t, bin, root, verb...)
				if r.code != 2 || !want.MatchString(r.stderr) {
					t.Errorf("%s: exit %d, stderr %q; want exit 2 and a line matching %s", verb[0], r.code, r.stderr, want)
				}
				if treeSum(t, out) != outside {
					t.Fatalf("%s changed %s (outside the project)", verb[0], out)
				}
				if b, _ := os.ReadFile(filepath.Join(root, "a")); string(b) != "two\n" {
					t.Errorf("%s changed the tree: a holds %q", verb[0], b)
				}
			}
		})
	}
}
