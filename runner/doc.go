// Package runner owns a run of `snapback run` from start to finish, in
// every isolation mode ([Run]): it picks the mode (from the one list in
// internal/isolation), checks the targets, starts a run or resumes a
// pending one, prepares the view (overlayfs or fuse) or snapshots the
// tree (copy, btrfs), executes the command ([Exec]), records what it
// changed, and then commits it, keeps it for review or discards it. The
// run's records and their states are the snapshot package's
// (snapshot/runstate.go); this package drives them through their steps.
//
// [Exec] runs the user's command the way a shell would, so that snapback
// is invisible to it: same stdin, stdout, stderr and terminal, same
// environment and working directory, signals forwarded, and an exit
// status that tells the caller exactly what happened (the code, or 128+N
// for a signal N; 126 and 127 as a shell reports them).
package runner
