package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/snapback/snapback/fsutil"
)

// A session's project is fixed for the session: the agent's shell may
// `cd /elsewhere`, and the payloads' cwd follows it, but a hook that
// followed too would make a store there and leave the project's
// checkpoint open. The project is the directory the harness names
// (Claude Code's CLAUDE_PROJECT_DIR, Gemini CLI's GEMINI_PROJECT_DIR);
// when it names none, the session's first directory, remembered under
// the user's state directory (the store cannot hold it: which store is
// the question).

// sessionState is what is remembered of a session.
type sessionState struct {
	Version int    `json:"version"`
	Harness string `json:"harness"`
	Session string `json:"session"`
	Dir     string `json:"dir"`
}

// SessionDir is where sessions' first directories are remembered:
// $XDG_STATE_HOME/snapback/agent-sessions, by default under
// ~/.local/state.
func SessionDir() (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "snapback", "agent-sessions"), nil
}

// Project is the directory the hook acts for, the project root then
// being found from it as for any verb: the harness's project directory
// variable when set; else the session's first directory (the payload's
// cwd, else the hook's working directory, where harnesses start hooks),
// remembered from the session's first hook that acts. A state directory
// that cannot be written (no home) only means nothing is remembered.
func (h *Harness) Project(p *Payload) (string, error) {
	if h.ProjectEnv != "" {
		if d := os.Getenv(h.ProjectEnv); d != "" {
			if !filepath.IsAbs(d) {
				return "", fmt.Errorf("%s=%q is not an absolute path", h.ProjectEnv, d)
			}
			return d, nil
		}
	}
	d := p.Cwd
	if d == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		d = wd
	}
	if !filepath.IsAbs(d) {
		return "", fmt.Errorf("hook payload: cwd %q is not an absolute path", d)
	}
	if p.Session == "" {
		return d, nil
	}
	dir, err := SessionDir()
	if err != nil {
		return d, nil // nowhere to remember: the payload's
	}
	first, err := loadSession(dir, h.Name, p.Session)
	if err != nil {
		return "", err
	}
	if first != "" {
		if _, err := os.Stat(first); err == nil {
			return first, nil
		}
		// Gone since (a session id used again after its project was
		// removed): the payload's directory is the session's now,
		// remembered over it below.
	}
	_ = saveSession(dir, sessionState{Harness: h.Name, Session: p.Session, Dir: d}) // best effort, as above
	return d, nil
}

func sessionName(harness, session string) string {
	return "session-" + turnName(harness, session)[len("turn-"):]
}

// loadSession returns a session's remembered directory ("" if none).
func loadSession(dir, harness, session string) (string, error) {
	d, err := fsutil.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("session state: %w", err)
	}
	defer d.Close() // read-only
	b, err := d.ReadFileLimit(sessionName(harness, session), maxTurn, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("session state: %w", err)
	}
	var st sessionState
	if err := json.Unmarshal(b, &st); err != nil || st.Version != 1 || st.Harness != harness || st.Session != session || !filepath.IsAbs(st.Dir) {
		return "", fmt.Errorf("session state %s/%s: not this session's", dir, sessionName(harness, session))
	}
	return st.Dir, nil
}

func saveSession(dir string, st sessionState) error {
	st.Version = 1
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	fsutil.Mutating()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	d, err := fsutil.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer d.Close() // a directory handle
	if err := writeSmall(d, sessionName(st.Harness, st.Session), b); err != nil {
		return err
	}
	pruneTurns(d, "session-", time.Now())
	return nil
}

// DropSession forgets a session's directory (at the session's end).
func (h *Harness) DropSession(session string) error {
	dir, err := SessionDir()
	if err != nil {
		return nil // nothing was remembered
	}
	d, err := fsutil.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("session state: %w", err)
	}
	defer d.Close() // a directory handle
	if err := d.Unlink(sessionName(h.Name, session)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("session state: %w", err)
	}
	return nil
}
