package uring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The io_uring ABI (include/uapi/linux/io_uring.h), as far as FUSE needs it.
const (
	setupSQE128    = 1 << 10 // IORING_SETUP_SQE128: 128-byte SQEs, an 80-byte command area
	setupCQSize    = 1 << 3  // IORING_SETUP_CQSIZE
	featSingleMmap = 1 << 0  // IORING_FEAT_SINGLE_MMAP
	enterGetEvents = 1 << 0  // IORING_ENTER_GETEVENTS
	offSQRing      = 0
	offSQEs        = 0x10000000
	opURingCmd     = 46 // IORING_OP_URING_CMD
	sqeSize        = 128
	cqeSize        = 16
)

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

// ring is one io_uring with 128-byte SQEs, used by one thread.
type ring struct {
	fd      int
	rings   []byte // the SQ and CQ rings (one mapping)
	sqes    []byte
	p       params
	sqTail  uint32 // ours: SQEs written, not all submitted yet
	pending uint32 // SQEs written since the last enter
}

// newRing sets up an io_uring of entries SQEs (and twice as many CQEs).
func newRing(entries uint32) (*ring, error) {
	r := &ring{}
	r.p.flags = setupSQE128 | setupCQSize
	r.p.cqEntries = 2 * entries
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&r.p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r.fd = int(fd)
	if r.p.features&featSingleMmap == 0 {
		r.close()
		return nil, fmt.Errorf("io_uring: the kernel maps SQ and CQ separately (before Linux 5.4)")
	}
	size := max(r.p.sqOff.array+r.p.sqEntries*4, r.p.cqOff.cqes+r.p.cqEntries*cqeSize)
	var err error
	if r.rings, err = unix.Mmap(r.fd, offSQRing, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring: map the rings: %w", err)
	}
	if r.sqes, err = unix.Mmap(r.fd, offSQEs, int(r.p.sqEntries*sqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring: map the SQEs: %w", err)
	}
	r.sqTail = *r.u32(r.p.sqOff.tail)
	return r, nil
}

func (r *ring) close() {
	if r.sqes != nil {
		unix.Munmap(r.sqes)
	}
	if r.rings != nil {
		unix.Munmap(r.rings)
	}
	unix.Close(r.fd)
}

func (r *ring) u32(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&r.rings[off])) }

// sqe returns the next free SQE, zeroed; nil if the queue is full.
func (r *ring) sqe() []byte {
	head := atomic.LoadUint32(r.u32(r.p.sqOff.head))
	if r.sqTail-head >= r.p.sqEntries {
		return nil
	}
	idx := r.sqTail & *r.u32(r.p.sqOff.ringMask)
	*(*uint32)(unsafe.Pointer(&r.rings[r.p.sqOff.array+4*idx])) = idx
	r.sqTail++
	r.pending++
	s := r.sqes[idx*sqeSize : (idx+1)*sqeSize]
	clear(s)
	return s
}

// enter submits the SQEs written so far and, if wait, waits for at
// least one completion.
func (r *ring) enter(wait bool) error {
	atomic.StoreUint32(r.u32(r.p.sqOff.tail), r.sqTail)
	var flags, min uintptr
	if wait {
		flags, min = enterGetEvents, 1
	}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.pending), min, flags, 0, 0)
		if errno == unix.EINTR {
			// Submitted SQEs are counted in n only when it succeeds.
			continue
		}
		if errno != 0 {
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
		r.pending -= uint32(n)
		return nil
	}
}

// cqe is one completion.
type cqe struct {
	userData uint64
	res      int32
}

// next takes the next completion, if any.
func (r *ring) next() (cqe, bool) {
	headp := r.u32(r.p.cqOff.head)
	head := *headp
	if head == atomic.LoadUint32(r.u32(r.p.cqOff.tail)) {
		return cqe{}, false
	}
	off := r.p.cqOff.cqes + (head&*r.u32(r.p.cqOff.ringMask))*cqeSize
	c := cqe{
		userData: *(*uint64)(unsafe.Pointer(&r.rings[off])),
		res:      *(*int32)(unsafe.Pointer(&r.rings[off+8])),
	}
	atomic.StoreUint32(headp, head+1)
	return c, true
}

func putU16(b []byte, v uint16) { *(*uint16)(unsafe.Pointer(&b[0])) = v }
func putU32(b []byte, v uint32) { *(*uint32)(unsafe.Pointer(&b[0])) = v }
func putU64(b []byte, v uint64) { *(*uint64)(unsafe.Pointer(&b[0])) = v }
func getU32(b []byte) uint32    { return *(*uint32)(unsafe.Pointer(&b[0])) }
func getU64(b []byte) uint64    { return *(*uint64)(unsafe.Pointer(&b[0])) }
