package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/snapback/snapback/catalog"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/suggest"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// How a verb's error reaches the user and the script: the exit status and
// the stable code (classify, the one classification), the hint line
// (explain, flagError), and the line or the JSON object on stderr
// (printError).

// exitError carries an exit status chosen by a verb (1 for a refusal).
type exitError struct {
	code int
	kind string // the stable error code of --json
	err  error
	hint string // a second line: what to do instead ("" for none)
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// statusError makes `run` end with the command's own status.
type statusError struct{ status int }

func (e *statusError) Error() string { return fmt.Sprintf("exit status %d", e.status) }

func usageErr(format string, a ...any) error {
	return &exitError{code: 2, kind: "usage", err: fmt.Errorf(format, a...)}
}

// printError writes a verb's error: one line and its hint, then a
// conflict's paths one a line; or the JSON error object under --json.
func printError(g *globals, args []string, kind, hint, msg string, paths []string) {
	// Once run has started, its flags are read and what follows its
	// command's first word is the command's: a --json there is not ours.
	if g.json || (!g.runStarted && jsonRequested(args)) {
		out := struct {
			Version int      `json:"version"`
			Error   string   `json:"error"`
			Hint    string   `json:"hint,omitempty"`
			Message string   `json:"message"`
			Paths   []string `json:"paths,omitempty"`
		}{jsonVersion, kind, hint, msg, paths}
		b, _ := json.Marshal(out) // strings and an int always marshal
		fmt.Fprintln(g.stderr, string(b))
		return
	}
	fmt.Fprintf(g.stderr, "snapback: %s\n", oneLine(msg))
	for _, p := range paths {
		fmt.Fprintf(g.stderr, "  %s\n", oneLine(quote(p)))
	}
	if hint != "" {
		fmt.Fprintf(g.stderr, "hint: %s\n", oneLine(hint))
	}
}

// jsonRequested: --json was on the command line, though parsing stopped
// before it was read (an unknown verb or flag).
func jsonRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}

// explain turns cobra's own errors into snapback's: one line, and a hint
// line (did you mean …?) where one helps.
func explain(root *cobra.Command, err error) (error, string) {
	var ee *exitError
	if errors.As(err, &ee) && ee.hint != "" {
		return err, ee.hint
	}
	var unknown *snapshot.UnknownIDError
	if errors.As(err, &unknown) {
		if unknown.Run {
			return err, "`snapback status` lists the pending runs"
		}
		return err, "`snapback list` lists the snapshots"
	}
	var ambiguous *snapshot.AmbiguousIDError
	if errors.As(err, &ambiguous) {
		return err, "give more of the id: its start, or the end of its last part"
	}
	msg := err.Error()
	if verb, ok := strings.CutPrefix(msg, "unknown command "); ok {
		// unknown command "undoo" for "snapback"\n\nDid you mean this?…
		name, _, _ := strings.Cut(verb, " for ")
		name = strings.Trim(name, `"`)
		hint := "`snapback --help` lists the verbs"
		if s := root.SuggestionsFor(name); len(s) > 0 {
			hint = "did you mean `snapback " + strings.Join(s, "` or `snapback ") + "`?"
		}
		return &exitError{code: 2, kind: "usage", err: fmt.Errorf("unknown verb %q", name)}, hint
	}
	return err, ""
}

// flagError words a flag parsing error of verb c, with a did-you-mean
// for a misspelt flag.
func flagError(c *cobra.Command, err error) error {
	verb := strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
	e := &exitError{code: 2, kind: "usage", err: fmt.Errorf("%s: %v", verb, err)}
	help := "`snapback " + verb + " --help` lists its flags"
	if c == c.Root() {
		e.err, help = err, "`snapback --help` lists its flags"
	}
	msg := err.Error()
	name := ""
	if n, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		name = n
	} else if n, ok := strings.CutPrefix(msg, "unknown shorthand flag: "); ok {
		name, _, _ = strings.Cut(strings.Trim(n, "'"), "'")
	}
	if name != "" {
		var names []string
		collect := func(f *pflag.Flag) { names = append(names, f.Name) }
		c.Flags().VisitAll(collect)
		c.InheritedFlags().VisitAll(collect)
		best := suggest.Closest(name, names)
		if best != "" {
			e.hint = "did you mean --" + best + "?"
		} else {
			e.hint = help
		}
	}
	return e
}

// classify maps an error to an exit status and a stable code.
func classify(err error) (int, string) {
	var ee *exitError
	var ce *snapshot.ConflictError
	var pe *snapshot.PendingError
	var cfg *config.Error
	switch {
	case errors.As(err, &ee):
		return ee.code, ee.kind
	case errors.As(err, &ce):
		return 1, "conflict"
	case errors.As(err, &pe):
		return 1, "pending"
	case errors.As(err, new(*snapshot.GitMovedError)):
		return 1, "git_moved" // refused, nothing changed: HEAD outside the root would disagree
	case errors.As(err, new(*snapshot.GitRefsError)):
		return 1, "git_conflict" // refused, nothing changed: a ref the step moved was moved since
	case errors.Is(err, snapshot.ErrNothingToUndo), errors.Is(err, snapshot.ErrNothingToRedo):
		return 1, "nothing_to_do"
	case errors.Is(err, snapshot.ErrRunning):
		return 1, "running" // refused, nothing changed: later it may work
	case errors.Is(err, snapshot.ErrCheckpointOpen):
		return 2, "checkpoint_open"

	case errors.As(err, &cfg):
		return 2, "config"
	case errors.As(err, new(*snapshot.AmbiguousIDError)):
		return 2, "ambiguous_id"
	case errors.Is(err, snapshot.ErrNotFound), errors.Is(err, snapshot.ErrNoPending):
		return 2, "not_found"
	case errors.Is(err, snapshot.ErrNoStore):
		return 2, "no_store"
	case errors.Is(err, snapshot.ErrLocked):
		return 2, "locked"
	case errors.Is(err, snapshot.ErrUntrusted):
		return 2, "untrusted_store"
	case errors.Is(err, snapshot.ErrDamaged):
		return 2, "damaged"
	case errors.Is(err, record.ErrCorrupt), errors.Is(err, snapshot.ErrMissingObject):
		return 2, "corrupt"
	case errors.Is(err, config.ErrTarget):
		return 2, "target"
	case catalog.CodeOf(err) != "":
		return 2, catalog.CodeOf(err)
	}
	return 2, "error"
}

// oneLine keeps an error message on one line (paths may hold newlines)
// with no control character reaching the terminal (see printable).
func oneLine(s string) string {
	return printable(s)
}
