// Command snapback makes a command's changes to a project reversible.
// See README.md; each verb lives in cmd_<verb>.go.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/catalog"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
	"github.com/snapback/snapback/runner"
	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

var version = "0.1.0-dev"

func main() { os.Exit(Main()) }

// Main runs the CLI with os.Args and returns the exit status.
func Main() int {
	if len(os.Args) > 1 && os.Args[1] == overlay.HelperVerb {
		return overlay.Helper(os.Args[2:]) // inside a run's mount namespace
	}
	if len(os.Args) > 1 && os.Args[1] == overlay.InitVerb {
		return overlay.Init(os.Args[2:]) // a fuse run's init, in its PID namespace
	}
	if len(os.Args) > 1 && os.Args[1] == fuse.ExecVerb {
		return fuse.Helper(os.Args[2:]) // inside a fuse run's mount namespace
	}
	if len(os.Args) > 1 && os.Args[1] == fuse.ServeVerb {
		return fuse.Serve(os.Args[2:]) // a fuse run's server
	}
	if len(os.Args) > 2 && os.Args[1] == overlay.ProbeVerb {
		return overlay.Probe(os.Args[2]) // doctor's probe, in a user namespace
	}
	if len(os.Args) > 1 && os.Args[1] == backends.VolumeHelperVerb {
		return backends.VolumeHelper(os.Args[2:]) // in a docker-volume helper container
	}
	// SNAPBACK_CPUPROFILE=FILE writes a CPU profile: for performance reports.
	if p := os.Getenv("SNAPBACK_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
	}
	return run(os.Args[1:], os.Stdout, os.Stderr)
}

// exitError carries an exit status chosen by a verb (1 for a refusal).
type exitError struct {
	code int
	kind string // the stable error code of --json
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// statusError makes `run` end with the command's own status.
type statusError struct{ status int }

func (e *statusError) Error() string { return fmt.Sprintf("exit status %d", e.status) }

func usageErr(format string, a ...any) error {
	return &exitError{code: 2, kind: "usage", err: fmt.Errorf(format, a...)}
}

func run(args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRootCmd(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.status
	}
	code, kind := classify(err)
	if g.runStarted {
		code = runner.StatusFailed
	}
	var re *runner.Error
	if errors.As(err, &re) {
		code = re.Status
	}
	if g.json {
		b, _ := json.Marshal(map[string]string{"error": kind, "message": err.Error()}) // strings always marshal
		fmt.Fprintln(stderr, string(b))
	} else {
		fmt.Fprintf(stderr, "snapback: %s\n", oneLine(err.Error()))
	}
	return code
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
	case errors.Is(err, snapshot.ErrNothingToUndo), errors.Is(err, snapshot.ErrNothingToRedo):
		return 1, "nothing_to_do"
	case errors.As(err, &cfg):
		return 2, "config"
	case errors.Is(err, snapshot.ErrNotFound), errors.Is(err, snapshot.ErrNoPending):
		return 2, "not_found"
	case errors.Is(err, snapshot.ErrNoStore):
		return 2, "no_store"
	case errors.Is(err, snapshot.ErrLocked):
		return 2, "locked"
	case errors.Is(err, snapshot.ErrDamaged):
		return 2, "damaged"
	case errors.Is(err, snapshot.ErrCorrupt), errors.Is(err, snapshot.ErrMissingObject):
		return 2, "corrupt"
	case errors.Is(err, backends.ErrTarget):
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

func newRootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "snapback",
		Short:         "Undo for your machine: make a command's changes to a project reversible",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.PersistentFlags().StringVarP(&g.dir, "dir", "C", "", "project root (default: nearest ancestor with snapback.toml or .snapback, else the working directory)")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "machine-readable output (and errors as JSON on stderr)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageErr("%s: %v", c.CommandPath(), err) })
	root.AddCommand(
		newSnapCmd(g), newListCmd(g), newDiffCmd(g), newUndoCmd(g), newRedoCmd(g),
		newRestoreCmd(g), newGCCmd(g), newRecoverCmd(g), newVersionCmd(g), newRunCmd(g),
		newStatusCmd(g), newCommitCmd(g), newDiscardCmd(g), newShellCmd(g), newDoctorCmd(g),
		newBackendsCmd(g), newArchiveCmd(g), newCheckCmd(g),
	)
	refuseEmpty(root)
	return root
}

// emptyAllowed are the string flags whose empty value means something:
// a snapshot without a note.
var emptyAllowed = map[string]bool{"message": true}

// commandLine are the verbs whose words after -- are a command line of
// the user's, where an empty word is an argument like any other.
var commandLine = map[string]bool{"run": true}

// refuseEmpty makes every verb refuse an empty argument or an empty flag
// value before it does anything: "" names no snapshot, run, archive,
// path or directory, and a lookup that reads it as "the default" would
// act on something the user did not name (undo "" undid the newest
// snapshot, -C "" chose the working directory). It runs first among the
// verb's own argument checks, so `redo ""` says what is wrong too.
func refuseEmpty(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseEmpty(sub)
	}
	if !c.Runnable() {
		return
	}
	check, names := c.Args, argNames(c.Use)
	c.Args = func(c *cobra.Command, args []string) error {
		verb := strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
		var err error
		c.Flags().Visit(func(f *pflag.Flag) {
			if err == nil && f.Value.Type() == "string" && f.Value.String() == "" && !emptyAllowed[f.Name] {
				name := "--" + f.Name
				if f.Shorthand != "" {
					name = "-" + f.Shorthand + "/" + name
				}
				err = usageErr("%s: %s is empty", verb, name)
			}
		})
		if err != nil {
			return err
		}
		n := len(args)
		if d := c.ArgsLenAtDash(); d >= 0 && commandLine[c.Name()] {
			n = d
		}
		for i, a := range args[:n] {
			if a != "" {
				continue
			}
			if len(names) == 0 {
				return usageErr("%s: argument %d is empty", verb, i+1)
			}
			return usageErr("%s: argument %d (%s) is empty", verb, i+1, names[min(i, len(names)-1)])
		}
		if check == nil {
			return nil
		}
		return check(c, args)
	}
}

// argNames lists the positional arguments a usage line names: "commit
// [ID] [PATH...]" gives ID, PATH (the last one repeats). Flags and their
// values ("--into DIR", "[--repo REPO]") are not arguments.
func argNames(use string) []string {
	words := strings.Fields(use)
	var names []string
	for i := 1; i < len(words); i++ {
		w := strings.Trim(words[i], "[]")
		switch {
		case w == "--":
			return names // what follows is a command line
		case strings.HasPrefix(w, "-"):
			// A value after a flag in the same brackets, or after a
			// flag outside brackets, is the flag's: skip it.
			if next := i + 1; next < len(words) && !strings.HasSuffix(words[i], "]") && !strings.HasPrefix(words[next], "[") &&
				isPlaceholder(strings.Trim(words[next], "[]")) {
				i++
			}
		case isPlaceholder(strings.TrimSuffix(w, "...")):
			names = append(names, strings.TrimSuffix(w, "..."))
		}
	}
	return names
}

// isPlaceholder: a usage word standing for a value, such as ID, PATH or
// ARCHIVE|ID (a choice may hold a literal: ID|all).
func isPlaceholder(w string) bool {
	first, _, _ := strings.Cut(w, "|")
	return first != "" && strings.ToUpper(first) == first && strings.ToLower(first) != first
}
