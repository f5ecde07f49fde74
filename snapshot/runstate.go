package snapshot

// The states of a run, in one place. Both kinds of run start "running":
// snapback holds the run's lock (runs/<id>/lock) for as long as the
// command works, so that another snapback can tell a live run from one
// whose process died.
//
// A run on the tree itself (tree modes, copy and btrfs: [TreeRun]) is a record
// in snapshots/ from the start:
//
//	running ──FinishTreeRun──> done          the command ended; the record
//	                                     holds the paths it changed
//	running ──recover────> interrupted   its snapback died; what the
//	                                     command changed until then is
//	                                     recorded the same way
//
// A run in a view (view modes, overlayfs and fuse: [ViewRun]) keeps its changes in its
// upper layer, with its state in runs/<id>/run.json, until they are
// committed or discarded:
//
//	(none) ──StartViewRun──> running     the view's directories and the
//	                                     targets' states are made first
//	running ──EndCommand──> pending      the command ended: the lock is
//	                                     released, ignored paths written
//	                                     through, the rest waits
//	running (process dead) ─> pending    reported so by PendingRuns: the
//	                                     layer is intact (the overlay
//	                                     modes' init holds the lock too,
//	                                     until no process of the run is
//	                                     left, so none writes after this)
//	pending ──Resume──────> running      another command in the same view
//	                                     (each command is a Step: BeginStep,
//	                                     then EndCommand completes it)
//	pending ──CommitViewRun─> a run record, state done, and the run's
//	                          directory goes (a selective commit leaves
//	                          the rest pending)
//	pending ──DiscardViewRun─> the directory goes; targets are restored
//
// Package runner drives these steps; nothing else changes a run's state.
//
// A checkpoint (checkpoint.go) is a record in snapshots/ too, but holds
// no lock: it stays open until `checkpoint end`, whichever process calls
// it, and recover leaves it open:
//
//	(none) ──BeginCheckpoint──> open   a tree snapshot of the state before
//	open ──EndCheckpoint──> done       narrowed to the paths changed since
//	open ──EndCheckpoint──> (none)     nothing changed: no undo step
//
// The state names are package record's (record.StateRunning, …).
