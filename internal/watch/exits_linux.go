//go:build linux

package watch

import (
	"encoding/binary"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// exits are the processes' exits the kernel's process connector told
// (netlink, root only): each exited process's parent then, for a writer
// gone before its event was read. A process's exit is told by the
// process itself, late in its exit: after its parent was told (and may
// have reaped it), so a writer's event may say it is gone before its
// exit is told (a process preempted there, on a busy machine): the
// reader then waits for it (see [resolver.gone]). Its writes' events
// were queued before it exited, so before its exit is told.
type exits struct {
	fd    int
	byPid map[int][]exitRec
	// lost: the connector's queue overflowed at lostAt (exits were not
	// all read): nothing is looked up until the fanotify queue has been
	// empty since (every write of before has been read).
	lost   bool
	lostAt uint64
}

type exitRec struct {
	at     uint64 // CLOCK_MONOTONIC, ns
	parent int
}

// Process connector constants (linux/connector.h, linux/cn_proc.h).
const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procEventExit     = 0x80000000
	cnMsgLen          = 20
	nsPerTick         = 10_000_000 // /proc's clock ticks (USER_HZ 100)
	procPidInitIno    = 0xEFFFFFFC // the initial pid namespace's inode (linux/proc_ns.h)
)

// openExits listens to the process connector; nil where it cannot, or
// where its process ids are not this process's: outside the initial pid
// namespace (the connector tells the initial namespace's ids).
func openExits() *exits {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil || st.Ino != procPidInitIno {
		return nil
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) // a busy machine's exits between two reads; fewer is no error
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc, Pid: 0}); err != nil {
		unix.Close(fd)
		return nil
	}
	// struct proc_input: listen, to exits only (Linux 6.6+; the watcher's
	// fanotify needs 6.9): forks, execs and the rest never wake the reader.
	msg := make([]byte, unix.SizeofNlMsghdr+cnMsgLen+8)
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint16(msg[4:], unix.NLMSG_DONE)
	binary.LittleEndian.PutUint32(msg[12:], uint32(os.Getpid()))
	c := msg[unix.SizeofNlMsghdr:]
	binary.LittleEndian.PutUint32(c[0:], cnIdxProc)
	binary.LittleEndian.PutUint32(c[4:], cnValProc)
	binary.LittleEndian.PutUint16(c[16:], 8)
	binary.LittleEndian.PutUint32(c[cnMsgLen:], procCnMcastListen)
	binary.LittleEndian.PutUint32(c[cnMsgLen+4:], procEventExit)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil
	}
	return &exits{fd: fd, byPid: map[int][]exitRec{}}
}

func (x *exits) close() {
	if x != nil {
		unix.Close(x.fd)
	}
}

// drain reads every exit told so far.
func (x *exits) drain() {
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(x.fd, buf, 0)
		if errors.Is(err, unix.ENOBUFS) {
			x.lost, x.lostAt = true, monoNow()
			clear(x.byPid)
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			return // EAGAIN: all read
		}
		for b := buf[:n]; len(b) >= unix.SizeofNlMsghdr; {
			l := int(binary.LittleEndian.Uint32(b))
			if l < unix.SizeofNlMsghdr || l > len(b) {
				break
			}
			x.note(b[unix.SizeofNlMsghdr:l])
			next := (l + 3) &^ 3
			if next >= len(b) {
				break
			}
			b = b[next:]
		}
	}
}

// note reads one connector message: a process's exit (what, cpu,
// timestamp, then pid, tgid, code, signal, parent pid, parent tgid).
func (x *exits) note(m []byte) {
	if len(m) < cnMsgLen+16+24 {
		return
	}
	if binary.LittleEndian.Uint32(m[0:]) != cnIdxProc || binary.LittleEndian.Uint32(m[4:]) != cnValProc {
		return
	}
	ev := m[cnMsgLen:]
	if binary.LittleEndian.Uint32(ev[0:]) != procEventExit {
		return
	}
	at := binary.LittleEndian.Uint64(ev[8:])
	d := ev[16:]
	pid, tgid, ptgid := int(binary.LittleEndian.Uint32(d[0:])), int(binary.LittleEndian.Uint32(d[4:])), int(binary.LittleEndian.Uint32(d[20:]))
	if pid != tgid {
		return // a thread's
	}
	if len(x.byPid) >= maxExits { // the fanotify queue not empty for long: start again
		x.lost, x.lostAt = true, monoNow()
		clear(x.byPid)
	}
	x.byPid[pid] = append(x.byPid[pid], exitRec{at, ptgid})
}

// maxExits bounds the exits kept.
const maxExits = 1 << 16

// evict forgets the exits before empty, a time the fanotify queue was
// empty: the events of every write of those processes have been read.
func (x *exits) evict(empty uint64) {
	for pid, recs := range x.byPid {
		k := 0
		for _, r := range recs {
			if r.at >= empty {
				recs[k], k = r, k+1
			}
		}
		if k == 0 {
			delete(x.byPid, pid)
		} else {
			x.byPid[pid] = recs[:k]
		}
	}
	if x.lost && empty > x.lostAt {
		x.lost = false
	}
}

// exitOf is an exit of pid told and not forgotten, after after, and how
// many there are: the writer's when exactly one (several: a process id
// taken again, the writer is not known); n is 0 also when exits were
// lost.
func (x *exits) exitOf(pid int, after uint64) (e exitRec, n int) {
	if x == nil || x.lost {
		return exitRec{}, 0
	}
	for _, r := range x.byPid[pid] {
		if r.at >= after {
			e, n = r, n+1
		}
	}
	return e, n
}

// wait waits until the connector has more to read, or until the
// monotonic time deadline; false when the exits were lost or the
// deadline has passed.
func (x *exits) wait(deadline uint64) bool {
	now := monoNow()
	if x.lost || now >= deadline {
		return false
	}
	ms := int((deadline - now + 999_999) / 1_000_000)
	unix.Poll([]unix.PollFd{{Fd: int32(x.fd), Events: unix.POLLIN}}, ms) // woken or not, look again
	x.drain()
	return !x.lost
}

// bootTime is the monotonic time at as the boot clock's (CLOCK_BOOTTIME,
// /proc's start times' clock): the monotonic clock, the connector's,
// stops while the machine is suspended; the boot clock counts on.
func bootTime(at uint64) uint64 {
	var b, m unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &b) // cannot fail
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &m)
	if d := b.Nano() - m.Nano(); d > 0 {
		return at + uint64(d)
	}
	return at
}

func monoNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail
	return uint64(ts.Nano())
}
