//go:build linux

package backends_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/dockerapi"
	"github.com/snapback/snapback/internal/treetest"
	"golang.org/x/sys/unix"
)

func init() { fixtures["docker-volume"] = dockerVolumeFixture }

// volumeTestVerbs are the programs the tests run in containers of the
// helper image (this test binary), after the helper verb.
var volumeTestVerbs = map[string]func(args []string) int{
	// test-sleep: an application using the volume, until stopped.
	"test-sleep": func([]string) int {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
		return 0
	},
	// test-cat: copies stdin to stdout, says how much on stderr, and
	// exits with status 7 (the client's attach and wait test).
	"test-cat": func([]string) int {
		n, err := io.Copy(os.Stdout, os.Stdin)
		fmt.Fprintf(os.Stderr, "copied %d bytes (%v)\n", n, err)
		return 7
	},
	// test-write DIR: one transaction of the fixture's writer.
	"test-write": func(args []string) int {
		if err := volumeWrite(args[0]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	},
}

// The writer's invariant, kept across kills like a database's: data/counter
// holds n, and data/row-1 … data/row-n hold "row K\n". A transaction
// writes two more rows, each by a rename, then commits by renaming a new
// counter into place; rows past n are uncommitted and written over.
func volumeWrite(dir string) error {
	d := filepath.Join(dir, "data")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	n := 0
	if b, err := os.ReadFile(filepath.Join(d, "counter")); err == nil {
		n, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	put := func(name, content string) error {
		tmp := filepath.Join(d, ".tmp-"+name)
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, filepath.Join(d, name))
	}
	for k := n + 1; k <= n+2; k++ {
		if err := put(fmt.Sprintf("row-%d", k), fmt.Sprintf("row %d\n", k)); err != nil {
			return err
		}
	}
	return put("counter", strconv.Itoa(n+2)+"\n")
}

func dockerClient() (*client.Client, error) {
	return client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
}

var (
	testDockerOnce sync.Once
	testDockerCli  *client.Client
	// apps maps a test volume to its application container.
	apps sync.Map
)

// testDocker returns a shared client, skipping or failing (by
// SNAPBACK_REQUIRE) where docker-volume is not available.
func testDocker(t *testing.T) *client.Client {
	t.Helper()
	ok, why := (&backends.DockerVolume{}).Available()
	if !treetest.Require(t, "docker", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name docker: " + why)
	}
	testDockerOnce.Do(func() {
		cli, err := dockerClient()
		if err != nil {
			panic(err)
		}
		testDockerCli = cli
	})
	return testDockerCli
}

// helperImage returns the helper image's reference, importing it if need
// be (through snapback's own client; the tests' checks use the SDK's).
func helperImage(t *testing.T) string {
	t.Helper()
	cli, err := dockerapi.FromEnv()
	treetest.Must(t, err)
	defer cli.Close()
	ref, err := (&backends.DockerVolume{}).HelperImage(context.Background(), cli)
	treetest.Must(t, err)
	return ref
}

// newVolume creates a uniquely named volume, removed when the test ends,
// and returns its name and mount point on this machine.
func newVolume(t *testing.T, cli *client.Client) (string, string) {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "snapback-test-" + hex.EncodeToString(b)
	v, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: map[string]string{"snapback.test": t.Name()}})
	treetest.Must(t, err)
	t.Cleanup(func() {
		if err := cli.VolumeRemove(context.Background(), name, true); err != nil && !strings.Contains(err.Error(), "No such volume") {
			t.Errorf("remove volume %s: %v", name, err)
		}
	})
	return name, v.Mountpoint
}

func mountpoint(t *testing.T, cli *client.Client, vol string) string {
	t.Helper()
	v, err := cli.VolumeInspect(context.Background(), vol)
	treetest.Must(t, err)
	return v.Mountpoint
}

// startApp runs a long-lived container of the helper image using the
// volume (removed when the test ends) and returns its id.
func startApp(t *testing.T, cli *client.Client, vol string) string {
	t.Helper()
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: helperImage(t), Cmd: []string{"test-sleep"}},
		&container.HostConfig{NetworkMode: "none", Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/v"}}},
		nil, nil, "")
	treetest.Must(t, err)
	t.Cleanup(func() {
		if err := cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Errorf("remove container: %v", err)
		}
	})
	treetest.Must(t, cli.ContainerStart(ctx, c.ID, container.StartOptions{}))
	apps.Store(vol, c.ID)
	return c.ID
}

// execWrite runs one writer transaction in the app container.
func execWrite(ctx context.Context, cli *client.Client, id string) error {
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd: []string{"/snapback", backends.VolumeHelperVerb, "test-write", "/v"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return err
	}
	att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return err
	}
	out, _ := io.ReadAll(att.Reader)
	att.Close()
	for {
		st, err := cli.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return err
		}
		if !st.Running {
			if st.ExitCode != 0 {
				return fmt.Errorf("test-write: exit %d: %q", st.ExitCode, out)
			}
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func volumeState(t *testing.T, mp string) (string, bool) {
	t.Helper()
	d := filepath.Join(mp, "data")
	b, err := os.ReadFile(filepath.Join(d, "counter"))
	if os.IsNotExist(err) {
		return "n=0", true
	}
	treetest.Must(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Sprintf("counter %q", b), false
	}
	for k := 1; k <= n; k++ {
		row, err := os.ReadFile(filepath.Join(d, fmt.Sprintf("row-%d", k)))
		if err != nil || string(row) != fmt.Sprintf("row %d\n", k) {
			return fmt.Sprintf("n=%d", n), false
		}
	}
	return fmt.Sprintf("n=%d", n), true
}

// The volume's application is a container of the helper image; the
// writer runs each transaction in it by exec, and like an application's
// client retries while the backend has it stopped (stop_containers).
var dockerVolumeFixture = fixture{
	capability: "docker",
	setup: func(t *testing.T, root string) backends.Target {
		cli := testDocker(t)
		name, _ := newVolume(t, cli)
		startApp(t, cli, name)
		return backends.Target{Name: "vol", Backend: "docker-volume", Volume: name, StopContainers: true}
	},
	bad: func(t *testing.T, root string) map[string]backends.Target {
		return map[string]backends.Target{
			"missing volume": {Backend: "docker-volume", Volume: "snapback-test-no-such-volume"},
			"no volume":      {Backend: "docker-volume"},
		}
	},
	state: func(t *testing.T, tg backends.Target, root string) (string, bool) {
		return volumeState(t, mountpoint(t, testDocker(t), tg.Volume))
	},
	write: func(t *testing.T, tg backends.Target, root string) error {
		id, _ := apps.Load(tg.Volume)
		deadline := time.Now().Add(time.Minute)
		for {
			err := execWrite(context.Background(), testDocker(t), id.(string))
			if err == nil || time.Now().After(deadline) {
				return err
			}
			time.Sleep(10 * time.Millisecond) // stopped for a snapshot: try again
		}
	},
}

func startedAt(t *testing.T, cli *client.Client, id string) (string, bool) {
	t.Helper()
	c, err := cli.ContainerInspect(context.Background(), id)
	treetest.Must(t, err)
	return c.State.StartedAt, c.State.Running
}

// TestDockerVolumeStopContainers: with stop_containers, a container using
// the volume is stopped for the snapshot and the restore and runs again
// after each; without it, it is left alone.
func TestDockerVolumeStopContainers(t *testing.T) {
	cli := testDocker(t)
	ctx := context.Background()
	b := &backends.DockerVolume{}
	name, _ := newVolume(t, cli)
	app := startApp(t, cli, name)
	tg := backends.Target{Backend: "docker-volume", Volume: name}
	t0, running := startedAt(t, cli, app)
	if !running {
		t.Fatal("the app container does not run")
	}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if t1, running := startedAt(t, cli, app); t1 != t0 || !running {
		t.Fatalf("without stop_containers the container was touched: started %s (was %s), running %v", t1, t0, running)
	}
	tg.StopContainers = true
	treetest.Must(t, b.Check(ctx, tg, ""))
	payload = t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	t1, running := startedAt(t, cli, app)
	if t1 == t0 || !running {
		t.Fatalf("snapshot with stop_containers: started %s (was %s), running %v", t1, t0, running)
	}
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if t2, running := startedAt(t, cli, app); t2 == t1 || !running {
		t.Fatalf("restore with stop_containers: started %s (was %s), running %v", t2, t1, running)
	}
}

// TestDockerVolumeRoundTrip: owners, modes, times, xattrs, hard links,
// symlinks pointing out of the volume, empty directories, a fifo and a
// sparse file come back exactly, and so does the volume's root; no image
// but the helper's is ever used.
func TestDockerVolumeRoundTrip(t *testing.T) {
	t.Run("bind", func(t *testing.T) { testDockerVolumeRoundTrip(t, &backends.DockerVolume{}) })
	t.Run("stream", func(t *testing.T) { testDockerVolumeRoundTrip(t, &backends.DockerVolume{Stream: true}) })
}

func testDockerVolumeRoundTrip(t *testing.T, b *backends.DockerVolume) {
	cli := testDocker(t)
	ctx := context.Background()
	start := time.Now()
	name, mp := newVolume(t, cli)
	treetest.Tricky(t, mp, 64<<20)
	treetest.Must(t, os.Lchown(filepath.Join(mp, "plain.txt"), 1234, 5678))
	treetest.Must(t, os.Lchown(filepath.Join(mp, "empty"), 4321, 8765))
	treetest.Must(t, os.Lchown(filepath.Join(mp, "abs-out"), 99, 98))
	treetest.Must(t, os.Chmod(mp, 0o751))
	want := treetest.Capture(t, mp)
	var rootBefore unix.Stat_t
	treetest.Must(t, unix.Lstat(mp, &rootBefore))

	tg := backends.Target{Backend: "docker-volume", Volume: name}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))

	treetest.Must(t, os.Remove(filepath.Join(mp, "plain.txt")))
	treetest.Must(t, os.RemoveAll(filepath.Join(mp, "deep")))
	treetest.Write(t, mp, "new/file", "new\n", 0o644)
	treetest.Must(t, os.Chmod(filepath.Join(mp, "exec.sh"), 0o600))
	treetest.Must(t, os.Chmod(mp, 0o700))
	treetest.Must(t, os.Lchown(mp, 7, 7))

	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	treetest.Equal(t, "after restore", want, treetest.Capture(t, mp))
	var rootAfter unix.Stat_t
	treetest.Must(t, unix.Lstat(mp, &rootAfter))
	if rootAfter.Mode != rootBefore.Mode || rootAfter.Uid != rootBefore.Uid || rootAfter.Gid != rootBefore.Gid || rootAfter.Mtim != rootBefore.Mtim {
		t.Errorf("volume root: mode %o uid %d gid %d mtime %v, want %o %d %d %v", rootAfter.Mode, rootAfter.Uid, rootAfter.Gid, rootAfter.Mtim,
			rootBefore.Mode, rootBefore.Uid, rootBefore.Gid, rootBefore.Mtim)
	}
	if a := treetest.Allocated(t, filepath.Join(mp, "sparse.img")); a > 8<<20 {
		t.Errorf("sparse.img takes %d bytes after restore", a)
	}

	// The daemon saw no image pulled: only the helper's imported.
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msgs, errs := cli.Events(ectx, events.ListOptions{Since: start.Format(time.RFC3339Nano), Until: time.Now().Format(time.RFC3339Nano),
		Filters: filters.NewArgs(filters.Arg("type", "image"))})
	for done := false; !done; {
		select {
		case m := <-msgs:
			if m.Action == "pull" {
				t.Errorf("an image was pulled: %s", m.Actor.ID)
			}
		case err := <-errs:
			if err != nil && err != io.EOF {
				t.Fatalf("events: %v", err)
			}
			done = true
		}
	}
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("volume", name))})
	treetest.Must(t, err)
	if len(cs) != 0 {
		t.Errorf("helper containers left behind: %d", len(cs))
	}
}

// TestDockerVolumeRestoreKilled: a restore whose helper is killed during
// extraction leaves the volume as it was; the next one finishes.
func TestDockerVolumeRestoreKilled(t *testing.T) {
	t.Run("bind", func(t *testing.T) { testDockerVolumeRestoreKilled(t, &backends.DockerVolume{}) })
	t.Run("stream", func(t *testing.T) { testDockerVolumeRestoreKilled(t, &backends.DockerVolume{Stream: true}) })
}

func testDockerVolumeRestoreKilled(t *testing.T, b *backends.DockerVolume) {
	cli := testDocker(t)
	ctx := context.Background()
	name, mp := newVolume(t, cli)
	chunk := bytes.Repeat([]byte("snapback restore under a kill\n"), 1<<15)
	for i := 0; i < 12; i++ {
		f, err := os.Create(filepath.Join(mp, fmt.Sprintf("big-%d", i)))
		treetest.Must(t, err)
		for j := 0; j < 32; j++ { // 30 MiB each
			_, err = f.Write(chunk)
			treetest.Must(t, err)
		}
		treetest.Must(t, f.Close())
	}
	treetest.Write(t, mp, "small", "before\n", 0o644)
	snap := treetest.Capture(t, mp)
	tg := backends.Target{Backend: "docker-volume", Volume: name}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	treetest.Must(t, os.Remove(filepath.Join(mp, "big-3")))
	treetest.Write(t, mp, "small", "changed\n", 0o600)
	treetest.Write(t, mp, "later", "made after the snapshot\n", 0o644)
	changed := treetest.Capture(t, mp)

	errc := make(chan error, 1)
	go func() { errc <- b.Restore(ctx, tg, "", payload) }()
	killed := false
	for !killed {
		select {
		case err := <-errc:
			t.Fatalf("the restore ended (%v) before it could be killed", err)
		default:
		}
		cs, err := cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "snapback.helper="+name))})
		treetest.Must(t, err)
		staged, _ := filepath.Glob(filepath.Join(mp, ".snapback-restore-*/tree/big-*"))
		if len(cs) == 1 && len(staged) > 1 {
			treetest.Must(t, cli.ContainerKill(ctx, cs[0].ID, "KILL"))
			killed = true
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := <-errc; err == nil {
		t.Fatal("a restore whose helper was killed succeeded")
	} else {
		t.Logf("killed restore: %v", err)
	}
	treetest.Equal(t, "after a killed restore", changed, treetest.Capture(t, mp))
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	treetest.Equal(t, "after the next restore", snap, treetest.Capture(t, mp))
}

// TestDockerVolumeRecreated: a volume removed after the snapshot comes
// back, with its labels, on restore.
func TestDockerVolumeRecreated(t *testing.T) {
	cli := testDocker(t)
	ctx := context.Background()
	b := &backends.DockerVolume{}
	name, mp := newVolume(t, cli)
	treetest.Write(t, mp, "a/b", "content\n", 0o640)
	want := treetest.Capture(t, mp)
	tg := backends.Target{Backend: "docker-volume", Volume: name}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	treetest.Must(t, cli.VolumeRemove(ctx, name, false))
	if err := b.Check(ctx, tg, ""); err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("Check of a removed volume: %v", err)
	}
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	v, err := cli.VolumeInspect(ctx, name)
	treetest.Must(t, err)
	if v.Driver != "local" || v.Labels["snapback.test"] != t.Name() {
		t.Errorf("recreated volume: driver %q labels %v", v.Driver, v.Labels)
	}
	treetest.Equal(t, "recreated volume", want, treetest.Capture(t, v.Mountpoint))
}

// BenchmarkDockerVolume times snapshots and restores of the volume named
// by SNAPBACK_BENCH_VOLUME, through the bind mount and through the API
// stream, for scripts/bench-docker.sh; each line is "what seconds".
func BenchmarkDockerVolume(b *testing.B) {
	name := os.Getenv("SNAPBACK_BENCH_VOLUME")
	if name == "" {
		b.Skip("SNAPBACK_BENCH_VOLUME names no volume")
	}
	ctx := context.Background()
	tg := backends.Target{Backend: "docker-volume", Volume: name}
	for i := 0; i < b.N; i++ {
		for _, d := range []*backends.DockerVolume{{}, {Stream: true}} {
			mode := "bind"
			if d.Stream {
				mode = "stream"
			}
			dir := b.TempDir()
			treetest.Must(b, exec.Command("sync").Run())
			t0 := time.Now()
			treetest.Must(b, d.Snapshot(ctx, tg, "", dir))
			t1 := time.Now()
			treetest.Must(b, exec.Command("sync").Run())
			t2 := time.Now()
			treetest.Must(b, d.Restore(ctx, tg, "", dir))
			t3 := time.Now()
			fmt.Printf("snapshot-%s %.2f\nrestore-%s %.2f\n", mode, t1.Sub(t0).Seconds(), mode, t3.Sub(t2).Seconds())
			treetest.Must(b, os.RemoveAll(dir))
		}
	}
}

// helperRestore runs the helper's restore in this process on dir, from
// the archive bytes arch, and returns its exit status.
func helperRestore(t testing.TB, dir string, arch []byte) int {
	t.Helper()
	in := filepath.Join(t.TempDir(), "in.tar")
	treetest.Must(t, os.WriteFile(in, arch, 0o600))
	sum := sha256.Sum256(arch)
	stderr := os.Stderr
	os.Stderr, _ = os.OpenFile(os.DevNull, os.O_WRONLY, 0) // the refusals are expected
	defer func() { os.Stderr = stderr }()
	return backends.VolumeHelper([]string{"restore", dir, "t1", hex.EncodeToString(sum[:]), in})
}

// tarOf builds an archive of the given headers, each regular file holding
// its name.
func tarOf(t testing.TB, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = h.Name
			h.Size = int64(len(body))
		}
		treetest.Must(t, tw.WriteHeader(h))
		_, err := tw.Write([]byte(body))
		treetest.Must(t, err)
	}
	treetest.Must(t, tw.Close())
	return buf.Bytes()
}

// TestVolumeHelperRefuses: archives that would write outside the volume,
// through a symlink, or that do not match their digest change nothing.
func TestVolumeHelperRefuses(t *testing.T) {
	base := t.TempDir()
	vol := filepath.Join(base, "vol")
	out := filepath.Join(base, "outside")
	treetest.Must(t, os.Mkdir(out, 0o755))
	treetest.Write(t, vol, "keep", "kept\n", 0o644)
	want := treetest.Capture(t, vol)
	reg := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg} }
	cases := map[string][]byte{
		"dot-dot":           tarOf(t, reg("../outside/evil")),
		"dot-dot inside":    tarOf(t, &tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, reg("a/../../outside/evil")),
		"absolute":          tarOf(t, reg(out+"/evil")),
		"through a symlink": tarOf(t, &tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: out}, reg("link/evil")),
		"symlink to inside": tarOf(t, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d"}, reg("l/f")),
		"hard link out":     tarOf(t, &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../outside/x"}),
		"hard link to dir":  tarOf(t, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "d"}),
		"no parent":         tarOf(t, reg("a/b")),
		"twice":             tarOf(t, reg("f"), reg("f")),
		"truncated":         tarOf(t, reg(strings.Repeat("long/", 200)+"f"))[:1500],
	}
	for name, arch := range cases {
		if code := helperRestore(t, vol, arch); code == 0 {
			t.Errorf("%s: restored", name)
		}
		treetest.Equal(t, name, want, treetest.Capture(t, vol))
		if ents, _ := os.ReadDir(out); len(ents) > 0 {
			t.Fatalf("%s: wrote outside the volume", name)
		}
	}
	in := filepath.Join(t.TempDir(), "in.tar")
	treetest.Must(t, os.WriteFile(in, tarOf(t, reg("f")), 0o600))
	if code := backends.VolumeHelper([]string{"restore", vol, "t1", strings.Repeat("0", 64), in}); code == 0 {
		t.Error("an archive with another digest was restored")
	}
	treetest.Equal(t, "wrong digest", want, treetest.Capture(t, vol))
	if code := helperRestore(t, vol, tarOf(t, &tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o700}, reg("new"))); code != 0 {
		t.Fatalf("a good archive: status %d", code)
	}
	if _, err := os.Stat(filepath.Join(vol, "keep")); !os.IsNotExist(err) {
		t.Errorf("keep survived a restore: %v", err)
	}
}

// TestVolumeHelperRecover: a restore interrupted at any step is undone
// before its staging directory is complete, and finished after.
func TestVolumeHelperRecover(t *testing.T) {
	base := t.TempDir()
	oldRef, newRef := filepath.Join(base, "old"), filepath.Join(base, "new")
	treetest.Write(t, oldRef, "a", "old a\n", 0o644)
	treetest.Write(t, oldRef, "b/c", "old c\n", 0o600)
	treetest.Write(t, newRef, "x", "new x\n", 0o644)
	treetest.Write(t, newRef, "b/d", "new d\n", 0o640)
	treetest.Must(t, os.Symlink("/etc", filepath.Join(newRef, "s")))
	oldState, newState := treetest.Capture(t, oldRef), treetest.Capture(t, newRef)
	cp := func(src, dst string) {
		t.Helper()
		treetest.Must(t, os.MkdirAll(dst, 0o755))
		if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
	}
	const stage, old = ".snapback-restore-t1", ".snapback-old-t1"
	cases := []struct {
		name  string
		setup func(vol string)
		want  treetest.State
	}{
		{"extracting", func(vol string) {
			cp(oldRef, vol)
			treetest.Write(t, vol, stage+"/tree/x", "half", 0o600)
		}, oldState},
		{"complete", func(vol string) {
			cp(oldRef, vol)
			cp(newRef, filepath.Join(vol, stage, "tree"))
			treetest.Write(t, vol, stage+"/complete", "", 0o644)
		}, newState},
		{"moving old out", func(vol string) {
			cp(oldRef, vol)
			cp(newRef, filepath.Join(vol, stage, "tree"))
			treetest.Write(t, vol, stage+"/complete", "", 0o644)
			treetest.Must(t, os.Mkdir(filepath.Join(vol, old), 0o700))
			treetest.Must(t, os.Rename(filepath.Join(vol, "b"), filepath.Join(vol, old, "b")))
		}, newState},
		{"moving new in", func(vol string) {
			cp(oldRef, filepath.Join(vol, old))
			cp(newRef, filepath.Join(vol, stage, "tree"))
			treetest.Write(t, vol, stage+"/complete", "", 0o644)
			treetest.Write(t, vol, stage+"/moved", "", 0o644)
			treetest.Must(t, os.Rename(filepath.Join(vol, stage, "tree", "b"), filepath.Join(vol, "b")))
		}, newState},
		{"removing old", func(vol string) {
			treetest.Write(t, vol, old+"/a", "old a\n", 0o644)
			cp(newRef, vol)
		}, newState},
	}
	for _, c := range cases {
		vol := filepath.Join(base, "vol-"+strings.ReplaceAll(c.name, " ", "-"))
		treetest.Must(t, os.Mkdir(vol, 0o755))
		c.setup(vol)
		if code := backends.VolumeHelper([]string{"recover", vol}); code != 0 {
			t.Fatalf("%s: recover: status %d", c.name, code)
		}
		treetest.Equal(t, c.name, c.want, treetest.Capture(t, vol))
	}
}

// TestDockerVolumeNoDaemon: without a daemon, Check and Snapshot say so
// in one line naming the target, and Available says why.
func TestDockerVolumeNoDaemon(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	b := &backends.DockerVolume{}
	if ok, why := b.Available(); ok || why == "" {
		t.Errorf("Available without a daemon: %v %q", ok, why)
	}
	tg := backends.Target{Name: "pgdata", Backend: "docker-volume", Volume: "pgdata"}
	for _, err := range []error{b.Check(context.Background(), tg, ""), b.Snapshot(context.Background(), tg, "", t.TempDir())} {
		if !errors.Is(err, config.ErrTarget) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "pgdata") {
			t.Errorf("without a daemon: %v", err)
		}
	}
}
