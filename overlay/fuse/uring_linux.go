//go:build linux

package fuse

import (
	"fmt"
	"os"
	"strings"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"github.com/snapback/snapback/overlay/fuse/uring"
	"golang.org/x/sys/unix"
)

// The view's transport: FUSE over io_uring (package uring) where the
// kernel offers it, else go-fuse's reads of /dev/fuse. The kernel's
// switch is root's (uring.ParamPath); snapback never flips it.

// ringOff makes the views of this process serve through /dev/fuse
// reads even where the ring is on (set by the benchmarks that compare
// the two in one run).
var ringOff bool

// ringErr is why this process's last view could not use the ring
// though the kernel offers it (the trial says it; a run's server falls
// back without a word, every run alike).
var ringErr error

// ringDepth is how many requests each CPU's queue holds at once: a
// second lets a queue's thread take the next request of a burst (the
// threads of `git status` stat the index's paths at once) without
// waiting in the kernel for it. Each entry keeps a buffer of MaxWrite.
const ringDepth = 2

// prepareRing sets up the rings for the device dev before the kernel's
// INIT is answered, and then asks for io_uring in mo; nil if the kernel
// does not offer it or the rings cannot be made (ringErr says why).
func prepareRing(dev int, mo *gofuse.MountOptions) *uring.Transport {
	ringErr = nil
	if ok, _ := uring.Enabled(); !ok || ringOff {
		return nil
	}
	t, err := uring.New(dev, mo.MaxWrite, ringDepth)
	if err != nil {
		ringErr = err
		return nil
	}
	mo.ExtraCapabilities |= gofuse.CAP_OVER_IO_URING
	t.Failed = func(err error) {
		// The view would hang on that CPU: end the server, as a killed
		// one (snapback reports it, and the run's changes stay pending).
		fmt.Fprintf(os.Stderr, "snapback: fuse server: %v\n", err)
		os.Exit(1)
	}
	return t
}

// startRing registers the rings once srv has answered INIT, and
// reports whether the ring serves the view's requests.
func startRing(t *uring.Transport, srv *gofuse.Server, raw gofuse.RawFileSystem, mo *gofuse.MountOptions) bool {
	if t == nil {
		return false
	}
	if err := t.Start(srv, raw, mo); err != nil {
		ringErr = err
		return false
	}
	return true
}

// transportPrefix starts the trial's line that says which transport its
// view used.
const transportPrefix = "transport: "

// transport says which transport a view served through (ring: the
// rings were registered).
func transport(ring bool) string {
	if ring {
		return "requests through io_uring (" + uring.ParamPath + " is Y)"
	}
	if ok, why := uring.Enabled(); !ok {
		return "requests through /dev/fuse reads (FUSE over io_uring is " + why + ")"
	}
	return fmt.Sprintf("requests through /dev/fuse reads (FUSE over io_uring is on, but the view could not use it: %v)", ringErr)
}

// trialTransport finds the transport line in the trial's output.
func trialTransport(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if t, ok := strings.CutPrefix(line, transportPrefix); ok {
			return t
		}
	}
	return ""
}

// Mounted is a view served by this process (see Mount).
type Mounted struct {
	*gofuse.Server
	mnt  string
	ring *uring.Transport // nil: the device serves every request
	root *node
}

// Ring reports whether the rings serve the view's requests.
func (m *Mounted) Ring() bool { return m.ring != nil }

// Unmount unmounts the view and waits until its server has stopped.
func (m *Mounted) Unmount() error {
	var err error
	delay := time.Duration(0)
	for try := 0; try < 5; try++ { // as go-fuse: the kernel may still see a file open for a moment
		if err = unix.Unmount(m.mnt, 0); err == nil {
			break
		}
		delay = 2*delay + 5*time.Millisecond
		time.Sleep(delay)
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w", m.mnt, err)
	}
	m.Server.Wait()
	if m.ring != nil {
		m.ring.Wait()
	}
	return nil
}

// pollHack is go-fuse's (WaitMount runs it, but not for a mount point
// given as /dev/fd/N): a poll of a file in the view makes the kernel ask
// POLL once, and go-fuse's ENOSYS tells it never to ask again. Else a
// Go program's first file opened in the view would wait in epoll_ctl
// for an answer from its own process, which then cannot exit.
func pollHack(mnt string) error {
	fd, err := unix.Open(mnt+"/.go-fuse-epoll-hack", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("poll once in the view: %w", err)
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	unix.Close(fd)
	return nil
}

// mountDirect mounts FUSE at mnt as go-fuse's direct mount does, and
// returns the device's descriptor (close-on-exec).
func mountDirect(mnt string, mo *gofuse.MountOptions) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		return -1, err
	}
	dev, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	opts := append([]string{fmt.Sprintf("fd=%d,rootmode=%o,user_id=%d,group_id=%d,max_read=%d", dev, st.Mode&unix.S_IFMT, os.Geteuid(), os.Getegid(), mo.MaxWrite)}, mo.Options...)
	if mo.AllowOther {
		opts = append(opts, "allow_other")
	}
	if err := unix.Mount(mo.FsName, mnt, "fuse."+mo.Name, unix.MS_NOSUID|unix.MS_NODEV, strings.Join(opts, ",")); err != nil {
		unix.Close(dev)
		return -1, err
	}
	return dev, nil
}
