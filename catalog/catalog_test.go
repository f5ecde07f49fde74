package catalog

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// project makes a project with a snapshot of a tricky tree (outside
// symlinks removed unless keepOut) and returns its repo and the record.
func project(t *testing.T, keepOut bool) (*snapshot.Repo, *record.Meta) {
	t.Helper()
	root := t.TempDir()
	treetest.Tricky(t, root, 64<<20)
	if !keepOut {
		for _, p := range []string{"abs-out", "rel-out", "deep/to-root"} {
			treetest.Must(t, os.Remove(filepath.Join(root, p)))
		}
	}
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	t.Cleanup(repo.Close)
	m, err := repo.Snap(record.KindSnap, "for the catalog")
	treetest.Must(t, err)
	return repo, m
}

func newCatalog(t *testing.T) *Catalog {
	t.Helper()
	c, err := Open(filepath.Join(t.TempDir(), "cat"), true)
	treetest.Must(t, err)
	return c
}

func create(t *testing.T, c *Catalog, repo *snapshot.Repo, m *record.Meta) *Summary {
	t.Helper()
	p, err := PlanArchive(repo, m)
	treetest.Must(t, err)
	s, _, err := c.Create(context.Background(), repo, p, projectOf(t, repo), nil)
	treetest.Must(t, err)
	return s
}

// projectOf names the repo's project, its id made on first use.
func projectOf(t testing.TB, repo *snapshot.Repo) Project {
	t.Helper()
	id, err := ProjectID(repo.Dir, true)
	treetest.Must(t, err)
	return Project{Root: repo.Root, ID: id}
}

func code(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || CodeOf(err) != want {
		t.Fatalf("error %v (code %q), want code %s", err, CodeOf(err), want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error on more than one line: %q", err)
	}
}

func TestCreateVerifyRestoreExact(t *testing.T) {
	repo, m := project(t, false)
	c := newCatalog(t)
	s := create(t, c, repo, m)
	st, err := os.Stat(c.Path(s.ID))
	treetest.Must(t, err)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("archive mode %04o, want 0600", st.Mode().Perm())
	}
	if s.Snapshot != m.ID || s.Files != m.Files || s.Project != repo.Root {
		t.Errorf("summary %+v does not describe snapshot %+v", s, m)
	}
	if _, err := c.Verify(context.Background(), FileName(s.ID), nil); err != nil {
		t.Fatal(err)
	}
	// The same snapshot again: the same identity, kept as it is.
	p, err := PlanArchive(repo, m)
	treetest.Must(t, err)
	s2, existed, err := c.Create(context.Background(), repo, p, projectOf(t, repo), nil)
	treetest.Must(t, err)
	if !existed || s2.ID != s.ID {
		t.Errorf("second create: existed=%v id %s, want the same archive %s", existed, s2.ID, s.ID)
	}

	into := filepath.Join(t.TempDir(), "out")
	var read int64
	res, err := c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{}, func(n int64) { read += n })
	treetest.Must(t, err)
	if res.Files != m.Files || read != s.Bytes {
		t.Errorf("restored %d files reading %d bytes, want %d files, %d bytes", res.Files, read, m.Files, s.Bytes)
	}
	want := treetest.Capture(t, repo.Root, snapshot.StoreDir)
	got := treetest.Capture(t, into)
	delete(want, "") // the roots: into keeps its own metadata
	delete(got, "")
	treetest.Equal(t, "restored tree vs project", want, got)
	// A sparse 64 MiB file stays sparse.
	var big os.FileInfo
	filepath.Walk(into, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Size() >= 64<<20 {
			big = info
		}
		return nil
	})
	if big == nil {
		t.Fatal("the sparse file was not restored")
	}

	// Not into a non-empty directory, unless merging.
	_, err = c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{}, nil)
	code(t, err, CodeNotEmpty)
	treetest.Write(t, into, "mine.txt", "kept\n", 0o644)
	treetest.Write(t, into, "plain.txt", "replaced\n", 0o644)
	_, err = c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{Merge: true}, nil)
	treetest.Must(t, err)
	if b, _ := os.ReadFile(filepath.Join(into, "plain.txt")); string(b) != "hello\n" {
		t.Errorf("merge: plain.txt = %q, want the archive's", b)
	}
	if b, _ := os.ReadFile(filepath.Join(into, "mine.txt")); string(b) != "kept\n" {
		t.Errorf("merge: mine.txt = %q, want it kept", b)
	}
	if ents, _ := filepath.Glob(filepath.Join(into, ".snapback-restore-*")); len(ents) > 0 {
		t.Errorf("staging left behind: %v", ents)
	}
}

// Symlinks are data: an archive of a tree whose symlinks point anywhere
// (absolute, up and out, like a virtualenv's) verifies and restores
// exactly; restore never follows one while writing: merging into a
// directory where a name is a symlink to elsewhere replaces the link and
// leaves elsewhere alone.
func TestRestoreKeepsSymlinks(t *testing.T) {
	repo, m := project(t, true)
	c := newCatalog(t)
	s := create(t, c, repo, m)
	into := filepath.Join(t.TempDir(), "out")
	_, err := c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{}, nil)
	treetest.Must(t, err)
	want := treetest.Capture(t, repo.Root, snapshot.StoreDir)
	got := treetest.Capture(t, into)
	delete(want, "")
	delete(got, "")
	treetest.Equal(t, "restored tree vs project", want, got)
	for _, l := range []string{"abs-out", "rel-out", "deep/to-root"} {
		w, _ := os.Readlink(filepath.Join(repo.Root, l))
		g, err := os.Readlink(filepath.Join(into, l))
		if err != nil || g != w {
			t.Errorf("%s -> %q (%v), want -> %q", l, g, err, w)
		}
	}
	// Merge into a directory whose "deep" is a symlink to elsewhere.
	elsewhere := t.TempDir()
	into2 := t.TempDir()
	treetest.Must(t, os.Symlink(elsewhere, filepath.Join(into2, "deep")))
	_, err = c.Restore(context.Background(), FileName(s.ID), into2, RestoreOptions{Merge: true}, nil)
	treetest.Must(t, err)
	if ents, _ := os.ReadDir(elsewhere); len(ents) > 0 {
		t.Fatalf("restore wrote through a symlink: %d entries in its target", len(ents))
	}
	if st, err := os.Lstat(filepath.Join(into2, "deep")); err != nil || !st.IsDir() {
		t.Errorf("deep is not the archive's directory: %v %v", st, err)
	}
}

func TestOpenCatalogRules(t *testing.T) {
	base := t.TempDir()
	// Made 0700 when missing.
	c, err := Open(filepath.Join(base, "new", "cat"), true)
	treetest.Must(t, err)
	if st, _ := os.Stat(c.Dir); st.Mode().Perm() != 0o700 {
		t.Errorf("made with mode %04o", st.Mode().Perm())
	}
	// Missing without create.
	_, err = Open(filepath.Join(base, "absent"), false)
	code(t, err, CodeNotFound)
	// Open to others.
	treetest.Must(t, os.Mkdir(filepath.Join(base, "open"), 0o755))
	_, err = Open(filepath.Join(base, "open"), false)
	code(t, err, CodeInsecure)
	// A symlink anywhere on the path.
	treetest.Must(t, os.Symlink(filepath.Join(base, "new"), filepath.Join(base, "link")))
	_, err = Open(filepath.Join(base, "link", "cat"), false)
	code(t, err, CodeInsecure)
	// Owned by someone else.
	if os.Geteuid() == 0 {
		other := filepath.Join(base, "other")
		treetest.Must(t, os.Mkdir(other, 0o700))
		treetest.Must(t, os.Chown(other, 4242, 4242))
		_, err = Open(other, false)
		code(t, err, CodeInsecure)
	}
}

// writeZip makes a zip with the given entries (name -> content), stored.
func writeZip(t *testing.T, p string, entries [][2]string) {
	t.Helper()
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := z.CreateHeader(&zip.FileHeader{Name: e[0], Method: zip.Store, Modified: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
		treetest.Must(t, err)
		io.WriteString(w, e[1])
	}
	treetest.Must(t, z.Close())
	treetest.Must(t, os.WriteFile(p, buf.Bytes(), 0o600))
}

// TestListRejectsAndKeeps: every kind of bad candidate is reported by id
// and code and left in place; unknown files are ignored and kept; the
// good archive is listed.
func TestListRejectsAndKeeps(t *testing.T) {
	repo, m := project(t, false)
	c := newCatalog(t)
	s := create(t, c, repo, m)
	good, err := os.ReadFile(c.Path(s.ID))
	treetest.Must(t, err)
	bad := map[string]string{}
	put := func(id, want string, b []byte) {
		treetest.Must(t, os.WriteFile(c.Path(id), b, 0o600))
		bad[id] = want
	}
	put("00000000000000000000000000000001", CodeBadName, good) // renamed
	put("00000000000000000000000000000002", CodeBadZip, good[:len(good)/2])
	// One flipped bit in a content, under the archive's own name (in a
	// second catalog): a checksum mismatch.
	flipped := bytes.Clone(good)
	i := bytes.Index(flipped, []byte("hello\n"))
	flipped[i] ^= 1
	c2 := newCatalog(t)
	treetest.Must(t, os.WriteFile(c2.Path(s.ID), flipped, 0o600))
	_, err = c2.Verify(context.Background(), FileName(s.ID), nil)
	code(t, err, CodeChecksum)
	put("00000000000000000000000000000004", CodeBadZip, []byte("not a zip at all"))
	dir := t.TempDir()
	for id, entries := range map[string][][2]string{
		"00000000000000000000000000000005": {{"../evil", "x"}},
		"00000000000000000000000000000006": {{"/etc/evil", "x"}},
		"00000000000000000000000000000007": {{"objects/" + strings.Repeat("a", 64), "x"}, {"objects/" + strings.Repeat("a", 64), "y"}},
		"00000000000000000000000000000008": {{"targets/0/x", "x"}},
	} {
		p := filepath.Join(dir, id)
		writeZip(t, p, entries)
		b, _ := os.ReadFile(p)
		want := CodeUnsafe
		if id == "00000000000000000000000000000008" {
			want = CodeBadSummary
		}
		put(id, want, b)
	}
	// A deflated entry that expands 1000 times: a decompression bomb.
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	w, _ := z.CreateHeader(&zip.FileHeader{Name: "objects/" + strings.Repeat("b", 64), Method: zip.Deflate})
	w.Write(make([]byte, 8<<20))
	z.Close()
	put("00000000000000000000000000000009", CodeTooLarge, buf.Bytes())
	treetest.Write(t, c.Dir, "README.txt", "mine\n", 0o600)
	treetest.Write(t, c.Dir, "backup-short.zip", "x", 0o600)

	l, err := c.List(context.Background(), nil)
	treetest.Must(t, err)
	if len(l.Archives) != 1 || l.Archives[0].ID != s.ID {
		t.Fatalf("listed %+v, want only %s", l.Archives, s.ID)
	}
	got := map[string]string{}
	for _, r := range l.Rejected {
		got[r.ID] = r.Error
	}
	for id, want := range bad {
		if got[id] != want {
			t.Errorf("candidate %s: rejected with %q, want %q", id, got[id], want)
		}
		if _, err := os.Stat(c.Path(id)); err != nil {
			t.Errorf("rejected candidate %s was not left in place: %v", id, err)
		}
	}
	if len(got) != len(bad) {
		t.Errorf("rejected %v, want exactly %v", got, bad)
	}
	for _, n := range []string{"README.txt", "backup-short.zip"} {
		if _, err := os.Stat(filepath.Join(c.Dir, n)); err != nil {
			t.Errorf("unknown file %s not kept: %v", n, err)
		}
	}
}

// A catalog that changes while it is listed is an error, not a half list.
func TestListSeesChange(t *testing.T) {
	repo, m := project(t, false)
	c := newCatalog(t)
	create(t, c, repo, m)
	once := false
	_, err := c.List(context.Background(), func(int64) {
		if !once {
			once = true
			treetest.Write(t, c.Dir, "arrived-meanwhile", "x", 0o600)
		}
	})
	code(t, err, CodeChanged)
}

func TestPrune(t *testing.T) {
	repo, m1 := project(t, false)
	c := newCatalog(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	s1 := create(t, c, repo, m1)
	var ids []string
	ids = append(ids, s1.ID)
	for i := 0; i < 3; i++ {
		treetest.Write(t, repo.Root, "plain.txt", strings.Repeat("v", i+2), 0o644)
		m, err := repo.Snap(record.KindSnap, "")
		treetest.Must(t, err)
		ids = append(ids, create(t, c, repo, m).ID)
	}
	// An invalid candidate is never deleted.
	treetest.Must(t, os.WriteFile(c.Path("0000000000000000000000000000dead"), []byte("junk"), 0o600))

	plan, err := c.PrunePreview(context.Background(), PruneOptions{Keep: 2}, tokens, nil)
	treetest.Must(t, err)
	if len(plan.Delete) != 2 || plan.Delete[0].ID != ids[0] || plan.Delete[1].ID != ids[1] || len(plan.Rejected) != 1 {
		t.Fatalf("plan deletes %v (rejected %v), want the two oldest", plan.Delete, plan.Rejected)
	}
	// Unknown and malformed tokens.
	_, err = c.PruneApply(context.Background(), strings.Repeat("0", 32), tokens, nil)
	code(t, err, CodeToken)
	_, err = c.PruneApply(context.Background(), "../../etc", tokens, nil)
	code(t, err, CodeToken)

	// A change since the preview refuses, and deletes nothing.
	treetest.Write(t, c.Dir, "new-file", "x", 0o600)
	_, err = c.PruneApply(context.Background(), plan.Token, tokens, nil)
	code(t, err, CodeStale)
	for _, id := range ids {
		if _, err := os.Stat(c.Path(id)); err != nil {
			t.Fatalf("a refused prune deleted %s", id)
		}
	}
	// That token is spent; a fresh preview and its token work once.
	_, err = c.PruneApply(context.Background(), plan.Token, tokens, nil)
	code(t, err, CodeToken)
	plan, err = c.PrunePreview(context.Background(), PruneOptions{Keep: 2}, tokens, nil)
	treetest.Must(t, err)
	res, err := c.PruneApply(context.Background(), plan.Token, tokens, nil)
	treetest.Must(t, err)
	if len(res.Deleted) != 2 {
		t.Fatalf("deleted %v", res.Deleted)
	}
	for i, id := range ids {
		_, err := os.Stat(c.Path(id))
		if (i < 2) != os.IsNotExist(err) {
			t.Errorf("archive %d (%s): stat %v", i, id, err)
		}
	}
	if _, err := os.Stat(c.Path("0000000000000000000000000000dead")); err != nil {
		t.Error("the invalid candidate was deleted")
	}
	if ents, _ := filepath.Glob(filepath.Join(c.Dir, ".snapback-prune-*")); len(ents) > 0 {
		t.Errorf("staging left behind: %v", ents)
	}
	_, err = c.PruneApply(context.Background(), plan.Token, tokens, nil)
	code(t, err, CodeToken)

	// An expired token (its record aged on disk) is refused.
	plan, err = c.PrunePreview(context.Background(), PruneOptions{Keep: 1}, tokens, nil)
	treetest.Must(t, err)
	p := filepath.Join(tokens, plan.Token+".json")
	b, _ := os.ReadFile(p)
	var rec tokenRecord
	treetest.Must(t, json.Unmarshal(b, &rec))
	rec.Expires = time.Now().Add(-time.Second)
	b, _ = json.Marshal(rec)
	treetest.Must(t, os.WriteFile(p, b, 0o600))
	_, err = c.PruneApply(context.Background(), plan.Token, tokens, nil)
	code(t, err, CodeToken)
	if _, err := os.Stat(c.Path(ids[2])); err != nil {
		t.Error("an expired token deleted an archive")
	}
}

// A pull killed part-way leaves a staging directory; the next pull sweeps
// it once it is old enough not to be a live pull's.
func TestSweepStaging(t *testing.T) {
	c := newCatalog(t)
	old, fresh := filepath.Join(c.Dir, ".snapback-pull-old"), filepath.Join(c.Dir, ".snapback-pull-new")
	treetest.Write(t, old, "backup-x.zip", "partial", 0o600)
	treetest.Must(t, os.Mkdir(fresh, 0o700))
	treetest.Must(t, os.Chtimes(old, time.Now().Add(-2*time.Hour), time.Now().Add(-2*time.Hour)))
	treetest.Write(t, c.Dir, ".snapback-pull-file", "not a directory: not ours", 0o600)
	sweepStaging(c.Dir, ".snapback-pull-", time.Hour)
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("old staging directory kept: %v", err)
	}
	for _, p := range []string{fresh, filepath.Join(c.Dir, ".snapback-pull-file")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}

// A prune that fails half-way loses nothing: the second archive cannot be
// moved (immutable: a real fault, set once the apply has checked the plan,
// as the flag changes the ctime the plan binds), so the first one, already
// staged, is moved back, and nothing is deleted.
func TestPruneFailsHalfWay(t *testing.T) {
	if !treetest.Require(t, "root", os.Geteuid() == 0, "the immutable flag needs root") {
		t.Skip("SNAPBACK_REQUIRE does not name root: not root")
	}
	repo, m := project(t, false)
	c := newCatalog(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	ids := []string{create(t, c, repo, m).ID}
	for i := 0; i < 2; i++ {
		treetest.Write(t, repo.Root, "plain.txt", strings.Repeat("w", i+2), 0o644)
		m, err := repo.Snap(record.KindSnap, "")
		treetest.Must(t, err)
		ids = append(ids, create(t, c, repo, m).ID)
	}
	plan, err := c.PrunePreview(context.Background(), PruneOptions{Keep: 1}, tokens, nil)
	treetest.Must(t, err)
	if len(plan.Delete) != 2 {
		t.Fatalf("plan deletes %d", len(plan.Delete))
	}
	// The flag works here (tried on a file of its own, or skipped).
	probe := filepath.Join(c.Dir, "probe")
	treetest.Write(t, c.Dir, "probe", "x", 0o600)
	if out, err := exec.Command("chattr", "+i", probe).CombinedOutput(); !treetest.Require(t, "root", err == nil, fmt.Sprintf("chattr +i: %v %s", err, out)) {
		t.Skip("SNAPBACK_REQUIRE does not name root: no immutable flag here")
	}
	treetest.Must(t, exec.Command("chattr", "-i", probe).Run())
	treetest.Must(t, os.Remove(probe))
	plan, err = c.PrunePreview(context.Background(), PruneOptions{Keep: 1}, tokens, nil)
	treetest.Must(t, err)
	second := c.Path(plan.Delete[1].ID)
	pruneStaged = func() { treetest.Must(t, exec.Command("chattr", "+i", second).Run()) }
	defer func() { pruneStaged = nil }()
	defer exec.Command("chattr", "-i", second).Run()
	_, err = c.PruneApply(context.Background(), plan.Token, tokens, nil)
	code(t, err, CodeIO)
	for _, id := range ids {
		if _, err := c.Verify(context.Background(), FileName(id), nil); err != nil {
			t.Errorf("after a failed prune, archive %s: %v", id, err)
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(c.Dir, ".snapback-prune-*")); len(ents) > 0 {
		t.Errorf("staging left behind though everything went back: %v", ents)
	}
}
