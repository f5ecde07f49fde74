package uring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The FUSE-over-io_uring ABI (include/uapi/linux/fuse.h, 7.42).
const (
	cmdRegister       = 1 // FUSE_IO_URING_CMD_REGISTER
	cmdCommitAndFetch = 2 // FUSE_IO_URING_CMD_COMMIT_AND_FETCH

	// struct fuse_uring_req_header: in_out[128], op_in[128], then
	// struct fuse_uring_ent_in_out {flags, commit_id u64; payload_sz,
	// padding u32; reserved u64}.
	hdrOpIn      = 128
	hdrCommitID  = 256 + 8
	hdrPayloadSz = 256 + 16
	hdrSize      = 256 + 32

	inHeaderSize  = 40 // struct fuse_in_header
	outHeaderSize = 16 // struct fuse_out_header
	opWrite       = 16 // FUSE_WRITE
	opInit        = 26 // FUSE_INIT
)

// ParamPath is the kernel's switch for FUSE over io_uring (root may
// write Y to it; it is N by default).
const ParamPath = "/sys/module/fuse/parameters/enable_uring"

// Enabled reports whether this kernel would offer FUSE over io_uring to
// a new connection, and if not, why.
func Enabled() (bool, string) {
	b, err := os.ReadFile(ParamPath)
	if err != nil {
		return false, "the kernel has no FUSE over io_uring (Linux 6.14+ with CONFIG_FUSE_IO_URING)"
	}
	if strings.TrimSpace(string(b)) != "Y" {
		return false, "switched off (" + ParamPath + " is N; root may write Y)"
	}
	return true, ""
}

// Transport serves a go-fuse connection's requests through io_uring
// rings, one queue per possible CPU, each served by its own thread
// bound to that CPU: a request is taken up on the CPU that issued it,
// without a read and a write system call per request. Forgets and
// interrupts still come through the device (the kernel sends them
// there), so the go-fuse Server's own loop keeps running beside it.
//
// An INTERRUPT of a request taken up through a ring does not reach the
// file system: the Server, which reads it from the device, does not know
// the request, and the kernel drops its answer (it looks for the request
// among the device's, not the ring's). Requests there are not cancelled.
//
// Use: New before the connection's INIT is answered (it sets up the
// rings, so that nothing can fail between offering io_uring to the
// kernel and registering); add fuse.CAP_OVER_IO_URING to the
// MountOptions' ExtraCapabilities only if it succeeded; make the
// fuse.Server; then Start, and Serve the Server as usual. Once the
// kernel has agreed to io_uring it holds every request until all
// queues are registered, or until a registration fails, when it falls
// back to the device for good.
type Transport struct {
	dev     int
	queues  []*queue
	payload int

	// ps serves the requests of every queue at once (each queue's
	// thread calls it): the file system must be safe for concurrent
	// requests, as under go-fuse's own loop with several readers.
	ps       *fuse.ProtocolServer
	logger   func(format string, args ...any)
	requests atomic.Uint64
	running  sync.WaitGroup

	// Failed, if set, is called when a queue stops while the connection
	// is up (an io_uring error): the kernel then holds the requests made
	// on that queue's CPU until the connection ends, so a server should
	// end it. Unset, the error is logged to stderr.
	Failed func(error)
}

type queue struct {
	id   int
	r    *ring
	ents []*entry
}

// entry is one ring entry: its header and payload buffers live outside
// the Go heap, since the kernel keeps their addresses.
type entry struct {
	hdr     []byte // struct fuse_uring_req_header, then the iovecs
	payload []byte
	in      [inHeaderSize + hdrOpIn]byte
	scratch []byte // a copy of a small payload, read while the reply is written
}

// New prepares rings for the FUSE device dev, whose connection will
// negotiate maxWrite (MountOptions.MaxWrite), with depth entries per
// queue.
func New(dev int, maxWrite, depth int) (*Transport, error) {
	n, err := possibleCPUs()
	if err != nil {
		return nil, err
	}
	pg := os.Getpagesize()
	// The kernel's payload size: max(FUSE_MIN_READ_BUFFER, max_write, max_pages * page).
	payload := max(8192, ((maxWrite+pg-1)/pg)*pg)
	t := &Transport{dev: dev, payload: payload, logger: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "fuse-uring: "+f+"\n", a...) }}
	for id := 0; id < n; id++ {
		q := &queue{id: id}
		t.queues = append(t.queues, q)
		if q.r, err = newRing(uint32(depth)); err != nil {
			t.close()
			return nil, err
		}
		for i := 0; i < depth; i++ {
			e := &entry{scratch: make([]byte, 16<<10)}
			if e.hdr, err = unix.Mmap(-1, 0, pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
				t.close()
				return nil, fmt.Errorf("fuse-uring: map a header: %w", err)
			}
			if e.payload, err = unix.Mmap(-1, 0, payload, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
				unix.Munmap(e.hdr)
				t.close()
				return nil, fmt.Errorf("fuse-uring: map a payload: %w", err)
			}
			q.ents = append(q.ents, e)
			// iov[0] the header, iov[1] the payload, kept after the header.
			iov := (*[2]unix.Iovec)(unsafe.Pointer(&e.hdr[512]))
			iov[0].Base, iov[1].Base = &e.hdr[0], &e.payload[0]
			iov[0].SetLen(hdrSize)
			iov[1].SetLen(payload)
		}
	}
	return t, nil
}

// Wait waits until every queue's thread has ended (the connection
// ended, or its registration failed).
func (t *Transport) Wait() { t.running.Wait() }

// Requests is the number of requests answered through the rings.
func (t *Transport) Requests() uint64 { return t.requests.Load() }

// Queues is the number of queues (the kernel's possible CPUs).
func (t *Transport) Queues() int { return len(t.queues) }

func (t *Transport) close() {
	for _, q := range t.queues {
		q.close()
	}
}

func (q *queue) close() {
	for _, e := range q.ents {
		unix.Munmap(e.hdr)
		unix.Munmap(e.payload)
	}
	q.ents = nil
	if q.r != nil {
		q.r.close()
		q.r = nil
	}
}

// possibleCPUs is the kernel's num_possible_cpus(): the number of queues
// a ring must have.
func possibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, fmt.Errorf("fuse-uring: %w", err)
	}
	return countCPUs(string(b))
}

// countCPUs counts the CPUs of a kernel CPU list ("0-3,8-11").
func countCPUs(list string) (int, error) {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		z, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || z < a {
			return 0, fmt.Errorf("fuse-uring: cannot read /sys/devices/system/cpu/possible: %q", list)
		}
		n += z - a + 1
	}
	return n, nil
}

// ErrNotNegotiated is Start's answer when the kernel did not offer FUSE
// over io_uring at INIT: the device serves every request.
var ErrNotNegotiated = errors.New("fuse-uring: the kernel did not offer io_uring at INIT")

// Start registers every queue's entries with the kernel and serves
// their requests with fs (the file system srv serves) until the
// connection ends. srv must have answered INIT with CAP_OVER_IO_URING
// among opts.ExtraCapabilities (opts as given to fuse.NewServer).
// It returns once the queues are registered, or with the first
// registration's error (the kernel then serves through the device).
func (t *Transport) Start(srv *fuse.Server, fs fuse.RawFileSystem, opts *fuse.MountOptions) error {
	init := srv.KernelSettings()
	if init.Flags64()&fuse.CAP_OVER_IO_URING == 0 || opts.ExtraCapabilities&fuse.CAP_OVER_IO_URING == 0 {
		t.close()
		return ErrNotNegotiated
	}
	t.ps = fuse.NewProtocolServer(fs, opts)
	// The protocol server learns the connection's settings from the
	// INIT the Server answered, as it would from the kernel.
	in := *init
	in.Length = uint32(unsafe.Sizeof(in))
	in.Opcode = opInit
	in.Unique = 1
	out := make([]byte, 4096)
	if _, st := t.ps.HandleRequest([][]byte{unsafe.Slice((*byte)(unsafe.Pointer(&in)), unsafe.Sizeof(in))}, [][]byte{out}); !st.Ok() {
		t.close()
		return fmt.Errorf("fuse-uring: INIT: %v", st)
	}
	ready := make(chan error, len(t.queues))
	for _, q := range t.queues {
		t.running.Add(1)
		go t.serve(q, ready)
	}
	var first error
	for range t.queues {
		if err := <-ready; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// serve runs one queue on a thread bound to the queue's CPU.
func (t *Transport) serve(q *queue, ready chan<- error) {
	runtime.LockOSThread() // the ring's completions run as task work on its submitting thread
	defer t.running.Done()
	defer q.close()
	var set unix.CPUSet
	set.Set(q.id)
	_ = unix.SchedSetaffinity(0, &set) // a possible CPU may be offline: then any CPU
	if err := t.register(q); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for {
		if err := q.r.enter(true); err != nil {
			t.failed(fmt.Errorf("fuse-uring: queue %d: %w", q.id, err))
			return
		}
		for c, ok := q.r.next(); ok; c, ok = q.r.next() {
			if c.res < 0 {
				if err := syscall.Errno(-c.res); err != unix.ENOTCONN && err != unix.ECANCELED && err != unix.ECONNABORTED {
					t.failed(fmt.Errorf("fuse-uring: queue %d: %w", q.id, err))
				}
				return // the connection ended
			}
			t.handle(q, int(c.userData))
		}
	}
}

// register registers q's entries. A failure completes at once (a good
// registration only when a request comes); the kernel answers EAGAIN
// while it has not yet taken in INIT's answer, and is then asked again.
func (t *Transport) register(q *queue) error {
	todo := make([]int, len(q.ents))
	for i := range todo {
		todo[i] = i
	}
	for try := 0; len(todo) > 0; try++ {
		for _, i := range todo {
			t.submit(q, i, cmdRegister, 0)
		}
		if err := q.r.enter(false); err != nil {
			return fmt.Errorf("fuse-uring: queue %d: %w", q.id, err)
		}
		todo = todo[:0]
		for c, ok := q.r.next(); ok; c, ok = q.r.next() {
			switch err := syscall.Errno(-c.res); {
			case c.res >= 0: // the ring is ready, and a request came
				t.handle(q, int(c.userData))
			case err == unix.EAGAIN && try < 100:
				todo = append(todo, int(c.userData))
			default:
				return fmt.Errorf("fuse-uring: register queue %d: %w", q.id, err)
			}
		}
		if len(todo) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// failed reports a queue that stopped while the connection is up: the
// kernel then holds the requests made on that queue's CPU until the
// connection ends.
func (t *Transport) failed(err error) {
	if t.Failed != nil {
		t.Failed(err)
		return
	}
	t.logger("%v", err)
}

// submit queues entry i's command on q's ring.
func (t *Transport) submit(q *queue, i int, cmd uint32, commitID uint64) {
	s := q.r.sqe() // never full: one SQE per entry, and the ring has depth SQEs
	s[0] = opURingCmd
	putU32(s[4:], uint32(t.dev))
	putU32(s[8:], cmd)
	if cmd == cmdRegister {
		putU64(s[16:], uint64(uintptr(unsafe.Pointer(&q.ents[i].hdr[512]))))
		putU32(s[24:], 2)
	}
	putU64(s[32:], uint64(i))
	// struct fuse_uring_cmd_req in the command area: flags, commit_id, qid.
	putU64(s[56:], commitID)
	putU16(s[64:], uint16(q.id))
}

// handle answers the request in q's entry i and queues its commit
// (which fetches the entry's next request).
func (t *Transport) handle(q *queue, i int) {
	e := q.ents[i]
	h := e.hdr
	inLen := int(getU32(h[0:]))
	opcode := getU32(h[4:])
	unique := getU64(h[8:])
	commitID := getU64(h[hdrCommitID:])
	psz := int(getU32(h[hdrPayloadSz:]))
	// The request as the device would give it: the in header, the
	// opcode's own struct (in op_in), then the rest (in the payload).
	opLen := inLen - inHeaderSize - psz
	n := 0
	st := fuse.EIO
	if opLen >= 0 && opLen <= hdrOpIn && psz <= len(e.payload) {
		copy(e.in[:], h[:inHeaderSize])
		copy(e.in[inHeaderSize:], h[hdrOpIn:hdrOpIn+opLen])
		payload := e.payload[:psz]
		if opcode != opWrite && psz <= len(e.scratch) {
			// The reply goes into the same buffer: a name or value
			// must not be overwritten while it may still be read.
			payload = e.scratch[:copy(e.scratch, payload)]
		}
		n, st = t.ps.HandleRequest([][]byte{e.in[:inHeaderSize+opLen], payload}, [][]byte{h[:outHeaderSize], e.payload})
	}
	if !st.Ok() || n < outHeaderSize {
		if st.Ok() {
			st = fuse.EIO
		}
		putU32(h[0:], outHeaderSize)
		putU32(h[4:], uint32(-int32(st)))
		putU64(h[8:], unique)
		n = outHeaderSize
	}
	putU32(h[hdrPayloadSz:], uint32(n-outHeaderSize))
	t.requests.Add(1)
	t.submit(q, i, cmdCommitAndFetch, commitID)
}
