// Package fuse is the `fuse` isolation mode of `snapback run`: a
// copy-on-write overlay filesystem served with go-fuse, mounted at the
// project root's own path in a private mount namespace. The lower layer is
// the real tree (never written); the upper layer is the run's upper
// directory, written in the format of Linux overlayfs through package
// layer, which snapshot.Repo.Changeset reads with, so commit, discard and
// diff are the same for every overlay mode.
//
// # Upper-layer format
//
//   - a deleted path is a whiteout: a 0/0 character device when the server
//     runs as root, else an empty regular file with the xattr
//     user.overlay.whiteout (overlayfs's "xwhiteout" form);
//   - a directory made where the lower tree had something hidden (mkdir
//     over a whiteout, a directory renamed over a lower entry) is opaque:
//     user.overlay.opaque = "y";
//   - a directory with lower content that is renamed is copied up (the
//     directory alone), moved, and given user.overlay.redirect = "/" + its
//     lower path, as overlayfs with redirect_dir does: rename(2) works,
//     and the changeset reader follows the redirect;
//   - anything else is the whole new state of its path: a file is copied
//     up whole (through a temporary file in the run's work directory,
//     then renamed into place) the first time it is written,
//     truncated, chmod/chown/utimes'd, given an xattr, linked or renamed.
//
// Hard links that exist in the lower tree are separate files in the view
// (own inode numbers, nlink 1), as on overlayfs without index: writing one
// copies it up alone, and a commit then splits the link. Links made
// during the run are real links in the upper layer.
// The store (.snapback at the root) is invisible (lookup ENOENT, absent
// from listings) and nothing can be created under that name.
//
// # Processes
//
// A FUSE server must never itself enter its mount (go-fuse's deadlock
// hazard), and the command must not have the server as its child (a
// shell's `wait` would wait for it). So:
//
//  1. snapback (the runner's parent) starts the exec helper ([ExecVerb]) in
//     a new mount namespace, handing it three pipes, each at its own
//     descriptor number (overlay.Pass: the caller's descriptors 3 and up
//     keep theirs): "alive" (snapback holds the write end for as long as
//     the command runs), "done" (the server holds the write end until it
//     exits) and the init's signal pipe. snapback becomes a child
//     subreaper so it can reap the server.
//  2. The helper makes every mount private, opens /dev/fuse and starts the
//     server ([ServeVerb]) through an intermediate process that exits at
//     once, in a second new mount namespace copied before the FUSE mount
//     exists: there the root path still shows the real tree, so the
//     layer directories the server opens by path at its start can never
//     be its own mount. The server is in its own session: Ctrl-C at the
//     terminal does not reach it.
//  3. The helper mounts FUSE on the root with that descriptor, waits for
//     the server to answer the kernel's INIT and say so on a third pipe,
//     then starts the overlay package's init (overlay.StartInit) in a new
//     PID and mount namespace, which runs the command in the working
//     directory; the server stays out of that PID namespace. The helper
//     exits with the init's status.
//  4. When the command ends, the init exits and the kernel ends what the
//     command left running; snapback writes "stop" to "alive" and closes
//     it, the server exits, and snapback waits for "done" before it reads
//     the upper layer. The mount exists only in the helper's namespaces:
//     it goes with the last process in them, and nothing is ever mounted
//     in the caller's namespace, whatever is killed when. An EOF on
//     "alive" without "stop" is snapback's death: the server then serves
//     on until the mount goes with the run's last process, so the command
//     keeps its view (and the run's lock, which the server holds too,
//     keeps the run running until the server has exited).
//
// By default (SNAPBACK_FUSE_KEEP=0 turns it off) a project's runs share
// one view kept warm by one long-lived server (keep_linux.go,
// keepserver_linux.go; an ordinary user's server lives in a user and
// mount namespace of its own and mounts without allow_other, so that
// runs in other user namespaces of the same user may use the view):
// the server makes the mount detached (fsmount) and never attaches it;
// step 2 is then a request on the server's socket, which answers with a
// clone of the mount (open_tree) over the run's new upper layer, and the
// helper attaches the clone on the root (move_mount) instead of mounting;
// step 4 is an "end" on the socket, after which the server has taken back
// from the kernel's caches everything the run's upper layer changed
// (warm_linux.go; what changed in the tree between runs comes from an
// inotify watcher of it, watch_linux.go).
//
// An ordinary user's helper does the same in a user namespace of its own
// that maps only the user's ids (overlay.UserNS, as the overlayfs mode);
// /dev/fuse must then be open to users. Its server cannot make device
// nodes, so its whiteouts are xwhiteouts. macOS (macFUSE) has no fuse
// mode.
//
// # Names, modes and privileges
//
// The server never builds an absolute path: it holds the lower, upper
// and work directories open (O_PATH) and names every entry relative to
// one of them with the *at calls (openat, fstatat, mkdirat, renameat2,
// linkat, fchownat, utimensat, ...; xattrs and truncate through the
// descriptor's /proc/self/fd link). A path of the view may then be as
// long as the user's own relative calls allow (PATH_MAX - 1), which with
// a layer's directory in front of it would be too long; one longer than
// PATH_MAX less a margin is walked to in pieces (see at).
//
// The kernel applies the caller's umask before a CREATE, MKDIR or MKNOD
// reaches the server (go-fuse does not negotiate FUSE_DONT_MASK): the
// server's own umask is 0 and it creates with the mode the request
// carries, and a mode of 0000 is shown as one (NullPermissions). As root
// it gives a new entry the caller's uid and gid (the directory's group
// under set-group-ID) and puts back the set-ID bits that chown cleared.
// Permission checks are the kernel's (default_permissions): sticky
// directories and a non-owner's chmod or rename behave as on the disk.
// Without FUSE_HANDLE_KILLPRIV the kernel clears set-user-ID, and
// set-group-ID with group execute, itself (a SETATTR before a write or
// truncate by a caller without CAP_FSETID); Linux also clears
// set-group-ID without group execute when the caller is outside the
// file's group, which the server does after the write, then drops the
// kernel's cached attributes so that fstat on the writing descriptor
// shows the new mode at once. cmd/snapback's POSIX table and
// scripts/pjdfstest.sh hold the view to the native filesystem.
//
// # Caching
//
// A FUSE request costs 25-90 us on a 2 vCPU VM (a round trip between
// processes on different CPUs), so the view is fast only where the
// kernel sends none. The server is the upper layer's only writer, so:
//
//   - entries, attributes and negative lookups are cached by the kernel
//     for an hour, and READDIRPLUS (go-fuse's default) hands the kernel
//     each listed entry with its attributes: a fresh `find` sends no
//     LOOKUP per name;
//   - opens send no message: OPENDIR, OPEN and CREATE answer ENOSYS, so
//     the kernel (FUSE_NO_OPENDIR_SUPPORT, FUSE_NO_OPEN_SUPPORT) never
//     sends OPENDIR, RELEASEDIR, OPEN, RELEASE or FLUSH (FLUSH without a
//     handle answers ENOSYS too: every write has reached the upper file
//     when it returns, and locks are the kernel's own) and makes new
//     files with MKNOD. Its defaults then are what the server asked for
//     before: listings cached (FOPEN_CACHE_DIR), pages kept across opens
//     (FOPEN_KEEP_CACHE). In a warm view a `tar` of the tree sends no
//     request per file, a `find` one GETATTR per directory (the kernel
//     drops a directory's cached atime when it reads it);
//   - with no handles, READ, WRITE, FSYNC and FALLOCATE are served by
//     name (rawFS keeps a listing per directory being read, on the
//     server's side, for READDIRPLUS): a read opens the node's entry as
//     it is now, the upper copy once there is one, so a reader that
//     opened the lower file sees the writes made after a copy-up; a
//     write copies up first (a file opened for writing and never
//     written is not copied up; O_TRUNC comes as a SETATTR of the size,
//     since go-fuse does not negotiate atomic_o_trunc); a file that
//     loses its name while the kernel may have it open (unlink, a rename
//     over it) keeps its content through a descriptor its node holds
//     until the kernel forgets the node, and a lower one gets a private
//     unnamed copy in the work directory when written (tests check
//     these);
//   - passthrough is never used: it needs a handle per open (the
//     backing file is registered in the OPEN reply), which zero-message
//     opens do without, and the kernel turns OPEN off for the whole
//     connection at the first ENOSYS, so it cannot be kept for large
//     files alone; go-fuse binds one backing file per inode, so a lower
//     file held open across a copy-up would take the writes meant for
//     the upper copy. Pages read once stay cached, so passthrough would
//     only speed the first read of each file (docs/performance.md has
//     the measurement).
//
// On a kernel without FUSE_NO_OPEN(DIR)_SUPPORT the server answers the
// opens as before (a handle per open, copy-up when opened for writing).
//
// # Performance
//
// scripts/overlay-bench.sh measures the view against native, kernel
// overlayfs and fuse-overlayfs; docs/performance.md has the figures and the
// levers tried.
//
// Where root has switched FUSE over io_uring on (Linux 6.14+,
// /sys/module/fuse/parameters/enable_uring), the server serves through
// it (package uring, uring_linux.go): the rings are made before INIT
// (so that nothing can fail between asking the kernel for io_uring and
// registering, when the kernel holds every request), registered once
// INIT is answered, and each CPU's queue is served by a thread bound to
// that CPU, the queues at once (two requests in each: a burst of
// callers, as `git status`'s threads stating the index, is served on
// both CPUs; the node tree is safe for concurrent requests, and
// scripts/test.sh runs this package under the race detector); FORGET
// and INTERRUPT still come through /dev/fuse, read by go-fuse's loop as
// before. Where the switch is off, or a ring cannot
// be made or registered, /dev/fuse reads serve everything, as before.
// The trial says which transport its view used, and doctor shows it. With the kernel sending few requests, what a request
// costs is mostly the hand-off between processes, so over /dev/fuse
// reads the server answers them one at a time from one goroutine on one P (MaxInflightRequestBytes
// 1, GOMAXPROCS 1), as fuse-overlayfs does: go-fuse's default of a second
// reader blocked on the device moved every request between threads. It
// never splices (a READ is answered with bytes, so go-fuse's attempt only
// wrote and drained a pipe). While the upper layer is empty and no
// request that may write has come (a fresh view), lookups and listings
// do not look at it. SNAPBACK_FUSE_CPUPROFILE=FILE makes a fresh
// view's server (SNAPBACK_FUSE_KEEP=0) write a CPU profile of its run. A listing carries
// its entries' attributes only where they will likely be used
// (listing_linux.go). What is left per request type, on Go's src/ as a
// git repository: a fresh `find` sends two READDIRPLUS per directory
// (the second finds the end), a fresh `git status` one LOOKUP per
// tracked file (it stats the index's paths before it reads any
// directory), a
// fresh `tar` a READ and a GETATTR per file (GNU tar fstats after
// reading, and a READ drops the cached atime); each file made by `tar x`
// costs MKNOD, WRITE, three SETATTR, three GETATTR and two GETXATTR of
// security.capability (the kernel's check before a write or chown may
// clear privileges; FUSE_HANDLE_KILLPRIV_V2 would leave that to the
// server, which would then clear set-ID bits on every write itself).
package fuse

// Hidden first arguments of snapback's own binary.
const (
	// ExecVerb makes snapback the helper that mounts and execs the command.
	ExecVerb = "__fuse-exec"
	// ServeVerb makes snapback the FUSE server.
	ServeVerb = "__fuse-serve"
	// KeepVerb makes snapback a project's kept view server (keep_linux.go).
	KeepVerb = "__fuse-keep"
)

// The environment of kept views (keep_linux.go).
const (
	// KeepEnv switches kept views off ("0"); they are on otherwise.
	KeepEnv = "SNAPBACK_FUSE_KEEP"
	// KeepIdleEnv is how long a kept view's server waits for the next
	// run (a Go duration).
	KeepIdleEnv = "SNAPBACK_FUSE_KEEP_IDLE"
)
