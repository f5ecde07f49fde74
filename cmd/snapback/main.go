// Command snapback makes a command's changes to a project reversible.
// See README.md; each verb lives in cmd_<verb>.go.
//
// The man pages in man/ are made from the commands by a test (the page
// writer is not linked into snapback: its markdown library's start-up
// cost every hook's process about half a millisecond), and
// TestManPages checks them.
package main

//go:generate go test -run ^TestManPages$ . -args -write-man ../../man

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/fsutil"
	"github.com/snapback/snapback/internal/watch"
	"github.com/snapback/snapback/overlay"
	"github.com/snapback/snapback/overlay/fuse"
	"github.com/snapback/snapback/runner"
	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// version is this build's: the module version `go install …@vX.Y.Z`
// stamps, or for a build from a checkout the pseudo-version Go makes of
// its commit (v0.0.0-TIME-REVISION, +dirty when the tree had changes);
// "devel" when the build recorded neither (a test binary).
var version, revision, modified = versionOf(debug.ReadBuildInfo())

func versionOf(bi *debug.BuildInfo, ok bool) (v, rev string, dirty bool) {
	if !ok {
		return "devel", "", false
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	v = bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
		if rev != "" {
			v = "devel-" + rev[:min(12, len(rev))]
			if dirty {
				v += "+dirty"
			}
		}
	}
	return v, rev, dirty
}

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
	if len(os.Args) > 1 && os.Args[1] == fuse.KeepVerb {
		return fuse.Keep(os.Args[2:]) // a project's kept fuse view
	}
	if len(os.Args) > 1 && os.Args[1] == fuse.ServeVerb {
		return fuse.Serve(os.Args[2:]) // a fuse run's server
	}
	if len(os.Args) > 2 && os.Args[1] == overlay.ProbeVerb {
		return overlay.Probe(os.Args[2]) // a trial overlayfs view, in namespaces of its own
	}
	if len(os.Args) > 2 && os.Args[1] == fuse.ProbeVerb {
		return fuse.Probe(os.Args[2]) // a trial fuse view, in a mount namespace of its own
	}
	if len(os.Args) > 1 && os.Args[1] == backends.VolumeHelperVerb {
		return backends.VolumeHelper(os.Args[2:]) // in a docker-volume helper container
	}
	if len(os.Args) > 1 && os.Args[1] == watch.ServeVerb {
		return watch.Serve(os.Args[2:]) // the tree's watcher, started by checkpoint begin
	}
	snapshot.WatchTree = true // this program serves watch.ServeVerb
	// SNAPBACK_CPUPROFILE=FILE writes a CPU profile: for performance
	// reports, in a test-seams build only (-tags snapback_testseams).
	if p := os.Getenv("SNAPBACK_CPUPROFILE"); p != "" && fsutil.TestSeams() {
		if f, err := os.Create(p); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
	}
	return run(os.Args[1:], os.Stdout, os.Stderr)
}

// targetBackend is how the store finds the backend of a target of
// snapback.toml (snapshot.UseBackends): in package backends.
func targetBackend(name string) (snapshot.Backend, error) { return backends.Get(name) }

func run(args []string, stdout, stderr io.Writer) int {
	snapshot.UseBackends(targetBackend)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	g := &globals{stdout: stdout, stderr: stderr}
	g.interrupts = &interrupts{cancel: cancel, now: func(sig syscall.Signal) {
		// The second signal: stop now, as its default would have.
		g.bar.end("")
		printError(g, args, "interrupted", "", fmt.Sprintf("%s, again: stopped at once (the next snapback finishes or rolls back what was under way)", signalName(sig)), nil)
		os.Exit(128 + int(sig))
	}}
	root := newRootCmd(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	g.interrupts.end()
	g.bar.end("") // whatever follows starts on a line of its own
	if err == nil {
		if sig := g.interrupts.received(); sig != 0 {
			// Past the point where it could stop: it finished instead.
			g.warn(fmt.Sprintf("%s came while %s could not stop half-way: it completed", signalName(sig), g.verb))
		}
		return 0
	}
	// Stopped by a signal, at a point where nothing is half-done.
	if sig := g.interrupts.received(); sig != 0 && errors.Is(err, context.Canceled) {
		printError(g, args, "interrupted", "", fmt.Sprintf("%s: interrupted by %s", g.verb, signalName(sig)), nil)
		return 128 + int(sig)
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
	err, hint := explain(root, err)
	if _, k := classify(err); k == "usage" {
		kind = k
	}
	// A conflict's paths: one a line, or an array.
	var paths []string
	if ce := (*snapshot.ConflictError)(nil); errors.As(err, &ce) {
		paths = ce.Paths
	}
	printError(g, args, kind, hint, err.Error(), paths)
	return code
}

func newRootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "snapback",
		Short:         "Undo for your machine: make a command's changes to a project reversible",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		// After the arguments' checks: -C "" is refused before this.
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			g.verb = strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
			g.ctx = c.Context()
			if !forwardsSignals[c.Name()] && g.interrupts != nil {
				g.interrupts.trap() // see interrupt.go
			}
			return g.chdir()
		},
	}
	root.PersistentFlags().StringVarP(&g.dir, "dir", "C", "", "run as if started in DIR (the root is then found from DIR: the nearest ancestor with snapback.toml or .snapback, else the top of the git work tree, else DIR)")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "machine-readable output (and errors as JSON on stderr)")
	root.PersistentFlags().BoolVarP(&g.quiet, "quiet", "q", false, "on a terminal too, no line on stderr saying what a verb did, and no progress")
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(
		newSnapCmd(g), newListCmd(g), newDiffCmd(g), newShowCmd(g), newUndoCmd(g), newRedoCmd(g),
		newRestoreCmd(g), newGCCmd(g), newRecoverCmd(g), newVersionCmd(g), newRunCmd(g),
		newStatusCmd(g), newCommitCmd(g), newDiscardCmd(g), newShellCmd(g), newDoctorCmd(g),
		newBackendsCmd(g), newArchiveCmd(g), newCheckCmd(g), newCheckpointCmd(g), newAgentCmd(g), newMCPCmd(g),
	)
	root.InitDefaultCompletionCmd() // as Execute would: for its examples
	setExamples(root)
	completeIDArgs(g, root)
	requireVerb(root)
	addCompletionInstall(g, root) // cmd_completion.go
	refuseEmpty(root)
	return root
}

// requireVerb makes every group of verbs (archive, checkpoint, agent,
// completion, …) refuse to run without one of its verbs or with one it
// does not have: cobra would print the group's help and exit 0, so that
// a script's typo (`snapback archive verfy ID && echo ok`) read as
// success. Each is a usage error (exit 2) with a did-you-mean hint.
func requireVerb(c *cobra.Command) {
	for _, sub := range c.Commands() {
		requireVerb(sub)
	}
	if c == c.Root() || !c.HasSubCommands() || c.Runnable() {
		return // the root refuses an unknown verb itself (see explain)
	}
	c.Args = cobra.ArbitraryArgs
	// A flag of the verb meant (archive restor X --into D) is not the
	// group's: it must not hide the verb's name behind a flag error.
	c.FParseErrWhitelist.UnknownFlags = true
	c.SuggestionsMinimumDistance = 2 // cobra sets it only for the root
	c.RunE = func(c *cobra.Command, args []string) error {
		group := strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
		hint := "`snapback " + group + " --help` lists its verbs"
		if len(args) == 0 {
			var verbs []string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					verbs = append(verbs, sub.Name())
				}
			}
			return &exitError{code: 2, kind: "usage", hint: hint,
				err: fmt.Errorf("%s: a verb is missing (one of: %s)", group, strings.Join(verbs, ", "))}
		}
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			hint = "did you mean `snapback " + group + " " + strings.Join(s, "` or `snapback "+group+" ") + "`?"
		}
		return &exitError{code: 2, kind: "usage", hint: hint, err: fmt.Errorf("unknown verb %q", group+" "+args[0])}
	}
}

// emptyAllowed are the string flags whose empty value means something:
// a snapshot without a note.
var emptyAllowed = map[string]bool{"message": true}

// commandLine are the verbs whose arguments are a command line of the
// user's (their flags end at its first word), where an empty word is an
// argument like any other.
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
		if commandLine[c.Name()] {
			n = 0
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
		if err := check(c, args); err != nil {
			// cobra says "requires at least 1 arg(s), only received 0":
			// say which argument is missing, or that there are too many.
			usage := strings.TrimPrefix(c.UseLine(), c.Root().Name()+" ")
			missing := names
			if _, cmd, ok := strings.Cut(c.Use, "[--] "); ok && len(args) == 0 {
				missing = []string{strings.Fields(cmd)[0]} // run's command
			}
			switch {
			case len(args) < len(missing):
				return usageErr("%s: %s is missing (usage: snapback %s)", verb, missing[len(args)], usage)
			case len(names) == 0:
				return usageErr("%s: takes no arguments, got %q (usage: snapback %s)", verb, args[0], usage)
			}
			return usageErr("%s: too many arguments (%d) (usage: snapback %s)", verb, len(args), usage)
		}
		return nil
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
