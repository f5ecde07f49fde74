// Package uring serves a go-fuse connection through FUSE over io_uring
// (Linux 6.14+, include/uapi/linux/fuse.h 7.42; the kernel's
// Documentation/filesystems/fuse-io-uring.rst): requests are fetched and
// answered through io_uring rings instead of a read(2) and a write(2) on
// /dev/fuse each, one ring per CPU, each served by a thread bound to its
// CPU, so a request is taken up where it was issued. The queues serve
// at once: the file system must be safe for concurrent requests (as
// under go-fuse's own loop with more than one reader).
//
// It drives go-fuse's exported request handling (fuse.ProtocolServer)
// and needs nothing else of go-fuse: the fuse.Server still answers INIT
// and serves what the kernel keeps sending through the device (FORGET,
// INTERRUPT) and the notifications the file system writes. The rings are
// written with golang.org/x/sys/unix (io_uring_setup, io_uring_enter,
// mmap), with 128-byte SQEs whose command area holds struct
// fuse_uring_cmd_req; each ring entry's header (struct
// fuse_uring_req_header) and payload buffer are anonymous mappings the
// kernel keeps the addresses of.
//
// The kernel offers io_uring at INIT only while
// /sys/module/fuse/parameters/enable_uring is Y (root's switch, N by
// default); see [Enabled]. The package is written to need nothing of
// snapback, so that it can go upstream to go-fuse.
package uring
