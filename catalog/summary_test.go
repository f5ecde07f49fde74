package catalog

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// rewrite rebuilds the archive at p as create would, with the summary
// changed by edit (its CRC right, its entries' time the new created_at):
// what anyone could do to a file in a catalog.
func rewrite(t *testing.T, p string, edit func(*Summary)) {
	t.Helper()
	b, err := os.ReadFile(p)
	treetest.Must(t, err)
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	treetest.Must(t, err)
	var sum *Summary
	for _, zf := range zr.File {
		if zf.Name == summaryName {
			rc, _ := zf.Open()
			sb, _ := io.ReadAll(rc)
			sum, err = DecodeSummary(sb)
			treetest.Must(t, err)
		}
	}
	edit(sum)
	var out bytes.Buffer
	z := zip.NewWriter(&out)
	for _, zf := range zr.File {
		w, err := z.CreateHeader(&zip.FileHeader{Name: zf.Name, Method: zip.Store, Modified: sum.CreatedAt})
		treetest.Must(t, err)
		if zf.Name == summaryName {
			w.Write(encodeSummary(sum))
			continue
		}
		rc, _ := zf.Open()
		io.Copy(w, rc)
	}
	treetest.Must(t, z.Close())
	treetest.Must(t, os.WriteFile(p, out.Bytes(), 0o600))
}

// The summary is covered by the name: an archive whose created_at and
// message were edited (CRC recomputed) is rejected, and prune does not
// trust it: it keeps the genuinely newest archive.
func TestTamperedSummaryRejected(t *testing.T) {
	repo, m := project(t, false)
	c := newCatalog(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	ids := []string{create(t, c, repo, m).ID}
	for i := 0; i < 3; i++ {
		treetest.Write(t, repo.Root, "plain.txt", strings.Repeat("t", i+2), 0o644)
		m, err := repo.Snap(record.KindSnap, "")
		treetest.Must(t, err)
		ids = append(ids, create(t, c, repo, m).ID)
	}
	rewrite(t, c.Path(ids[0]), func(s *Summary) {
		s.CreatedAt = time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
		s.Message = "the newest, honest"
	})
	_, err := c.Verify(context.Background(), FileName(ids[0]), nil)
	code(t, err, CodeBadName)
	for what, edit := range map[string]func(*Summary){
		"kind":    func(s *Summary) { s.Kind = "pre-run" },
		"files":   func(s *Summary) { s.Files++ },
		"message": func(s *Summary) { s.Message = "another" },
	} {
		c2 := newCatalog(t)
		b, _ := os.ReadFile(c.Path(ids[1]))
		treetest.Must(t, os.WriteFile(c2.Path(ids[1]), b, 0o600))
		rewrite(t, c2.Path(ids[1]), func(s *Summary) { edit(s); s.ID = identity(s) })
		// Renamed to the identity of its new summary, still refused:
		// the summary must agree with the record and the manifest.
		s, err := c2.readSummary(FileName(ids[1]))
		treetest.Must(t, err)
		treetest.Must(t, os.Rename(c2.Path(ids[1]), c2.Path(s.ID)))
		_, err = c2.Verify(context.Background(), FileName(s.ID), nil)
		if CodeOf(err) != CodeBadSummary {
			t.Errorf("%s edited, renamed to match: %v, want %s", what, err, CodeBadSummary)
		}
	}
	plan, err := c.PrunePreview(context.Background(), PruneOptions{Keep: 1}, tokens, nil)
	treetest.Must(t, err)
	if len(plan.Delete) != 2 || plan.Delete[0].ID != ids[1] || plan.Delete[1].ID != ids[2] || len(plan.Kept) != 1 || plan.Kept[0].ID != ids[3] {
		t.Fatalf("prune deletes %v, keeps %v; want %v deleted, %s kept", plan.Delete, plan.Kept, ids[1:3], ids[3])
	}
	if len(plan.Rejected) != 1 || plan.Rejected[0].ID != ids[0] {
		t.Errorf("rejected %v, want the tampered %s", plan.Rejected, ids[0])
	}
}

func TestSummaryDuplicateKeys(t *testing.T) {
	good, _ := smallArchive(t)
	zr, err := zip.NewReader(bytes.NewReader(good), int64(len(good)))
	treetest.Must(t, err)
	var sb []byte
	for _, zf := range zr.File {
		if zf.Name == summaryName {
			rc, _ := zf.Open()
			sb, _ = io.ReadAll(rc)
		}
	}
	if _, err := DecodeSummary(sb); err != nil {
		t.Fatal(err)
	}
	dup := bytes.Replace(sb, []byte(`"created_at"`), []byte(`"created_at": "2036-01-01T00:00:00Z", "created_at"`), 1)
	_, err = DecodeSummary(dup)
	code(t, err, CodeBadSummary)
	if !strings.Contains(err.Error(), "twice") {
		t.Errorf("error %q does not name the duplicate key", err)
	}
	for _, ok := range []string{`{"a":{"b":1,"c":[{"b":2}]},"b":3}`, `[{"a":1},{"a":2}]`} {
		if err := noDuplicateKeys([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	if err := noDuplicateKeys([]byte(`{"a":{"b":1,"b":2}}`)); err == nil {
		t.Error("a nested duplicate passed")
	}
}

// In a shared catalog, a project's prune deletes only its own archives;
// another project's are neither deleted nor counted against keep.
func TestPruneScopedToProject(t *testing.T) {
	c := newCatalog(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	snaps := func(n int) (*snapshot.Repo, []string) {
		repo, m := project(t, false)
		ids := []string{create(t, c, repo, m).ID}
		for i := 1; i < n; i++ {
			treetest.Write(t, repo.Root, "plain.txt", strings.Repeat("s", i+2), 0o644)
			m, err := repo.Snap(record.KindSnap, "")
			treetest.Must(t, err)
			ids = append(ids, create(t, c, repo, m).ID)
		}
		return repo, ids
	}
	repoA, a := snaps(3)
	_, b := snaps(2)
	pa := projectOf(t, repoA)
	l, err := c.List(context.Background(), nil)
	treetest.Must(t, err)
	if got := l.Of(pa.ID); len(got) != 3 {
		t.Fatalf("project A has %d archives listed, want 3", len(got))
	}
	plan, err := c.PrunePreview(context.Background(), PruneOptions{Keep: 2, Project: pa.ID}, tokens, nil)
	treetest.Must(t, err)
	if len(plan.Delete) != 1 || plan.Delete[0].ID != a[0] || plan.Others != 2 {
		t.Fatalf("prune from A deletes %v (others %d), want only %s", plan.Delete, plan.Others, a[0])
	}
	_, err = c.PruneApply(context.Background(), plan.Token, tokens, nil)
	treetest.Must(t, err)
	for _, id := range append(a[1:], b...) {
		if _, err := os.Stat(c.Path(id)); err != nil {
			t.Errorf("%s deleted", id)
		}
	}
	// Keep and max-delete bounds.
	for _, o := range []PruneOptions{{Keep: 0}, {Keep: 1001}, {Keep: 1, MaxDelete: 101}, {Keep: 1, MaxDelete: -1}} {
		_, err := c.PrunePreview(context.Background(), o, tokens, nil)
		code(t, err, CodeUsage)
	}
	plan, err = c.PrunePreview(context.Background(), PruneOptions{Keep: 1, MaxDelete: 1}, tokens, nil)
	treetest.Must(t, err)
	if len(plan.Delete) != 1 || len(plan.Later) != 2 {
		t.Errorf("max-delete 1: deletes %d, later %d; want 1 and 2", len(plan.Delete), len(plan.Later))
	}
}
