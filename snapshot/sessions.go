package snapshot

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/snapback/snapback/internal/watch"
	"github.com/snapback/snapback/snapshot/record"
)

// Sessions side by side: each session has its own open checkpoint, and
// turns of different sessions may overlap in time (two agents in one
// project). Each checkpoint narrows to the paths changed while it was
// open, whoever changed them; its step then keeps only what its session
// changed, by what is known exactly:
//
//   - Claimed: the paths the session's edit tools named before writing
//     (a hook's PreToolUse payload), each with the directories above it;
//   - AnyPath: the session may have written any path (a shell command, or
//     a checkpoint begun from the command line, whose writer is unknown);
//   - Marks: while a checkpoint is open, each time another session's
//     begins or ends (or, beside others, turns to writing any path: its
//     first shell command), the tree's state then and which other
//     sessions' checkpoints are open from then on. They cut its stretch into
//     spans, each with a fixed set of sessions open; each mark holds the
//     claims (paths, or any path) the open sessions made during its span.
//
//   - Agent: the session's agent's process, when a hook found it (the
//     hook's nearest ancestor that is not a shell): its descendants run
//     the session's shell commands.
//
// A changed path is looked at in each span where it changed. In a span
// where no other session's checkpoint was open, the change is the
// session's, whoever made it (as with one session). In a span shared
// with others, a path every write of which during the checkpoint the
// tree's watcher saw made by the processes of one session's agent
// (fanotify, as root: internal/watch), that session open in the span,
// is that session's; else its writers are the sessions open in it that
// claimed the path, or said they may write any path, in that span or an earlier one
// (a claim comes before the write); with none (a person's edit, a tool
// the hooks do not see) it is nobody's known. Over the spans: a path
// whose writers are the session alone is its own; one whose writers are
// other sessions only is left out of this step (their steps hold it);
// any other is shared: kept in the step, listed in Shared, and
// left alone by undo unless --include-shared. A directory whose only
// change is its times (a child came or went) follows the paths below it
// and is never shared. A target (a database) cannot be told apart by
// path or time: with another session's checkpoint open at any time
// during this one, it is the session's only when the session may write
// any path and no other overlapping session may; otherwise it is shared
// (SharedTargets).
//
// Claims are made before the tool writes, and each claim made while
// other sessions' checkpoints are open goes into the current mark of
// every open checkpoint: what a session's tools can have written in a
// span is claimed by the span's end, and not before the span where it
// was claimed. The marks are written in an order that errs on the side of
// sharing: a begin marks the other checkpoints before its own record is
// written (a crash between leaves marks naming a checkpoint that never
// opened, which claimed nothing), and an end writes its closed record
// before it marks the others (a crash between leaves them believing it
// open longer, making no claim).

// Writes is what a session says it is about to write, as its turn's
// checkpoint is begun or found open.
type Writes struct {
	// Paths are the paths its edit tools will write, relative to the
	// root and slash-separated.
	Paths []string
	// Any: it may write any path (a shell command).
	Any bool
	// Agent is the session's agent's process, when known: kept in the
	// checkpoint the turn opens ([HookAgent]).
	Agent *record.Agent
}

// HookAgent is the agent's process of the hook this process runs as (see
// watch.Agent): its nearest ancestor that is not a shell or snapback;
// nil where none is known.
func HookAgent() *record.Agent {
	p, ok := watch.Agent()
	if !ok {
		return nil
	}
	return &record.Agent{Pid: p.Pid, Start: p.Start, PidNS: watch.PidNS()}
}

// ErrWhichCheckpoint refuses an end without a session while checkpoints
// of several sessions are open.
var ErrWhichCheckpoint = errors.New("several checkpoints are open")

// valid is w with each path the store could not name (a harness's
// payload is outside input) taken as any path: nothing exact is known of
// it.
func (w Writes) valid() Writes {
	out := Writes{Any: w.Any, Agent: w.Agent}
	for _, p := range w.Paths {
		if record.ValidPath(p) {
			out.Paths = append(out.Paths, p)
		} else {
			out.Any = true
		}
	}
	return out
}

// claim adds w (valid) to m's writes and reports whether anything was
// new.
func claim(m *record.Meta, w Writes) bool {
	grew := false
	for _, p := range w.Paths {
		i, found := slices.BinarySearch(m.Claimed, p)
		switch {
		case found:
		case len(m.Claimed) >= record.MaxClaims:
			w.Any = true
		default:
			m.Claimed, grew = slices.Insert(m.Claimed, i, p), true
		}
	}
	if w.Any && !m.AnyPath {
		m.AnyPath, grew = true, true
	}
	return grew
}

// OpenCheckpoints lists the open checkpoints, oldest first (at most one
// per session). A damaged record is as for [Reader.OpenCheckpoint].
func (r *Reader) OpenCheckpoints() ([]*record.Meta, error) {
	all, damaged, err := r.liveRecords()
	if err != nil {
		return nil, err
	}
	if len(damaged) > 0 && !r.SkipDamaged {
		return nil, damagedError(damaged)
	}
	var out []*record.Meta
	for _, m := range all {
		if m.Kind == record.KindCheckpoint && m.State == record.StateOpen {
			out = append(out, m)
		}
	}
	return out, nil
}

// openOf picks from open the checkpoint of session; "" picks the one
// begun without a session, or else the only one open (nil when none is).
func openOf(open []*record.Meta, session string) (*record.Meta, error) {
	for _, m := range open {
		if m.Session == session {
			return m, nil
		}
	}
	if session != "" || len(open) == 0 {
		return nil, nil
	}
	if len(open) == 1 {
		return open[0], nil
	}
	var names []string
	for _, m := range open {
		names = append(names, m.Session)
	}
	return nil, fmt.Errorf("%w (sessions %s): name the session", ErrWhichCheckpoint, strings.Join(names, ", "))
}

// claimOf is what m's session has claimed so far.
func claimOf(m *record.Meta) record.Claim {
	return record.Claim{ID: m.ID, Session: m.Session, AnyPath: m.AnyPath, Paths: m.Claimed, Agent: m.Agent}
}

// addClaim adds c to the claims of mark k.
func addClaim(k *record.Mark, c record.Claim) {
	for i := range k.Claims {
		if o := &k.Claims[i]; o.ID == c.ID {
			o.AnyPath = o.AnyPath || c.AnyPath
			if o.Agent == nil {
				o.Agent = c.Agent
			}
			for _, p := range c.Paths {
				j, found := slices.BinarySearch(o.Paths, p)
				switch {
				case found:
				case len(o.Paths) >= record.MaxClaims:
					o.AnyPath = true
				default:
					o.Paths = slices.Insert(o.Paths, j, p)
				}
			}
			return
		}
	}
	c.Paths = sortedSet(append([]string(nil), c.Paths...))
	if len(c.Paths) > record.MaxClaims {
		c.Paths, c.AnyPath = nil, true
	}
	k.Claims = append(k.Claims, c)
}

// claimBeside writes m, which claimed w just now, and adds w to the
// current mark of m and of each other open checkpoint: the span it is
// claimed in. When m's session turns to writing any path (its first
// shell command), a new span begins for all of them (cut): what the
// others wrote before it stays theirs.
func (r *Repo) claimBeside(open []*record.Meta, m *record.Meta, w Writes, cut bool) error {
	if len(m.Marks) == 0 { // no other session's beside it: its record says it
		return r.WriteMeta(m)
	}
	c := record.Claim{ID: m.ID, Session: m.Session, AnyPath: w.Any, Paths: w.Paths, Agent: m.Agent}
	var tree string
	if cut {
		t, err := r.ScanTree(true)
		if err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
		if tree, err = r.record(t); err != nil {
			return err
		}
		if err := r.Flush(); err != nil {
			return err
		}
	}
	now := time.Now().UTC()
	for _, o := range open {
		if len(o.Marks) == 0 {
			continue
		}
		if cut {
			last := o.Marks[len(o.Marks)-1]
			o.Marks = append(o.Marks, record.Mark{At: now, Tree: tree, Open: last.Open})
		}
		addClaim(&o.Marks[len(o.Marks)-1], c)
		if err := r.WriteMeta(o); err != nil {
			return err
		}
	}
	return nil
}

// markOthers appends a mark to each checkpoint of open not of self's
// session: the tree is tree at t, and the others open from then on are
// those of open, with self when it begins (joins: with what it claims
// at its beginning), without it when it ends.
func (r *Repo) markOthers(open []*record.Meta, self *record.Meta, joins bool, t time.Time, tree string) error {
	for _, m := range open {
		if m.Session == self.Session {
			continue
		}
		if len(m.Marks) == 0 { // the first: its beginning, alone
			k := record.Mark{At: m.CreatedAt, Tree: m.Manifest}
			addClaim(&k, claimOf(m))
			m.Marks = []record.Mark{k}
		}
		k := record.Mark{At: t, Tree: tree}
		for _, o := range open {
			if o != m && o.Session != self.Session {
				k.Open = append(k.Open, o.ID)
			}
		}
		if joins {
			k.Open = append(k.Open, self.ID)
			addClaim(&k, claimOf(self))
		}
		m.Marks = append(m.Marks, k)
		if err := r.WriteMeta(m); err != nil {
			return err
		}
	}
	return nil
}

// treeAfter is the whole tree at a checkpoint's end, from the whole tree
// at its beginning and its narrowed change: the state the marks of the
// others open need, without a second scan.
func (r *Repo) treeAfter(begin string, changed record.Manifest) (string, error) {
	if bt, blocked, err := r.openBlocked(begin); err != nil {
		return "", err
	} else if blocked { // patched a block at a time (blocked.go)
		var paths []string
		var now record.Manifest
		for _, e := range changed {
			paths = append(paths, e.Path)
			if e.Type != record.Absent {
				now = append(now, e)
			}
		}
		id, _, _, err := bt.patch(r, paths, nil, now)
		if err != nil {
			return "", err
		}
		return id, r.Flush()
	}
	full, err := r.LoadManifest(begin)
	if err != nil {
		return "", err
	}
	out := make(record.Manifest, 0, len(full)+len(changed))
	for i := range full {
		if changed.Find(full[i].Path) == nil {
			out = append(out, full[i])
		}
	}
	for i := range changed {
		if changed[i].Type != record.Absent {
			out = append(out, changed[i])
		}
	}
	out.Sort()
	id, err := r.record(out)
	if err != nil {
		return "", err
	}
	return id, r.Flush() // on disk before a record names it
}

// claimSet is a session's claims with the directories above them: a
// directory an edit tool made to write a file below it is its too.
func claimSet(claimed []string) map[string]bool {
	set := map[string]bool{}
	for _, p := range claimed {
		for q := p; !set[q]; q = record.Parent(q) {
			set[q] = true
			if q == "" {
				break
			}
		}
	}
	return set
}

// writer is what one session said it may write, up to a span.
type writer struct {
	session string
	any     bool
	claims  map[string]bool
}

// spanWriters lists, for each span of marks, the sessions' writers in
// it by checkpoint: what each claimed in that span or an earlier one.
func spanWriters(marks []record.Mark) []map[string]*writer {
	out := make([]map[string]*writer, len(marks))
	cur := map[string]*writer{}
	for i, k := range marks {
		for _, c := range k.Claims {
			w := cur[c.ID]
			if w == nil {
				w = &writer{session: c.Session, claims: map[string]bool{}}
			} else {
				w = &writer{session: w.session, any: w.any, claims: maps.Clone(w.claims)}
			}
			w.any = w.any || c.AnyPath
			for p := range claimSet(c.Paths) {
				w.claims[p] = true
			}
			cur[c.ID] = w
		}
		out[i] = maps.Clone(cur)
	}
	return out
}

// sameAt reports whether a path is in the same state in two manifests
// (nil: absent), as narrowing compares it; a directory's times are no
// change (they move whenever a child comes or goes).
func sameAt(a, b *record.Entry) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if a.Type == record.Dir && b.Type == record.Dir {
		return !a.Changed(b)
	}
	return a.SameContent(b) && a.SameMeta(b)
}

// markTrees loads the tree of each mark but the first (the beginning,
// as the checkpoint's before has it), at paths: what attribute asks of
// it (a blocked tree is read a block at a time). A mark whose tree cannot be read (a
// damaged object) is merged into the span before it: the two spans are
// judged as one, with the sessions and claims of both, which can only
// share more.
func (r *Repo) markTrees(marks []record.Mark, paths []string) ([]record.Mark, []record.Manifest) {
	out, trees := marks[:1:1], []record.Manifest{nil}
	for _, k := range marks[1:] {
		t, err := r.stateAt(k.Tree, paths)
		if err == nil {
			out, trees = append(out, k), append(trees, t)
			continue
		}
		prev := &out[len(out)-1]
		prev.Open = sortedSet(append(append([]string(nil), prev.Open...), k.Open...))
		for _, c := range k.Claims {
			addClaim(prev, c)
		}
	}
	return out, trees
}

// stateAt returns the state id's entries at paths (sorted): a blocked
// state is read a block at a time, a plain one whole.
func (r *Repo) stateAt(id string, paths []string) (record.Manifest, error) {
	bt, blocked, err := r.openBlocked(id)
	if err != nil || !blocked {
		if err == nil {
			return r.LoadManifest(id)
		}
		return nil, err
	}
	var out record.Manifest
	for _, p := range paths {
		e, err := bt.find(p)
		if err != nil {
			return nil, err
		}
		if e != nil {
			out = append(out, *e)
		}
	}
	return out, nil
}

// attribute cuts m, narrowed to the paths changed while it was open, to
// what its session changed, and lists what it shares with the sessions
// whose checkpoints overlapped it (see the top of this file).
func (r *Repo) attribute(m *record.Meta) error {
	marks := m.Marks
	m.Marks = nil
	overlaps := map[string]bool{}
	for _, k := range marks {
		for _, id := range k.Open {
			overlaps[id] = true
		}
	}
	if len(overlaps) == 0 {
		return nil
	}
	for id := range overlaps {
		m.Overlaps = append(m.Overlaps, id)
	}
	sort.Strings(m.Overlaps)
	before, err := r.LoadManifest(m.Manifest)
	if err != nil {
		return err
	}
	after, err := r.LoadManifest(m.After)
	if err != nil {
		return err
	}
	marks, trees := r.markTrees(marks, after.Paths())
	ws := spanWriters(marks)
	by, sessionOf := r.writtenBy(m, marks)
	const nobody = "\x00nobody"
	// whose lists the sessions that may have written p over the spans
	// where it changed.
	whose := func(p string) map[string]bool {
		out := map[string]bool{}
		at := func(i int) *record.Entry {
			var e *record.Entry
			switch {
			case i == 0:
				e = before.Find(p)
			case i == len(marks):
				e = after.Find(p)
			default:
				e = trees[i].Find(p)
			}
			if e != nil && e.Type == record.Absent {
				return nil
			}
			return e
		}
		for i := range marks {
			if sameAt(at(i), at(i+1)) {
				continue
			}
			if len(marks[i].Open) == 0 {
				out[m.Session] = true
				continue
			}
			// Written by one open session's agent's processes alone.
			if ids := by[p]; len(ids) == 1 && (ids[0] == m.ID || slices.Contains(marks[i].Open, ids[0])) {
				out[sessionOf[ids[0]]] = true
				continue
			}
			found := false
			for _, id := range append([]string{m.ID}, marks[i].Open...) {
				if w := ws[i][id]; w != nil && (w.any || w.claims[p]) {
					out[w.session], found = true, true
				}
			}
			if !found {
				out[nobody] = true
			}
		}
		return out
	}
	keep, shared, churn := map[string]bool{}, []string{}, []string{}
	for i := range after {
		a := &after[i]
		b := before.Find(a.Path)
		if b != nil && b.Type == record.Dir && a.Type == record.Dir && !b.Changed(a) {
			churn = append(churn, a.Path)
			continue
		}
		w := whose(a.Path)
		switch {
		case len(w) == 1 && w[m.Session]:
			keep[a.Path] = true
		case len(w) > 0 && !w[m.Session] && !w[nobody]:
			// Other sessions' alone: their steps hold it. (A change no
			// span shows, the marks disagreeing with the narrowing, is
			// shared: nothing is dropped on a guess.)
		default:
			keep[a.Path] = true
			shared = append(shared, a.Path)
		}
	}
	for _, d := range churn {
		for p := range keep {
			if record.Under(p, d) {
				keep[d] = true
				break
			}
		}
	}
	// A target is written by a shell command or a tool, never an edit
	// tool's path, at no time snapback sees.
	anyOthers := false
	for _, k := range marks {
		for _, c := range k.Claims {
			anyOthers = anyOthers || c.ID != m.ID && c.AnyPath
		}
	}
	if !m.AnyPath || anyOthers {
		for _, t := range m.Targets {
			m.SharedTargets = append(m.SharedTargets, t.Name)
		}
	}
	if len(keep) == len(after) && len(shared) == 0 {
		return nil
	}
	m.Shared = shared
	return r.recordNarrowed(m, before, after, keep)
}

// writtenBy asks the tree's watcher whose agents' processes wrote each
// path that changed while m was open: for each path whose every write
// was by a known process of one of the agents of the checkpoints in
// marks (the agent or its descendants), those checkpoints (an agent
// several sessions share names them all); with the session of each. A
// path written by another process, by one gone before the watcher read
// it, through a mapping or another name (held for writing now, or with
// several names at the begin) is not in it; nor is any path when the
// watcher did not vouch for m's end or cannot tell writers (it does not
// run as root, lost events), or when m or a checkpoint open beside it
// has no known agent: then claims say, as without it.
func (r *Repo) writtenBy(m *record.Meta, marks []record.Mark) (map[string][]string, map[string]string) {
	sessionOf := map[string]string{}
	for _, k := range marks {
		for _, c := range k.Claims {
			sessionOf[c.ID] = c.Session
		}
	}
	if !r.LastWatched {
		return nil, sessionOf
	}
	w, err := r.loadWatchToken(r.watchTokenPath(m.ID))
	if err != nil {
		return nil, sessionOf
	}
	// Every checkpoint open beside m, and m, must have a known agent:
	// one without (a begin typed at a terminal, or a record of before)
	// may have written through any process, an agent's too.
	ns := watch.PidNS()
	agentOf := map[string]*record.Agent{m.ID: m.Agent}
	for _, k := range marks {
		for _, c := range k.Claims {
			if c.Agent != nil && agentOf[c.ID] == nil {
				agentOf[c.ID] = c.Agent
			}
		}
	}
	var agents []watch.Proc
	var ids [][]string // each agent's checkpoints
	add := func(id string) bool {
		a := agentOf[id]
		if a == nil {
			if o, err := r.Store.ReadMeta(id); err == nil && o.Agent != nil {
				a, sessionOf[id] = o.Agent, o.Session
			}
		}
		if a == nil || a.PidNS != ns {
			return false
		}
		p := watch.Proc{Pid: a.Pid, Start: a.Start}
		i := slices.Index(agents, p)
		if i < 0 {
			agents, ids, i = append(agents, p), append(ids, nil), len(agents)
		}
		if !slices.Contains(ids[i], id) {
			ids[i] = append(ids[i], id)
		}
		return true
	}
	sessionOf[m.ID] = m.Session
	if !add(m.ID) {
		return nil, sessionOf
	}
	for _, k := range marks {
		for _, id := range k.Open {
			if !add(id) {
				return nil, sessionOf
			}
		}
	}
	got, err := watch.WrittenBy(r.Dir, w.token, ns, agents)
	if err != nil {
		return nil, sessionOf
	}
	held := map[string]bool{}
	for _, p := range r.writersNow() {
		held[p] = true
	}
	out := map[string][]string{}
	for p, who := range got {
		if _, linked := w.links[p]; linked || held[p] {
			continue
		}
		var cps []string
		for _, i := range who {
			if i < 0 {
				cps = nil
				break
			}
			cps = append(cps, ids[i]...)
		}
		if len(cps) > 0 {
			out[p] = sortedSet(cps)
		}
	}
	return out, sessionOf
}

// SharedSteps lists the checkpoints not undone that share paths or
// targets with another session's turn, oldest first. A damaged record is
// skipped without a warning: the verb that reads the history warns.
func (r *Reader) SharedSteps() ([]*record.Meta, error) {
	all, _, err := r.records()
	if err != nil {
		return nil, err
	}
	h := historyOf(all)
	var out []*record.Meta
	for _, m := range all {
		if m.Kind == record.KindCheckpoint && !h.Undone[m.ID] && len(m.Shared)+len(m.SharedTargets) > 0 {
			out = append(out, m)
		}
	}
	return out, nil
}

// nameTurns adds to a conflict of the undo of steps the later turns of
// other sessions that changed its paths (the newest first), so that the
// refusal says whose work it keeps.
func (r *Repo) nameTurns(err error, steps ...*record.Meta) error {
	var ce *ConflictError
	if !errors.As(err, &ce) || len(steps) == 0 || steps[0].Kind != record.KindCheckpoint {
		return err
	}
	h, herr := r.History()
	if herr != nil {
		return err // the refusal stands without the names
	}
	first := steps[0]
	for i := len(h.All) - 1; i >= 0; i-- {
		o := h.All[i]
		if o.Kind != record.KindCheckpoint || o.State != record.StateDone || h.Undone[o.ID] || o.Session == first.Session || !o.CreatedAt.After(first.CreatedAt) {
			continue
		}
		after, lerr := r.LoadManifest(o.After)
		if lerr != nil {
			continue
		}
		for _, p := range ce.Paths {
			if after.Find(p) != nil {
				ce.Turns = append(ce.Turns, fmt.Sprintf("%s (session %s)", o.ID, o.Session))
				break
			}
		}
	}
	return err
}

// SharedLeft is what an undo or redo left of a step because it is shared
// with another session's turn: paths and targets' names.
type SharedLeft struct {
	Paths   []string
	Targets []string
}

func (s *SharedLeft) add(o SharedLeft) {
	s.Paths = append(s.Paths, o.Paths...)
	s.Targets = append(s.Targets, o.Targets...)
}

// ownPart is s without what it shares with another session's turn (the
// paths and targets undo leaves), or s itself when it shares nothing or
// all is taken.
func (r *Repo) ownPart(s *record.Meta, includeShared bool) (*record.Meta, SharedLeft, error) {
	if includeShared || len(s.Shared)+len(s.SharedTargets) == 0 {
		return s, SharedLeft{}, nil
	}
	part := *s
	part.Targets = nil
	for _, t := range s.Targets {
		if !slices.Contains(s.SharedTargets, t.Name) {
			part.Targets = append(part.Targets, t)
		}
	}
	left := SharedLeft{Paths: s.Shared, Targets: s.SharedTargets}
	if len(s.Shared) == 0 {
		return &part, left, nil
	}
	before, err := r.LoadManifest(s.Manifest)
	if err != nil {
		return nil, left, err
	}
	after, err := r.LoadManifest(s.After)
	if err != nil {
		return nil, left, err
	}
	keep := map[string]bool{}
	for i := range after {
		if _, found := slices.BinarySearch(s.Shared, after[i].Path); !found {
			keep[after[i].Path] = true
		}
	}
	b, a := Subset(before, after, keep)
	if part.Manifest, err = r.record(b); err != nil {
		return nil, left, err
	}
	if part.After, err = r.record(a); err != nil {
		return nil, left, err
	}
	return &part, left, nil
}

// sortedSet sorts s and drops repeats.
func sortedSet(s []string) []string {
	sort.Strings(s)
	return slices.Compact(s)
}
