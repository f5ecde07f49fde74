package record

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/snapback/snapback/internal/gitdirs"
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
	// `checkpoint end` (package snapshot's checkpoint.go).
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
	State      string   `json:"state,omitempty"` // run: running, done or interrupted; checkpoint: open or done (the State constants)
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
	// Agent is the session's agent's process, when its hooks found it:
	// what its process tree writes is its session's.
	Agent         *Agent   `json:"agent,omitempty"`
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
	// (package snapshot's gitseen.go): undo refuses to leave the files disagreeing with it.
	Git []GitHead `json:"git,omitempty"`
}

// ValidID reports whether s has the form of a snapshot id:
// ^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$ (looked at byte by byte: no regexp
// compiled at every start).
func ValidID(s string) bool {
	if len(s) != 8+1+6+1+6 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 15:
			if c != '-' {
				return false
			}
		case i > 15:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		case c < '0' || c > '9':
			return false
		}
	}
	return true
}

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
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%w: meta %q: %v", ErrCorrupt, m.ID, err)
	}
	return &m, nil
}

func (m *Meta) Validate() error {
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
		if err := m.Targets[i].Validate(); err != nil {
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

// Step is one command of a run's session: the first, then one more for
// each `run --continue` (and each `shell`). The run's record keeps them
// all, so that a session of several commands is not shown as its first.
type Step struct {
	Command    []string  `json:"command"`
	StartedAt  time.Time `json:"started_at"`
	ExitStatus *int      `json:"exit_status,omitempty"` // nil while it runs, or if its end was not seen
	DurationMS int64     `json:"duration_ms"`
	// Paths are the paths of the upper layer the step wrote, created or
	// removed (at most MaxStepPaths of them, sorted); Changes counts them
	// all.
	Paths   []string `json:"paths,omitempty"`
	Changes int      `json:"changes"`
}

// MaxStepPaths bounds the paths a step keeps: an `npm install` writes
// tens of thousands, and the record is read by every `list`.
const MaxStepPaths = 50

func (s *Step) validate() error {
	if len(s.Command) == 0 || s.StartedAt.IsZero() || s.DurationMS < 0 || s.Changes < len(s.Paths) {
		return errors.New("bad step")
	}
	for _, p := range s.Paths {
		if !ValidPath(p) {
			return fmt.Errorf("bad step path %q", p)
		}
	}
	return nil
}

// TargetState is one target's saved state, as a snapshot records it: a
// payload directory in the store, targets/<owner id>/<n>/, holding the
// target's settings (target.json) and what its backend wrote (data/).
type TargetState struct {
	Name    string `json:"name"`
	Backend string `json:"backend"`
	Payload string `json:"payload"` // relative to the store
	Bytes   int64  `json:"bytes"`
	Millis  int64  `json:"millis"` // how long the snapshot took
}

// validate checks a target state read from the store: its payload must be
// a payload directory of the store, targets/<owner id>/<n>.
func (s *TargetState) Validate() error {
	parts := strings.Split(s.Payload, "/")
	if len(parts) != 3 || parts[0] != "targets" || !ValidID(parts[1]) {
		return fmt.Errorf("payload %q", s.Payload)
	}
	if n, err := strconv.Atoi(parts[2]); err != nil || n < 0 || strconv.Itoa(n) != parts[2] {
		return fmt.Errorf("payload %q", s.Payload)
	}
	if s.Bytes < 0 {
		return fmt.Errorf("payload %q: negative size", s.Payload)
	}
	return nil
}

// GitHead is the HEAD of a git dir outside the tree (a linked worktree's,
// a submodule's: see package gitdirs) as an undo step saw it: before
// the step's change and after it. No snapshot holds that git dir, so undo
// cannot put it back; what it can do is see that the step moved HEAD and
// refuse to leave the files reverted under a HEAD that names the step's
// commit (snapshot.GitMovedError).
type GitHead struct {
	GitDir string       `json:"git_dir"`
	Before gitdirs.Head `json:"before"`
	// After is unset while the step is open.
	After *gitdirs.Head `json:"after,omitempty"`
}

// Moved reports whether the step moved HEAD: another commit, or another
// branch.
func (g GitHead) Moved() bool { return g.After != nil && *g.After != g.Before }

func (g GitHead) Validate() error {
	if !filepath.IsAbs(g.GitDir) || filepath.Clean(g.GitDir) != g.GitDir {
		return fmt.Errorf("git head: bad git dir %q", g.GitDir)
	}
	for _, h := range []*gitdirs.Head{&g.Before, g.After} {
		if h == nil {
			continue
		}
		if h.Ref != "" && !gitdirs.ValidRefName(h.Ref) || h.OID != "" && !gitdirs.ValidOID(h.OID) {
			return fmt.Errorf("git head %s: bad ref %q or object id %q", g.GitDir, h.Ref, h.OID)
		}
	}
	return nil
}

// validateGit checks the git heads of a record read from the store.
func (m *Meta) validateGit() error {
	for _, g := range m.Git {
		if err := g.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Skipped is a path that snapshots, and so commits, undo and redo, do
// not carry: a Unix socket (as tar and git skip them: it is a live
// endpoint, not data) or a device file.
type Skipped struct {
	Path string `json:"path"`
	Type string `json:"type"` // SkippedSocket or SkippedDevice
}

// The types of Skipped.
const (
	SkippedSocket = "socket"
	SkippedDevice = "device"
)

// Reason says why the path is not carried, for a person to read.
func (s Skipped) Reason() string {
	return "a " + s.Type + " is not carried"
}

// maxSession bounds a session's name: harnesses name theirs with a UUID.
const maxSession = 128

// ValidSession checks a session's name ("" is none): printable UTF-8, at
// most 128 bytes, no space at either end.
func ValidSession(s string) error {
	switch {
	case len(s) > maxSession:
		return fmt.Errorf("session %.20q…: longer than %d bytes", s, maxSession)
	case !utf8.ValidString(s):
		return fmt.Errorf("session %q: not UTF-8", s)
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("session %q: space at an end", s)
	case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("session %q: a control character", s)
	}
	return nil
}

// validateCheckpoint checks what a record says about checkpoints: only a
// checkpoint has a session, and an open one is a tree snapshot while a
// closed one holds its paths before and after.
func (m *Meta) validateCheckpoint() error {
	if err := m.validateSessions(); err != nil {
		return err
	}
	if m.Session != "" && m.Kind != KindCheckpoint {
		return fmt.Errorf("kind %s with a session", m.Kind)
	}
	if err := ValidSession(m.Session); err != nil {
		return err
	}
	if m.Kind != KindCheckpoint {
		if m.State == StateOpen {
			return fmt.Errorf("kind %s with state open", m.Kind)
		}
		return nil
	}
	switch m.State {
	case StateOpen:
		if m.Scope != ScopeTree || m.After != "" {
			return fmt.Errorf("open checkpoint of scope %s", m.Scope)
		}
	case StateDone:
		if m.Scope != ScopePaths || m.After == "" {
			return fmt.Errorf("closed checkpoint of scope %s without after", m.Scope)
		}
	default:
		return fmt.Errorf("checkpoint in state %q", m.State)
	}
	if m.Command != nil || m.ExitStatus != nil || m.Mode != "" {
		return fmt.Errorf("checkpoint with a command")
	}
	return nil
}

// The states of a run and of a checkpoint (their transitions are in
// package snapshot's runstate.go). A run is running, then pending (in a
// view, its changes waiting), then done or interrupted; a checkpoint is
// open, then done.
const (
	StateRunning     = "running"
	StatePending     = "pending"
	StateDone        = "done"
	StateInterrupted = "interrupted"
	StateOpen        = "open"
)
