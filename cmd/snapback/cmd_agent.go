package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/snapback/snapback/agent"
	"github.com/snapback/snapback/snapshot"
	"github.com/spf13/cobra"
)

func newAgentCmd(g *globals) *cobra.Command {
	var names []string
	for _, h := range agent.Harnesses {
		names = append(names, h.Name)
	}
	c := &cobra.Command{
		Use:   "agent",
		Short: "Make each turn of a coding agent one undo step: " + strings.Join(names, ", "),
		Long: "Make each turn of a coding agent one undo step, through the agent's hooks.\n\n" +
			"`snapback agent install HARNESS` writes the hooks into the project's settings for the\n" +
			"harness (" + strings.Join(names, ", ") + "). A prompt starts a turn; the first tool call\n" +
			"that may change files opens a checkpoint (snapback checkpoint begin); the end of the\n" +
			"turn closes it into one undo step, with the prompt's first line as its message.\n" +
			"`snapback undo` then reverts the last turn, `snapback undo --session ID` a whole session.\n" +
			"The hooks never block the agent: when snapback fails, the agent goes on and the user\n" +
			"sees a one-line warning.",
		Args: cobra.NoArgs,
	}
	c.AddCommand(newAgentHookCmd(g, names), newAgentInstallCmd(g, names, true), newAgentInstallCmd(g, names, false))
	return c
}

type agentInstallOptions struct {
	shared, local, user, dryRun, command bool
}

func newAgentInstallCmd(g *globals, names []string, install bool) *cobra.Command {
	var o agentInstallOptions
	verb, short := "install", "Write snapback's hooks into the project's settings for HARNESS"
	long := short + ":\nby default the settings kept out of version control (Claude Code's\n" +
		".claude/settings.local.json; Gemini CLI has one project file, .gemini/settings.json,\n" +
		"written unless git tracks it); --shared: the committed ones (.claude/settings.json), which\n" +
		"give every clone the hooks. The settings and hooks already there stay, byte for byte; an\n" +
		"event that already runs snapback's hook is left as it is, so a second install changes\n" +
		"nothing, and uninstall after install gives the file back as it was. The file is changed in\n" +
		"place (its owner, mode and hard links stay) after a backup beside it; one that is not valid\n" +
		"JSON, or has a key twice, is refused naming its line, and left as it is. The hooks run\n" +
		"`snapback agent hook HARNESS` with a timeout of " + fmt.Sprint(int(agent.HookTimeout.Seconds())) + " s: snapback must be on the agent's PATH.\n\n" +
		"Gemini CLI's settings may hold comments and trailing commas, as Gemini CLI reads them:\n" +
		"they stay where they are. Codex CLI's hooks go in .codex/hooks.json, or with --user in\n" +
		"~/.codex/hooks.json ($CODEX_HOME), for every project Codex works in; Codex runs them only\n" +
		"once you approve them in its /hooks screen. Install ends with what the harness still\n" +
		"needs from you."
	if !install {
		verb, short = "uninstall", "Remove the hooks install wrote from the project's settings for HARNESS"
		long = short + ":\nthe hooks whose command is `snapback agent hook HARNESS`, wherever\n" +
			"they are, and nothing else (a group or event left empty goes too); the same file as\n" +
			"install (--shared: the committed one; --user: the one in your home)."
	}
	if install {
		long += "\n\n" +
			"--command, with no HARNESS: for a harness snapback has no table for (aider, opencode, a\n" +
			"loop of your own) that can run a command before each tool that may change files and one\n" +
			"at the end of each turn: print the two commands, `snapback checkpoint begin` and\n" +
			"`snapback checkpoint end`, with the agent's session and the turn's prompt as shell\n" +
			"variables; nothing is written."
	}
	c := &cobra.Command{
		Use:       verb + " HARNESS [--shared | --user] [--dry-run]",
		Short:     short,
		Long:      long,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: names,
		RunE: func(c *cobra.Command, args []string) error {
			switch {
			case o.command && len(args) > 0:
				return usageErr("agent: --command is the recipe for any harness: give no HARNESS")
			case o.command:
				return runAgentCommand(g, o)
			case len(args) == 0:
				return usageErr("agent %s: HARNESS is missing (usage: snapback agent %s; known: %s)", verb, c.Use, strings.Join(names, ", "))
			}
			return runAgentInstall(g, args[0], install, o)
		},
	}
	if install {
		c.Flags().BoolVar(&o.command, "command", false, "print the commands any harness with pre-tool and end-of-turn hooks runs; write nothing")
	}
	c.Flags().BoolVar(&o.shared, "shared", false, "the committed settings file (Claude Code: .claude/settings.json), shared with everyone who clones the project")
	c.Flags().BoolVar(&o.user, "user", false, "the settings in your home (Codex CLI: ~/.codex/hooks.json, or in $CODEX_HOME), for every project the harness works in")
	c.Flags().BoolVar(&o.local, "local", false, "the settings file kept out of version control: the default")
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "print the change as a diff, write nothing")
	_ = c.Flags().MarkHidden("local") // kept for the scripts written when it was not the default
	return c
}

func runAgentInstall(g *globals, name string, install bool, o agentInstallOptions) error {
	h, err := agent.Find(name)
	if err != nil {
		return usageErr("agent: %v", err)
	}
	if o.shared && o.local || o.user && (o.shared || o.local) {
		return usageErr("agent: --shared, --local and --user name different files: give one")
	}
	if o.user {
		return runAgentInstallUser(g, h, install, o)
	}
	rel := h.SettingsFile(o.shared)
	root, err := g.rootDir()
	if err != nil {
		return err
	}
	git := gitState(root, rel)
	if install && !o.shared && rel == h.Settings && git == gitTracked {
		// A harness with one project file (Gemini CLI): committed, it is
		// everyone's, and hooks there run for teammates without snapback.
		return usageErr("agent: %s is tracked by git: the hooks would reach everyone who clones the project; --shared writes them there all the same", rel)
	}
	edit := h.InstallHooks
	if !install {
		edit = h.UninstallHooks
	}
	c, err := edit(root, rel, !o.dryRun)
	if err != nil {
		// A settings file snapback cannot read is the user's to fix:
		// it is left as it is.
		return &exitError{code: 2, kind: "bad_settings", err: err}
	}
	store, snapshots := "", 0
	if install && !o.dryRun {
		// The store is made now, outside the tree (Outside), so that
		// every verb, and a first `snap`, finds it there.
		if repo, err := g.open(snapshot.Options{Verb: "agent install", Access: snapshot.ForChange, Create: true, Outside: true}); err != nil {
			g.warn("the project's store: " + err.Error())
		} else {
			store = storeName(repo.Store)
			list, _ := repo.List() // unreadable: as if none
			snapshots = len(list)
			repo.Close()
		}
		if _, err := exec.LookPath("snapback"); err != nil {
			g.warn(h.Title + " runs `" + h.Command() + "`, but snapback is not on this PATH: install it where the agent finds it")
		}
	}
	diff := ""
	if o.dryRun && c.Changed() {
		diff, _ = difflib.GetUnifiedDiffString(difflib.UnifiedDiff{ // writes to a string: no error
			A: difflib.SplitLines(string(c.Old)), B: difflib.SplitLines(string(c.New)),
			FromFile: "a/" + c.File, ToFile: "b/" + c.File, Context: 3,
		})
	}
	if g.json {
		out := agentInstallJSON{Harness: h.Name, File: c.File, Changed: c.Changed(), DryRun: o.dryRun, Events: nonNil(c.Events), Store: store}
		if install && c.Changed() && !o.dryRun {
			out.Next = h.NextStep
		}
		if o.dryRun {
			out.Diff = &diff
		}
		return g.printJSON(out)
	}
	switch {
	case o.dryRun && c.Changed():
		fmt.Fprint(g.stdout, diff)
	case !c.Changed() && install:
		fmt.Fprintf(g.stdout, "%s already runs snapback's hooks (%s)\n", c.File, h.Title)
	case !c.Changed():
		fmt.Fprintf(g.stdout, "%s holds no hook of snapback's (%s)\n", c.File, h.Title)
	case install:
		fmt.Fprintf(g.stdout, "added snapback's hooks to %s for %s: %s\n", c.File, h.Title, strings.Join(c.Events, ", "))
		fmt.Fprintf(g.stdout, "next: %s\n", h.NextStep)
		if !o.shared && git == gitUntracked {
			// Claude Code makes git ignore its local file when it makes
			// it; one install made is not, and `git add -A` would share it.
			fmt.Fprintf(g.stdout, "%s is not ignored by git: add it to .gitignore (or .git/info/exclude) to keep the hooks yours\n", c.File)
		}
		if other := h.SettingsFile(!o.shared); other != rel {
			// An install of an earlier snapback wrote the shared file.
			if oc, err := h.UninstallHooks(root, other, false); err == nil && oc.Changed() {
				fmt.Fprintf(g.stdout, "%s runs snapback's hooks too: `snapback agent uninstall %s%s` removes them there\n", other, h.Name, map[bool]string{true: "", false: " --shared"}[o.shared])
			}
		}
		configHooksToo(g, h, root, h.Config)
		if store != "" {
			fmt.Fprintf(g.stdout, "the store (undo history): %s\n", store)
		}
		if hint := firstSnapshotHint(root, snapshots); hint != "" {
			fmt.Fprintln(g.stdout, hint)
		}
	default:
		fmt.Fprintf(g.stdout, "removed snapback's hooks from %s for %s: %s\n", c.File, h.Title, strings.Join(c.Events, ", "))
		configHooksToo(g, h, root, h.Config)
	}
	return nil
}

// configHooksToo says when the harness's TOML config (rel under dir)
// runs snapback's hooks too, in tables install does not write: the
// harness would run both. A config that cannot be read is passed over:
// the harness says what is wrong with it.
func configHooksToo(g *globals, h *agent.Harness, dir, rel string) {
	if ok, err := h.ConfigHooks(dir, rel); err == nil && ok {
		fmt.Fprintf(g.stdout, "%s runs snapback's hooks too, in its [hooks] tables, which agent uninstall does not change: %s runs both; keep one\n", filepath.Join(dir, rel), h.Title)
	}
}

// The generic recipe: what a harness's hooks run, in the project's
// directory, with SESSION and PROMPT set by the harness.
const (
	agentBeginCommand = `snapback checkpoint begin --session "$SESSION" -m "$PROMPT"`
	agentEndCommand   = `snapback checkpoint end --session "$SESSION"`
)

// runAgentCommand prints the generic recipe (install --command).
func runAgentCommand(g *globals, o agentInstallOptions) error {
	if o.shared || o.local || o.user || o.dryRun {
		return usageErr("agent: --command writes no file: it takes no --shared, --local, --user or --dry-run")
	}
	if g.json {
		return g.printJSON(agentCommandJSON{Begin: agentBeginCommand, End: agentEndCommand})
	}
	fmt.Fprintf(g.stdout, "before each tool that may change files: %s\n", agentBeginCommand)
	fmt.Fprintf(g.stdout, "at the end of each turn:                %s\n", agentEndCommand)
	fmt.Fprintln(g.stdout, "run them in the project's directory (or give snapback -C DIR), SESSION the agent's session, PROMPT the turn's prompt: each turn becomes one undo step (`snapback undo`), a whole session's `snapback undo --session SESSION`; begin does nothing when the checkpoint is open already, end when none is")
	return nil
}

// runAgentInstallUser installs or uninstalls the hooks in the settings
// in the user's home (--user): no project, no store (each project's is
// made by its first turn that writes), no git.
func runAgentInstallUser(g *globals, h *agent.Harness, install bool, o agentInstallOptions) error {
	dir, err := h.UserDir()
	if err != nil {
		return usageErr("agent: %v", err)
	}
	edit := h.InstallHooks
	if !install {
		edit = h.UninstallHooks
	}
	c, err := edit(dir, h.UserSettings, !o.dryRun)
	if err != nil {
		// Each error starts with the file's name: put its directory before it.
		return &exitError{code: 2, kind: "bad_settings", err: fmt.Errorf("%s/%w", dir, err)}
	}
	file := filepath.Join(dir, c.File)
	diff := ""
	if o.dryRun && c.Changed() {
		diff, _ = difflib.GetUnifiedDiffString(difflib.UnifiedDiff{ // writes to a string: no error
			A: difflib.SplitLines(string(c.Old)), B: difflib.SplitLines(string(c.New)),
			FromFile: "a" + file, ToFile: "b" + file, Context: 3,
		})
	}
	if g.json {
		out := agentInstallJSON{Harness: h.Name, File: file, Changed: c.Changed(), DryRun: o.dryRun, Events: nonNil(c.Events)}
		if o.dryRun {
			out.Diff = &diff
		}
		if install && c.Changed() && !o.dryRun {
			out.Next = h.NextStep
		}
		return g.printJSON(out)
	}
	switch {
	case o.dryRun && c.Changed():
		fmt.Fprint(g.stdout, diff)
	case !c.Changed() && install:
		fmt.Fprintf(g.stdout, "%s already runs snapback's hooks (%s)\n", file, h.Title)
	case !c.Changed():
		fmt.Fprintf(g.stdout, "%s holds no hook of snapback's (%s)\n", file, h.Title)
	case install:
		fmt.Fprintf(g.stdout, "added snapback's hooks to %s for %s: %s\n", file, h.Title, strings.Join(c.Events, ", "))
		fmt.Fprintf(g.stdout, "next: %s\n", h.NextStep)
		configHooksToo(g, h, dir, h.UserConfig)
		if _, err := exec.LookPath("snapback"); err != nil {
			g.warn(h.Title + " runs `" + h.Command() + "`, but snapback is not on this PATH: install it where the agent finds it")
		}
	default:
		fmt.Fprintf(g.stdout, "removed snapback's hooks from %s for %s: %s\n", file, h.Title, strings.Join(c.Events, ", "))
		configHooksToo(g, h, dir, h.UserConfig)
	}
	return nil
}

// What git makes of a settings file.
const (
	gitNone      = iota // no git, or no work tree here
	gitTracked          // committed (or staged): everyone's
	gitIgnored          // kept out of commits
	gitUntracked        // neither: `git add -A` would take it
)

// gitState says what git makes of rel in the work tree at root.
func gitState(root, rel string) int {
	if exec.Command("git", "-C", root, "rev-parse", "--is-inside-work-tree").Run() != nil {
		return gitNone
	}
	if exec.Command("git", "-C", root, "ls-files", "--error-unmatch", "--", rel).Run() == nil {
		return gitTracked
	}
	if exec.Command("git", "-C", root, "check-ignore", "-q", "--", rel).Run() == nil {
		return gitIgnored
	}
	return gitUntracked
}

// largeTree is the number of files past which install suggests taking
// the first snapshot now.
const largeTree = 10000

// firstSnapshotHint suggests a first snapshot when the project has none
// and holds over largeTree files: the first turn that writes would take
// it inside a tool call, holding the agent up (later ones read only what
// changed).
func firstSnapshotHint(root string, snapshots int) string {
	if snapshots > 0 {
		return ""
	}
	n := 0
	stop := errors.New("enough")
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		if n > largeTree {
			return stop
		}
		return nil // an unreadable directory only makes the count smaller
	})
	if n <= largeTree {
		return ""
	}
	return fmt.Sprintf("this project holds over %d files and has no snapshot yet: the first turn that writes takes one inside its tool call; `snapback snap -m baseline` takes it now (later ones read only what changed)", largeTree)
}

func newAgentHookCmd(g *globals, names []string) *cobra.Command {
	return &cobra.Command{
		Use:   "hook HARNESS",
		Short: "Act on one hook event of HARNESS (JSON on stdin), as the hooks install writes run it",
		Long: "Act on one hook event of HARNESS: read the harness's hook payload (JSON) on stdin,\n" +
			"note a turn, open or close the session's checkpoint, and answer as the harness expects.\n" +
			"It always exits 0: a failure of snapback's is a one-line warning the harness shows,\n" +
			"never a reason to stop the agent.",
		Hidden:    true, // run by the agent's hooks, not by people
		Args:      cobra.ExactArgs(1),
		ValidArgs: names,
		RunE: func(c *cobra.Command, args []string) error {
			h, err := agent.Find(args[0])
			if err != nil {
				// Still answer in a form the harnesses read, and exit 0.
				h = &agent.Harness{}
				_, werr := g.stdout.Write(h.Answer("warning: " + err.Error()))
				return werr
			}
			_, err = g.stdout.Write(h.Answer(agentHookWithin(hookDeadline(), func() string { return agentHook(g, h, c.InOrStdin()) })))
			return err
		},
	}
}

// defaultHookDeadline bounds a hook's whole life, short of the timeout
// install gives the harness (agent.HookTimeout): the checkpoint's store
// lock waits up to checkpointLockWait, and a first snapshot of a large
// tree takes what it takes; past it the agent goes on without snapback.
const defaultHookDeadline = agent.HookTimeout - 15*time.Second

// hookDeadline is defaultHookDeadline, or SNAPBACK_HOOK_DEADLINE (a Go
// duration) when set: for tests, and for a harness whose timeout is
// shorter.
func hookDeadline() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("SNAPBACK_HOOK_DEADLINE")); err == nil && d > 0 {
		return d
	}
	return defaultHookDeadline
}

// agentHookWithin runs act, and answers for it if it has not answered
// within d: a hook must never hold the agent up, whatever it waits on
// (a payload whose writer never closes stdin, a lock). The work left
// behind dies with the process when the answer is written, as after a
// kill: the store is crash-safe at every step and the next verb
// recovers it.
func agentHookWithin(d time.Duration, act func() string) string {
	done := make(chan string, 1)
	go func() { done <- act() }()
	select {
	case msg := <-done:
		return msg
	case <-time.After(d):
		return fmt.Sprintf("warning: snapback did not answer within %v (the agent goes on; this turn may not be undoable)", d)
	}
}

// agentHook acts on one hook payload and returns what the user should
// be told: "" when all went well and there is nothing to say.
func agentHook(g *globals, h *agent.Harness, in io.Reader) (msg string) {
	failed := func(err error) string {
		return "warning: " + err.Error() + " (the agent goes on; this turn may not be undoable)"
	}
	defer func() {
		if r := recover(); r != nil {
			msg = failed(fmt.Errorf("the hook failed: %v", r))
		}
	}()
	p, err := agent.ReadPayload(in)
	if err != nil {
		return failed(err)
	}
	act := h.Decide(p)
	if act == agent.None {
		return "" // a reading tool, an event of no interest: at once
	}
	if p.Session == "" {
		return failed(errors.New("hook payload: no session_id"))
	}
	if act == agent.CloseSession {
		defer func() {
			if err := h.DropSession(p.Session); err != nil && msg == "" {
				msg = failed(err)
			}
		}()
	}
	if g.dir == "" { // -C, when given, wins
		dir, err := h.Project(p)
		if err == nil {
			err = os.Chdir(dir)
		}
		if err != nil {
			return failed(err)
		}
	}
	create := act == agent.NoteTurn || act == agent.OpenLazily
	// Several hooks of a turn arrive at once; the first may snapshot a
	// large tree: the others wait for it as checkpoint begin does.
	repo, err := g.openForCheckpoint(snapshot.Options{Verb: "agent hook", Access: snapshot.ForChange, Create: create, Outside: true})
	if errors.Is(err, snapshot.ErrNoStore) {
		return "" // nothing was ever opened here: nothing to close
	}
	if err != nil {
		return failed(err)
	}
	defer repo.Close()
	// Housekeeping for doctor: a stamp that cannot be written leaves
	// "never fired" said of hooks that run, nothing worse.
	_ = agent.MarkFired(repo.Dir, h.Name, time.Now())
	note, err := h.Act(repo, p, act)
	if err != nil {
		return failed(err)
	}
	if w := patchOutside(repo.Store.Root, p); w != "" && note == "" {
		note = w
	}
	return note
}

// patchOutside warns of the files an apply_patch call (Codex CLI) names
// outside the project: its undo steps do not hold them. "" when there
// are none.
func patchOutside(root string, p *agent.Payload) string {
	dir := p.Cwd
	if dir == "" {
		dir, _ = os.Getwd() // the hook moved to the project: the payload's cwd is the same
	}
	out := agent.Outside(root, dir, agent.PatchPaths(p))
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprintf("warning: this patch writes %s, outside the project %s: no undo step holds it", strings.Join(out, ", "), root)
}
