package main

import (
	"time"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/catalog"
	"github.com/snapback/snapback/internal/watch"
	"github.com/snapback/snapback/snapshot/record"
)

// What the verbs print under --json, one named type per verb's object
// (docs/json.md documents each). Fields are in the order of their names,
// as a map's keys marshal: the objects are byte for byte what the maps
// they replace printed. The types of the records, snapshots and archives
// they carry (snapJSON, archiveJSON, …) live beside the verbs that share
// them.

// archiveCreateJSON: archive create.
type archiveCreateJSON struct {
	Archive archiveJSON `json:"archive"`
	Existed bool        `json:"existed"`
}

// archiveVerifyJSON: archive verify of one archive.
type archiveVerifyJSON struct {
	Archive archiveJSON `json:"archive"`
	OK      bool        `json:"ok"`
}

// archiveRestoreJSON: archive restore.
type archiveRestoreJSON struct {
	Archive archiveJSON `json:"archive"`
	Files   int         `json:"files"`
	Into    string      `json:"into"`
	Targets int         `json:"targets"`
}

// prunePreviewJSON: archive prune without --apply, the plan.
type prunePreviewJSON struct {
	Delete    []archiveJSON      `json:"delete"`
	ExpiresAt time.Time          `json:"expires_at"`
	Keep      int                `json:"keep"`
	Kept      []archiveJSON      `json:"kept"`
	Later     int                `json:"later"`
	MaxDelete int                `json:"max_delete"`
	Others    int                `json:"others"`
	Rejected  []catalog.Rejected `json:"rejected"`
	Token     string             `json:"token"`
}

// pruneApplyJSON: archive prune --apply.
type pruneApplyJSON struct {
	Deleted []string `json:"deleted"`
}

// pushJSON: archive push.
type pushJSON struct {
	Invalid []catalog.Rejected `json:"invalid"`
	Pushed  []string           `json:"pushed"`
	Skipped []string           `json:"skipped"`
}

// pullJSON: archive pull.
type pullJSON struct {
	Differs []string `json:"differs"`
	Pulled  []string `json:"pulled"`
	Skipped []string `json:"skipped"`
}

// backendsJSON: backends.
type backendsJSON struct {
	Backends []backends.Status `json:"backends"`
}

// gcJSON: gc.
type gcJSON struct {
	BytesFreed       int64 `json:"bytes_freed"`
	ObjectsRemoved   int   `json:"objects_removed"`
	SnapshotsRemoved int   `json:"snapshots_removed"`
}

// nonNil is s, or an empty slice where s is nil: a list prints as [],
// never null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// agentHooksJSON: a harness's hooks install wrote, in doctor and
// checkpoint status.
type agentHooksJSON struct {
	File       string     `json:"file"` // relative to the root, or absolute (in the user's home)
	Harness    string     `json:"harness"`
	LastFired  *time.Time `json:"last_fired,omitempty"`
	NeverFired bool       `json:"never_fired"`
	NextStep   string     `json:"next_step,omitempty"` // with never_fired: what the user has to do
}

// agentCommandJSON: agent install --command.
type agentCommandJSON struct {
	Begin string `json:"begin"` // before each tool that may change files
	End   string `json:"end"`   // at the end of each turn
}

// agentInstallJSON: agent install and uninstall.
type agentInstallJSON struct {
	Changed bool     `json:"changed"`
	Diff    *string  `json:"diff,omitempty"` // with --dry-run (empty: nothing would change)
	DryRun  bool     `json:"dry_run"`
	Events  []string `json:"events"`
	File    string   `json:"file"`
	Harness string   `json:"harness"`
	Next    string   `json:"next_step,omitempty"` // what the user still has to do for the hooks to run
	Store   string   `json:"store,omitempty"`     // where install made the project's first store
}

// commitJSON: commit, and run --then commit's commit.
type commitJSON struct {
	Partial  bool             `json:"partial"`
	Run      string           `json:"run"`
	Skipped  []record.Skipped `json:"skipped"`
	Snapshot *snapshotJSON    `json:"snapshot"` // null: the run changed nothing
}

// discardJSON: discard.
type discardJSON struct {
	Discarded       string           `json:"discarded"`
	DroppedExcluded []string         `json:"dropped_excluded"`
	KeptIgnored     []string         `json:"kept_ignored"`
	RestoredTargets []restoredTarget `json:"restored_targets"`
}

// restoredTarget is a target a discard or a failed run's line restored:
// its name, backend and the paths of the tree the run wrote to it.
type restoredTarget struct {
	Backend string   `json:"backend"`
	Name    string   `json:"name"`
	Paths   []string `json:"paths"`
}

// doctorJSON: doctor.
type doctorJSON struct {
	Agents       []agentHooksJSON `json:"agents"`
	Covered      []coveredJSON    `json:"covered"`
	KeptView     int              `json:"kept_view"` // the pid of the project's kept fuse view server, 0 if none
	Modes        []modeJSON       `json:"modes"`
	Root         string           `json:"root"`
	Store        string           `json:"store"`
	StoreWarning string           `json:"store_warning"`
	Uncovered    uncoveredJSON    `json:"uncovered"`
	Writers      writersJSON      `json:"writers"`
}

// writersJSON says whether the tree's watcher tells whose processes
// wrote what changed (it runs as root, with fanotify), which sessions
// side by side use to tell their shell commands' writes apart; if not,
// why.
type writersJSON struct {
	On  bool   `json:"on"`
	Why string `json:"why,omitempty"`
}

// writerState asks the watcher of the store at dir ("": none yet).
func writerState(dir string) writersJSON {
	if dir == "" {
		return writersJSON{Why: "no store yet"}
	}
	on, why, err := watch.WriterStatus(dir)
	if err != nil {
		why = err.Error()
	}
	return writersJSON{On: on, Why: why}
}

// snapResultJSON: snap.
type snapResultJSON struct {
	BytesRead int64         `json:"bytes_read"`
	FilesRead int           `json:"files_read"`
	Snapshot  snapshotJSON  `json:"snapshot"`
	Uncovered uncoveredJSON `json:"uncovered,omitempty"`
}

// revertJSON: undo, redo and restore (with paths: undo ID -- PATH...).
type revertJSON struct {
	LeftShared *sharedLeftJSON `json:"left_shared,omitempty"` // undo: what it left, shared with another session's turn
	Paths      []string        `json:"paths,omitempty"`
	Saved      snapshotJSON    `json:"saved"`
	Snapshot   snapshotJSON    `json:"snapshot"`
	Uncovered  uncoveredJSON   `json:"uncovered,omitempty"`
}

// sharedLeftJSON: what an undo left because another session's turn
// shares it (undo --include-shared takes it).
type sharedLeftJSON struct {
	Paths   []string `json:"paths"`
	Targets []string `json:"targets"`
}
