// Package agent makes each turn of a coding agent one undo step, through
// the agent harness's hooks, and writes those hooks into the harness's
// settings.
//
// # Harnesses
//
// A [Harness] is one agent's hook interface, as its makers document it:
// a table from its hook events to an [Action] (note the turn, open the
// checkpoint lazily, close it), the tools that may change files, its
// settings file, and how a hook answers. [ClaudeCode] and [GeminiCLI]
// are listed in [Harnesses]; every harness goes through the same code.
//
// # A turn
//
// The prompt's event notes the turn ([SaveTurn]: its first line becomes
// the message of the turn's step) without opening anything; the first
// tool call that may change files opens the session's checkpoint
// (snapshot.Repo.BeginCheckpoint), later ones find it open; the turn's
// end closes it (EndCheckpoint) into one undo step of the paths changed.
// The hook processes of a turn share nothing but the store: the note
// lives there, under [TurnDir]. [Harness.Act] does what an event asks on
// a store the caller opened (the CLI finds the project from the
// payload's cwd as any verb finds it, and answers the harness); this
// package never prints.
//
// # Settings
//
// [Harness.InstallHooks] and [Harness.UninstallHooks] edit a settings
// file as JSON kept in its own order: the user's keys, hooks and
// indentation stay; snapback's hooks are recognised by their command
// ([Harness.Command]), so install is idempotent and uninstall removes
// exactly them. A file that is not valid JSON is an error naming its line,
// and is never rewritten; a change is written atomically.
package agent
