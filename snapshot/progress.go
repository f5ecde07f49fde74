package snapshot

// Progress is how far a long step has got. The repo reports it to
// [Repo.Progress] as the work goes and never prints it: the command line
// decides whether and how to show it.
type Progress struct {
	// Step is what is being done: StepScan (a snapshot reading the
	// tree: snap, a copy-mode run) or StepApply (commit, undo, redo and
	// restore putting paths in place).
	Step string
	// Paths: the paths seen (StepScan) or applied (StepApply) so far.
	Paths int64
	// Total: the paths to apply (StepApply); 0 when not known (StepScan).
	Total int64
	// Bytes: the bytes of file content read so far (StepScan).
	Bytes int64
	// Done: the step is over (the last report of it, with its totals).
	Done bool
}

// The steps of Progress.
const (
	StepScan  = "scanning"
	StepApply = "applying"
)

// progressFunc is the type of Repo.Progress: called often (once a path),
// from several goroutines at once, so it must be quick and safe for
// concurrent use; successive calls of one step may come slightly out of
// order.
type progressFunc = func(Progress)

// report calls fn, when set.
func report(fn progressFunc, p Progress) {
	if fn != nil {
		fn(p)
	}
}
