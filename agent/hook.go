package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/snapback/snapback/snapshot"
)

// MaxPayload bounds a hook payload. A payload holds the tool's input (a
// Write tool's whole file among them), so the bound is generous; one
// past it fails open like any other failure.
const MaxPayload = 256 << 20

// Payload is what snapback reads of a hook's JSON input; the fields are
// named alike by every supported harness.
type Payload struct {
	Event   string `json:"hook_event_name"`
	Session string `json:"session_id"`
	Cwd     string `json:"cwd"`
	Prompt  string `json:"prompt"`
	Tool    string `json:"tool_name"`
	// Input is the tool's input, kept whole: an edit tool's is read
	// for the file it writes, Codex CLI's apply_patch for the files
	// its patch names (writes.go, PatchPaths).
	Input json.RawMessage `json:"tool_input"`
}

// ReadPayload decodes a hook payload from r.
func ReadPayload(r io.Reader) (*Payload, error) {
	var p Payload
	dec := json.NewDecoder(io.LimitReader(r, MaxPayload+1))
	if err := dec.Decode(&p); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, errors.New("hook payload: not a whole JSON object (or over 256 MiB)")
		}
		return nil, fmt.Errorf("hook payload: %w", err)
	}
	if p.Event == "" {
		return nil, errors.New("hook payload: no hook_event_name")
	}
	return &p, nil
}

// MaxMessage bounds a turn's message (the prompt's first line), in bytes.
const MaxMessage = 200

// Message is a prompt's first line that holds more than blanks, trimmed
// and cut to MaxMessage bytes at a character boundary: the undo step's
// message, as `snapback list` shows it.
func Message(prompt string) string {
	for _, l := range strings.Split(prompt, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if len(l) <= MaxMessage {
			return l
		}
		cut := MaxMessage - len("…")
		for cut > 0 && (l[cut]&0xc0) == 0x80 { // inside a UTF-8 sequence
			cut--
		}
		return l[:cut] + "…"
	}
	return ""
}

// Act does what the payload's event asks (a decided, not None) on the
// project's store, opened and locked by the caller, and returns what the
// user should be told ("" for nothing).
func (h *Harness) Act(repo *snapshot.Repo, p *Payload, a Action) (string, error) {
	switch a {
	case NoteTurn:
		// A turn the user interrupted got no stop event: its checkpoint
		// is still open, and becomes its own step now.
		if _, _, err := repo.EndCheckpoint(p.Session); err != nil {
			return "", fmt.Errorf("close the interrupted turn's checkpoint: %w", err)
		}
		t := Turn{Harness: h.Name, Session: p.Session, Message: Message(p.Prompt), Noted: time.Now().UTC()}
		if err := SaveTurn(repo.Dir, t); err != nil {
			return "", fmt.Errorf("note the turn: %w", err)
		}
	case OpenLazily:
		// Each session has its own checkpoint, beside other sessions'
		// open ones; what this tool writes is noted in it, so that a
		// path another session's turn changed meanwhile is told apart.
		// The agent's processes (a shell command's are its descendants)
		// are known, for the tree's watcher to tell what they wrote.
		t, terr := LoadTurn(repo.Dir, h.Name, p.Session)
		w := h.Writes(p, repo.Root)
		w.Agent = snapshot.HookAgent()
		if _, _, err := repo.BeginTurn(p.Session, t.Message, w); err != nil {
			return "", fmt.Errorf("open the turn's checkpoint: %w", err)
		}
		if terr != nil {
			return "", fmt.Errorf("the turn's message: %w", terr) // the checkpoint is open, without it
		}
	case Close, CloseSession:
		m, dropped, err := repo.EndCheckpoint(p.Session)
		if err != nil {
			return "", fmt.Errorf("close the turn's checkpoint: %w", err)
		}
		if a == CloseSession {
			if err := DropTurn(repo.Dir, h.Name, p.Session); err != nil {
				return "", fmt.Errorf("session end: %w", err)
			}
		}
		if m != nil && !dropped {
			return "this turn is undo step " + m.ID + " (`snapback undo` reverts it)", nil
		}
	}
	return "", nil
}
