//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"golang.org/x/sys/unix"
)

// The kill-at-every-system-call test, in the style of ALICE and
// CrashMonkey: each operation that changes the tree is run once for every
// state-changing system call it makes, and SIGKILLed just before the 1st,
// the 2nd, … the N-th of them (SNAPBACK_KILL_AT, counted by
// fsutil.Mutating around every create, write, fsync, rename, link,
// symlink, unlink, mkdir, rmdir, chmod, chown, utimes and setxattr), until
// a run completes untouched. After every kill, `snapback recover` must
// exit 0; the tree (contents, types, modes, owners, times, link targets,
// xattrs, hard links) and the SQLite target must be exactly the state
// before the operation or exactly the state after it; and the store must
// still work: from "before" the operation itself completes to "after",
// and from "after" its inverse brings "before" back.

// killScenario is one operation under the kill test.
type killScenario struct {
	name string
	// prepare builds, in root, a project whose next step is op.
	prepare func(t *testing.T, bin, root string)
	op      []string
	// inverse takes the state after op back to the state before it (for
	// gc, which changes no state: a verb whose result gc must not change).
	inverse []string
	// sqlite: the project has a SQLite target, app.db, whose rows are
	// part of the state.
	sqlite bool
	// runs: op runs a command, whose writes carry the time it ran: the
	// state after it is compared without times.
	runs bool
	// project, when set, is the project's directory below the prepared
	// one (where snapback runs), and observe the directory whose state
	// is compared (relative to the project; "": the project itself).
	project, observe string
	// fails: op, run to the end, refuses (exit 2) and changes nothing.
	fails bool
	// unchanged: op never changes the state compared (checkpoint begin
	// and end change only the store); after each kill and recover the
	// state must be as before, and then verify must pass.
	unchanged bool
	// verify, when set, checks after each kill and recover that the store
	// still does its job from there (in the project's directory).
	verify func(t *testing.T, bin, proj string)
	// stdin is what op reads (commit -p's answers).
	stdin string
	// pendingDiff: op leaves a run pending, whose `diff -p` after each kill
	// and recover must be the one before op or the one after it, as the
	// tree is.
	pendingDiff bool
	// storeOutside: the project's store is outside the tree, at
	// outsideStore ([snapshot] store); each copy of the project gets the
	// template's store there afresh, with an identity record made for
	// the copy.
	storeOutside bool
	// git: the project is a linked worktree (see worktreePrep), whose git
	// state outside the root is part of the state compared (gitKillState).
	// Its git files name each other by absolute path, so the project is
	// prepared, and every copy of it made, at one path.
	git bool
	// zfs: the project is in a ZFS dataset (the zfs mode's), made for the
	// scenario; after each kill and recover, no snapshot or clone of it
	// is left.
	zfs bool
	// inverseFurther: the inverse takes back more than op did (the undo of
	// a commit also takes back the git state its run moved as it ran): the
	// state after it is the uninterrupted inverse's, not the one before.
	inverseFurther bool
	// copied, when set, runs (unkilled) in each copy of the prepared
	// project, the uninterrupted one's too, before op: what a copy cannot
	// take from the template (a watcher of the tree, which watches a
	// path). It must leave the state compared as the template's.
	copied func(t *testing.T, bin, proj string)
}

// outsideStore is where a storeOutside scenario's store is: in the
// default temporary directory, named for the scenario's directory (on
// tmpfs where there is one: then the store is on another filesystem than
// the tree, as a state directory often is, and nothing can be linked or
// renamed between the two).
func outsideStore(root string) string {
	return filepath.Join(os.TempDir(), filepath.Base(filepath.Dir(root))+"-store")
}

// reidentify writes the identity record of the store at dir for the
// project at root, as the store would have made it there (a copy of a
// store is refused: new inodes).
func reidentify(t *testing.T, dir, root string) {
	t.Helper()
	var st, rst unix.Stat_t
	treetest.Must(t, unix.Lstat(dir, &st))
	treetest.Must(t, unix.Stat(root, &rst))
	id := fmt.Sprintf(`{"version":1,"root":%q,"root_ino":%d,"store_ino":%d,"dev":%d}`+"\n", root, rst.Ino, st.Ino, st.Dev)
	treetest.Must(t, os.WriteFile(filepath.Join(dir, snapshot.IdentityFile), []byte(id), 0o600))
}

var mtimeField = regexp.MustCompile(` mtime=[0-9]+`)

// withoutTimes is a state with every mtime left out.
func withoutTimes(st treetest.State) treetest.State {
	out := treetest.State{}
	for p, d := range st {
		out[p] = mtimeField.ReplaceAllString(d, "")
	}
	return out
}

// killTree is the project the scenarios change: the tricky cases (odd
// names, symlinks in and out, a fifo, hard links, odd modes, xattrs, a
// sparse file) and 6 directories of 20 files.
func killTree(t *testing.T, root string) {
	treetest.Tricky(t, root, 1<<20)
	for d := 0; d < 6; d++ {
		for f := 0; f < 20; f++ {
			treetest.Write(t, root, fmt.Sprintf("tree/d%d/f%02d.txt", d, f), fmt.Sprintf("%d/%d %s\n", d, f, strings.Repeat("x", 100+f*40)), 0o644)
		}
	}
}

// killChange changes about 50 paths of every kind: contents, deletions,
// creations (files, directories, symlinks, a fifo, a hard link), modes,
// renames, a symlink retargeted, a directory replaced by a file and a file
// by a directory, an xattr. (Every kill point of an operation is run, so
// its size is what the test's time is made of.)
const killChange = `set -e
for d in 0 1 2; do
  for f in 00 01 02 03 04 05 06 07 08; do
    case $f in
      0[0-2]) echo "changed $d $f" > tree/d$d/f$f.txt ;;
      0[3-4]) rm tree/d$d/f$f.txt ;;
      0[5-6]) chmod 600 tree/d$d/f$f.txt ;;
      0[7-8]) mv tree/d$d/f$f.txt tree/d$d/moved$f.txt ;;
    esac
  done
  mkdir -p tree/new$d/sub
  echo "new $d" > tree/new$d/sub/n.txt
  ln -s ../f00.txt tree/new$d/link
done
ln -sfn plain.txt dangling
rm -rf deep
rm plain.txt && mkdir plain.txt && echo inside > plain.txt/f
rm -rf empty && echo now-a-file > empty
mkfifo tree/newfifo
ln exec.sh tree/exec-link
chmod 700 tree/d0
setfattr -n user.changed -v yes tree/d1/f15.txt
`

// zfsKillTree is a small tree of every kind without xattrs (zfs-fuse
// keeps none).
func zfsKillTree(t *testing.T, root string) {
	for d := 0; d < 2; d++ {
		for f := 0; f < 4; f++ {
			treetest.Write(t, root, fmt.Sprintf("tree/d%d/f%d.txt", d, f), fmt.Sprintf("%d/%d\n", d, f), 0o644)
		}
	}
	treetest.Write(t, root, "plain.txt", "plain\n", 0o644)
	treetest.Write(t, root, "exec.sh", "#!/bin/sh\n", 0o755)
	treetest.Write(t, root, "gone/inside", "inside\n", 0o644)
	treetest.Must(t, os.Symlink("plain.txt", filepath.Join(root, "link")))
}

// zfsKillChange changes a path of each kind in zfsKillTree's tree:
// contents, a deletion, a mode, a rename, a new directory, a symlink, a
// fifo, a hard link, a file replaced by a directory and a directory
// deleted.
const zfsKillChange = `set -e
echo changed > tree/d0/f0.txt
rm tree/d0/f1.txt
chmod 600 tree/d1/f2.txt
mv tree/d1/f3.txt tree/d1/moved.txt
mkdir -p tree/new/sub && echo new > tree/new/sub/n.txt
ln -sfn exec.sh link
mkfifo tree/fifo
ln exec.sh tree/exec-link
rm plain.txt && mkdir plain.txt && echo inside > plain.txt/f
rm -rf gone
`

// noZFSLeft fails the test when the dataset ds has a snapshot, or one
// has a clone, left.
func noZFSLeft(t *testing.T, what, ds string) {
	t.Helper()
	out, err := exec.Command("zfs", "list", "-H", "-t", "all", "-o", "name,origin").CombinedOutput()
	if err != nil {
		t.Fatalf("zfs list: %v\n%s", err, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, origin, _ := strings.Cut(l, "\t")
		if strings.HasPrefix(name, ds+"@") || strings.HasPrefix(origin, ds+"@") {
			t.Errorf("%s: %s is left", what, name)
		}
	}
}

// damageObject flips a byte of the stored object holding content (its
// size stays: the damage is found only while it is written back).
func damageObject(t *testing.T, root string, content []byte) {
	t.Helper()
	h := fmt.Sprintf("%x", sha256.Sum256(content))
	o, ok, err := findObject(filepath.Join(root, snapshot.StoreDir), h)
	treetest.Must(t, err)
	if !ok {
		t.Fatalf("the store holds no object %s", h)
	}
	_, err = setStoredByte(o, content[0]^1)
	treetest.Must(t, err)
}

// sqliteTarget adds a SQLite target inside the tree to root.
func sqliteTarget(t *testing.T, root string) {
	treetest.Write(t, root, "snapback.toml", "[[target]]\nname = \"app\"\nbackend = \"sqlite\"\npath = \"app.db\"\n", 0o644)
	sqliteExec(t, root, `CREATE TABLE t(v TEXT); INSERT INTO t VALUES ('one')`)
}

func sqliteExec(t *testing.T, root, q string) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(root, "app.db"))
	treetest.Must(t, err)
	defer db.Close()
	_, err = db.Exec(q)
	treetest.Must(t, err)
}

// killState is what must be before or after: the tree, and the target.
func killState(t *testing.T, root string, withDB bool) treetest.State {
	t.Helper()
	st := treetest.Capture(t, root, snapshot.StoreDir, "app.db", "app.db-wal", "app.db-shm", "app.db-journal")
	if _, err := os.Lstat(filepath.Join(root, "app.db")); withDB && err != nil {
		st["<sqlite app.db>"] = "<absent>" // (sql.Open would make it)
	} else if withDB {
		db, err := sql.Open("sqlite", filepath.Join(root, "app.db"))
		treetest.Must(t, err)
		defer db.Close()
		var v sql.NullString
		treetest.Must(t, db.QueryRow(`SELECT group_concat(v) FROM (SELECT v FROM t ORDER BY v)`).Scan(&v))
		st["<sqlite app.db>"] = v.String
	}
	return st
}

func runSh(t *testing.T, dir, script string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sh: %v\n%s", err, out)
	}
}

func killScenarios(t *testing.T, bin string) []killScenario {
	modes := map[string]bool{}
	for _, m := range posixModes(t, bin) {
		modes[m] = true
	}
	// An undo of a snapshot: the change above is reverted.
	undoPrep := func(t *testing.T, bin, root string) {
		killTree(t, root)
		sqliteTarget(t, root)
		sbT(t, bin, root, "snap", "-m", "base")
		runSh(t, root, killChange)
		sqliteExec(t, root, `INSERT INTO t VALUES ('two')`)
	}
	pending := func(mode string) func(t *testing.T, bin, root string) {
		return func(t *testing.T, bin, root string) {
			killTree(t, root)
			sbT(t, bin, root, "snap", "-m", "base")
			sbT(t, bin, root, "run", "--mode", mode, "--then", "review", "--", "sh", "-c", killChange)
		}
	}
	// A pending run whose long.txt has three hunks.
	longPending := func(mode string) func(t *testing.T, bin, root string) {
		return func(t *testing.T, bin, root string) {
			killTree(t, root)
			var long strings.Builder
			for i := 1; i <= 40; i++ {
				fmt.Fprintf(&long, "line %d\n", i)
			}
			treetest.Write(t, root, "long.txt", long.String(), 0o644)
			sbT(t, bin, root, "snap", "-m", "base")
			sbT(t, bin, root, "run", "--mode", mode, "--then", "review", "--", "sh", "-c",
				killChange+"sed -i 's/^line 2$/two/; s/^line 20$/twenty/; s/^line 35$/thirty-five/' long.txt\n")
		}
	}
	out := []killScenario{
		{name: "undo", prepare: undoPrep, op: []string{"undo"}, inverse: []string{"redo"}, sqlite: true},
		// The store outside the tree ([snapshot] store): the same undo.
		{name: "undo-outside", storeOutside: true, prepare: func(t *testing.T, bin, root string) {
			treetest.Write(t, root, "snapback.toml", fmt.Sprintf("[snapshot]\nstore = %q\n", outsideStore(root)), 0o644)
			killTree(t, root)
			sbT(t, bin, root, "snap", "-m", "base")
			runSh(t, root, killChange)
			if _, err := os.Lstat(filepath.Join(root, snapshot.StoreDir)); err == nil {
				t.Fatal("a store in the tree, though snapback.toml names one outside")
			}
		}, op: []string{"undo"}, inverse: []string{"redo"}},
		// Damaged content met half-way: the undo rolls back what it did.
		{name: "undo-damaged", prepare: func(t *testing.T, bin, root string) {
			killTree(t, root)
			sbT(t, bin, root, "snap", "-m", "base")
			old, err := os.ReadFile(filepath.Join(root, "tree/d2/f01.txt"))
			treetest.Must(t, err)
			runSh(t, root, killChange)
			damageObject(t, root, old)
		}, op: []string{"undo"}, fails: true},
		// The first migration undone: the database it made is removed
		// (its write-ahead log first emptied into it, then each file
		// unlinked), and redo makes it again.
		{name: "undo-first-db", prepare: func(t *testing.T, bin, root string) {
			treetest.Write(t, root, "snapback.toml", "[[target]]\nname = \"app\"\nbackend = \"sqlite\"\npath = \"app.db\"\n", 0o644)
			treetest.Write(t, root, "a.txt", "before\n", 0o644)
			sbT(t, bin, root, "snap", "-m", "base")
			sqliteExec(t, root, `PRAGMA journal_mode=WAL; CREATE TABLE t(v TEXT); INSERT INTO t VALUES ('one')`)
			treetest.Write(t, root, "a.txt", "after\n", 0o644)
		}, op: []string{"undo"}, inverse: []string{"redo"}, sqlite: true},
		{name: "redo", prepare: func(t *testing.T, bin, root string) {
			undoPrep(t, bin, root)
			sbT(t, bin, root, "undo")
		}, op: []string{"redo"}, inverse: []string{"undo"}, sqlite: true},
		{name: "restore", prepare: func(t *testing.T, bin, root string) {
			killTree(t, root)
			sbT(t, bin, root, "snap", "-m", "base")
			runSh(t, root, killChange)
			sbT(t, bin, root, "snap", "-m", "changed")
			runSh(t, root, "echo later > later.txt; rm -rf tree/d7")
		}, op: []string{"restore", "@base"}, inverse: []string{"undo"}},
		{name: "gc", prepare: func(t *testing.T, bin, root string) {
			undoPrep(t, bin, root)
			sbT(t, bin, root, "snap", "-m", "changed")
			runSh(t, root, "echo more > more.txt")
			sbT(t, bin, root, "snap", "-m", "more")
		}, op: []string{"gc", "--keep", "1"}, inverse: []string{"undo"}, sqlite: true},
		{name: "run-copy", prepare: func(t *testing.T, bin, root string) {
			killTree(t, root)
			sbT(t, bin, root, "snap", "-m", "base")
		}, op: []string{"run", "--mode", "copy", "--then", "commit", "--", "sh", "-c", killChange}, inverse: []string{"undo"}, runs: true},
	}
	// A snap changes only the store: small contents go to a pack, which
	// must be whole before the stat cache or a record names it. After
	// each kill, check finds no damage and the next snap's contents, read
	// through the stat cache, come back by undo.
	snapVerify := func(t *testing.T, bin, proj string) {
		sbT(t, bin, proj, "check")
		sbT(t, bin, proj, "snap", "-m", "verify")
		want := killState(t, proj, false)
		runSh(t, proj, "rm -rf tree && echo gone > gone.txt")
		sbT(t, bin, proj, "undo")
		treetest.Equal(t, "undo of the snap after the killed one", want, killState(t, proj, false))
	}
	out = append(out,
		// (The store's directory made beforehand: recover needs one.)
		killScenario{name: "snap-first", prepare: func(t *testing.T, bin, root string) {
			killTree(t, root)
			treetest.Must(t, os.Mkdir(filepath.Join(root, snapshot.StoreDir), 0o700))
		}, op: []string{"snap", "-m", "first"}, unchanged: true, verify: snapVerify},
		killScenario{name: "snap", prepare: func(t *testing.T, bin, root string) {
			killTree(t, root)
			sbT(t, bin, root, "snap", "-m", "base")
			runSh(t, root, killChange)
		}, op: []string{"snap", "-m", "changed"}, unchanged: true, verify: snapVerify})
	out = append(out, checkpointScenarios()...)
	// A linked worktree: an undo (and its redo) whose change includes the
	// git state outside the root (refs, HEAD, index, config keys).
	out = append(out, killScenario{name: "undo-worktree", git: true, project: "wt", prepare: func(t *testing.T, bin, root string) {
		wt := worktreePrep(t, root)
		sbT(t, bin, wt, "run", "--mode", "copy", "--", "sh", "-c", worktreeChange)
	}, op: []string{"undo"}, inverse: []string{"redo"}})
	// A checkpoint turn in a linked worktree closed: what the turn moved
	// in git is noted as it closes; after each kill and recover, the end
	// (again) gives a step whose undo and redo are exact.
	var wtBegin, wtEnd treetest.State
	out = append(out, killScenario{name: "checkpoint-end-worktree", git: true, project: "wt", unchanged: true,
		prepare: func(t *testing.T, bin, root string) {
			wt := worktreePrep(t, root)
			sbT(t, bin, wt, "snap", "-m", "base") // the store in the tree, copied with it
			sbT(t, bin, wt, "checkpoint", "begin")
			wtBegin = observed(t, wt, killScenario{git: true})
			runSh(t, wt, worktreeChange)
			wtEnd = observed(t, wt, killScenario{git: true})
		},
		op: []string{"checkpoint", "end"},
		verify: func(t *testing.T, bin, proj string) {
			sbT(t, bin, proj, "checkpoint", "end")
			sbT(t, bin, proj, "undo")
			treetest.Equal(t, "undo of the checkpoint", wtBegin, observed(t, proj, killScenario{git: true}))
			sbT(t, bin, proj, "redo")
			treetest.Equal(t, "redo of the checkpoint", wtEnd, observed(t, proj, killScenario{git: true}))
		}})
	out = append(out, killScenario{name: "archive-restore", project: "proj", observe: "../out", prepare: func(t *testing.T, bin, root string) {
		proj := filepath.Join(root, "proj")
		killTree(t, proj)
		sbT(t, bin, proj, "snap", "-m", "base")
		sbT(t, bin, proj, "archive", "create", "--catalog", filepath.Join(root, "cat"))
		names, err := filepath.Glob(filepath.Join(root, "cat", "backup-*.zip"))
		treetest.Must(t, err)
		if len(names) != 1 {
			t.Fatalf("archive create made %d archives", len(names))
		}
		treetest.Must(t, os.Rename(names[0], filepath.Join(root, "cat", "the.zip")))
	}, op: []string{"archive", "restore", "../cat/the.zip", "--into", "../out"}})
	// A run in the zfs mode, committed: clones made, the layer written
	// from them, clones destroyed, the commit. (zfs-fuse keeps no xattrs:
	// a tree and a change without them.)
	out = append(out, killScenario{name: "run-zfs", zfs: true, runs: true, prepare: func(t *testing.T, bin, root string) {
		zfsKillTree(t, root)
		sbT(t, bin, root, "snap", "-m", "base")
	}, op: []string{"run", "--mode", "zfs", "--then", "commit", "--", "sh", "-c", zfsKillChange}, inverse: []string{"undo"}})
	for _, mode := range []string{"overlayfs", "fuse"} {
		if !modes[mode] {
			continue
		}
		out = append(out,
			killScenario{name: "commit-" + mode, prepare: pending(mode), op: []string{"commit", "--force"}, inverse: []string{"undo"}},
			// Parts of files committed (the layer keeps the rest of
			// them), whole files, a symlink and the new directory it is
			// in; a new file not taken stays pending.
			killScenario{name: "commit-p-" + mode, prepare: longPending(mode),
				op: []string{"commit", "-p", "--force", "long.txt", "tree/d0/f00.txt", "tree/new0"}, stdin: "y\nn\ny\ny\ny\nn\n",
				inverse: []string{"undo", "--force"}, pendingDiff: true, runs: true}, // (a part is written at the time of the commit)
			// A hunk dropped from the layer, the tree untouched: the
			// run's diff is the one before or the one after.
			killScenario{name: "discard-p-" + mode, prepare: longPending(mode),
				op: []string{"discard", "-p", "long.txt"}, stdin: "n\ny\nn\n", unchanged: true, pendingDiff: true},
			// A renamed directory committed while the stored object of
			// one of its files is damaged: the file's own inode, staged,
			// supplies the content (and the undo's).
			killScenario{name: "commit-damaged-" + mode, prepare: func(t *testing.T, bin, root string) {
				for f := 0; f < 4; f++ {
					treetest.Write(t, root, fmt.Sprintf("dir/f%d.txt", f), fmt.Sprintf("content %d\n", f), 0o644)
				}
				sbT(t, bin, root, "snap", "-m", "base")
				damageObject(t, root, []byte("content 1\n"))
				sbT(t, bin, root, "run", "--mode", mode, "--then", "review", "--", "mv", "dir", "moved")
			}, op: []string{"commit"}, inverse: []string{"undo"}},
			killScenario{name: "discard-" + mode, prepare: func(t *testing.T, bin, root string) {
				killTree(t, root)
				sqliteTarget(t, root)
				sbT(t, bin, root, "snap", "-m", "base")
				sbT(t, bin, root, "run", "--mode", mode, "--then", "review", "--", "sh", "-c", killChange+"\nsqlite3 app.db \"INSERT INTO t VALUES ('two')\"")
			}, op: []string{"discard"}, sqlite: true},
		)
		if mode == "overlayfs" { // (the git state is the same in either mode: one of them)
			// A run in a linked worktree that committed there as it ran
			// (its git writes went outside the view): the commit of its
			// files, and undo takes back both.
			out = append(out, killScenario{name: "commit-worktree-" + mode, git: true, project: "wt", prepare: func(t *testing.T, bin, root string) {
				wt := worktreePrep(t, root)
				sbT(t, bin, wt, "run", "--mode", mode, "--then", "review", "--", "sh", "-c", worktreeChange)
			}, op: []string{"commit"}, inverse: []string{"undo"}, inverseFurther: true})
		}
	}
	return out
}

// TestKillAtEverySyscall runs every scenario's kill points; the number
// covered per operation is logged.
func TestKillAtEverySyscall(t *testing.T) {
	if os.Geteuid() != 0 {
		treetest.Require(t, "root", false, "the kill test's fixtures (hard links across owners, trusted xattrs of overlay layers) need root")
		t.Skip("SNAPBACK_REQUIRE does not name root")
	}
	for _, tool := range []string{"setfattr", "sqlite3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (scripts/test.sh installs it)", tool)
		}
	}
	bin := snapbackBinary(t)
	for _, sc := range killScenarios(t, bin) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			killScenarioTest(t, bin, sc)
		})
	}
}

// snapIDs maps each snapshot message in `snapback list` to its id, so a
// scenario can name a snapshot as @message.
func snapIDs(t *testing.T, bin, root string) map[string]string {
	ids := map[string]string{}
	re := regexp.MustCompile(`(?m)^(\S+) .*? (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(sb(t, bin, root, "list"), -1) {
		ids["@"+m[2]] = m[1]
	}
	return ids
}

// shmDir is a tmpfs directory for scratch trees, or "" (the default temp
// directory) where there is none.
func shmDir() string {
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC {
		return "/dev/shm"
	}
	return ""
}

// hungAfter is how long the kill test lets one call of snapback take
// before it takes it for hung: seconds at most here, but zfs-fuse, with
// the machine busy, has been seen to leave a request unanswered for over
// 30 s and then answer it.
const hungAfter = 3 * time.Minute

// sbT runs snapback like sb, but a call that hangs is ended (SIGQUIT, so
// it prints where it was) and fails the test.
func sbT(t *testing.T, bin, root string, args ...string) string {
	t.Helper()
	return sbTIn(t, bin, root, "", args...)
}

// sbTIn is sbT with stdin.
func sbTIn(t *testing.T, bin, root, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hungAfter)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-C", root}, args...)...)
	cmd.Dir = root // a run's command runs where snapback is started
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("snapback %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

// pendingDiffLines is a diff's output as a state, one entry a line, to compare.
func pendingDiffLines(out string) treetest.State {
	st := treetest.State{}
	for i, l := range strings.Split(out, "\n") {
		st[fmt.Sprint(i)] = l
	}
	return st
}

// observed is the state a scenario compares, in a copy of its prepared
// directory: a directory that does not exist is a state of its own.
func observed(t *testing.T, root string, sc killScenario) treetest.State {
	t.Helper()
	dir := filepath.Join(root, sc.project, sc.observe)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return treetest.State{"<absent>": ""}
	}
	st := killState(t, dir, sc.sqlite)
	if sc.git {
		maps.Copy(st, gitKillState(t, dir))
	}
	return st
}

// gitKillState is the git state of the worktree at dir that lives outside
// it: every ref, HEAD, the index entries, the common config's keys, and
// that every ref names objects that are there (git fsck).
func gitKillState(t *testing.T, dir string) treetest.State {
	t.Helper()
	common := strings.TrimSpace(git(t, dir, "rev-parse", "--path-format=absolute", "--git-common-dir"))
	cfg := strings.Split(strings.TrimSpace(git(t, dir, "config", "--file", filepath.Join(common, "config"), "--list")), "\n")
	slices.SortStableFunc(cfg, func(a, b string) int { // by key: a key's values keep their order
		ka, _, _ := strings.Cut(a, "=")
		kb, _, _ := strings.Cut(b, "=")
		return strings.Compare(ka, kb)
	})
	git(t, dir, "fsck", "--no-progress", "--connectivity-only")
	return treetest.State{
		"<git refs>":   git(t, dir, "for-each-ref"),
		"<git HEAD>":   git(t, dir, "rev-parse", "HEAD") + git(t, dir, "symbolic-ref", "-q", "HEAD"),
		"<git index>":  git(t, dir, "ls-files", "-s"),
		"<git config>": strings.Join(cfg, "\n"),
	}
}

// worktreePrep makes, in root, a repository main/ with a linked worktree
// wt/ on branch feat (the scenario's project), and returns wt.
func worktreePrep(t *testing.T, root string) string {
	t.Helper()
	main, wt := filepath.Join(root, "main"), filepath.Join(root, "wt")
	for i := 0; i < 5; i++ {
		treetest.Write(t, main, fmt.Sprintf("f%d.txt", i), fmt.Sprintf("file %d\n", i), 0o644)
	}
	git(t, main, "init", "-q")
	git(t, main, "add", "-A")
	git(t, main, "commit", "-q", "-m", "init")
	git(t, main, "branch", "old")
	git(t, main, "worktree", "add", "-q", "-b", "feat", wt)
	return wt
}

// worktreeChange is a step's work in the worktree: files edited, deleted
// and added, a commit, a branch and a tag, an amend, a config key set
// and one unset, and a staged file.
const worktreeChange = `set -e
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.com GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.com
echo changed > f0.txt
rm f1.txt
echo new > new.txt
git add -A
git commit -qm change
git branch made
git tag -a -m t tagged
echo more >> f0.txt
git commit -qa --amend -m change2
git branch -D -q old
git config user.name agent
git config --unset core.bare
echo staged > staged.txt
git add staged.txt
`

func killScenarioTest(t *testing.T, bin string, sc killScenario) {
	// On tmpfs where there is one: a process kill tests the same states
	// on any filesystem, and each of the thousands of runs copies the
	// project afresh, which a disk shared with other work makes slow.
	parent, ds := shmDir(), ""
	if sc.zfs {
		ds = treetest.ZFS(t)
		parent = treetest.ZFSMount(t, ds)
	}
	base, err := os.MkdirTemp(parent, "snapback-kill-")
	treetest.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	tpl := filepath.Join(base, "tpl")
	if sc.git { // prepared where every copy will be
		tpl = filepath.Join(base, "k")
	}
	treetest.Must(t, os.Mkdir(tpl, 0o755))
	if sc.storeOutside {
		t.Cleanup(func() { os.RemoveAll(outsideStore(tpl)) })
	}
	sc.prepare(t, bin, tpl)
	if sc.git {
		treetest.Must(t, os.Rename(tpl, filepath.Join(base, "tpl")))
		tpl = filepath.Join(base, "tpl")
	}
	if sc.storeOutside {
		if out, err := exec.Command("cp", "-a", outsideStore(tpl), filepath.Join(base, "store-tpl")).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v\n%s", err, out)
		}
	}
	// Where the kill test works on a copy: the project and its store.
	fresh := func(name string) string {
		if sc.git {
			name = "k"
		}
		dir := filepath.Join(base, name)
		treetest.Must(t, os.RemoveAll(dir))
		if out, err := exec.Command("cp", "-a", tpl, dir).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v\n%s", err, out)
		}
		// A copied store is not the one made for its root (new inodes):
		// without its identity record it is adopted, as one an older
		// snapback made (the template holds no journal).
		if err := os.Remove(filepath.Join(dir, sc.project, ".snapback", "identity")); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if sc.storeOutside { // one copy at a time: the store's place is the same for each
			store := outsideStore(tpl)
			treetest.Must(t, os.RemoveAll(store))
			if out, err := exec.Command("cp", "-a", filepath.Join(base, "store-tpl"), store).CombinedOutput(); err != nil {
				t.Fatalf("cp -a: %v\n%s", err, out)
			}
			reidentify(t, store, filepath.Join(dir, sc.project))
		}
		return dir
	}
	// A git scenario is read in a copy where it was prepared (its git
	// files name that path).
	at := tpl
	if sc.git {
		at = fresh("k")
	}
	ids := snapIDs(t, bin, filepath.Join(at, sc.project))
	op := append([]string(nil), sc.op...)
	for i, a := range op {
		if id, ok := ids[a]; ok {
			op[i] = id
		}
	}
	// state is what is compared: for a run, without times.
	state := func(root string) treetest.State {
		st := observed(t, root, sc)
		if sc.runs {
			st = withoutTimes(st)
		}
		return st
	}
	before := observed(t, at, sc)
	// The uninterrupted operation gives the state after it.
	ref := fresh("ref")
	if sc.copied != nil {
		sc.copied(t, bin, filepath.Join(ref, sc.project))
	}
	var diffBefore, diffAfter string // the pending run's diff
	if sc.fails {
		cmd := exec.Command(bin, append([]string{"-C", filepath.Join(ref, sc.project)}, op...)...)
		if out, err := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 2 {
			t.Fatalf("the operation should refuse with status 2: %v\n%s", err, out)
		}
	} else {
		if sc.pendingDiff {
			diffBefore = sbT(t, bin, filepath.Join(ref, sc.project), "diff", "-p")
		}
		sbTIn(t, bin, filepath.Join(ref, sc.project), sc.stdin, op...)
	}
	after := state(ref)
	if sc.pendingDiff {
		diffAfter = sbT(t, bin, filepath.Join(ref, sc.project), "diff", "-p")
		if diffAfter == diffBefore {
			t.Fatalf("the operation left the pending run as it was: the scenario tests nothing")
		}
	}
	if sc.fails || sc.unchanged {
		treetest.Equal(t, "an operation that changes nothing", before, after)
	} else if same(before, after) && sc.name != "gc" && !strings.HasPrefix(sc.name, "discard") {
		t.Fatalf("the operation changed nothing: the scenario tests nothing")
	}
	var afterInverse treetest.State
	if sc.inverse != nil {
		sbT(t, bin, filepath.Join(ref, sc.project), sc.inverse...)
		afterInverse = observed(t, ref, sc)
		if sc.name != "gc" && !sc.inverseFurther {
			treetest.Equal(t, "the inverse of the uninterrupted operation", before, afterInverse)
		}
	}
	killed, sawBefore, sawAfter := 0, 0, 0
	zfsRetried := false
	for k := 1; ; k++ {
		root := fresh("k")
		proj := filepath.Join(root, sc.project)
		if sc.copied != nil {
			sc.copied(t, bin, proj)
		}
		// A call that hangs fails this scenario in hungAfter (SIGQUIT, so
		// it prints where it was) instead of the package's whole time.
		ctx, cancel := context.WithTimeout(context.Background(), hungAfter)
		cmd := exec.CommandContext(ctx, bin, append([]string{"-C", proj}, op...)...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 5 * time.Second
		cmd.Dir = proj
		cmd.Env = append(os.Environ(), fmt.Sprintf("SNAPBACK_KILL_AT=%d", k))
		cmd.Stdin = strings.NewReader(sc.stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		hung := ctx.Err() == context.DeadlineExceeded
		cancel()
		if hung && sc.zfs && !zfsRetried {
			// zfs-fuse has been seen to stop reading one mount's requests
			// for good (its threads idle, the request unread, its other
			// mounts answering): a mount it lost when two were made at
			// once (docs/modes.md), which the zfs mount lock now keeps
			// from happening among snapback's and its tests' mounts.
			// Should it happen still, it is nothing a retry of snapback
			// could mend: that mount's connection is aborted, the run's
			// leftovers recovered, and the kill point run again, once per
			// scenario, said in the log.
			if stalled := abortStalledZFS(t); len(stalled) > 0 {
				zfsRetried = true
				t.Logf("note: kill point %d: zfs-fuse stopped answering on %s; its connection was aborted, and the kill point is run again. The operation's output:\n%s", k, strings.Join(stalled, ", "), out.String())
				rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
				b, err := exec.CommandContext(rctx, bin, "-C", proj, "recover").CombinedOutput()
				rcancel()
				if err != nil {
					t.Fatalf("kill point %d: recover after zfs-fuse stopped answering: %v\n%s", k, err, b)
				}
				noZFSLeft(t, fmt.Sprintf("kill point %d: after zfs-fuse stopped answering and recover", k), ds)
				k--
				continue
			}
		}
		if hung {
			t.Fatalf("kill point %d: the operation hung%s: %v\n%s", k, hungWhere(sc), err, out.String())
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
			// Past the last state-changing call: the operation completed.
			if err != nil && !(sc.fails && cmd.ProcessState.ExitCode() == 2) {
				t.Fatalf("kill point %d: the operation failed without being killed: %v\n%s", k, err, out.String())
			}
			treetest.Equal(t, "the operation run to the end", after, state(root))
			break
		}
		killed++
		if testing.Verbose() && k%50 == 0 {
			t.Logf("%s: kill point %d", sc.name, k)
		}
		rec := exec.Command(bin, "-C", proj, "recover")
		if b, err := rec.CombinedOutput(); err != nil {
			t.Fatalf("kill point %d: recover: %v\n%s", k, err, b)
		}
		if sc.zfs {
			noZFSLeft(t, fmt.Sprintf("kill point %d: after recover", k), ds)
		}
		got := observed(t, root, sc)
		gotLoose := got
		if sc.runs {
			gotLoose = withoutTimes(got)
		}
		if k%10 == 0 {
			// Reading verbs work (every 10th point: each costs a process).
			for _, verb := range [][]string{{"status"}, {"list"}} {
				sbT(t, bin, filepath.Join(root, sc.project), verb...)
			}
		}
		switch {
		case sc.fails || sc.unchanged:
			treetest.Equal(t, fmt.Sprintf("kill point %d: after recover, an operation that changes nothing", k), before, got)
			d := diffBefore
			if sc.pendingDiff { // (the tree as before: the run's diff tells)
				if d = sbT(t, bin, proj, "diff", "-p"); d != diffBefore && d != diffAfter {
					treetest.Equal(t, fmt.Sprintf("kill point %d: the pending run's diff", k), pendingDiffLines(diffAfter), pendingDiffLines(d))
				}
			}
			if d == diffBefore {
				sawBefore++
			} else {
				sawAfter++
			}
			if sc.verify != nil {
				sc.verify(t, bin, proj)
			}
		case same(got, before) && !same(before, after):
			sawBefore++
			if sc.pendingDiff {
				treetest.Equal(t, fmt.Sprintf("kill point %d: the pending run's diff", k), pendingDiffLines(diffBefore), pendingDiffLines(sbT(t, bin, proj, "diff", "-p")))
			}
			// The operation did not happen: it can be done now.
			sbTIn(t, bin, filepath.Join(root, sc.project), sc.stdin, op...)
			treetest.Equal(t, fmt.Sprintf("kill point %d: the operation done again after recover", k), after, state(root))
		case same(gotLoose, after):
			sawAfter++
			if sc.pendingDiff {
				treetest.Equal(t, fmt.Sprintf("kill point %d: the pending run's diff", k), pendingDiffLines(diffAfter), pendingDiffLines(sbT(t, bin, proj, "diff", "-p")))
			}
			if sc.inverse != nil {
				sbT(t, bin, filepath.Join(root, sc.project), sc.inverse...)
				treetest.Equal(t, fmt.Sprintf("kill point %d: %v after recover", k, sc.inverse), afterInverse, observed(t, root, sc))
			}
		default:
			treetest.Equal(t, fmt.Sprintf("kill point %d: after recover the state is neither before nor after", k), after, gotLoose)
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%s: %d kill points, each recovered (%d to the state before, %d after)", sc.name, killed, sawBefore, sawAfter)
	if killed == 0 {
		t.Fatal("the operation made no state-changing call: the seam is not armed")
	}
}

// checkpointScenarios kill checkpoint begin and end, which change no path
// of the tree: after each kill and recover, the tree (and the SQLite
// target) must be untouched, and the checkpoint must still work from
// there: an end (after a begin, for the begin scenario) records exactly
// the stretch's change, which undo reverts and redo reapplies.
func checkpointScenarios() []killScenario {
	// change is a stretch's work: contents, a removal, a new directory,
	// a mode, a symlink, and a row of the target.
	change := func(t *testing.T, root string) {
		runSh(t, root, "echo turn >> tree/d0/f00.txt; rm tree/d1/f01.txt; mkdir -p tree/turn && echo n > tree/turn/n.txt; chmod 600 tree/d2/f02.txt; ln -s d0 tree/turn/link")
		sqliteExec(t, root, `INSERT INTO t VALUES ('turn')`)
	}
	// endUndoRedo ends the checkpoint (nothing, if the killed end had
	// closed it already) and checks that undo brings from to back and
	// redo brings to.
	endUndoRedo := func(t *testing.T, bin, proj string, from, to treetest.State) {
		t.Helper()
		sbT(t, bin, proj, "checkpoint", "end")
		sbT(t, bin, proj, "undo")
		treetest.Equal(t, "undo of the checkpoint", from, killState(t, proj, true))
		sbT(t, bin, proj, "redo")
		treetest.Equal(t, "redo of the checkpoint", to, killState(t, proj, true))
	}
	base := func(t *testing.T, bin, root string) {
		killTree(t, root)
		sqliteTarget(t, root)
		sbT(t, bin, root, "snap", "-m", "base")
		// New contents since, for begin to store.
		runSh(t, root, "echo since > since.txt; echo since >> tree/d3/f03.txt")
	}
	var beforeTurn treetest.State // the end scenario's state at begin
	session := func(t *testing.T, bin, root string) {
		base(t, bin, root)
		for turn, script := range []string{
			"echo one >> tree/d0/f00.txt; rm tree/d1/f01.txt; mkdir tree/s1 && echo n > tree/s1/n.txt",
			"echo two >> tree/d0/f00.txt; rm -r tree/s1; ln -s d4 tree/s2; chmod 600 tree/d2/f02.txt",
		} {
			sbT(t, bin, root, "checkpoint", "begin", "-m", fmt.Sprint("turn ", turn), "--session", "kill")
			runSh(t, root, script)
			sqliteExec(t, root, fmt.Sprintf(`INSERT INTO t VALUES ('turn %d')`, turn))
			sbT(t, bin, root, "checkpoint", "end")
		}
	}
	// beside: session A's checkpoint is open and has changed f00 alone
	// (its own); B's is open beside it (with B, both); what changes then,
	// f03, is shared (a checkpoint begun here may write any path).
	beside := func(t *testing.T, bin, root string, withB bool) {
		base(t, bin, root)
		sbT(t, bin, root, "checkpoint", "begin", "-m", "A's turn", "--session", "A")
		runSh(t, root, "echo alone >> tree/d0/f00.txt")
		if withB {
			sbT(t, bin, root, "checkpoint", "begin", "-m", "B's turn", "--session", "B")
			runSh(t, root, "echo both >> tree/d3/f03.txt")
		}
	}
	// endBoth closes both sessions' checkpoints (what the killed verb had
	// not) and checks that their undo reverts A's own f00 and leaves the
	// shared f03, and redo puts f00 back.
	endBoth := func(t *testing.T, bin, proj string) {
		t.Helper()
		sbT(t, bin, proj, "checkpoint", "end", "--session", "B")
		sbT(t, bin, proj, "checkpoint", "end", "--session", "A")
		f00, f03 := readFile(t, filepath.Join(proj, "tree/d0/f00.txt")), readFile(t, filepath.Join(proj, "tree/d3/f03.txt"))
		sbT(t, bin, proj, "undo")
		sbT(t, bin, proj, "undo")
		if got := readFile(t, filepath.Join(proj, "tree/d0/f00.txt")); strings.Contains(got, "alone") {
			t.Errorf("undo of both turns left A's own change to f00: %q", got)
		}
		if got := readFile(t, filepath.Join(proj, "tree/d3/f03.txt")); got != f03 {
			t.Errorf("undo of both turns changed the shared f03: %q, was %q", got, f03)
		}
		sbT(t, bin, proj, "redo")
		sbT(t, bin, proj, "redo")
		if got := readFile(t, filepath.Join(proj, "tree/d0/f00.txt")); got != f00 {
			t.Errorf("redo of both turns: f00 %q, want %q", got, f00)
		}
	}
	// Watched: in each copy the tree's watcher is started and vouches
	// (turns until an end says it read only what changed), then the tree
	// changes, so that the killed begin patches the state a block at a
	// time, and the killed end reads it so. The change is a file edited,
	// one made, one removed: made in the template (its state is the one
	// compared), and made again in each copy after the warm turns, from
	// the state before it, with the same times.
	const beforeTimes = "touch -h -d 2020-01-01T01:01:01 tree/d4 tree/d4/f04.txt tree/d5 tree/d5/f05.txt"
	const afterTimes = "touch -h -d 2020-02-02T02:02:02 tree/d4 tree/d4/f04.txt tree/d4/new.txt tree/d5"
	watchedChange := "echo watched >> tree/d4/f04.txt; echo new > tree/d4/new.txt; rm tree/d5/f05.txt; " + afterTimes
	// (Each scenario its own template: prepared in parallel.)
	var beforeWatched [2]treetest.State
	watchedPrep := func(i int) func(t *testing.T, bin, root string) {
		return func(t *testing.T, bin, root string) {
			base(t, bin, root)
			runSh(t, root, "cp tree/d4/f04.txt f04.keep; cp tree/d5/f05.txt f05.keep; "+beforeTimes)
			beforeWatched[i] = killState(t, root, true)
			runSh(t, root, watchedChange)
		}
	}
	warm := func(t *testing.T, bin, proj string) {
		t.Helper()
		runSh(t, proj, "cp f04.keep tree/d4/f04.txt; rm tree/d4/new.txt; cp f05.keep tree/d5/f05.txt; "+beforeTimes)
		for i := 0; ; i++ {
			sbT(t, bin, proj, "checkpoint", "begin", "-m", "warm", "--session", "warm")
			if strings.Contains(sbT(t, bin, proj, "checkpoint", "end", "--session", "warm", "--json"), `"watched": true`) {
				return
			}
			if i == 300 {
				t.Fatal("no watched end in 300 turns")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return []killScenario{
		{name: "checkpoint-begin-watched", sqlite: true, unchanged: true, prepare: watchedPrep(0),
			copied: func(t *testing.T, bin, proj string) {
				warm(t, bin, proj)
				runSh(t, proj, watchedChange)
			},
			op: []string{"checkpoint", "begin", "-m", "turn", "--session", "kill"},
			verify: func(t *testing.T, bin, proj string) {
				sbT(t, bin, proj, "checkpoint", "begin", "-m", "turn", "--session", "kill")
				from := killState(t, proj, true)
				change(t, proj)
				endUndoRedo(t, bin, proj, from, killState(t, proj, true))
			}},
		{name: "checkpoint-end-watched", sqlite: true, unchanged: true, prepare: watchedPrep(1),
			copied: func(t *testing.T, bin, proj string) {
				warm(t, bin, proj)
				sbT(t, bin, proj, "checkpoint", "begin", "-m", "turn", "--session", "kill")
				runSh(t, proj, watchedChange)
			},
			op: []string{"checkpoint", "end", "--session", "kill"},
			verify: func(t *testing.T, bin, proj string) {
				endUndoRedo(t, bin, proj, beforeWatched[1], killState(t, proj, true))
			}},
		// Another session's checkpoint begins beside an open one (marking
		// it), and one of two open side by side ends (marking the other).
		{name: "checkpoint-begin-beside", unchanged: true,
			prepare: func(t *testing.T, bin, root string) { beside(t, bin, root, false) },
			op:      []string{"checkpoint", "begin", "-m", "B's turn", "--session", "B"},
			verify: func(t *testing.T, bin, proj string) {
				sbT(t, bin, proj, "checkpoint", "begin", "-m", "B's turn", "--session", "B")
				runSh(t, proj, "echo both >> tree/d3/f03.txt")
				endBoth(t, bin, proj)
			}},
		{name: "checkpoint-end-beside", unchanged: true,
			prepare: func(t *testing.T, bin, root string) { beside(t, bin, root, true) },
			op:      []string{"checkpoint", "end", "--session", "B"},
			verify:  endBoth},
		// Both turns of the session are reverted in one journaled step.
		{name: "undo-session", sqlite: true, prepare: session, op: []string{"undo", "--session", "kill"}, inverse: []string{"redo"}},
		{name: "checkpoint-begin", sqlite: true, unchanged: true, prepare: base,
			op: []string{"checkpoint", "begin", "-m", "turn", "--session", "kill"},
			verify: func(t *testing.T, bin, proj string) {
				sbT(t, bin, proj, "checkpoint", "begin", "-m", "turn", "--session", "kill")
				from := killState(t, proj, true)
				change(t, proj)
				endUndoRedo(t, bin, proj, from, killState(t, proj, true))
			}},
		{name: "checkpoint-end", sqlite: true, unchanged: true,
			prepare: func(t *testing.T, bin, root string) {
				base(t, bin, root)
				sbT(t, bin, root, "checkpoint", "begin", "-m", "turn", "--session", "kill")
				beforeTurn = killState(t, root, true)
				change(t, root)
			},
			op: []string{"checkpoint", "end", "--session", "kill"},
			verify: func(t *testing.T, bin, proj string) {
				endUndoRedo(t, bin, proj, beforeTurn, killState(t, proj, true))
			}},
	}
}

// abortStalledZFS aborts the FUSE connection of each zfs-fuse mount
// that does not answer a statfs (always a request: the kernel keeps no
// answer) within 5 s, and returns their mount points.
func abortStalledZFS(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	treetest.Must(t, err)
	const ctl = "/sys/fs/fuse/connections"
	var stalled []string
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 || g[0] != "fuse.zfs" || g[1] == "kstat" {
			continue
		}
		mnt := f[4]
		if exec.Command("timeout", "-s", "KILL", "5", "stat", "-f", "-c", "%i", mnt).Run() == nil {
			continue
		}
		_, minor, _ := strings.Cut(f[2], ":")
		if _, err := os.Stat(filepath.Join(ctl, minor)); err != nil {
			// The FUSE control filesystem, where the kernel offers each
			// connection's abort (mounted on demand, left as the kernel's).
			if out, err := exec.Command("mount", "-t", "fusectl", "fusectl", ctl).CombinedOutput(); err != nil {
				t.Logf("mount fusectl: %v %s", err, out)
			}
		}
		if err := os.WriteFile(filepath.Join(ctl, minor, "abort"), []byte("1"), 0); err != nil {
			t.Logf("abort the connection of %s: %v", mnt, err)
			continue
		}
		stalled = append(stalled, mnt)
	}
	return stalled
}

// hungWhere says what may have hung a scenario's operation: for a zfs
// scenario, whether zfs-fuse still answers (a stat of its pool's root
// within 5 s); it has been seen to stop answering reads for good after
// many killed operations.
func hungWhere(sc killScenario) string {
	if !sc.zfs {
		return ""
	}
	out, err := exec.Command("timeout", "5", "sh", "-c", `stat -c %n "$(zfs list -H -o mountpoint | head -1)"`).CombinedOutput()
	if err != nil {
		return fmt.Sprintf(" (zfs-fuse does not answer a stat of its pool's root either: %v %s)", err, bytes.TrimSpace(out))
	}
	return " (zfs-fuse still answers a stat of its pool's root)"
}
