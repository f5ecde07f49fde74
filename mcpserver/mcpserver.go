// Package mcpserver serves snapback's verbs to a coding agent as tools of
// the Model Context Protocol (MCP), through the official Go SDK
// (github.com/modelcontextprotocol/go-sdk). `snapback mcp` runs it over
// stdio.
//
// # Tools
//
// The reading tools are status, list and diff; the writing ones
// checkpoint (begin, end, status), undo, redo, commit and discard. [Options.ReadOnly]
// leaves the writing ones out: a client then neither sees them listed nor
// can call them. Every tool takes an optional dir, the project (or any
// directory inside it: the root is found from there as the CLI finds it),
// relative to [Options.Dir] and defaulting to it.
//
// # Which directories
//
// The server acts on the project it was started in ([Options.Root]) and
// on the roots the client declares through MCP's roots, if it declares
// any: a dir elsewhere (absolute, or climbing out with "..", or through
// a symbolic link: links are resolved before the comparison), or one
// whose project root (found from it as the CLI finds it) is elsewhere, is
// a tool error naming it, and no verb runs. Every id, session, message and path
// a tool passes on is checked first too, and placed where the verb
// cannot read it as a flag.
//
// # One verb, one result
//
// Each call runs the verb itself: the snapback binary ([Options.Exe]) with
// --json, in a process of its own. Its result is exactly the CLI's JSON
// (docs/json.md, "version" included) as the tool's structured content and
// its text; its failure is a tool error (isError) whose text is the CLI's
// one-line message (and its hint line), with the CLI's error object
// (version, error code, message, hint) as structured content. So the tools
// and the verbs cannot drift apart, and a verb that fails in any way
// (even a crash) fails one call, never the server. A process per call
// also keeps what the verbs change for themselves apart: -C changes the
// working directory of the whole process, and stdin is the protocol's.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/snapback/snapback/snapshot"
	"github.com/snapback/snapback/snapshot/record"
)

// Options say which binary the tools run, where, and which tools exist.
type Options struct {
	// Exe is the snapback binary each tool call runs (os.Executable()).
	Exe string
	// Dir is the project directory a call without dir works on; a
	// relative dir is relative to it. It must be absolute.
	Dir string
	// Root is the project the server serves: a call's dir must be in it
	// (or in one of the client's roots). Default: Dir.
	Root string
	// ReadOnly serves only the tools that never change anything.
	ReadOnly bool
	// Version is the server's version, as the client sees it.
	Version string
}

// instructions tell the model what the server is for.
const instructions = `snapback makes changes to a project reversible: every run, checkpointed agent turn
or snapshot is an undo step covering all files (untracked ones and .git included) and
declared databases. Use status and diff to see what is pending or what changed, undo/redo
to move through the history (list shows it), commit or discard to decide a pending run,
checkpoint begin/end around a stretch of your own edits to make it one undo step.
Results are snapback's --json objects (version 1).`

// New makes the server with its tools; serve it with its Run method.
func New(o Options) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "snapback", Version: o.Version},
		// No logging capability (the SDK's default): the server sends
		// no log messages; what a verb warns of comes with its result.
		&mcp.ServerOptions{Instructions: instructions, Capabilities: &mcp.ServerCapabilities{}})
	root := o.Root
	if root == "" {
		root = o.Dir
	}
	r := &verbCaller{exe: o.Exe, dir: o.Dir, root: root}
	no := false
	reading := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}
	// Undo, redo and commit save what they replace (redo, undo and undo
	// bring it back): nothing is lost, so not "destructive".
	reversible := &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no}
	destructive := &mcp.ToolAnnotations{OpenWorldHint: &no}

	addTool(s, r, &mcp.Tool{Name: "status", Annotations: reading, Description: "List the pending runs: runs " +
		"whose changes wait in an isolated layer, not yet in the tree (each with its id, state, command, mode and " +
		"number of changes), and the open checkpoint if there is one. Result: `snapback status --json`: " +
		"{version, runs: [...], checkpoint}."},
		func(statusIn, string) ([]string, error) { return []string{"status"}, nil })
	addTool(s, r, &mcp.Tool{Name: "list", Annotations: reading, Description: "List the snapshots, newest first: " +
		"what undo can take back (runs, checkpointed turns, snaps), with which are undone. Result: " +
		"`snapback list --json`: {version, snapshots: [...], store_bytes}."},
		func(in listIn, _ string) ([]string, error) { return flagged([]string{"list"}, in.All, "--all"), nil })
	addTool(s, r, &mcp.Tool{Name: "diff", Annotations: reading, Description: "Show what changed: a pending run's " +
		"changes (default: the newest pending run), else what changed in the tree since a snapshot (default: " +
		"the one undo would revert). Each change is a path with op A (added), D (deleted), M (modified) or T " +
		"(type changed). Result: `snapback diff --json`: {version, snapshot, changes: [{path, op, type, ...}], " +
		"targets, wrote_through, excluded}; with patch, each change's patch text in git's format."},
		func(in diffIn, _ string) ([]string, error) {
			// diff reads what follows "--" as paths, and an id before it:
			// the id is checked (see checkInput) so it cannot be a flag.
			args := flagged(flagged([]string{"diff"}, in.Patch, "--patch"), in.Stat, "--stat")
			if in.ID != "" {
				args = append(args, in.ID)
			}
			if len(in.Paths) > 0 {
				args = append(append(args, "--"), in.Paths...)
			}
			return args, nil
		})
	if o.ReadOnly {
		return s
	}
	addTool(s, r, &mcp.Tool{Name: "checkpoint", Annotations: reversible, Description: "Make a stretch of " +
		"edits one undo step: action begin opens a checkpoint (a cheap incremental snapshot; a no-op when one " +
		"is open), action end closes it into one undo step holding exactly the paths changed in between (none " +
		"when nothing changed); status says whether one is open. While one is open, undo, redo and commit are " +
		"refused. Result: `snapback checkpoint begin --json`: {version, id, opened, session, message, created_at}; " +
		"`checkpoint end --json`: {version, id, state: done|dropped|none, files, changes, ...}; `checkpoint status " +
		"--json`: {version, open, id, session, message, created_at}."},
		func(in checkpointIn, _ string) ([]string, error) {
			if in.Action != "begin" && in.Action != "end" && in.Action != "status" {
				return nil, fmt.Errorf("action %q: not begin, end or status", in.Action)
			}
			args := []string{"checkpoint", in.Action}
			// --flag=VALUE: a value starting with "-" stays a value.
			if in.Message != "" && in.Action == "begin" {
				args = append(args, "--message="+in.Message)
			}
			if in.Session != "" && in.Action != "status" {
				args = append(args, "--session="+in.Session)
			}
			return args, nil
		})
	addTool(s, r, &mcp.Tool{Name: "undo", Annotations: reversible, Description: "Revert the newest snapshot not " +
		"yet undone (a committed run, a checkpointed turn, a snap), or the one named by id, or every step of a " +
		"session. Only the paths it changed are put back: edits made since to other files stay. Refused, " +
		"changing nothing, when one of those paths was changed since (the error lists them) or while a run is " +
		"pending, unless force (what force overwrites is saved first), and while a checkpoint is open. redo puts " +
		"it back. Result: `snapback undo --json`: {version, snapshot (the one reverted), saved (the state saved " +
		"first)}; with session, also session and snapshots (every step it reverted)."},
		func(in undoIn, _ string) ([]string, error) {
			args := flagged([]string{"undo"}, in.Force, "--force")
			if in.Session != "" {
				args = append(args, "--session="+in.Session)
			}
			return positional(args, in.ID, nil), nil
		})
	addTool(s, r, &mcp.Tool{Name: "redo", Annotations: reversible, Description: "Reapply the most recent undo. " +
		"Result: `snapback redo --json`: {version, snapshot (the one put back), saved (the state saved first)}."},
		func(in redoIn, _ string) ([]string, error) {
			return flagged([]string{"redo"}, in.Force, "--force"), nil
		})
	addTool(s, r, &mcp.Tool{Name: "commit", Annotations: reversible, Description: "Move a pending run's changes " +
		"(the newest pending run, or id) into the tree, only those at or below paths when given (the rest stays " +
		"pending); what they replace is saved first, so undo reverts the commit. Refused, changing nothing, when " +
		"a path it would write was changed in the tree since the run started (the error lists them), unless " +
		"force. Result: `snapback commit --json`: {version, run, snapshot (null when the run changed nothing), partial}."},
		func(in commitIn, dir string) ([]string, error) {
			// The CLI reads commit's first argument as a path when a
			// file of that name is here: the id would name the wrong
			// thing.
			if _, err := os.Lstat(filepath.Join(dir, in.ID)); in.ID != "" && err == nil {
				return nil, fmt.Errorf("id %s is also the name of a file in %s: give the run's whole id (status shows it)", in.ID, dir)
			}
			args := flagged([]string{"commit"}, in.Force, "--force")
			return positional(args, in.ID, in.Paths), nil
		})
	addTool(s, r, &mcp.Tool{Name: "discard", Annotations: destructive, Description: "Throw a pending run's " +
		"changes away (the newest pending run, or id), as if it never ran; its saved database states are " +
		"restored. This cannot be undone. Result: `snapback discard --json`: {version, discarded, kept_ignored, " +
		"dropped_excluded}."},
		func(in discardIn, _ string) ([]string, error) {
			return positional([]string{"discard"}, in.ID, nil), nil
		})
	return s
}

// The tools' inputs. Each holds the project's dir (see [project]).
type (
	statusIn struct{ project }
	listIn   struct {
		project
		All bool `json:"all,omitempty" jsonschema:"also list the pre-undo and pre-redo records (the states undo and redo saved)"`
	}
	diffIn struct {
		project
		ID    string   `json:"id,omitempty" jsonschema:"a pending run or a snapshot: its whole id, a prefix of it, or the end of its last part (as status and list show them). Default: the newest pending run, else the snapshot undo would revert"`
		Paths []string `json:"paths,omitempty" jsonschema:"only changes at or below these paths (relative to dir, or absolute)"`
		Patch bool     `json:"patch,omitempty" jsonschema:"include each change's patch text, in git's format"`
		Stat  bool     `json:"stat,omitempty" jsonschema:"include lines added and removed per file"`
	}
	checkpointIn struct {
		project
		Action  string `json:"action" jsonschema:"begin: open a checkpoint before a stretch of edits; end: close it into one undo step; status: say whether one is open, since when, for which session"`
		Message string `json:"message,omitempty" jsonschema:"with begin: what the stretch is for (shown by list), such as the prompt's first line"`
		Session string `json:"session,omitempty" jsonschema:"a name for the agent session the checkpoint belongs to (undo with session reverts a whole session)"`
	}
	undoIn struct {
		project
		ID      string `json:"id,omitempty" jsonschema:"the snapshot to revert: its whole id, a prefix, or the end of its last part (as list shows them). Default: the newest not yet undone"`
		Session string `json:"session,omitempty" jsonschema:"revert every step of this checkpoint session instead"`
		Force   bool   `json:"force,omitempty" jsonschema:"revert even over paths changed since (what it overwrites is saved first)"`
	}
	redoIn struct {
		project
		Force bool `json:"force,omitempty" jsonschema:"redo even over paths changed since the undo (what it overwrites is saved first)"`
	}
	commitIn struct {
		project
		ID    string   `json:"id,omitempty" jsonschema:"the pending run: its whole id, a prefix, or the end of its last part (as status shows them). Default: the newest pending run"`
		Paths []string `json:"paths,omitempty" jsonschema:"commit only the changes at or below these paths (relative to dir, or absolute); the rest stays pending"`
		Force bool     `json:"force,omitempty" jsonschema:"commit over paths changed in the tree since the run started (what it overwrites is saved first)"`
	}
	discardIn struct {
		project
		ID string `json:"id,omitempty" jsonschema:"the pending run: its whole id, a prefix, or the end of its last part (as status shows them). Default: the newest pending run"`
	}
)

// project is the input every tool shares.
type project struct {
	Dir string `json:"dir,omitempty" jsonschema:"the project directory, or any directory inside it (the project root is found from there: the nearest ancestor holding snapback.toml or .snapback, else the top of the git work tree); relative to the server's directory, which is the default"`
}

func (p project) dir() string { return p.Dir }

// check is each input's own check of what it passes to the verb (none
// for dir: see [verbCaller.resolve]).
func (p project) check() error { return nil }

func (in diffIn) check() error { return errors.Join(checkID(in.ID), checkPaths(in.Paths)) }
func (in checkpointIn) check() error {
	return errors.Join(checkText("message", in.Message), checkSession(in.Session))
}
func (in undoIn) check() error    { return errors.Join(checkID(in.ID), checkSession(in.Session)) }
func (in commitIn) check() error  { return errors.Join(checkID(in.ID), checkPaths(in.Paths)) }
func (in discardIn) check() error { return checkID(in.ID) }

type input interface {
	dir() string
	check() error
}

// Bounds of what a tool passes on: far above any real id, path or note.
const (
	maxID    = 64
	maxText  = 4096 // a message, a path
	maxPaths = 1000
)

// checkID: an id is a snapshot's or a run's id, a prefix of it or the end
// of its last part: letters, digits and "-", never first. So it can stand
// before "--" (diff reads an id there) without being read as a flag:
// "--stat" gave the default diff, "-C/" ran diff in /.
func checkID(id string) error {
	if id == "" {
		return nil
	}
	if len(id) > maxID {
		return fmt.Errorf("id %.20q…: longer than %d bytes", id, maxID)
	}
	for i, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' && i > 0) {
			return fmt.Errorf("id %q: not an id (letters, digits and -, as list and status show them)", id)
		}
	}
	return nil
}

// checkSession: a session name as the CLI takes one.
func checkSession(s string) error {
	if s == "" {
		return nil
	}
	return record.ValidSession(s)
}

// checkText: free text (a message, a path) that a command line can carry:
// UTF-8, no NUL, bounded.
func checkText(field, s string) error {
	switch {
	case len(s) > maxText:
		return fmt.Errorf("%s %.20q…: longer than %d bytes", field, s, maxText)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q: not UTF-8", field, s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s %q: a NUL byte", field, s)
	}
	return nil
}

// checkPaths: paths go after "--", where no flag is read; each must be
// a path a command line carries.
func checkPaths(paths []string) error {
	if len(paths) > maxPaths {
		return fmt.Errorf("paths: %d, more than %d", len(paths), maxPaths)
	}
	for _, p := range paths {
		if p == "" {
			return errors.New("paths: an empty path")
		}
		if err := checkText("path", p); err != nil {
			return err
		}
	}
	return nil
}

// addTool adds a tool whose call runs the verb argv gives for its input
// and its project directory; an error of argv is a usage error.
func addTool[In input](s *mcp.Server, r *verbCaller, t *mcp.Tool, argv func(In, string) ([]string, error)) {
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: schema of %s: %v", t.Name, err)) // a bug in the types above
	}
	if a, ok := schema.Properties["action"]; ok {
		a.Enum = []any{"begin", "end", "status"}
	}
	t.InputSchema = schema
	mcp.AddTool(s, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		roots, asked := clientRoots(req)
		dir, err := r.resolve(in.dir(), roots)
		if errors.Is(err, errOutside) && !asked && declaresRoots(req.Session) {
			// Ask for the client's roots (the SDK sends roots/list to a
			// client of a protocol before 2026-07-28) and come back.
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{rootsInput: &mcp.ListRootsParams{}}}, nil, nil
		}
		if err != nil {
			return toolError(cliError{Version: 1, Error: "usage", Message: err.Error()}, ""), nil, nil
		}
		if err := in.check(); err != nil {
			return toolError(cliError{Version: 1, Error: "usage", Message: oneLine(err)}, ""), nil, nil
		}
		args, err := argv(in, dir)
		if err != nil {
			return toolError(cliError{Version: 1, Error: "usage", Message: err.Error()}, ""), nil, nil
		}
		return r.run(dir, args), nil, nil
	})
}

// flagged appends flag to args when on.
func flagged(args []string, on bool, flag string) []string {
	if on {
		return append(args, flag)
	}
	return args
}

// positional appends the id and the paths after "--", so that neither is
// read as a flag. Without an id, a first path that could be read as one
// (commit takes an id first, and "d13" may name a run) is made "./d13",
// which only a path can be.
func positional(args []string, id string, paths []string) []string {
	if id == "" && len(paths) == 0 {
		return args
	}
	args = append(args, "--")
	if id != "" {
		args = append(args, id)
	} else if p := paths[0]; p != "" && !filepath.IsAbs(p) && !strings.HasPrefix(p, "./") && !strings.HasPrefix(p, "../") {
		paths = append([]string{"./" + p}, paths[1:]...)
	}
	return append(args, paths...)
}

// verbCaller runs one verb of the snapback binary per call.
type verbCaller struct {
	exe  string
	dir  string // the default project directory
	root string // the project served
}

// cliError is the CLI's error object (docs/json.md): the last line of its
// stderr under --json.
type cliError struct {
	Version int    `json:"version"`
	Error   string `json:"error"`
	Hint    string `json:"hint,omitempty"`
	Message string `json:"message"`
}

// resolve makes a tool's dir absolute (relative to the server's), checks
// that it is a directory, and that it is in the project served or in one
// of the client's roots, both with their symbolic links resolved: an MCP
// client naming a directory must not reach another project (undo there
// reverted it, diff -p handed out its files).
func (r *verbCaller) resolve(dir string, roots []string) (string, error) {
	switch {
	case dir == "":
		dir = r.dir
	case !filepath.IsAbs(dir):
		dir = filepath.Join(r.dir, dir)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("dir %s: not a directory", dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("dir %s: %w", dir, err)
	}
	// The verb acts on the project root it finds from dir, which may lie
	// above it (a directory with no marker of its own in a parent's git
	// work tree): that root, not only dir, must be in a root served.
	proj := snapshot.FindRoot(real)
	for _, root := range append([]string{r.root}, roots...) {
		if rr, err := filepath.EvalSymlinks(root); err == nil && within(real, rr) && within(proj, rr) {
			return real, nil
		}
	}
	where := "the project " + r.root
	if len(roots) > 0 {
		where += " or the client's roots (" + strings.Join(roots, ", ") + ")"
	}
	if proj != real {
		return "", fmt.Errorf("dir %s: its project root %s is %w %s; this server acts only there", dir, proj, errOutside, where)
	}
	return "", fmt.Errorf("dir %s: %w %s; this server acts only there", dir, errOutside, where)
}

// errOutside: a dir not in the project served nor in a client's root.
var errOutside = errors.New("outside")

// within: path is root or below it (both clean and absolute).
func within(path, root string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// rootsInput names the request for the client's roots in a call's
// input requests (MCP's multi round-trip requests).
const rootsInput = "snapback-roots"

// declaresRoots: the client said at initialization that it has roots.
func declaresRoots(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.RootsV2 != nil
}

// clientRoots are the directories the client declared through MCP's roots
// in answer to this call's request for them (asked: it answered), asked
// for at each call that needs them, as they may change. A root that is no
// local directory (file:// URI) is left out.
func clientRoots(req *mcp.CallToolRequest) (dirs []string, asked bool) {
	if req.Params == nil {
		return nil, false
	}
	res, ok := req.Params.InputResponses[rootsInput].(*mcp.ListRootsResult)
	if !ok {
		return nil, false
	}
	for _, root := range res.Roots {
		u, err := url.Parse(root.URI)
		if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) {
			continue // the protocol's roots are file:// URIs
		}
		dirs = append(dirs, filepath.Clean(u.Path))
	}
	return dirs, true
}

// oneLine keeps a joined error on one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// run runs `snapback --json -C DIR VERB...` and makes its output the
// call's result. A cancelled call does not stop the verb: killed half-way,
// a verb that changes the tree leaves a journal for the next one to
// finish, and each verb is short.
func (r *verbCaller) run(dir string, args []string) *mcp.CallToolResult {
	verb := args[0]
	if verb == "checkpoint" {
		verb += " " + args[1]
	}
	argv := append([]string{"--json", "-C", dir}, args...)
	cmd := exec.Command(r.exe, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr // stdin: /dev/null, never the protocol's
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return toolError(cliError{Version: 1, Error: "error", Message: fmt.Sprintf("snapback %s: %v", verb, err)}, "")
	}
	// What precedes the result or the error object on stderr are the
	// CLI's own notes (warnings, a finished recovery): passed on, never
	// dropped.
	notes := strings.TrimSpace(stderr.String())
	if err != nil {
		last := notes
		if i := strings.LastIndexByte(notes, '\n'); i >= 0 {
			last, notes = notes[i+1:], strings.TrimSpace(notes[:i])
		} else {
			notes = ""
		}
		var ce cliError
		if json.Unmarshal([]byte(last), &ce) != nil || ce.Message == "" {
			// Not the CLI's error object: a crash, say. Its stderr
			// follows the line saying so.
			ce = cliError{Version: 1, Error: "error", Message: fmt.Sprintf("snapback %s: %v, without an error object", verb, err)}
			notes = strings.TrimSpace(stderr.String())
		}
		return toolError(ce, notes)
	}
	// The CLI indents its JSON for people; a model reads it compact.
	var out bytes.Buffer
	var obj map[string]json.RawMessage
	if json.Unmarshal(stdout.Bytes(), &obj) != nil || json.Compact(&out, stdout.Bytes()) != nil {
		return toolError(cliError{Version: 1, Error: "error", Message: fmt.Sprintf("snapback %s: its output is not a JSON object: %.200q", verb, stdout.Bytes())}, notes)
	}
	res := &mcp.CallToolResult{StructuredContent: json.RawMessage(out.Bytes()), Content: []mcp.Content{&mcp.TextContent{Text: out.String()}}}
	if notes != "" {
		res.Content = append(res.Content, &mcp.TextContent{Text: notes})
	}
	return res
}

// toolError is a failed call: the CLI's message (and its hint) as text,
// its error object as structured content, and the notes that came before.
func toolError(ce cliError, notes string) *mcp.CallToolResult {
	text := ce.Message
	if ce.Hint != "" {
		text += "\nhint: " + ce.Hint
	}
	b, _ := json.Marshal(ce) // strings and an int always marshal
	res := &mcp.CallToolResult{IsError: true, StructuredContent: json.RawMessage(b), Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	if notes != "" {
		res.Content = append(res.Content, &mcp.TextContent{Text: notes})
	}
	return res
}
