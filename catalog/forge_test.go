package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/sys/unix"
)

// forge writes into a fresh catalog a self-consistent archive of m whose
// manifest edit changed: archives are not signed, so anyone can make one
// like it, and only what verify and restore check stands in the way.
func forge(t *testing.T, repo *snapshot.Repo, m *record.Meta, edit func(record.Manifest) record.Manifest) (*Catalog, *Summary) {
	t.Helper()
	p, err := PlanArchive(repo, m)
	treetest.Must(t, err)
	mf, err := record.DecodeManifest(p.manifest)
	treetest.Must(t, err)
	mf = edit(mf)
	mf.Sort()
	raw := record.EncodeManifest(mf)
	sum := sha256.Sum256(raw)
	meta := *m
	meta.Manifest = hex.EncodeToString(sum[:])
	p.meta, p.manifest = &meta, raw
	p.metaJSON, err = record.EncodeMeta(&meta)
	treetest.Must(t, err)
	p.files = 0
	for i := range mf {
		if mf[i].Type == record.File {
			p.files++
		}
	}
	c := newCatalog(t)
	s, _, err := c.Create(context.Background(), repo, p, projectOf(t, repo), nil)
	treetest.Must(t, err)
	return c, s
}

// firstFile is a file entry of m, to copy.
func firstFile(t *testing.T, m record.Manifest) record.Entry {
	t.Helper()
	for _, e := range m {
		if e.Type == record.File && e.Link == "" {
			return e
		}
	}
	t.Fatal("no file in the manifest")
	return record.Entry{}
}

// An archive never writes a project's store: entries under .snapback/
// are refused at verify time with their code, and restore (fresh or
// merged into a project) creates nothing there.
func TestStoreEntriesRefused(t *testing.T) {
	repo, m := project(t, false)
	for _, paths := range [][]string{{".snapback"}, {".snapback", ".snapback/journal"}} {
		c, s := forge(t, repo, m, func(mf record.Manifest) record.Manifest {
			for i, p := range paths {
				e := firstFile(t, mf)
				if i < len(paths)-1 {
					e = record.Entry{Type: record.Dir, Mode: 0o755}
				}
				e.Path = p
				mf = append(mf, e)
			}
			return mf
		})
		_, err := c.Verify(context.Background(), FileName(s.ID), nil)
		code(t, err, CodeStoreEntry)
		into := filepath.Join(t.TempDir(), "into")
		_, err = c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{}, nil)
		code(t, err, CodeStoreEntry)
		_, err = c.Restore(context.Background(), FileName(s.ID), repo.Root, RestoreOptions{Merge: true}, nil)
		code(t, err, CodeStoreEntry)
		if _, err := os.Lstat(filepath.Join(repo.Root, ".snapback", "journal")); err == nil {
			t.Fatal("a merge restore planted a journal in the store")
		}
		if _, err := os.Lstat(filepath.Join(into, ".snapback")); err == nil {
			t.Fatal("a restore made .snapback")
		}
	}
}

// A restore drops the privileges an archive could grant: setuid and
// setgid bits, file capabilities (security.*) and trusted.* xattrs, and
// owners other than the restoring user; KeepPrivileges keeps them.
func TestRestoreDropsPrivileges(t *testing.T) {
	repo, m := project(t, false)
	root := os.Geteuid() == 0
	// A v2 file capability: CAP_NET_BIND_SERVICE, effective.
	capability := []byte{0x01, 0x00, 0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	c, s := forge(t, repo, m, func(mf record.Manifest) record.Manifest {
		e := firstFile(t, mf)
		e.Path, e.Mode, e.UID, e.GID = "suid-bin", 0o6755, 4242, 4243
		if root {
			e.Xattrs = []fsutil.Xattr{{Name: "security.capability", Value: capability}, {Name: "trusted.overlay.redirect", Value: []byte("/etc")}, {Name: "user.kept", Value: []byte("v")}}
		}
		d := record.Entry{Path: "sgid-dir", Type: record.Dir, Mode: 0o2775, UID: 4242, GID: 4243}
		return append(mf, e, d)
	})
	check := func(into string, keep bool) {
		t.Helper()
		for p, want := range map[string]os.FileMode{"suid-bin": 0o755 | os.ModeSetuid | os.ModeSetgid, "sgid-dir": 0o775 | os.ModeSetgid} {
			st, err := os.Lstat(filepath.Join(into, p))
			treetest.Must(t, err)
			if !keep {
				want &^= os.ModeSetuid | os.ModeSetgid
			}
			if got := st.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid); got != want {
				t.Errorf("keep=%v: %s has mode %v, want %v", keep, p, got, want)
			}
			sys := st.Sys().(*syscall.Stat_t)
			wantUID := uint32(os.Geteuid())
			if keep && root {
				wantUID = 4242
			}
			if sys.Uid != wantUID {
				t.Errorf("keep=%v: %s owned by %d, want %d", keep, p, sys.Uid, wantUID)
			}
		}
		if !root {
			return
		}
		p := filepath.Join(into, "suid-bin")
		_, capErr := unix.Lgetxattr(p, "security.capability", make([]byte, 64))
		_, trErr := unix.Lgetxattr(p, "trusted.overlay.redirect", make([]byte, 64))
		if keep != (capErr == nil) || keep != (trErr == nil) {
			t.Errorf("keep=%v: capability %v, trusted xattr %v", keep, capErr, trErr)
		}
		if _, err := unix.Lgetxattr(p, "user.kept", make([]byte, 8)); err != nil && treetest.XattrsSupported(into) {
			t.Errorf("user.* xattr dropped: %v", err)
		}
	}
	into := filepath.Join(t.TempDir(), "into")
	_, err := c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{}, nil)
	treetest.Must(t, err)
	check(into, false)
	into = filepath.Join(t.TempDir(), "into")
	_, err = c.Restore(context.Background(), FileName(s.ID), into, RestoreOptions{KeepPrivileges: true}, nil)
	treetest.Must(t, err)
	check(into, true)
}
