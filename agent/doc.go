// Package agent makes each turn of a coding agent one undo step, through
// the agent harness's hooks, and writes those hooks into the harness's
// settings.
//
// # Harnesses
//
// A [Harness] is one agent's hook interface, as its makers document it:
// a table from its hook events to an [Action] (note the turn, open the
// checkpoint lazily, close it), the tools that may change files, its
// settings file, and how a hook answers. [ClaudeCode], [GeminiCLI] and
// [Codex] are listed in [Harnesses]; every harness goes through the same
// code. Each hook that acts stamps the time in the store ([MarkFired]),
// so that hooks installed but never fired (Codex skips hooks the user
// has not trusted, without a word) can be told ([LastFired]).
//
// # A turn
//
// The prompt's event notes the turn ([SaveTurn]: its first line becomes
// the message of the turn's step) without opening anything; the first
// tool call that may change files opens the session's checkpoint
// (snapshot.Repo.BeginCheckpoint), later ones find it open; the turn's
// end closes it (EndCheckpoint) into one undo step of the paths changed.
// The hook processes of a turn share nothing but the store: the note
// lives there, under [TurnDir], read back without following a link or
// waiting on a FIFO. [Harness.Act] does what an event asks on a store the
// caller opened (the CLI finds the project from [Harness.Project], the
// session's fixed directory, as any verb finds it, and answers the
// harness); this package never prints.
//
// # Settings
//
// [Harness.InstallHooks] and [Harness.UninstallHooks] edit a settings
// file by splicing: the file is parsed with each value's place, install
// inserts its hooks after the last child of the containers they join
// (with the separator the file uses there), uninstall cuts each of
// snapback's hooks out with its separator, so every byte of the user's
// (escapes, numbers, layout) stays and install then uninstall gives the
// file back byte for byte. A harness that reads JSONC (Gemini CLI) has
// its file parsed through a copy with the comments and trailing commas
// blanked (jsonc.go), each value at its place, and the comments stay. snapback's hooks are recognised by their
// command ([Harness.Command]): install is idempotent and uninstall
// removes exactly them. A file that is not valid JSON, or has a key
// twice (harnesses disagree on which counts), is an error naming its
// line, and is never rewritten; anything but a regular file is refused
// without waiting on it. A change is written in place after a synced
// backup, so the file keeps its inode, owner and mode.
package agent
