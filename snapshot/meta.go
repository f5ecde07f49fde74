package snapshot

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Kind says why a snapshot was taken.
type Kind string

// Snapshot kinds. Only snap, run, checkpoint and pre-restore are what
// `undo` reverts; pre-undo and pre-redo are the bookkeeping that makes undo
// and redo exact.
const (
	KindSnap Kind = "snap"
	KindRun  Kind = "run"
	// KindCheckpoint is a stretch of time between `checkpoint begin` and
	// `checkpoint end` (checkpoint.go).
	KindCheckpoint Kind = "checkpoint"
	KindPreUndo    Kind = "pre-undo"
	KindPreRedo    Kind = "pre-redo"
	KindPreRestore Kind = "pre-restore"
)

// Undoable reports whether `undo` may revert a snapshot of this kind.
func (k Kind) Undoable() bool {
	return k == KindSnap || k == KindRun || k == KindCheckpoint || k == KindPreRestore
}

// InProgress reports a record that is not a step yet: a run still
// running (or one that died: recover it) or an open checkpoint. Undo
// never takes it, and retention neither counts nor removes it.
func (m *Meta) InProgress() bool {
	return m.State == StateRunning || m.State == StateOpen
}

// Scope says which paths a snapshot covers.
type Scope string

const (
	// ScopeTree covers every path of the tree but ignored ones: restoring
	// it also removes paths it does not hold.
	ScopeTree Scope = "tree"
	// ScopePaths covers only the paths in its manifest.
	ScopePaths Scope = "paths"
)

// Meta is a snapshot's record, stored as JSON in the store's snapshots/
// directory. The manifest itself is an object, addressed by hash.
type Meta struct {
	ID         string   `json:"id"`
	Kind       Kind     `json:"kind"`
	Message    string   `json:"message,omitempty"`
	Command    []string `json:"command,omitempty"`
	ExitStatus *int     `json:"exit_status,omitempty"`
	Mode       string   `json:"mode,omitempty"`  // run: the isolation mode
	State      string   `json:"state,omitempty"` // run: running, done or interrupted; checkpoint: open or done (runstate.go)
	// Session, for a checkpoint, is the session (an agent's, say) whose
	// stretch it records: `undo --session` reverts all of a session's.
	Session string `json:"session,omitempty"`

	// Turns of several sessions side by side (a checkpoint's, sessions.go):
	// the paths its session's edit tools named (Claimed); AnyPath when it
	// may have written others (a shell command, or a begin from the
	// command line, whose writer is unknown); while open, the tree's state
	// each time another session's checkpoint began or ended (Marks); once
	// closed, the other sessions' checkpoints open during it (Overlaps)
	// and the paths and targets of its step no exact source gives to its
	// session alone (Shared, SharedTargets), which undo leaves unless told.
	Claimed       []string `json:"claimed,omitempty"`
	AnyPath       bool     `json:"any_path,omitempty"`
	Marks         []Mark   `json:"marks,omitempty"`
	Overlaps      []string `json:"overlaps,omitempty"`
	Shared        []string `json:"shared,omitempty"`
	SharedTargets []string `json:"shared_targets,omitempty"`

	CreatedAt time.Time `json:"created_at"`
	Scope     Scope     `json:"scope"`
	// Manifest is the state this snapshot returns to.
	Manifest string `json:"manifest"`
	// After, for a paths snapshot, is the state its paths had right after
	// the change it guards (the run's result, or what an undo wrote): a
	// path that no longer matches it was edited by someone else since, and
	// reverting it is a conflict.
	After string `json:"after,omitempty"`
	// AfterHashesOnly says that the store does not hold the contents After
	// names: a commit moves a run's contents into the tree without a
	// copy. Nothing needs them: undo and redo compare the tree with After
	// by hash, and what they put back is a Manifest (the undo's own
	// record saves the contents it replaces, for redo).
	AfterHashesOnly bool   `json:"after_hashes_only,omitempty"`
	Undoes          string `json:"undoes,omitempty"` // pre-undo: the snapshot it reverted
	// UndoesMore, for a pre-undo of a whole session (`undo --session`),
	// are the session's other steps it reverted along with Undoes.
	UndoesMore []string `json:"undoes_more,omitempty"`
	// UndoesPaths, for a pre-undo of part of a step (`undo ID -- PATH…`),
	// are the paths it reverted: the step itself is not undone (undo
	// still takes the rest of it).
	UndoesPaths []string `json:"undoes_paths,omitempty"`
	Redoes      string   `json:"redoes,omitempty"` // pre-redo: the pre-undo it reapplied
	Files       int      `json:"files"`
	Bytes       int64    `json:"bytes"`
	// Targets are the states outside the tree this snapshot returns to.
	Targets []TargetState `json:"targets,omitempty"`
	// Steps, for a run in a view, are its session's commands (Command is
	// the first's, ExitStatus the last's).
	Steps []Step `json:"steps,omitempty"`
	// WroteThrough and Excluded, for a run in a view, are the topmost
	// ignored paths its commands wrote (in the tree at once) and excluded
	// ones its commit moved into the tree: neither is undone with it.
	WroteThrough []string `json:"wrote_through,omitempty"`
	Excluded     []string `json:"excluded,omitempty"`
	// Skipped, for a run on the tree (copy mode), are the sockets and
	// devices its command left that the record does not carry: undo
	// leaves them where they are.
	Skipped []Skipped `json:"skipped,omitempty"`
	// Git, for a step taken where HEAD lives outside the root (a linked
	// worktree, a submodule), is what HEAD was before and after it
	// (gitseen.go): undo refuses to leave the files disagreeing with it.
	Git []GitHead `json:"git,omitempty"`
}

var idPattern = regexp.MustCompile(`^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$`)

// ValidID reports whether s has the form of a snapshot id.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// NewID makes an id that sorts by time to the second and is unique by a
// random suffix; CreatedAt orders snapshots within one second.
func NewID(t time.Time) string {
	var r [3]byte
	if _, err := rand.Read(r[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux or macOS
	}
	return t.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(r[:])
}

// EncodeMeta serializes m.
func EncodeMeta(m *Meta) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode meta %s: %w", m.ID, err)
	}
	return append(b, '\n'), nil
}

// DecodeMeta parses and checks a snapshot record.
func DecodeMeta(b []byte) (*Meta, error) {
	var m Meta
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: meta: %v", ErrCorrupt, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: meta: trailing data", ErrCorrupt)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%w: meta %q: %v", ErrCorrupt, m.ID, err)
	}
	return &m, nil
}

func (m *Meta) validate() error {
	if !ValidID(m.ID) {
		return fmt.Errorf("bad id")
	}
	switch m.Kind {
	case KindSnap, KindRun, KindCheckpoint, KindPreUndo, KindPreRedo, KindPreRestore:
	default:
		return fmt.Errorf("unknown kind %q", m.Kind)
	}
	if m.Scope != ScopeTree && m.Scope != ScopePaths {
		return fmt.Errorf("unknown scope %q", m.Scope)
	}
	if _, ok := ParseObjectID(m.Manifest); !ok {
		return fmt.Errorf("bad manifest id %q", m.Manifest)
	}
	if _, ok := ParseObjectID(m.After); m.After != "" && !ok {
		return fmt.Errorf("bad after id %q", m.After)
	}
	if m.Undoes != "" && !ValidID(m.Undoes) || m.Redoes != "" && !ValidID(m.Redoes) {
		return fmt.Errorf("bad undo/redo reference")
	}
	if (m.Kind == KindPreUndo) != (m.Undoes != "") || (m.Kind == KindPreRedo) != (m.Redoes != "") {
		return fmt.Errorf("kind %s with undoes=%q redoes=%q", m.Kind, m.Undoes, m.Redoes)
	}
	if len(m.UndoesMore) > 0 && m.Kind != KindPreUndo {
		return fmt.Errorf("kind %s with undoes_more", m.Kind)
	}
	if len(m.UndoesPaths) > 0 && (m.Kind != KindPreUndo || len(m.UndoesMore) > 0) {
		return fmt.Errorf("kind %s with undoes_paths", m.Kind)
	}
	for _, p := range m.UndoesPaths {
		if !ValidPath(p) && p != "" {
			return fmt.Errorf("bad undoes_paths path %q", p)
		}
	}
	for _, id := range m.UndoesMore {
		if !ValidID(id) || id == m.Undoes {
			return fmt.Errorf("bad undoes_more reference %q", id)
		}
	}
	if err := m.validateCheckpoint(); err != nil {
		return err
	}
	if err := m.validateGit(); err != nil {
		return err
	}
	if m.Files < 0 || m.Bytes < 0 {
		return fmt.Errorf("negative counts")
	}
	if m.CreatedAt.IsZero() {
		return fmt.Errorf("no created_at")
	}
	if _, err := m.CreatedAt.MarshalJSON(); err != nil {
		return fmt.Errorf("created_at: %w", err) // an offset of 24h or more: it could never be written back
	}
	for i := range m.Targets {
		// Restores read and write below the payload: it must be one of
		// the store's own, never a path out of it.
		if err := m.Targets[i].validate(); err != nil {
			return fmt.Errorf("target %d: %w", i, err)
		}
	}
	for _, p := range append(append([]string(nil), m.WroteThrough...), m.Excluded...) {
		if !ValidPath(p) {
			return fmt.Errorf("bad path %q", p)
		}
	}
	for _, sk := range m.Skipped {
		if !ValidPath(sk.Path) || sk.Type != SkippedSocket && sk.Type != SkippedDevice {
			return fmt.Errorf("bad skipped path %q (%q)", sk.Path, sk.Type)
		}
	}
	for i := range m.Steps {
		if err := m.Steps[i].validate(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

var payloadPath = regexp.MustCompile(`^targets/[0-9]{8}-[0-9]{6}-[0-9a-f]{6}/[0-9]+$`)
