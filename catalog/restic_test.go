package catalog

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapback/snapback/internal/treetest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// resticEnv is restic's environment in these tests: a password, and a
// cache of the test's own.
func resticEnv(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("restic"); !treetest.Require(t, "restic", err == nil, "restic is not installed (Debian: restic)") {
		t.Skip("SNAPBACK_REQUIRE does not name restic: not installed")
	}
	return append(os.Environ(), "RESTIC_PASSWORD=snapback-test", "RESTIC_CACHE_DIR="+t.TempDir())
}

// resticRun runs restic for a test, failing it on error.
func resticRun(t *testing.T, r *Restic, stdin []byte, args ...string) {
	t.Helper()
	cmd := exec.Command("restic", append([]string{"--repo", r.Repo}, args...)...)
	cmd.Env = r.Env
	cmd.Stdin = bytes.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restic %s: %v: %s", args[0], err, out)
	}
}

// localRepo is a fresh restic repository in a temp directory.
func localRepo(t *testing.T) *Restic {
	t.Helper()
	r := &Restic{Repo: filepath.Join(t.TempDir(), "repo"), Env: resticEnv(t)}
	resticRun(t, r, nil, "init")
	return r
}

// restRepo is a fresh repository on the rest-server scripts/test.sh
// starts on loopback (SNAPBACK_TEST_REST_SERVER=rest:http://host:port/).
func restRepo(t *testing.T) *Restic {
	t.Helper()
	env := resticEnv(t)
	base := os.Getenv("SNAPBACK_TEST_REST_SERVER")
	if !treetest.Require(t, "rest-server", base != "", "SNAPBACK_TEST_REST_SERVER is not set (scripts/test.sh starts a rest-server)") {
		t.Skip("SNAPBACK_REQUIRE does not name rest-server: none started")
	}
	b := make([]byte, 8)
	rand.Read(b)
	r := &Restic{Repo: strings.TrimSuffix(base, "/") + "/" + hex.EncodeToString(b) + "/", Env: env}
	resticRun(t, r, nil, "init")
	return r
}

// smallProject is a project with one snapshot of a few files.
func smallProject(t *testing.T) (*snapshot.Repo, *record.Meta) {
	t.Helper()
	root := t.TempDir()
	treetest.Write(t, root, "a.txt", "one\n", 0o644)
	treetest.Write(t, root, "dir/b.bin", strings.Repeat("snapback ", 100000), 0o600)
	repo, err := snapshot.Open(root, snapshot.Options{Access: snapshot.ForChange, Create: true})
	treetest.Must(t, err)
	t.Cleanup(repo.Close)
	m, err := repo.Snap(record.KindSnap, "for restic")
	treetest.Must(t, err)
	return repo, m
}

// noStaging fails the test if a pull left its staging directory.
func noStaging(t *testing.T, c *Catalog) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(c.Dir, ".snapback-pull-*")); len(m) > 0 {
		t.Errorf("staging left in the catalog: %v", m)
	}
}

func TestResticLocal(t *testing.T) { testRestic(t, localRepo) }
func TestResticRest(t *testing.T)  { testRestic(t, restRepo) }

func testRestic(t *testing.T, newRepo func(*testing.T) *Restic) {
	ctx := context.Background()
	t.Run("push-pull", func(t *testing.T) {
		r := newRepo(t)
		repo, m := smallProject(t)
		src := newCatalog(t)
		s := create(t, src, repo, m)
		name := FileName(s.ID)
		res, err := r.Push(ctx, src, nil, nil)
		treetest.Must(t, err)
		if len(res.Pushed) != 1 || res.Pushed[0] != name || len(res.Skipped) != 0 {
			t.Fatalf("push: %+v", res)
		}
		res, err = r.Push(ctx, src, []string{name}, nil)
		treetest.Must(t, err)
		if len(res.Pushed) != 0 || len(res.Skipped) != 1 {
			t.Fatalf("second push: %+v, want it skipped", res)
		}

		dst := newCatalog(t)
		pr, err := r.Pull(ctx, dst, "all", nil)
		treetest.Must(t, err)
		if len(pr.Pulled) != 1 || pr.Pulled[0] != name {
			t.Fatalf("pull: %+v", pr)
		}
		want, err := os.ReadFile(src.Path(s.ID))
		treetest.Must(t, err)
		got, err := os.ReadFile(dst.Path(s.ID))
		treetest.Must(t, err)
		if !bytes.Equal(want, got) {
			t.Fatal("the pulled archive differs from the pushed one")
		}
		if st, _ := os.Stat(dst.Path(s.ID)); st.Mode().Perm() != 0o600 {
			t.Errorf("pulled archive mode %04o, want 0600", st.Mode().Perm())
		}
		l, err := dst.List(context.Background(), nil)
		treetest.Must(t, err)
		if len(l.Archives) != 1 || l.Archives[0].ID != s.ID || len(l.Rejected) != 0 {
			t.Fatalf("listing after the pull: %+v", l)
		}
		noStaging(t, dst)

		// Already there: kept, and known to be the same.
		pr, err = r.Pull(ctx, dst, s.ID[:6], nil)
		treetest.Must(t, err)
		if len(pr.Pulled) != 0 || len(pr.Skipped) != 1 || len(pr.Differs) != 0 {
			t.Fatalf("pull of a present archive: %+v", pr)
		}
		_, err = r.Pull(ctx, dst, "ffffffff", nil)
		code(t, err, CodeNotFound)
		noStaging(t, dst)
	})

	t.Run("damaged", func(t *testing.T) {
		r := newRepo(t)
		repo, m := smallProject(t)
		src := newCatalog(t)
		s := create(t, src, repo, m)
		name := FileName(s.ID)
		good, err := os.ReadFile(src.Path(s.ID))
		treetest.Must(t, err)

		dst := newCatalog(t)
		// Another valid archive under this one's name: refused by name.
		root2 := t.TempDir()
		treetest.Write(t, root2, "c.txt", "other\n", 0o644)
		repo2, err := snapshot.Open(root2, snapshot.Options{Access: snapshot.ForChange, Create: true})
		treetest.Must(t, err)
		defer repo2.Close()
		m2, err := repo2.Snap(record.KindSnap, "other")
		treetest.Must(t, err)
		c2 := newCatalog(t)
		other, err := os.ReadFile(c2.Path(create(t, c2, repo2, m2).ID))
		treetest.Must(t, err)
		resticRun(t, r, other, "backup", "--stdin", "--stdin-filename", name, "--tag", "snapback", "--tag", "archive-"+s.ID)
		_, err = r.Pull(ctx, dst, s.ID, nil)
		code(t, err, CodeBadName)
		if _, err := os.Lstat(dst.Path(s.ID)); err == nil {
			t.Fatal("a misnamed archive was let into the catalog")
		}
		noStaging(t, dst)

		// What a damaged remote looks like: the archive's name and tags,
		// one byte of an object changed.
		bad := bytes.Clone(good)
		z, err := zip.NewReader(bytes.NewReader(good), int64(len(good)))
		treetest.Must(t, err)
		for _, f := range z.File {
			if strings.HasPrefix(f.Name, objectsDir) && f.UncompressedSize64 > 0 {
				off, err := f.DataOffset()
				treetest.Must(t, err)
				bad[off] ^= 0xff
				break
			}
		}
		resticRun(t, r, bad, "backup", "--stdin", "--stdin-filename", name, "--tag", "snapback", "--tag", "archive-"+s.ID)
		_, err = r.Pull(ctx, dst, "all", nil)
		code(t, err, CodeChecksum)
		if _, err := os.Lstat(dst.Path(s.ID)); err == nil {
			t.Fatal("a damaged archive was let into the catalog")
		}
		noStaging(t, dst)

		// A push of the good copy mends it: a pull takes the newest that verifies.
		res, err := r.Push(ctx, src, nil, nil)
		treetest.Must(t, err)
		if len(res.Pushed) != 1 {
			t.Fatalf("push beside a damaged copy: %+v, want it pushed", res)
		}
		pr, err := r.Pull(ctx, dst, "all", nil)
		treetest.Must(t, err)
		if len(pr.Pulled) != 1 {
			t.Fatalf("pull: %+v", pr)
		}
		if _, err := dst.Verify(context.Background(), name, nil); err != nil {
			t.Fatal(err)
		}
		noStaging(t, dst)
	})
}

func TestResticErrors(t *testing.T) {
	ctx := context.Background()
	env := resticEnv(t)
	c := newCatalog(t)
	var noPass []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "RESTIC_PASSWORD") {
			noPass = append(noPass, kv)
		}
	}
	_, err := (&Restic{Repo: t.TempDir(), Env: noPass}).Push(ctx, c, nil, nil)
	code(t, err, CodeResticPassword)

	_, err = (&Restic{Repo: t.TempDir(), Env: env, Bin: "/nonexistent/restic"}).Pull(ctx, c, "all", nil)
	code(t, err, CodeResticMissing)

	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	treetest.Must(t, err)
	addr := l.Addr().String()
	l.Close()
	_, err = (&Restic{Repo: "rest:http://" + addr + "/repo/", Env: env}).Pull(ctx, c, "all", nil)
	code(t, err, CodeRestic)
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("unreachable server: %v", err)
	}

	// Not a repository; a wrong password.
	_, err = (&Restic{Repo: t.TempDir(), Env: env}).Pull(ctx, c, "all", nil)
	code(t, err, CodeRestic)
	r := localRepo(t)
	wrong := append(append([]string{}, noPass...), "RESTIC_PASSWORD=wrong")
	_, err = (&Restic{Repo: r.Repo, Env: wrong}).Pull(ctx, c, "all", nil)
	code(t, err, CodeRestic)
	if !strings.Contains(err.Error(), "wrong password") {
		t.Errorf("wrong password: %v", err)
	}
	noStaging(t, c)
}
