package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"golang.org/x/term"
)

// globals are the flags every verb shares, and its output streams.
type globals struct {
	dir    string
	json   bool
	quiet  bool // -q: no summary line or progress on a terminal
	stdout io.Writer
	stderr io.Writer
	// runStarted: failures from here on are snapback's own (status 125).
	runStarted bool
	bar        *progressLine // the progress line, once shown (progress.go)
	// lockWait, when set, is how long open waits for the store's lock
	// instead of lockWait().
	lockWait time.Duration
	// verb is the verb running ("archive create"), for its messages.
	verb string
	// ctx is the verb's context: cancelled by SIGINT or SIGTERM.
	ctx        context.Context
	interrupts *interrupts
}

// lockWait is how long a verb waits for another snapback to finish.
func lockWait() time.Duration {
	if s := os.Getenv("SNAPBACK_LOCK_WAIT"); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			return d
		}
	}
	return 5 * time.Second
}

// chdir makes -C DIR mean "as if started in DIR", as for git and make:
// the root is found from there, run's command runs there, and relative
// PATH arguments resolve against it.
func (g *globals) chdir() error {
	if g.dir == "" {
		return nil
	}
	abs, err := filepath.Abs(g.dir)
	if err != nil {
		return fmt.Errorf("-C %s: %w", g.dir, err)
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return usageErr("-C %s: not a directory", g.dir)
	}
	if err := os.Chdir(abs); err != nil {
		return usageErr("-C %s: %v", g.dir, err)
	}
	// The command of run inherits it: a shell's pwd then names DIR.
	return os.Setenv("PWD", abs)
}

// rootDir finds the project root from the working directory
// (snapshot.FindRoot): a run started in a subdirectory then protects the
// whole project.
func (g *globals) rootDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	return snapshot.FindRoot(wd), nil
}

// storeOf says where the store of the project at root is, by its config
// (snapshot.Locate: every verb finds its store there), for the verbs that
// name it without opening it.
func storeOf(root string) (snapshot.Location, error) {
	cfg, err := config.Load(root)
	if err != nil {
		return snapshot.Location{}, err
	}
	return snapshot.Locate(root, cfg.Snapshot.Store, false)
}

// open opens the project's store to change it, as the verb declares in o
// (snapshot.Open: locked, an interrupted operation finished first). The
// caller must Close the repo.
func (g *globals) open(o snapshot.Options) (*snapshot.Repo, error) {
	root, err := g.openOptions(&o)
	if err != nil {
		return nil, err
	}
	return snapshot.Open(root, o)
}

// openReader opens the project's store to look, as the verb declares in
// o (snapshot.OpenReader: what it returns cannot change the tree). The
// caller must Close the reader.
func (g *globals) openReader(o snapshot.Options) (*snapshot.Reader, error) {
	root, err := g.openOptions(&o)
	if err != nil {
		return nil, err
	}
	return snapshot.OpenReader(root, o)
}

// openOptions finds the project root and completes o, as a verb declared
// it, with how this process waits for the lock and hears of what opening
// does.
func (g *globals) openOptions(o *snapshot.Options) (string, error) {
	root, err := g.rootDir()
	if err != nil {
		return "", err
	}
	if o.Create {
		if err := g.refuseWideRoot(root); err != nil { // wideroot.go: not all of $HOME or /
			return "", err
		}
	}
	o.LockWait = lockWait()
	if g.lockWait > 0 {
		o.LockWait = g.lockWait
	}
	o.Ctx = g.ctx // a scan or a target's work stops on Ctrl-C
	o.Working = g.working
	if p := g.progressLine(); p != nil {
		o.Progress = p.snapshot
	}
	o.Warn = g.warn
	o.Recovered = func(note string) {
		fmt.Fprintf(g.stderr, "snapback: %s (recover)\n", oneLine(note))
	}
	o.SetAside = func(msg string) {
		if g.json { // stdout holds the one JSON object
			fmt.Fprintf(g.stderr, "snapback: %s\n", oneLine(msg))
		} else {
			fmt.Fprintln(g.stdout, oneLine(msg))
		}
	}
	return root, nil
}

// openPending opens the store as o declares and finds the pending run
// named by the optional first argument (default: the newest). The caller
// must Close the repo.
func (g *globals) openPending(o snapshot.Options, args []string) (*snapshot.Repo, *snapshot.ViewRun, error) {
	repo, err := g.open(o)
	if err != nil {
		return nil, nil, err
	}
	ref := ""
	if len(args) > 0 {
		ref = args[0]
	}
	p, err := repo.FindViewRun(ref)
	if err != nil {
		repo.Close()
		return nil, nil, err
	}
	return repo, p, nil
}

// jsonVersion is the version of the schema of every JSON output
// (docs/json.md): it changes when a field changes meaning or goes away,
// not when one is added.
const jsonVersion = 1

func (g *globals) printJSON(v any) error {
	b, err := json.Marshal(versioned(v))
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = g.stdout.Write(out.Bytes())
	return err
}

// versioned puts "version" first in a JSON object that lacks it, so that
// a script can check the schema before it reads anything else.
func versioned(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil || len(b) < 2 || b[0] != '{' {
		return b // Marshal of the result reports the error again
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(b, &keys) == nil {
		if _, ok := keys["version"]; ok {
			return b
		}
	}
	head := fmt.Sprintf(`{"version":%d`, jsonVersion)
	if len(b) == 2 {
		return json.RawMessage(head + "}")
	}
	return json.RawMessage(head + "," + string(b[1:]))
}

// warn prints a warning: something the user should know though the verb
// goes on.
func (g *globals) warn(msg string) {
	g.bar.end("")
	fmt.Fprintf(g.stderr, "snapback: warning: %s\n", oneLine(msg))
}

// noteSkipped names, on stderr, each socket or device a run left that
// verb (a commit, a diff) does not carry: dropped without a word, it
// would look carried.
func (g *globals) noteSkipped(skipped []record.Skipped) {
	g.bar.end("")
	for _, sk := range skipped {
		fmt.Fprintf(g.stderr, "snapback: skipped %s (%s)\n", oneLine(quote(sk.Path)), sk.Reason())
	}
}

// columns is the width git's --stat fits: $COLUMNS, else the width of
// stdout when it is a terminal, else 80 (as git's term_columns).
func (g *globals) columns() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if f, ok := g.stdout.(*os.File); ok {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
			return w
		}
	}
	return 80
}

// summary: after a verb that changes things, a terminal gets one line on
// stderr saying what it did; scripts (stderr not a terminal), -q and
// --json get none.
func (g *globals) summary() bool {
	return !g.quiet && !g.json && g.terminal(g.stderr, "stderr")
}

// terminal reports whether w, the stream called name, is a terminal.
// SNAPBACK_TERMINAL stands for one in the tests (a test-seams build
// only): "1" or "stderr" for stderr, "stdout,stderr" for both.
func (g *globals) terminal(w io.Writer, name string) bool {
	if v := os.Getenv("SNAPBACK_TERMINAL"); v != "" && fsutil.TestSeams() {
		for _, s := range strings.Split(v, ",") {
			if s == name || s == "1" && name == "stderr" {
				return true
			}
		}
		return false
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// say prints the line on stdout that scripts read after a verb that
// changes things, unless the summary line will say it on the same
// terminal: a person there reads one line, not two saying one thing.
// Piped or redirected, stdout gets its line as before.
func (g *globals) say(format string, a ...any) {
	if g.summary() && g.terminal(g.stdout, "stdout") {
		return
	}
	fmt.Fprintf(g.stdout, format, a...)
}

// summarize prints line as the summary, when there is one to print.
func (g *globals) summarize(line string) {
	g.bar.end("")
	if line != "" && g.summary() {
		fmt.Fprintf(g.stderr, "snapback: %s\n", oneLine(line))
	}
}

// working shows, on a terminal, what a step that has taken over a second
// is doing, and how long it took; elsewhere it says nothing.
func (g *globals) working(what string) func() {
	if !g.progressShown() {
		return func() {}
	}
	g.bar.end("")
	f := g.stderr
	start := time.Now()
	var mu sync.Mutex
	shown := false
	timer := time.AfterFunc(progressDelay(), func() {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, "snapback: %s…", what)
		shown = true
	})
	return func() {
		timer.Stop()
		mu.Lock()
		defer mu.Unlock()
		if shown {
			fmt.Fprintf(f, " %.1f s\n", time.Since(start).Seconds())
		}
	}
}

// storeName names a store for the user: .snapback in the tree, else its
// path.
func storeName(s *snapshot.Store) string {
	if s.InTree() {
		return snapshot.StoreDir
	}
	return s.Dir
}
