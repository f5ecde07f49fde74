// Package watch keeps a journal of the paths that change in a project's
// tree, so that a checkpoint's end reads only those instead of every path.
//
// # The watcher
//
// One process per project ([Serve], started by [Start] as `snapback
// __watch-tree ROOT STORE`, detached) watches every directory of the tree
// with inotify and numbers what it sees: each event that names a path
// gets the next sequence number, and the path is noted with it (and its
// parent directory, whose listing and mtime a create, delete or rename
// changes). A directory that appears (made, or moved in) is noted deep:
// what was put in it before its own watches existed had no event, so the
// reader scans all of it. A generation, chosen at random when the watcher
// starts (and again after it lost events), names the numbering: a
// sequence number means nothing in another generation.
//
// Its files are in the store's watch/ directory, private as the store is:
// lock (flock held while it runs: one watcher per project), sock (where
// it answers) and marks/ (see below). [Start] makes them, takes the lock
// and passes it, with the socket, to the watcher: the command that
// starts it is at work on the store then, while the watcher, detached,
// may start as the tree and its store are being removed (a test's
// directory at its end), and a name made in a directory the removal has
// already listed fails it (directory not empty). The watcher makes only
// its markers, in the marks/ it holds open, and only after looking that
// its root and store are still where they were. It exits when nothing
// has asked it anything for an hour (SNAPBACK_WATCH_IDLE), when the root
// or the store goes (it looks on each removal in watch/, and every few
// seconds), and when asked to ([Stop]).
//
// # Vouching
//
// [Mark] asks for a token, (generation, sequence): every change that
// happens after the answer gets a greater number. [Since] asks which
// paths changed after a token; the watcher answers only when it can vouch
// for the whole stretch, else it says why not ([NotVouchedError]): its
// generation changed (it restarted, or its queue overflowed: the
// kernel's IN_Q_OVERFLOW), a watch could not be added (the
// fs.inotify.max_user_watches limit, a directory it may not read), the
// root moved. A watcher that is not running cannot vouch either.
//
// The race between a change and the question is closed by a marker: on
// each Since the watcher creates a file in marks/, which it watches with
// the same inotify instance as the tree, and answers once it has read
// that file's event. The kernel queues an instance's events in the order
// they happen, so every change made before the question (before `end`
// began) was read by then.
//
// What inotify does not report, a watcher cannot vouch for: a write
// through a shared memory mapping (mmap) is not an event until the
// file's last descriptor and mapping are gone, so the reader also reads
// every file a process holds for writing or maps shared and writable
// then ([Writers], from /proc); a change made through another name of a
// hard-linked file (another directory's name, or one outside the tree)
// is reported only under the name used, so the reader also reads every
// file that had several names when the checkpoint began; a change made on
// another machine (a network filesystem) is never reported, so the
// watcher refuses to vouch on filesystems other than local disk ones.
//
// # Writers' processes
//
// Running as root on a kernel with pidfs (Linux 6.9 or later), the
// watcher also makes a fanotify group (FAN_REPORT_DFID_NAME, with a
// pidfd for the writer: FAN_REPORT_PIDFD) with a mark on each directory
// it watches, added with its inotify watch (the changes inotify hears
// of, on files and directories: not a mark on the whole filesystem,
// whose other events, the rest of the machine's, would each cost a
// pidfd), and one on marks/. Each event names a directory by its file
// handle, and a name in it: the watcher notes each directory's handle
// as it marks it, so an event maps to a tree path (one of a directory
// it does not know, moved away, is dropped). Its reader (which owns the
// group, and sleeps until an event, an exit or its stop comes: a second
// at most while it waits for an exit, below) reads the writer's lineage at once,
// before handing the event on: the writer's /proc/PID/stat (its parent, its start time), checked
// to be the pidfd's process after the read (an id is taken again only
// once its process is gone), then each ancestor's, each started no
// later than its child (else a later process took the id: not known).
// Lineages are kept by the pidfd's inode (pidfs numbers each process
// once). A writer gone (reaped) before the reader reads its event (a
// short command: rm, sed -i) has no pidfd: the reader also listens to
// the kernel's process connector (netlink, root, in the initial pid
// namespace, whose ids it tells), which tells each process's exit, with
// its parent then (only exits: the connector filters the rest out; they
// are read at most every 100 ms, so a busy machine's exits wake the
// reader at most ten times a second, and an idle machine's not at
// all). The exiting process tells it itself, just after its
// parent was told of its exit: the parent may have reaped it, and the
// event be read, before (a process preempted there, on a busy machine),
// so an exit not told yet is waited for (up to a second for a batch of
// events; it comes as soon as the process runs again). Such a
// writer's lineage is its exit's parent's (alive and started by then,
// or gone too: its own exit says), when exactly one exit of the id is
// known: exits are forgotten once the fanotify queue has been seen empty
// after them (every event of their writes was read by then), so two
// mean the id was taken again, and none (after the wait) is not known;
// so is everything while exits were lost (the connector's queue
// overflowed) until the fanotify queue has been empty since.
//
// Each event gets the next sequence number, as inotify's, and the path
// (with its directory, for a create, delete or rename) keeps, for each
// writer, the number of its last write. [WrittenBy] asks, after a token
// and for given processes (the sessions' agents), which of their trees
// wrote each path changed since: the path's writers numbered after the
// token, each matched against the lineages. "Not known" (-1) is a writer
// whose lineage could not be read or is none of theirs, a change no
// fanotify event told (a path
// below a directory that came, went or moved in the stretch: events in
// it may name it by its old or new place), or everything when the
// group's queue overflowed after the token (FAN_Q_OVERFLOW), a
// directory could not be marked or had no handle, or another filesystem
// is mounted in the tree. An event of one group may be read before or
// after the other's of the same change (the kernel does not
// order two groups): a fanotify event read late is numbered after a
// token given meanwhile, which only adds a writer to the stretch. The
// marker closes the race for both: a WrittenBy is answered once the
// marker's events of both groups have been read. Without root or
// pidfs, or where fanotify refuses the marks (a filesystem without file
// handles), writers are not told: WrittenBy says why ([WriterStatus]).
package watch
