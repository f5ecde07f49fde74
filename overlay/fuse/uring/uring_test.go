//go:build linux

package uring

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/snapback/snapback/internal/treetest"
	"golang.org/x/sys/unix"
)

// requireRing skips (or fails, where SNAPBACK_REQUIRE names fuse-uring)
// unless this process can mount FUSE and the kernel offers io_uring.
func requireRing(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "mounting FUSE with a descriptor of its own needs root"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "no /dev/fuse"
	} else if ok, w := Enabled(); !ok {
		why = "FUSE over io_uring is " + w
	}
	if !treetest.Require(t, "fuse-uring", why == "", why) {
		t.Skipf("SNAPBACK_REQUIRE does not name fuse-uring: %s", why)
	}
}

// mountLoopback mounts a go-fuse loopback of dir at mnt, served through
// the rings, and returns the transport; it is unmounted when the test
// ends.
func mountLoopback(t testing.TB, dir, mnt string) *Transport {
	return mountLoopbackVia(t, dir, mnt, true)
}

// mountLoopbackVia mounts as mountLoopback does, through the rings or
// (ring false) through go-fuse's reads of /dev/fuse (the transport is
// then nil). Entries and attributes are not cached: every stat is a
// request.
func mountLoopbackVia(t testing.TB, dir, mnt string, ring bool) *Transport {
	t.Helper()
	root, err := fs.NewLoopbackRoot(dir)
	treetest.Must(t, err)
	return mountRaw(t, mnt, fs.NewNodeFS(root, &fs.Options{}), ring, 1)
}

// mountRaw mounts raw at mnt, served through depth-deep rings or (ring
// false) through go-fuse's reads of /dev/fuse (the transport is then
// nil); it is unmounted when the test ends.
func mountRaw(t testing.TB, mnt string, raw fuse.RawFileSystem, ring bool, depth int) *Transport {
	t.Helper()
	dev, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	treetest.Must(t, err)
	opts := fuse.MountOptions{MaxWrite: 1 << 20}
	var tr *Transport
	if ring {
		opts.ExtraCapabilities = fuse.CAP_OVER_IO_URING
		tr, err = New(dev, opts.MaxWrite, depth)
		treetest.Must(t, err)
	}
	opt := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,max_read=%d", dev, opts.MaxWrite)
	treetest.Must(t, unix.Mount("uringtest", mnt, "fuse.uringtest", 0, opt))
	srv, err := fuse.NewServer(raw, fmt.Sprintf("/dev/fd/%d", dev), &opts)
	treetest.Must(t, err)
	if tr != nil {
		if err := tr.Start(srv, raw, &opts); err != nil {
			unix.Unmount(mnt, unix.MNT_DETACH)
			t.Fatal(err)
		}
	}
	go srv.Serve()
	// go-fuse's poll hack (as WaitMount would): the kernel learns that
	// POLL is ENOSYS before this process's files in the mount reach the
	// runtime's epoll.
	fd, err := unix.Open(filepath.Join(mnt, ".go-fuse-epoll-hack"), unix.O_RDONLY, 0)
	treetest.Must(t, err)
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	unix.Close(fd)
	t.Cleanup(func() {
		unix.Unmount(mnt, 0) // EINVAL if the test unmounted it
		srv.Wait()
		if tr != nil {
			tr.Wait()
		}
	})
	return tr
}

// BenchmarkStat is one request's round trip (a LOOKUP: nothing is
// cached), through go-fuse's reads of /dev/fuse and through the rings,
// with the benchmark's process as both the caller and the server.
func BenchmarkStat(b *testing.B) {
	requireRing(b)
	dir := b.TempDir()
	treetest.Write(b, dir, "f", "x", 0o644)
	for _, ring := range []bool{false, true} {
		name := map[bool]string{false: "device", true: "ring"}[ring]
		b.Run(name, func(b *testing.B) {
			mnt := b.TempDir()
			mountLoopbackVia(b, dir, mnt, ring)
			p := filepath.Join(mnt, "f")
			var st unix.Stat_t
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := unix.Lstat(p, &st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// nullFS answers every name as the same empty file, from memory, and
// has the kernel cache nothing: each lstat through it is a LOOKUP that
// costs the server nothing but its answer.
type nullFS struct{ fuse.RawFileSystem }

func (nullFS) Lookup(_ <-chan struct{}, _ *fuse.InHeader, _ string, out *fuse.EntryOut) fuse.Status {
	out.NodeId, out.Generation = 2, 1
	out.Attr = fuse.Attr{Ino: 2, Mode: unix.S_IFREG | 0o644, Nlink: 1}
	return fuse.OK
}

func (nullFS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	out.Attr = fuse.Attr{Ino: 2, Mode: unix.S_IFREG | 0o644, Nlink: 1}
	if in.NodeId == fuse.FUSE_ROOT_ID {
		out.Attr = fuse.Attr{Ino: 1, Mode: unix.S_IFDIR | 0o755, Nlink: 2}
	}
	return fuse.OK
}

// BenchmarkRoundTrip is the floor of a request here: an lstat that is
// a LOOKUP the server answers from memory (nullFS), through /dev/fuse
// reads and through the rings (two entries per queue, as the view
// has), from one caller and from two at once (each caller's thread
// may move between CPUs, as a workload's do): what a request costs
// before the file system does any work.
func BenchmarkRoundTrip(b *testing.B) {
	requireRing(b)
	for _, ring := range []bool{false, true} {
		for _, callers := range []int{1, 2} {
			name := fmt.Sprintf("%s/callers=%d", map[bool]string{false: "device", true: "ring"}[ring], callers)
			b.Run(name, func(b *testing.B) {
				mnt := b.TempDir()
				mountRaw(b, mnt, nullFS{fuse.NewDefaultRawFileSystem()}, ring, 2)
				p := filepath.Join(mnt, "f")
				var wg sync.WaitGroup
				for c := 0; c < callers; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var st unix.Stat_t
						for i := c; i < b.N; i += callers {
							if err := unix.Lstat(p, &st); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}

// TestRing is the ABI's proof: lookups, attributes, listings, reads
// and writes of a loopback mount are answered through the rings.
func TestRing(t *testing.T) {
	requireRing(t)
	dir, mnt := t.TempDir(), t.TempDir()
	treetest.Write(t, dir, "a/b/file", "hello\n", 0o640)
	big := bytes.Repeat([]byte("0123456789abcdef"), 300_000) // 4.8 MB: several 1 MiB READs and WRITEs
	treetest.Must(t, os.WriteFile(filepath.Join(dir, "big"), big, 0o644))
	tr := mountLoopback(t, dir, mnt)

	st, err := os.Stat(filepath.Join(mnt, "a/b/file")) // LOOKUP a, b, file
	treetest.Must(t, err)
	if st.Size() != 6 || st.Mode().Perm() != 0o640 {
		t.Fatalf("stat through the ring: size %d mode %v, want 6 and 0640", st.Size(), st.Mode())
	}
	if _, err := os.Stat(filepath.Join(mnt, "a/missing")); !os.IsNotExist(err) {
		t.Fatalf("stat of a missing name: %v, want ENOENT", err)
	}
	ents, err := os.ReadDir(filepath.Join(mnt, "a/b"))
	treetest.Must(t, err)
	if len(ents) != 1 || ents[0].Name() != "file" {
		t.Fatalf("listing through the ring: %v", ents)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "big"))
	treetest.Must(t, err)
	if !bytes.Equal(got, big) {
		t.Fatalf("read %d bytes through the ring, not the file's %d", len(got), len(big))
	}
	rev := bytes.ToUpper(big)
	treetest.Must(t, os.WriteFile(filepath.Join(mnt, "a/new"), rev, 0o600))
	if got, _ := os.ReadFile(filepath.Join(dir, "a/new")); !bytes.Equal(got, rev) {
		t.Fatalf("wrote %d bytes through the ring, the disk has %d", len(rev), len(got))
	}
	treetest.Must(t, unix.Setxattr(filepath.Join(mnt, "a/new"), "user.k", []byte("value"), 0))
	buf := make([]byte, 64)
	n, err := unix.Getxattr(filepath.Join(mnt, "a/new"), "user.k", buf)
	treetest.Must(t, err)
	if string(buf[:n]) != "value" {
		t.Fatalf("getxattr through the ring: %q", buf[:n])
	}
	treetest.Must(t, os.Rename(filepath.Join(mnt, "a/new"), filepath.Join(mnt, "a/b/renamed")))
	treetest.Must(t, os.Remove(filepath.Join(mnt, "a/b/renamed")))
	if _, err := os.Lstat(filepath.Join(dir, "a/b/renamed")); !os.IsNotExist(err) {
		t.Fatalf("unlink through the ring left the file: %v", err)
	}
	t.Logf("%d requests through the rings", tr.Requests())
	if tr.Requests() < 10 {
		t.Fatalf("the rings answered %d requests: the device served the rest", tr.Requests())
	}
}

// TestRingUnmount: the queues' threads end with the connection.
func TestRingUnmount(t *testing.T) {
	requireRing(t)
	dir, mnt := t.TempDir(), t.TempDir()
	tr := mountLoopback(t, dir, mnt)
	if _, err := os.ReadDir(mnt); err != nil {
		t.Fatal(err)
	}
	treetest.Must(t, unix.Unmount(mnt, 0))
	done := make(chan struct{})
	go func() { tr.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the queues still wait 10 s after the unmount")
	}
}

// TestCountCPUs: the kernel's possible CPUs, one queue each.
func TestCountCPUs(t *testing.T) {
	for list, want := range map[string]int{"0\n": 1, "0-1\n": 2, "0-3,8-11\n": 8, "0,2,4-5": 4} {
		if got, err := countCPUs(list); err != nil || got != want {
			t.Errorf("countCPUs(%q) = %d, %v; want %d", list, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "3-1", "0-"} {
		if n, err := countCPUs(bad); err == nil {
			t.Errorf("countCPUs(%q) = %d, want an error", bad, n)
		}
	}
}
