//go:build linux

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapback/snapback/internal/treetest"
	"pgregory.net/rapid"
)

// TestModel drives the real binary through random sequences of
// operations by several actors — a person editing the tree, commands
// under `run` in the copy mode and each view mode, `snap`, `undo`,
// `redo`, `restore`, `gc`, checkpoints of two sessions, SIGKILLs at
// random kill points followed by `recover` — and after every step
// compares the tree with a reference model of what each verb promises
// (the README's): the tree equals the model's, or the verb refused in
// one line with exit status >= 1 and changed nothing.
//
// The model keeps the tree (modeltree_test.go) and the history undo and
// redo walk: undo reverts the newest step not undone — a tree snapshot
// (`snap`, `restore`'s saved state) by putting its whole tree back, a
// run's or a checkpoint's by putting back only its paths, refusing when
// one of them changed since — and redo reverts the last undo: it puts
// back what that undo replaced (its pre-undo record, docs/architecture.md),
// so a path the undo found put back by hand stays as it was then. What a
// command does is taken from running it natively on a copy of the tree;
// what a person does, from the tree after it.
//
// rapid (pgregory.net/rapid) draws the sequences, shrinks a failing one
// and writes it to testdata/rapid/TestModel/, which every later run
// replays first; the log of the failing sequence is a shell script that
// replays it.
//
// go test (and so scripts/test.sh) replays one fixed search: seed 1,
// SNAPBACK_MODEL_SEQUENCES sequences (default 36; a fifth with -short)
// of about SNAPBACK_MODEL_STEPS actions each (default 30; half with
// -short), a count rather than a time, so that a fast and a slow machine
// with the same modes (root: copy, overlayfs, fuse) run the same
// sequences (the person's git writes the same bytes everywhere, see
// [modelGitEnv]), step for step; they passed when the count was set, so the
// suite fails only on a regression. A search is
// scripts/fuzz.sh model DURATION: SNAPBACK_MODEL_TIME bounds it by time
// instead, SNAPBACK_MODEL_RANDOM=1 draws a new seed, SNAPBACK_MODEL_SEED
// picks one.
func TestModel(t *testing.T) {
	bin := snapbackBinary(t)
	setFlag := func(name, env, value string) {
		t.Helper()
		if v := os.Getenv(env); v != "" {
			value = v
		}
		if value == "" || flagSet(name) {
			return
		}
		if err := flag.Set(name, value); err != nil {
			t.Fatalf("%s=%q: %v", env, value, err)
		}
	}
	var deadline time.Time // (zero: a count of sequences)
	if v := os.Getenv("SNAPBACK_MODEL_TIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SNAPBACK_MODEL_TIME=%q: %v", v, err)
		}
		deadline = time.Now().Add(d)
		// The time bounds the search: once it is spent, each further
		// check passes at once (see [modelRun.sequence]).
		setFlag("rapid.checks", "RAPID_CHECKS", "100000")
	} else {
		setFlag("rapid.checks", "SNAPBACK_MODEL_SEQUENCES", "36")
	}
	setFlag("rapid.steps", "SNAPBACK_MODEL_STEPS", "")
	seed := ""
	if os.Getenv("SNAPBACK_MODEL_RANDOM") == "" {
		seed = "1"
	}
	setFlag("rapid.seed", "SNAPBACK_MODEL_SEED", seed)
	// Shrinking replays whole sequences: bound it too, in go test.
	setFlag("rapid.shrinktime", "RAPID_SHRINKTIME", "20s")
	want := flag.Lookup("rapid.checks").Value.(flag.Getter).Get().(int)
	if testing.Short() {
		want /= 5 // (as rapid does)
	}
	run := &modelRun{bin: bin, modes: viewModes(t, bin), deadline: deadline, known: map[string]int{}, verbs: map[string]int{}}
	seeds, _ := filepath.Glob("testdata/rapid/TestModel/TestModel-*.fail")
	run.seeds = len(seeds)
	start := time.Now()
	rapid.Check(t, run.sequence)
	t.Logf("model: %d sequences, %d steps in %v (modes %v)", run.sequences, run.steps, time.Since(start).Round(time.Second), run.modes)
	if deadline.IsZero() && !t.Failed() && run.calls < want {
		// rapid stops early when go test's -timeout draws near: then
		// this machine did not run what the count promises.
		t.Errorf("model: %d of %d sequences ran (rapid stopped early: go test's -timeout is too close)", run.calls, want)
	}
	t.Logf("model: steps of each sequence: %v", run.lengths)
	t.Logf("model: verbs run: %v", run.verbs)
	for k, n := range run.known {
		t.Logf("model: known defect %s tolerated %d times: %s", k, n, knownDefects[k])
	}
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// viewModes is copy and the view modes doctor finds working here.
func viewModes(t *testing.T, bin string) []string {
	dir := t.TempDir()
	out, err := exec.Command(bin, "-C", dir, "doctor", "--json").Output()
	if err != nil {
		t.Fatalf("doctor: %v", err)
	}
	var doc struct {
		Modes []struct {
			Name      string
			Available bool
			Reason    string
		}
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	modes := []string{"copy"}
	if !treetest.Require(t, "root", os.Geteuid() == 0, "not root: the view modes are left out, the copy mode only") {
		return modes
	}
	for _, m := range doc.Modes {
		if (m.Name == "overlayfs" || m.Name == "fuse") && treetest.Require(t, m.Name, m.Available, m.Reason) {
			modes = append(modes, m.Name)
		}
	}
	return modes
}

// modelRun is what the sequences of one TestModel share.
type modelRun struct {
	bin      string
	modes    []string
	deadline time.Time
	// failed: a sequence failed, and rapid replays it to shrink it:
	// the deadline no longer cuts sequences short.
	failed    bool
	sequences int
	lengths   []int // the steps of each sequence: the same on every machine
	steps     int
	known     map[string]int // how often each known defect showed
	seeds     int            // the checked-in sequences
	calls     int
	verbs     map[string]int // how often each verb ran
}

func (r *modelRun) sequence(t *rapid.T) {
	// rapid replays the seeds first, one call each: whatever the time.
	r.calls++
	if r.calls > r.seeds && !r.failed && !r.deadline.IsZero() && time.Now().After(r.deadline) {
		return
	}
	dir, err := os.MkdirTemp("", "snapback-model-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	m := &model{t: t, run: r, bin: r.bin, dir: dir, root: filepath.Join(dir, "p"),
		ref: "../ref", scratch: filepath.Join(dir, "scratch"), tree: tree{}}
	for _, p := range []string{m.root, filepath.Join(dir, "ref")} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(m.root); err == nil {
		err = os.Mkdir(m.root, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.sequences++
	defer func(from int) { r.lengths = append(r.lengths, r.steps-from) }(r.steps)
	m.script = append(m.script, "export "+strings.Join(modelGitEnv, " "))
	setup := "printf 1 > a; mkdir d; printf 22 > d/a; ln -s a l"
	// Retention ([snapshot] keep), applied after each snap and run, in
	// some sequences: snapback.toml is then in the tree, which the edits
	// and commands leave alone.
	if m.keep = rapid.IntRange(0, 3).Draw(t, "retention"); m.keep > 0 {
		setup += fmt.Sprintf("; printf '[snapshot]\\nkeep = %d\\n' > snapback.toml", m.keep)
	}
	// A git project, in some sequences: git commands are a person's.
	if m.git = rapid.Bool().Draw(t, "git"); m.git {
		setup += "; git init -q && git add -A && " + gitCommit + " -qm c0"
	}
	m.person(setup)
	m.snap(t) // a store to work on: without one, every verb is exit 2
	t.Repeat(map[string]func(*rapid.T){
		"edit":        m.edit,
		"snap":        m.snap,
		"undo":        m.undo,
		"redo":        m.redo,
		"restore":     m.restore,
		"gc":          m.gc,
		"run":         m.runCmd,
		"commit":      m.commit,
		"discard":     m.discard,
		"checkpoint":  m.checkpoint,
		"agent":       m.agent,
		"undoSession": m.undoSession,
		"damage":      m.damage,
		"repair":      m.repair,
		"git":         m.gitCmd,
		"":            m.check,
	})
}

// step is one undo step as the model knows it.
type step struct {
	id   string
	kind string // snap, run, checkpoint, pre-restore
	// scope tree: state is the whole tree it recorded. saved is the
	// tree its undo replaced, which its redo puts back (all of it, or
	// the step's paths: [step.redoState]).
	whole        bool
	state, saved tree
	// scope paths: the paths it changed, before and after.
	before, after tree
	undone, gone  bool
	unknown       bool // what it holds is not all in before and after
	session       string
	// linked: the files with more than one name when the step began:
	// what the store records of them names their other names too,
	// which the model does not see (its undo may refuse over them).
	linked map[string]bool
	// savedLinked: the same of saved (a tree step's undo).
	savedLinked map[string]bool
	// merged: the checkpoints an undo --session reverted as this one
	// step, which redo reapplies together.
	merged []*step
	// seq orders the history as the store does, by when each record was
	// made: a checkpoint's when it began (one that began before another
	// session's and ended after it is the older step).
	seq int
	// dirs: the directories the step added an entry to or removed one
	// from (it records them, for their times), as the step left them;
	// undoDirs: the same as its undo left them. One changed since (its
	// mode, or gone) may make the undo or the redo refuse.
	dirs, undoDirs tree
}

type pendingRun struct {
	id         string
	base, view tree
	timeOnly   []string        // changed by the run in their times alone
	dirTimes   []string        // directories whose times it changed
	left       []string        // changed paths not committed yet
	multi      map[string]bool // the files with other names at the start
}

type openCheckpoint struct {
	session string
	base    tree
	mtimes  map[string]int64
	multi   map[string]bool // the files with other names at the start
	seq     int             // its step's (step.seq)
	// spans: from its beginning and from each time another session's
	// checkpoint began or ended, the tree then and whether another was
	// open from then on (snapback's marks, snapshot/sessions.go).
	spans []span
}

type span struct {
	tree   tree
	mtimes map[string]int64
	others bool
}

type model struct {
	t                   *rapid.T
	run                 *modelRun
	bin, dir, root, ref string
	scratch             string
	tree                tree
	multi               map[string]bool
	hist                []*step
	redoStack           []*step
	pend                *pendingRun
	cps                 []*openCheckpoint // one per session, oldest first
	seq                 int               // the last step.seq given
	script              []string
	keep                int  // [snapshot] keep in snapback.toml (0: none)
	git                 bool // a git project
	// branches: those made so far (b1, b2, …), commits: how many.
	branches, commits int
	// damaged: the store objects the sequence damaged, with the bytes
	// that repair puts back.
	damaged map[string][]byte
	// names: the shell variable the replay script keeps each id in.
	names map[string]string
	last  result // the last verb's
}

// name gives id a shell variable in the replay script, set by capture.
func (m *model) name(id, prefix, capture string) {
	if m.names == nil {
		m.names = map[string]string{}
	}
	n := fmt.Sprintf("%s%d", prefix, len(m.names)+1)
	m.names[id] = n
	m.script = append(m.script, n+"=$("+capture+")")
}

// fail ends the sequence with what went wrong and the script that
// replays it.
func (m *model) fail(format string, args ...any) {
	m.run.failed = true
	m.t.Fatalf("%s\nreplay, as root, in an empty directory:\n%s", fmt.Sprintf(format, args...), strings.Join(m.script, "\n"))
}

func (m *model) log(line string) {
	m.script = append(m.script, line)
	m.t.Log("$ " + line)
	m.run.steps++
}

// person runs a shell script in the tree, as a person (or their tools)
// would, outside snapback: the model takes the tree it leaves.
func (m *model) person(script string) {
	m.log(script)
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = m.root
	cmd.Env = append(os.Environ(), modelGitEnv...)
	_ = cmd.Run() // a failed edit (rmdir of a full directory) is an edit that did nothing
	m.tree, m.multi = m.walk()
}

func (m *model) walk() (tree, map[string]bool) {
	tr, multi, err := walkTree(m.root)
	if err != nil {
		m.fail("walking the tree: %v", err)
	}
	return tr, multi
}

type result struct {
	code           int
	killed         bool
	stdout, stderr string
}

// sb runs snapback in the root.
func (m *model) sb(env []string, args ...string) result { return m.sbIn(env, "", args...) }

// sbIn runs snapback in the root with stdin (none if empty).
func (m *model) sbIn(env []string, stdin string, args ...string) result {
	words := make([]string, len(args))
	for i, a := range args {
		words[i] = shq(a)
		if n, ok := m.names[a]; ok {
			words[i] = `"$` + n + `"`
		}
	}
	shown := strings.ReplaceAll(strings.Join(env, " "), m.dir, `"$PWD"/..`) // (the replay's root is its working directory)
	line := strings.TrimSpace(shown + " snapback " + strings.Join(words, " "))
	if stdin != "" {
		line = "printf '%s' " + shq(stdin) + " | " + line
	}
	m.log(line)
	verb := args[0]
	if len(args) > 1 && (verb == "agent" || verb == "checkpoint" || args[1] == "--session") {
		verb += " " + args[1]
	}
	m.run.verbs[verb]++
	cmd := exec.Command(m.bin, args...)
	cmd.Dir = m.root
	cmd.Env = append(os.Environ(), env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	defer func() { m.last = r }()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			r.killed = true
		}
	default:
		m.fail("snapback %v: %v", args, err)
	}
	return r
}

// outcome is what the model expects of a verb.
type outcome struct {
	refuse bool // it must refuse, changing nothing
	code   int  // the refusal's exit status (0: any >= 1)
	either bool // the model cannot tell: success or refusal
	want   tree // the tree after it succeeds
	status int  // its exit status when it succeeds
	// known: a defect found and reported but not fixed yet, whose
	// status (knownStatus) is tolerated — and logged — unless
	// SNAPBACK_MODEL_STRICT is set.
	known       string
	knownStatus int
}

// knownDefects are those the model tolerates (see outcome.known): each
// is reported, with the sequence that shows it; remove it once fixed.
var knownDefects = map[string]string{}

func refuse(code int) outcome { return outcome{refuse: true, code: code} }

// verb runs snapback and judges it against o. It reports whether the
// verb took effect (false: it refused, as the model allowed, or a kill
// left the state before it). With kill set, and a verb expected to
// change the tree, it is SIGKILLed before a random state-changing
// system call and `snapback recover` must leave the tree exactly before
// or after.
func (m *model) verb(o outcome, kill bool, args ...string) bool {
	var env []string
	if kill && !o.refuse && !o.either && len(changed(m.tree, o.want)) > 0 {
		env = []string{fmt.Sprintf("SNAPBACK_KILL_AT=%d", rapid.IntRange(1, 60).Draw(m.t, "killAt"))}
	}
	r := m.sb(env, args...)
	if r.killed && env != nil {
		rec := m.sb(nil, "recover")
		if rec.code != 0 {
			m.fail("recover after a kill: exit %d\n%s%s", rec.code, rec.stdout, rec.stderr)
		}
		got, multi := m.walk()
		switch {
		case len(changed(got, o.want)) == 0:
			m.multi = multi
			return true
		case len(changed(got, m.tree)) == 0:
			return false
		}
		m.fail("after a kill and recover, the tree is neither before nor after %v:\nagainst after:\n%s\nagainst before:\n%s",
			args, strings.Join(diffLines(o.want, got), "\n"), strings.Join(diffLines(m.tree, got), "\n"))
	}
	got, multi := m.walk()
	if o.known != "" && o.knownStatus == 1 && r.code == 1 && !o.refuse && len(changed(m.tree, got)) == 0 && os.Getenv("SNAPBACK_MODEL_STRICT") == "" {
		m.t.Logf("tolerated known defect %s: %s", o.known, knownDefects[o.known])
		m.run.known[o.known]++
		return false
	}
	refused := r.code != 0 && (o.refuse || o.either) && len(changed(m.tree, got)) == 0
	if refused {
		line := strings.SplitN(strings.TrimSpace(r.stderr), "\n", 2)[0]
		if !strings.HasPrefix(line, "snapback: ") {
			m.fail("%v refused (exit %d) without a snapback: line on stderr:\n%s", args, r.code, r.stderr)
		}
		if o.refuse && o.code != 0 && r.code != o.code {
			m.fail("%v refused with exit %d, want %d:\n%s", args, r.code, o.code, r.stderr)
		}
		return false
	}
	if o.refuse && o.known != "" && r.code == 0 && len(changed(o.want, got)) == 0 && os.Getenv("SNAPBACK_MODEL_STRICT") == "" {
		m.t.Logf("tolerated known defect %s: %s", o.known, knownDefects[o.known])
		m.run.known[o.known]++
		m.multi = multi
		return true
	}
	if o.refuse {
		m.fail("%v: exit %d, want a refusal (exit >= 1) changing nothing; changed:\n%s\n%s%s",
			args, r.code, strings.Join(diffLines(m.tree, got), "\n"), r.stdout, r.stderr)
	}
	if o.known != "" && r.code == o.knownStatus && r.code != o.status && os.Getenv("SNAPBACK_MODEL_STRICT") == "" {
		m.t.Logf("tolerated known defect %s: %s", o.known, knownDefects[o.known])
		m.run.known[o.known]++
		o.status = r.code
	}
	if d := diffLines(o.want, got); len(d) > 0 || r.code != o.status {
		m.fail("%v: exit %d (want %d), the tree against the model's:\n%s\n%s%s",
			args, r.code, o.status, strings.Join(d, "\n"), r.stdout, r.stderr)
	}
	m.multi = multi
	return true
}

// check runs after every step: the tree is the model's, and the store
// agrees on what is pending and open.
func (m *model) check(t *rapid.T) {
	got, _ := m.walk()
	if d := diffLines(m.tree, got); len(d) > 0 {
		m.fail("the tree is not the model's:\n%s", strings.Join(d, "\n"))
	}
	if _, err := os.Lstat(filepath.Join(m.root, ".snapback")); err != nil {
		return // no store yet
	}
	pending := m.pendingRuns()
	if want := map[bool]int{true: 1, false: 0}[m.pend != nil]; pending != want {
		m.fail("status shows %d pending runs, the model %d", pending, want)
	}
	var cs struct{ Open bool }
	m.jsonOf(&cs, "checkpoint", "status", "--json")
	if cs.Open != (len(m.cps) > 0) {
		m.fail("checkpoint status: open=%v, the model: %v", cs.Open, len(m.cps) > 0)
	}
}

func (m *model) pendingRuns() int {
	var st struct {
		Runs []struct{ ID, State string }
	}
	m.jsonOf(&st, "status", "--json")
	pending := 0
	for _, r := range st.Runs {
		if r.State == "pending" {
			pending++
		}
	}
	return pending
}

// jsonOf runs a reading verb (unlogged: it changes nothing) into v.
func (m *model) jsonOf(v any, args ...string) {
	cmd := exec.Command(m.bin, args...)
	cmd.Dir = m.root
	out, err := cmd.Output()
	if err != nil {
		m.fail("snapback %v: %v", args, err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		m.fail("snapback %v: %v\n%s", args, err, out)
	}
}

// newStep records a step the verb just made, with the id the store
// gave it: the newest record the model does not know yet.
func (m *model) newStep(s *step) { m.maybeStep(true, s) }

// maybeStep records s if the store made a record for it; must says it
// has to have.
func (m *model) maybeStep(must bool, s *step) {
	if !s.whole {
		s.dirs = m.entryDirs(s)
	}
	var list struct {
		Snapshots []struct{ ID, Kind, State string }
	}
	m.jsonOf(&list, "list", "-a", "--json")
	known := map[string]bool{}
	for _, h := range m.hist {
		known[h.id] = true
	}
	for _, r := range list.Snapshots {
		// (Another session's checkpoint still open is no step yet.)
		if !known[r.ID] && r.Kind != "pre-undo" && r.Kind != "pre-redo" && r.State != "open" {
			s.id = r.ID
			break
		}
	}
	if s.id != "" && s.kind == "snap" {
		m.name(s.id, "S", `snapback list --json | sed -n '0,/"id"/s/.*"id": "\([^"]*\)".*/\1/p'`)
	}
	if s.id == "" {
		if must {
			m.fail("%s made no record in list -a", s.kind)
		}
		return
	}
	// A step the model did not expect holds paths it cannot name (a
	// directory's times): its undo and redo may refuse.
	s.unknown = !must
	for _, tr := range []tree{s.before, s.after} {
		for p := range tr {
			s.unknown = s.unknown || s.linked[p] || m.multi[p]
		}
	}
	if s.seq == 0 {
		m.seq++
		s.seq = m.seq
	}
	i := len(m.hist)
	for i > 0 && m.hist[i-1].seq > s.seq {
		i--
	}
	m.hist = slices.Insert(m.hist, i, s)
	m.redoStack = nil // a new step ends what redo can reach
}

func (m *model) edit(t *rapid.T) {
	m.person(genOp(t, m.editable(), m.multi, m.ref, false))
}

func (m *model) snap(t *rapid.T) {
	if len(m.cps) > 0 {
		m.verb(refuse(2), false, "snap")
		return
	}
	if m.verb(outcome{want: m.tree}, false, "snap") {
		m.newStep(&step{kind: "snap", whole: true, state: m.tree.clone(), linked: m.multi})
		m.retained()
	}
}

// entryDirs is each directory of the tree that a path s made or
// removed is in, as the tree has it now.
func (m *model) entryDirs(s *step) tree {
	out := tree{}
	for _, tr := range []tree{s.before, s.after} {
		for p := range tr {
			if (s.before[p] == absent) != (s.after[p] == absent) {
				if q := filepath.Dir(p); q != "." {
					out[q] = m.tree[q]
				}
			}
		}
	}
	return out
}

// dirsMoved reports whether a directory of dirs differs in the tree now.
func (m *model) dirsMoved(dirs tree) bool {
	for q, e := range dirs {
		if m.tree[q] != e {
			return true
		}
	}
	return false
}

// target is the step undo reverts: the newest not undone.
func (m *model) target() *step {
	for i := len(m.hist) - 1; i >= 0; i-- {
		if s := m.hist[i]; !s.undone && !s.gone {
			return s
		}
	}
	return nil
}

// pathsOutcome is the outcome of writing vals over the tree, where each
// path must still be as from says: refused when one is not (conflict),
// or when a path the write would remove holds what vals does not name.
// A path already as vals has it is none: for undo and redo (put back
// by hand, README), any value; for a commit (commit set), only a path
// the run deleted too. Undo and redo also refuse to write a path below a
// directory that is gone or no longer a directory.
func (m *model) pathsOutcome(from, vals tree, commit bool) outcome {
	for p, e := range from {
		v, named := vals[p]
		if m.tree[p] != e && !(named && m.tree[p] == v && (!commit || v == absent)) {
			return refuse(1)
		}
	}
	if !commit {
		// Undo and redo write a path into the directories it was in,
		// which they record (for their times): one removed since by
		// someone else, or made something else, is changed since, and
		// the write would bring it back.
		for p, v := range vals {
			if v == absent {
				continue
			}
			for q := filepath.Dir(p); q != "."; q = filepath.Dir(q) {
				if !m.tree.isDir(q) && !vals.isDir(q) {
					return refuse(1)
				}
			}
		}
	}
	if len(foreign(m.tree, vals)) > 0 {
		return refuse(0)
	}
	return outcome{want: apply(m.tree, vals)}
}

// withParents adds to want the directories above its paths that it
// lacks, as view has them: those the run made.
func withParents(want, view tree) tree {
	for p := range want {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			if _, ok := want[d]; !ok && view.isDir(d) {
				want[d] = view[d]
			}
		}
	}
	return want
}

func (m *model) undo(t *rapid.T) {
	s := m.target()
	kill := rapid.IntRange(0, 2).Draw(t, "kill") == 0
	var o outcome
	switch {
	case len(m.cps) > 0:
		o = refuse(2)
	case m.pend != nil || s == nil:
		o = refuse(1)
	case s.whole:
		o = outcome{want: s.state}
	default:
		o = m.pathsOutcome(s.after, s.before, false)
		if (s.unknown || m.dirsMoved(s.dirs)) && !o.refuse {
			o.either = true
		}
	}
	old, oldLinked := m.tree, m.multi
	if s != nil {
		o = m.needsDamaged(o, s.linked)
	}
	if m.verb(o, kill, "undo") {
		m.tree = o.want
		s.undone, s.saved, s.savedLinked = true, old, oldLinked
		s.undoDirs = tree{}
		for q := range s.dirs {
			s.undoDirs[q] = m.tree[q]
		}
		m.redoStack = append(m.redoStack, s)
	}
}

func (m *model) redo(t *rapid.T) {
	kill := rapid.IntRange(0, 2).Draw(t, "kill") == 0
	var s *step
	if n := len(m.redoStack); n > 0 {
		s = m.redoStack[n-1]
	}
	var o outcome
	switch {
	case len(m.cps) > 0:
		o = refuse(2)
	case s == nil:
		o = refuse(1)
	case s.whole:
		o = outcome{want: s.saved}
	default:
		o = m.pathsOutcome(s.before, s.redoState(), false)
		if (s.unknown || m.dirsMoved(s.undoDirs)) && !o.refuse {
			o.either = true
		}
	}
	if s != nil {
		links := s.savedLinked
		if !s.whole {
			// Those of the step and of what the undo replaced, which
			// the redo writes back.
			links = map[string]bool{}
			for _, l := range []map[string]bool{s.linked, s.savedLinked} {
				for p := range l {
					links[p] = true
				}
			}
		}
		o = m.needsDamaged(o, links)
	}
	if m.verb(o, kill, "redo") {
		m.tree = o.want
		s.undone = false
		for _, x := range s.merged {
			x.undone = false
		}
		m.redoStack = m.redoStack[:len(m.redoStack)-1]
	}
}

// redoState is what redo writes over the paths of s, a step of paths
// undone: each as it was when the undo ran, which the undo saved in its
// pre-undo record (snapshot.Repo.Redo applies that record). That is
// s.after but where the undo found a path put back by hand already (as
// s.before has it, say a directory the step deleted, made again since):
// the undo wrote nothing there, and the redo leaves it as it was.
func (s *step) redoState() tree {
	if s.saved == nil {
		return s.after
	}
	return pick(s.saved, s.before.paths())
}

func (m *model) restore(t *rapid.T) {
	var snaps []*step
	for _, s := range m.hist {
		if s.kind == "snap" && !s.gone {
			snaps = append(snaps, s)
		}
	}
	if len(snaps) == 0 || m.pend != nil {
		t.Skip("no snapshot to restore, or a run pending") // rapid: this action does not apply in this state (no capability; SNAPBACK_REQUIRE has no say)
	}
	s := snaps[rapid.IntRange(0, len(snaps)-1).Draw(t, "restore")] // (an index: a step's trees make a long log line)
	kill := rapid.IntRange(0, 2).Draw(t, "kill") == 0
	if len(m.cps) > 0 {
		m.verb(refuse(2), false, "restore", s.id)
		return
	}
	old, oldLinked := m.tree, m.multi
	if m.verb(m.needsDamaged(outcome{want: s.state}, s.linked), kill, "restore", s.id) {
		m.tree = s.state.clone()
		m.newStep(&step{kind: "pre-restore", whole: true, state: old, linked: oldLinked})
	}
}

func (m *model) gc(t *rapid.T) {
	if len(m.cps) > 0 || len(m.hist) == 0 {
		t.Skip("a checkpoint open, or nothing to collect") // rapid: this action does not apply in this state (no capability; SNAPBACK_REQUIRE has no say)
	}
	keep := rapid.IntRange(1, 3).Draw(t, "keep")
	if !m.verb(outcome{want: m.tree}, false, "gc", "--keep", fmt.Sprint(keep)) {
		return
	}
	m.collected(fmt.Sprintf("gc --keep %d", keep))
}

// editable is the tree the edits and commands draw their paths from:
// all of it but the configuration and .git (which git commands change).
func (m *model) editable() tree {
	if m.keep == 0 && !m.git {
		return m.tree
	}
	out := m.tree.clone()
	delete(out, "snapback.toml")
	for p := range out {
		if p == ".git" || under(p, ".git") {
			delete(out, p)
		}
	}
	return out
}

// modelGitEnv makes what a person's git writes the same on every machine and
// in every replay (no configuration of the machine's, fixed times): the
// contents the sequence stores, and so what it draws from them, with it.
var modelGitEnv = []string{"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
	"GIT_AUTHOR_NAME=m", "GIT_AUTHOR_EMAIL=m@example.com", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z",
	"GIT_COMMITTER_NAME=m", "GIT_COMMITTER_EMAIL=m@example.com", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=init.defaultBranch", "GIT_CONFIG_VALUE_0=main"}

// gitCommit commits as a person with no git configuration can.
const gitCommit = "git -c user.name=m -c user.email=m@example.com commit --allow-empty"

// gitCmd is a git command of the person's in a git project: a commit of
// everything, a branch, a checkout of one (new or old), a gc.
func (m *model) gitCmd(t *rapid.T) {
	if !m.git {
		t.Skip("not a git project") // rapid: this action does not apply in this state (no capability; SNAPBACK_REQUIRE has no say)
	}
	var cmd string
	kind := rapid.SampledFrom([]string{"commit", "branch", "checkout", "checkout-b", "gc"}).Draw(t, "git")
	switch kind {
	case "commit":
		m.commits++
		cmd = fmt.Sprintf("git add -A && %s -qm c%d", gitCommit, m.commits)
	case "branch":
		m.branches++
		cmd = fmt.Sprintf("git branch b%d", m.branches)
	case "checkout":
		if m.branches == 0 {
			t.Skip("no branch yet") // rapid: this action does not apply in this state (no capability; SNAPBACK_REQUIRE has no say)
		}
		cmd = fmt.Sprintf("git checkout -q b%d", rapid.IntRange(1, m.branches).Draw(t, "branch"))
	case "checkout-b":
		m.branches++
		cmd = fmt.Sprintf("git checkout -q -b b%d", m.branches)
	case "gc":
		cmd = "git gc -q"
	}
	m.run.verbs["git "+kind]++
	m.person(cmd + " 2>/dev/null")
}

// retained follows a verb that applies retention (snap, run): what it
// deleted must be nothing undo or redo needs next.
func (m *model) retained() {
	if m.keep > 0 {
		m.collected(fmt.Sprintf("retention (keep = %d)", m.keep))
	}
}

// collected marks the steps whose records what (gc, retention) deleted
// gone, and fails if one of them is what undo or redo needs next.
func (m *model) collected(what string) {
	var list struct {
		Snapshots []struct{ ID string }
	}
	m.jsonOf(&list, "list", "-a", "--json")
	present := map[string]bool{}
	for _, r := range list.Snapshots {
		present[r.ID] = true
	}
	need := map[*step]bool{}
	if s := m.target(); s != nil {
		need[s] = true
	}
	for _, s := range m.redoStack {
		need[s] = true
		for _, x := range s.merged {
			need[x] = true
		}
	}
	for _, s := range m.hist {
		if !s.gone && !present[s.id] {
			if need[s] {
				m.fail("%s deleted %s (%s), which undo or redo needs next", what, s.id, s.kind)
			}
			s.gone = true
			m.run.verbs["(deleted by "+strings.Fields(what)[0]+")"]++
		}
	}
}

// runCmd runs a drawn command under `snapback run`: the reference for
// what it does is the same command run natively on a copy of the tree.
func (m *model) runCmd(t *rapid.T) {
	mode := rapid.SampledFrom(m.run.modes).Draw(t, "mode")
	if m.pend != nil {
		mode = "copy" // one pending run at a time
	}
	then := "commit"
	if mode != "copy" {
		then = rapid.SampledFrom([]string{"commit", "review", "discard"}).Draw(t, "then")
	}
	status := 0
	if then != "discard" && rapid.IntRange(0, 3).Draw(t, "fails") == 0 {
		status = 1
	}
	script := genScript(t, m.editable(), m.multi, m.ref, true, status)
	view, timeOnly, dirTimes := m.native(script)
	ch := changed(m.tree, view)
	resFile := filepath.Join(m.dir, "result.json")
	os.Remove(resFile)
	args := []string{"run", "--mode", mode, "--then", then, "--result", "../result.json", "--", "sh", "-c", script}
	if mode == "copy" && len(m.cps) > 0 {
		m.verb(refuse(125), false, args...)
		return
	}
	o := outcome{want: m.tree, status: status}
	state := "pending"
	switch {
	case mode == "copy":
		o.want, state = view, "committed"
	case then == "discard":
		state = "discarded"
	case then == "commit" && status == 0 && len(m.cps) == 0:
		o.want, state = view, "committed"
	case then == "commit" && status == 0:
		// The commit refuses while a checkpoint is open (run: 125);
		// the run stays pending.
		o.status = 125
	}
	base, baseMulti := m.tree, m.multi
	m.verb(o, false, args...)
	code := m.last.code
	var res struct{ ID, State string }
	if m.last.code == 125 {
		// snapback failed after the command (the commit refused):
		// docs/json.md has the error on stderr then, and no result.
		var st struct{ Runs []struct{ ID, State string } }
		m.jsonOf(&st, "status", "--json")
		for _, r := range st.Runs {
			if r.State == "pending" {
				res = r
			}
		}
	} else if data, err := os.ReadFile(resFile); err != nil || json.Unmarshal(data, &res) != nil {
		m.fail("run --result: %v\n%s\n%s%s", err, data, m.last.stdout, m.last.stderr)
	}
	if res.State != state && !(len(ch) == 0 && res.State == "empty") {
		// A command that changed only times (touch, a rewrite with the
		// same bytes) changed something the model does not see: either
		// is right then.
		m.fail("run: state %q, the model %q", res.State, state)
	}
	state = res.State
	m.tree = o.want
	switch state {
	case "committed":
		all := append(append([]string{}, ch...), timeOnly...)
		m.maybeStep(len(all) > 0, &step{kind: "run", before: pick(base, all), after: pick(view, all), linked: baseMulti})
	case "pending":
		m.pend = &pendingRun{id: res.ID, base: base, view: view, left: ch, multi: baseMulti, timeOnly: timeOnly, dirTimes: dirTimes}
		m.name(res.ID, "R", `snapback status --json | sed -n '0,/"id"/s/.*"id": "\([^"]*\)".*/\1/p'`)
	}
	if code != 125 { // (a run snapback failed applies no retention)
		m.retained()
	}
}

// native runs script on a copy of the tree and returns what it left,
// and the files and symlinks whose mtime alone it changed (a run's
// changes too, which the model's entries do not show).
func (m *model) native(script string) (tree, []string, []string) {
	if err := os.RemoveAll(m.scratch); err != nil {
		m.fail("%v", err)
	}
	if out, err := exec.Command("cp", "-a", m.root, m.scratch).CombinedOutput(); err != nil {
		m.fail("cp -a: %v\n%s", err, out)
	}
	if err := os.RemoveAll(filepath.Join(m.scratch, ".snapback")); err != nil {
		m.fail("%v", err)
	}
	before := mtimes(m.scratch)
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = m.scratch
	_ = cmd.Run() // its status is the script's own exit
	tr, _, err := walkTree(m.scratch)
	if err != nil {
		m.fail("walking the reference: %v", err)
	}
	var timeOnly, dirTimes []string
	for p, t := range mtimes(m.scratch) {
		if bt, ok := before[p]; ok && bt != t && tr[p] == m.tree[p] {
			if tr.isDir(p) {
				dirTimes = append(dirTimes, p)
			} else {
				timeOnly = append(timeOnly, p)
			}
		}
	}
	return tr, timeOnly, dirTimes
}

// mtimes is the mtime of each path below dir.
func mtimes(dir string) map[string]int64 {
	out := map[string]int64{}
	_ = filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		var st syscall.Stat_t
		if err == nil && syscall.Lstat(p, &st) == nil {
			rel, _ := filepath.Rel(dir, p)
			out[rel] = st.Mtim.Nano()
		}
		return nil // (a path that went: none)
	})
	return out
}

func (m *model) commit(t *rapid.T) {
	p := m.pend
	if p == nil {
		t.Skip("no run pending") // rapid: this action does not apply in this state (no capability; SNAPBACK_REQUIRE has no say)
	}
	sub, subTimes, dirs := p.left, p.timeOnly, p.dirTimes
	args := []string{"commit", p.id}
	if len(p.left) > 0 && rapid.Bool().Draw(t, "partial") {
		top := strings.SplitN(rapid.SampledFrom(p.left).Draw(t, "path"), "/", 2)[0]
		within := func(all []string) []string {
			var out []string
			for _, q := range all {
				if q == top || under(q, top) {
					out = append(out, q)
				}
			}
			return out
		}
		sub, subTimes = within(p.left), within(p.timeOnly)
		dirs = within(p.dirTimes)
		args = append(args, top)
	}
	// The paths the commit judges: what it writes. What the run changed
	// the times of alone is in its changeset too, but the run left what
	// it holds as it found it: changed since by someone else, the commit
	// leaves it; else it writes the times (the step's paths).
	judged := append([]string{}, sub...)
	for _, q := range subTimes {
		if m.tree[q] == p.base[q] {
			judged = append(judged, q)
		}
	}
	kill := rapid.IntRange(0, 2).Draw(t, "kill") == 0
	var o outcome
	if len(m.cps) > 0 {
		o = refuse(2)
	} else {
		o = m.pathsOutcome(pick(p.base, sub), pick(p.view, sub), true)
		if !o.refuse && deletedSince(m.tree, p, sub) {
			o = refuse(1)
		}
		if o.want != nil {
			o.want = withParents(o.want, p.view)
		}
	}
	before := m.tree
	if !m.verb(o, kill, args...) {
		return
	}
	m.tree = o.want
	// (A run that changed only times commits a step the model cannot
	// see coming. Paths the tree holds as the run left them already are
	// nothing to write: a commit of only those makes no step.)
	writes := len(judged) > len(sub)
	for _, q := range sub {
		writes = writes || before[q] != p.view[q]
	}
	m.maybeStep(writes, &step{kind: "run", before: pick(before, judged), after: pick(p.view, judged), linked: p.multi})
	p.left, p.timeOnly, p.dirTimes = without(p.left, sub), without(p.timeOnly, subTimes), without(p.dirTimes, dirs)
	// A deletion left pending whose path is gone from the tree since is
	// no change any more (the layer's whiteout matches the tree): a
	// commit that takes the rest ends the run.
	var left []string
	for _, q := range p.left {
		if p.view[q] != absent || m.tree[q] != absent {
			left = append(left, q)
		}
	}
	p.left = left
	if len(p.left) == 0 && (len(args) == 2 || m.pendingRuns() == 0) {
		// (A commit of PATHs leaves what else the run changed, which may
		// be only times, which the model does not see: status tells.)
		m.pend = nil
	}
}

// deletedSince says whether the tree lost, since the run started, a
// directory the run writes below: the run's entry of it, noted when the
// command ended, makes that a conflict, as any deletion of a path the
// run changed. (One whose times alone the run changed, with nothing
// written below, is none: the run left it as it found it, and the
// commit leaves the tree's.)
func deletedSince(cur tree, p *pendingRun, sub []string) bool {
	for _, q := range sub {
		if p.view[q] == absent {
			continue
		}
		for d := filepath.Dir(q); d != "."; d = filepath.Dir(d) {
			if p.base.isDir(d) && cur[d] == absent {
				return true
			}
		}
	}
	return false
}

// partnerInPlace says whether a file of want with other names (links)
// other than p, of p's content, is in tr already.
func partnerInPlace(tr, want tree, links map[string]bool, p string) bool {
	for q := range links {
		if q != p && want[q] == want[p] && tr[q] == want[q] {
			return true
		}
	}
	return false
}

func without(all, drop []string) []string {
	d := map[string]bool{}
	for _, p := range drop {
		d[p] = true
	}
	var out []string
	for _, p := range all {
		if !d[p] {
			out = append(out, p)
		}
	}
	return out
}

func (m *model) discard(t *rapid.T) {
	if m.pend == nil {
		t.Skip("no run pending") // rapid: this action does not apply in this state (no capability; SNAPBACK_REQUIRE has no say)
	}
	if m.verb(outcome{want: m.tree}, false, "discard", m.pend.id) {
		m.pend = nil
	}
}

// checkpoint begins or ends a stretch of session A's, B's or none's:
// each session has its own, open side by side; a begin while the
// session's is open does nothing; an end without a session closes the
// one begun without, else the only one open, and refuses (exit 2) when
// several are.
func (m *model) checkpoint(t *rapid.T) {
	verb := rapid.SampledFrom([]string{"begin", "end"}).Draw(t, "cpverb")
	session := rapid.SampledFrom([]string{"", "A", "B"}).Draw(t, "session")
	args := []string{"checkpoint", verb}
	if session != "" {
		args = append(args, "--session", session)
	}
	c := m.openOf(session)
	if verb == "end" && c == nil && session == "" && len(m.cps) == 1 {
		c = m.cps[0]
	}
	o := outcome{want: m.tree}
	if verb == "end" && c == nil && session == "" && len(m.cps) > 1 {
		o = refuse(2)
	}
	if !m.verb(o, false, args...) {
		return
	}
	switch {
	case verb == "begin" && c == nil:
		m.beginCheckpoint(session)
	case verb == "end" && c != nil:
		m.endCheckpoint(c)
	}
}

// openOf is session's open checkpoint, or nil.
func (m *model) openOf(session string) *openCheckpoint {
	for _, c := range m.cps {
		if c.session == session {
			return c
		}
	}
	return nil
}

// beginCheckpoint opens session's checkpoint beside the others, each of
// which notes the tree now and that another is open from now on.
func (m *model) beginCheckpoint(session string) {
	now := span{tree: m.tree.clone(), mtimes: mtimes(m.root), others: true}
	for _, o := range m.cps {
		o.spans = append(o.spans, now)
	}
	now.others = len(m.cps) > 0
	m.seq++
	m.cps = append(m.cps, &openCheckpoint{session: session, base: m.tree, mtimes: now.mtimes, multi: m.multi, spans: []span{now}, seq: m.seq})
}

// endCheckpoint closes c into the step it records: the paths changed
// since it began but those that changed while another session's was open
// too, which are shared (every writer the model drives may write any
// path: its hooks' tools carry no file, and a checkpoint begun by hand
// has no known writer); undo leaves those.
func (m *model) endCheckpoint(c *openCheckpoint) {
	base := c.base
	ch := changed(base, m.tree)
	now := mtimes(m.root)
	for p, t := range now {
		if bt, ok := c.mtimes[p]; ok && bt != t && m.tree[p] != absent && !m.tree.isDir(p) && base[p] == m.tree[p] {
			ch = append(ch, p) // its times alone changed
		}
	}
	spans := append(c.spans, span{tree: m.tree, mtimes: now})
	var own []string
	for _, p := range ch {
		shared := false
		for i := 0; i+1 < len(spans) && !shared; i++ {
			a, b := spans[i], spans[i+1]
			moved := a.tree[p] != b.tree[p] || b.tree[p] != absent && !b.tree.isDir(p) && a.tree[p] == b.tree[p] && a.mtimes[p] != b.mtimes[p]
			shared = a.others && moved
		}
		if !shared {
			own = append(own, p)
		}
	}
	var rest []*openCheckpoint
	for _, o := range m.cps {
		if o != c {
			rest = append(rest, o)
		}
	}
	m.cps = rest
	for _, o := range m.cps {
		o.spans = append(o.spans, span{tree: m.tree.clone(), mtimes: now, others: len(m.cps) > 1})
	}
	// A stretch that changed only times is a step the model cannot
	// see coming: it takes what the store says.
	m.maybeStep(len(ch) > 0, &step{kind: "checkpoint", session: c.session, before: pick(base, own), after: pick(m.tree, own), linked: c.multi, seq: c.seq})
}

// agent sends one hook payload of Claude Code's, of session A's or B's,
// to `snapback agent hook claude-code` (the README's agents section): a
// prompt notes the turn and closes the session's turn left open (an
// interrupted one); a writing tool's PreToolUse opens the session's
// checkpoint when it has none open, beside the other session's; a
// reading tool's, PostToolUse
// and SubagentStop do nothing; Stop, StopFailure and SessionEnd close
// the session's own. What the agent's tools write is the edit action,
// while the turn is open. A hook never fails: exit 0, the tree as it was.
func (m *model) agent(t *rapid.T) {
	session := rapid.SampledFrom([]string{"A", "B"}).Draw(t, "agentSession")
	event := rapid.SampledFrom([]string{"UserPromptSubmit", "PreToolUse", "PreToolUse", "PreToolUse:Read",
		"PostToolUse", "SubagentStop", "Stop", "StopFailure", "SessionEnd"}).Draw(t, "event")
	// No cwd: the hook acts on its working directory, the root.
	payload := map[string]any{"session_id": session, "hook_event_name": event}
	switch event {
	case "UserPromptSubmit":
		payload["prompt"] = "task of " + session
	case "PreToolUse", "PostToolUse":
		payload["tool_name"], payload["tool_input"] = rapid.SampledFrom([]string{"Edit", "Write", "Bash"}).Draw(t, "tool"), map[string]any{}
	case "PreToolUse:Read":
		payload["hook_event_name"], payload["tool_name"], payload["tool_input"] = "PreToolUse", "Read", map[string]any{}
	case "Stop", "SubagentStop":
		payload["stop_hook_active"] = false
	case "StopFailure":
		payload["error"] = "rate_limit"
	}
	b, err := json.Marshal(payload)
	if err != nil {
		m.fail("%v", err)
	}
	env := []string{"XDG_STATE_HOME=" + filepath.Join(m.dir, "state")}
	r := m.sbIn(env, string(b), "agent", "hook", "claude-code")
	if r.code != 0 || strings.Contains(r.stdout, "warning") {
		m.fail("agent hook %s: exit %d\n%s%s", event, r.code, r.stdout, r.stderr)
	}
	if got, _ := m.walk(); len(changed(m.tree, got)) > 0 {
		m.fail("agent hook %s changed the tree:\n%s", event, strings.Join(diffLines(m.tree, got), "\n"))
	}
	mine := m.openOf(session)
	switch event {
	case "PreToolUse":
		if mine == nil {
			m.beginCheckpoint(session)
		}
	case "UserPromptSubmit", "Stop", "StopFailure", "SessionEnd":
		if mine != nil {
			m.endCheckpoint(mine)
		}
	}
}

// undoSession reverts every checkpoint of a session not yet undone, as
// one step: each path back to its state before the session's first
// checkpoint that changed it, refused when one is not as the session's
// last checkpoint that changed it left it.
func (m *model) undoSession(t *rapid.T) {
	session := rapid.SampledFrom([]string{"A", "B"}).Draw(t, "undoSession")
	kill := rapid.IntRange(0, 2).Draw(t, "kill") == 0
	var steps []*step
	for _, s := range m.hist {
		if s.kind == "checkpoint" && s.session == session && !s.undone && !s.gone {
			steps = append(steps, s)
		}
	}
	merged := &step{kind: "session", session: session, before: tree{}, after: tree{}, merged: steps}
	for _, s := range steps {
		for p, e := range s.before {
			if _, ok := merged.before[p]; !ok {
				merged.before[p] = e
			}
		}
		for p, e := range s.after {
			merged.after[p] = e
		}
		merged.unknown = merged.unknown || s.unknown
	}
	var o outcome
	switch {
	case len(m.cps) > 0:
		o = refuse(2)
	case len(steps) == 0:
		o = refuse(1)
	default:
		o = m.pathsOutcome(merged.after, merged.before, false)
		if merged.unknown && !o.refuse {
			o.either = true
		}
	}
	links := map[string]bool{}
	for _, s := range steps {
		for p := range s.linked {
			links[p] = true
		}
	}
	o = m.needsDamaged(o, links)
	old, oldLinked := m.tree, m.multi
	if m.verb(o, kill, "undo", "--session", session) {
		m.tree = o.want
		for _, s := range steps {
			s.undone = true
		}
		merged.saved, merged.savedLinked = old, oldLinked
		m.redoStack = append(m.redoStack, merged)
	}
}

// stored is where the store keeps the content c, loose or packed.
func (m *model) stored(c string) (storedObject, bool) {
	o, ok, err := findObject(filepath.Join(m.root, ".snapback"), fmt.Sprintf("%x", sha256.Sum256([]byte(c))))
	if err != nil {
		m.fail("finding object: %v", err)
	}
	return o, ok
}

// intact says whether the store still holds a copy of the content c
// that matches its hash (a content may be packed twice: a damaged copy
// does not stop a verb that can read another).
func (m *model) intact(c string) bool {
	return intactCopy(filepath.Join(m.root, ".snapback"), fmt.Sprintf("%x", sha256.Sum256([]byte(c))))
}

// fileContent is the content of a file entry of the model's tree.
func fileContent(e string) (string, bool) {
	f := strings.SplitN(e, " ", 3)
	if len(f) != 3 || f[0] != "file" {
		return "", false
	}
	c, err := strconv.Unquote(f[2])
	return c, err == nil
}

// damage flips a byte of a stored content some step holds: while it
// is damaged, an undo, redo or restore that has to write it from the
// store refuses (exit 2), changing nothing (README: a damaged object is
// never written back; see [model.needsDamaged]).
func (m *model) damage(t *rapid.T) {
	seen := map[string]bool{}
	var cands []string
	for _, s := range m.hist {
		for _, tr := range []tree{s.state, s.saved, s.before, s.after} {
			for _, e := range tr {
				if c, ok := fileContent(e); ok && c != "" && !seen[c] && m.damaged[c] == nil {
					if _, ok := m.stored(c); ok {
						seen[c] = true
						cands = append(cands, c)
					}
				}
			}
		}
	}
	if len(cands) == 0 {
		t.Skip("no stored content to damage") // rapid: this action does not apply in this state (no capability; SNAPBACK_REQUIRE has no say)
	}
	sort.Strings(cands)
	c := rapid.SampledFrom(cands).Draw(t, "damage")
	o, _ := m.stored(c)
	rel, _ := filepath.Rel(m.root, o.path)
	b0, err := setStoredByte(o, c[0]^1)
	if err != nil {
		m.fail("damaging object %s: %v", rel, err)
	}
	m.log(fmt.Sprintf("chmod u+w %s; printf '\\%03o' | dd of=%s bs=1 seek=%d count=1 conv=notrunc 2>/dev/null # damage", rel, b0^1, rel, o.off))
	if m.damaged == nil {
		m.damaged = map[string][]byte{}
	}
	m.damaged[c] = []byte{b0}
}

// repair puts a damaged object's bytes back.
func (m *model) repair(t *rapid.T) {
	var cs []string
	for c := range m.damaged {
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		t.Skip("nothing damaged") // rapid: this action does not apply in this state (no capability; SNAPBACK_REQUIRE has no say)
	}
	sort.Strings(cs)
	c := rapid.SampledFrom(cs).Draw(t, "repair")
	orig := m.damaged[c]
	delete(m.damaged, c)
	o, ok := m.stored(c) // (gc may have packed it again elsewhere)
	if !ok {
		return // gc took it
	}
	rel, _ := filepath.Rel(m.root, o.path)
	m.log(fmt.Sprintf("printf '\\%03o' | dd of=%s bs=1 seek=%d count=1 conv=notrunc 2>/dev/null # repair", orig[0], rel, o.off))
	if _, err := setStoredByte(o, orig[0]); err != nil {
		m.fail("repairing object %s: %v", rel, err)
	}
}

// needsDamaged turns o, a verb writing o.want over the tree, into a
// refusal with exit 2 when a content it has to write is damaged (and
// nothing else refuses it first). links are the files of o.want that
// had other names then: one whose partner of the same content is in
// place already may be made a link of it, reading nothing (either).
func (m *model) needsDamaged(o outcome, links map[string]bool) outcome {
	if o.refuse || o.either || o.want == nil || len(m.damaged) == 0 {
		return o
	}
	// A file the verb replaces or removes lends its own inode (staged
	// before the apply, one name only) to a write of its content: the
	// store's copy is not read then.
	held := map[string]bool{}
	for _, p := range changed(m.tree, o.want) {
		c, ok := fileContent(m.tree[p])
		if w, _ := fileContent(o.want[p]); ok && w != c && !m.multi[p] {
			held[c] = true
		}
	}
	for _, p := range changed(m.tree, o.want) {
		c, ok := fileContent(o.want[p])
		if !ok || m.damaged[c] == nil || held[c] || m.intact(c) {
			continue
		}
		if have, ok := fileContent(m.tree[p]); ok && have == c {
			continue // the content is there already (a chmod, at most)
		}
		if links[p] && partnerInPlace(m.tree, o.want, links, p) {
			o.either = true
			continue
		}
		return refuse(2)
	}
	return o
}
