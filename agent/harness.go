package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Action is what a hook event asks of snapback.
type Action int

const (
	// None: nothing to do; the hook answers at once, without touching
	// the store.
	None Action = iota
	// NoteTurn: a prompt starts a turn. A checkpoint the session left
	// open (a turn the user interrupted: the harness then sends no stop
	// event) is closed first; the prompt's first line is noted as the
	// message of the turn's checkpoint. No checkpoint is opened: a turn
	// that only reads leaves nothing.
	NoteTurn
	// OpenLazily: a tool that may change files is about to run; the
	// session's checkpoint is opened unless it is open already.
	OpenLazily
	// Close: the turn is over; its checkpoint becomes one undo step.
	Close
	// CloseSession: the session ends; its checkpoint is closed and its
	// note dropped.
	CloseSession
)

// Harness is one coding agent's hook interface: the table from its
// documented events to actions, the tools that may change files, where
// its settings live and how it wants to be answered.
type Harness struct {
	Name  string // as on the command line: claude-code
	Title string // as its makers write it: Claude Code
	// Events maps each hook event the harness sends to what it means.
	Events map[string]Action
	// Install lists the events install writes hooks for, in order.
	Install []string
	// Tools are the tools whose call opens the checkpoint (the matcher
	// of the OpenLazily event's hook); other tools are only looked at.
	Tools []string
	// Settings is the project's settings file, relative to the root;
	// LocalSettings the one kept out of version control ("" if none).
	Settings, LocalSettings string
	// ProjectEnv names the variable holding the project directory in a
	// hook's environment: the fallback when a payload has no cwd.
	ProjectEnv string
	// NamedHooks: hook entries carry a "name" (Gemini CLI enables and
	// disables hooks by name).
	NamedHooks bool
	// TimeoutMillis: a hook's "timeout" is in milliseconds (Gemini CLI),
	// not seconds (Claude Code, Codex CLI).
	TimeoutMillis bool
	// Comments: the settings file may hold comments and trailing commas
	// (JSONC), which the harness reads (Gemini CLI).
	Comments bool
	// UserHome names the harness's directory in the user's home (".codex"),
	// and UserHomeEnv the variable that moves it (CODEX_HOME): where
	// `install --user` writes UserSettings. "" when install writes only
	// the project's file.
	UserHome, UserHomeEnv, UserSettings string
	// Config and UserConfig are the harness's TOML config files, in the
	// project and in UserHome, whose [hooks] tables it runs too (Codex
	// CLI's config.toml): install does not write them, but names one
	// that runs snapback's hook already (ConfigHooks).
	Config, UserConfig string
	// NextStep is what the user still has to do after install for the
	// hooks to run.
	NextStep string
	// quiet is the answer when all went well: Gemini CLI parses stdout
	// as JSON and wants an object; Claude Code wants nothing.
	quiet string
}

// HookTimeout is the timeout install gives each hook: room for the
// first snapshot of a large tree and for a wait on the store's lock. The
// hook itself answers a little before it (see the CLI's hook deadline).
const HookTimeout = 3 * time.Minute

// Claude Code's hooks: https://code.claude.com/docs/en/hooks ("Hook
// Input", "Hook Output": exit 0 with JSON on stdout; `systemMessage` is
// shown to the user; stdout of UserPromptSubmit would otherwise be added
// to the model's context, so a success prints nothing).
//
// SubagentStop does not close the checkpoint: it fires when a subagent
// (the Task tool) finishes while the main agent's turn goes on, and
// often while other subagents of the same turn are still writing.
// Closing there would cut one turn into several undo steps at arbitrary
// points, and cut the other subagents' work in two. The subagents' tool
// calls carry the main session's id, so their writes join the turn's
// checkpoint, which Stop closes.
//
// Every event that ends a turn closes it: Stop when the answer is
// complete, StopFailure when an API error ends the turn instead (rate
// limit, authentication, server error: Stop is then not sent, and a
// checkpoint left open would take the person's later edits into the
// agent's turn), SessionEnd with the session.
var ClaudeCode = &Harness{
	Name:  "claude-code",
	Title: "Claude Code",
	Events: map[string]Action{
		"UserPromptSubmit": NoteTurn,
		"PreToolUse":       OpenLazily,
		"Stop":             Close,
		"StopFailure":      Close,
		"SubagentStop":     None,
		"SessionEnd":       CloseSession,
	},
	Install:       []string{"UserPromptSubmit", "PreToolUse", "Stop", "StopFailure", "SessionEnd"},
	Tools:         []string{"Edit", "Write", "MultiEdit", "NotebookEdit", "Bash"},
	Settings:      ".claude/settings.json",
	LocalSettings: ".claude/settings.local.json",
	ProjectEnv:    "CLAUDE_PROJECT_DIR",
	NextStep:      "start a new Claude Code session, or review the hooks in its /hooks menu: a running session does not take up new hooks",
}

// Gemini CLI's hooks: https://geminicli.com/docs/hooks/reference
// ("Base input schema", "Common output fields": exit 0 with JSON on
// stdout, nothing else; `systemMessage` is displayed to the user).
// BeforeAgent fires after the user submits a prompt, AfterAgent once per
// turn after the final response; the reference documents no other event
// that ends a turn (no failure event: a turn that ends otherwise is
// closed by the next prompt, as an interrupted one, or by SessionEnd).
var GeminiCLI = &Harness{
	Name:  "gemini-cli",
	Title: "Gemini CLI",
	Events: map[string]Action{
		"BeforeAgent": NoteTurn,
		"BeforeTool":  OpenLazily,
		"AfterAgent":  Close,
		"SessionEnd":  CloseSession,
	},
	Install:       []string{"BeforeAgent", "BeforeTool", "AfterAgent", "SessionEnd"},
	Tools:         []string{"write_file", "replace", "run_shell_command"},
	Settings:      ".gemini/settings.json",
	ProjectEnv:    "GEMINI_PROJECT_DIR",
	NamedHooks:    true,
	TimeoutMillis: true,
	Comments:      true,
	NextStep:      "start a new Gemini CLI session: it reads its hooks when it starts",
	quiet:         "{}",
}

// Codex CLI's hooks: https://developers.openai.com/codex/hooks, and its
// source, openai/codex: codex-rs/config/src/hook_config.rs (the
// hooks.json shape: {"hooks": {EVENT: [{"matcher", "hooks": [{"type":
// "command", "command", "timeout" in seconds}]}]}}, the shape Claude
// Code's settings give "hooks"), codex-rs/hooks/src/schema.rs (the
// payloads: session_id, turn_id, cwd, hook_event_name, tool_name,
// tool_input) and codex-rs/hooks/src/events/pre_tool_use.rs (exit 0 with
// nothing on stdout goes on; JSON with `systemMessage` is shown as a
// warning). Shell calls arrive as tool "Bash", patch edits as
// "apply_patch" with the patch in tool_input.command (openai/codex
// #18391); an MCP tool's call is only looked at. Codex reads hooks.json
// beside each of its config layers: ~/.codex (CODEX_HOME) and the
// project's .codex. It runs a hook only once the user has trusted it in
// its /hooks screen, and skips an untrusted one without a word: install
// says so, and doctor tells hooks installed but never fired.
//
// The events hook_config.rs reads (at commit 7cd4bc1a: PreToolUse,
// PostToolUse, SessionStart, UserPromptSubmit, Stop; at 012d0aa0 also
// PermissionRequest, PreCompact, PostCompact) hold none for a session's
// end or a turn an error ends: a turn that ends without Stop is closed
// by the next prompt, as an interrupted one. The payload's turn_id is
// not needed: a turn runs from its prompt to its Stop.
var Codex = &Harness{
	Name:  "codex",
	Title: "Codex CLI",
	Events: map[string]Action{
		"UserPromptSubmit": NoteTurn,
		"PreToolUse":       OpenLazily,
		"Stop":             Close,
	},
	Install:      []string{"UserPromptSubmit", "PreToolUse", "Stop"},
	Tools:        []string{"Bash", "apply_patch"},
	Settings:     ".codex/hooks.json",
	UserHome:     ".codex",
	UserHomeEnv:  "CODEX_HOME",
	UserSettings: "hooks.json",
	Config:       ".codex/config.toml",
	UserConfig:   "config.toml",
	NextStep:     "approve them in Codex's /hooks screen (Codex skips a hook not yet trusted, without a word)",
}

// Harnesses lists the supported harnesses, in the order help shows them.
var Harnesses = []*Harness{ClaudeCode, GeminiCLI, Codex}

// Find returns the harness named name.
func Find(name string) (*Harness, error) {
	var names []string
	for _, h := range Harnesses {
		if h.Name == name {
			return h, nil
		}
		names = append(names, h.Name)
	}
	return nil, fmt.Errorf("unknown harness %q (known: %s)", name, strings.Join(names, ", "))
}

// Decide says what the event of a payload asks for: an event not in the
// table, or a tool that changes no files, asks for nothing.
func (h *Harness) Decide(p *Payload) Action {
	a := h.Events[p.Event]
	if a == OpenLazily && !slices.Contains(h.Tools, p.Tool) {
		return None
	}
	return a
}

// Answer is what the hook writes on stdout (its exit status is always 0:
// the agent goes on whatever happened). A message, when there is one, is
// shown to the user: a warning that snapback failed, or what a closed
// turn became.
func (h *Harness) Answer(message string) []byte {
	if message == "" {
		if h.quiet == "" {
			return nil
		}
		return []byte(h.quiet + "\n")
	}
	b, _ := json.Marshal(map[string]string{"systemMessage": "snapback: " + message}) // a string map always marshals
	return append(b, '\n')
}

// UserDir is the harness's directory in the user's home, where install
// --user writes UserSettings: UserHomeEnv's value when set (absolute),
// else UserHome under the home directory. It must exist: the harness
// makes it when it first runs.
func (h *Harness) UserDir() (string, error) {
	if h.UserSettings == "" {
		return "", fmt.Errorf("%s has no settings in your home that snapback writes: install in the project", h.Title)
	}
	dir := os.Getenv(h.UserHomeEnv)
	if dir != "" && !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%s=%q is not an absolute path", h.UserHomeEnv, dir)
	}
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, h.UserHome)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory: run %s once first (it makes it)", dir, h.Title)
	}
	return dir, nil
}
