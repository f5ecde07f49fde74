// Package snapshot is the store of a project and everything that reads or
// changes it: content-addressed objects, snapshot records, the stat cache,
// the scanner that reads the tree, the one applier that writes it, the
// journal that makes every change of the tree crash-safe, the history that
// undo, redo and restore walk, and the records of runs. It stays one
// package because these parts share invariants (an object is whole before
// a record names it; a journal is durable before the tree changes; the
// stat cache is trusted only where the applier or scanner wrote it).
//
// # The store: <root>/.snapback/, or outside the tree
//
// The store is .snapback in the root, or a directory outside the tree
// that snapback.toml or the agent hooks chose; [Locate] says which, for
// every verb (locate.go).
//
//	lock              flock held by the snapback that changes the store (lock.go)
//	treerun.lock      flock held by a run on the tree (a tree mode) from its
//	                  snapshot to its record: such runs take turns (treerun.go)
//	objects/ab/cdef…  contents and manifests, named by their SHA-256 (store.go; their
//	                  encoding: package record)
//	packs/<sha256>.pack  contents of up to 16 KiB, many to a file, with an
//	                  index (pack.go); a store made before packs has none
//	snapshots/ID.json one record (record.Meta) per snapshot; an open
//	                  checkpoint is one too, until its end (checkpoint.go)
//	index             the stat cache, checksummed (statcache.go)
//	journal.json      the plan of the tree change in progress (journal.go)
//	runs/ID/          a run: lock (held while its command works: for a
//	                  run in a view, until its last process is gone), and
//	                  for a run in a view run.json (with its session's
//	                  steps: steps.go), upper/ and work/ (viewrun.go), for
//	                  a run with a copy-on-write snapshot before/ (treerun_cow.go)
//	targets/ID/N/     payloads: the saved states of targets (targets.go)
//	tmp/              temporary files, staged links (stage-OPID/) and
//	                  runs being dropped (drop-ID/); recover sweeps it
//	damaged/          what check --repair set aside (damaged.go)
//	agent/            a note per coding agent session of its current turn's
//	                  message, between the hooks' processes (package agent)
//	identity          the inode numbers of the store and of the root it was
//	                  made for: a store that came by a clone, an archive or
//	                  a copy does not match and is refused (trust.go)
//	untrusted-…       parts check --repair set aside (trust.go)
//
// [Open] checks all of the above before anything is read or written: each
// directory a plain one, each file a plain regular file of a sane size,
// every one the store owner's (trust.go); every store file is then read
// through fsutil's bounded reader, which follows no symlink below the
// root and never waits on a FIFO.
//
// # Opening
//
// Every verb opens its project's store the one way, open.go: [Open] for a
// verb that changes the project, [OpenReader] for one that only looks.
// Each says, in [Options], its [Access] (ForRead, ForChange, ForRepair)
// and whether it makes a missing store, where a new one goes and whether
// it goes on past damaged records; opening then loads the config, finds
// the store ([Locate]), checks it, takes the lock, and deals with an
// interrupted operation as the access says: a reader is warned of it, a
// writer finishes it first. A [Reader] has no method that changes the
// tree; the [Repo] that changes it embeds one.
//
// # The journal protocol
//
// Every operation that changes the tree (undo, redo, restore, commit,
// discard, recover) is one transition (journal.go):
//
//  1. read the current state of the paths the target governs, and save
//     every content the change replaces (staged as hard links where the
//     apply removes the file, copied otherwise); check that every
//     content to write is in the store and that the space is there;
//  2. make all of it durable, then write journal.json (Repo.writeJournal,
//     the one writer; it is validated on write and on read): the plan,
//     with the target manifest, the record to write and the times of the
//     directories it changes entries in without holding them (a recovery
//     puts back those, not what the interrupted attempt left);
//  3. apply the target (apply.go: the one applier, used by every verb);
//     restore the targets; adopt the staged links as objects; write the
//     record; drop the run a commit or discard completes;
//  4. remove the journal.
//
// A crash anywhere leaves either no journal (nothing changed) or one that
// Repo.Recover finishes by applying the same target again: applying is
// idempotent. A content found damaged half-way rolls the tree back to the
// saved state instead. Every state-changing system call is preceded by
// fsutil.Mutating, so that the kill test can stop the process before each.
//
// The states of runs are in runstate.go.
//
// # What the caller hears
//
// The package never prints. Long work reports how far it has got through
// [Reader.Progress] (the scanner's paths and bytes, the applier's paths of
// the target: progress.go); what snapshots do not hold, sockets and
// devices, is reported as record.Skipped (ScanStats.Skipped, Meta.Skipped,
// Reader.SkippedIn) rather than dropped unseen.
package snapshot
