package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/snapback/snapback/fsutil"
)

// TurnDir is where the turns' notes live, inside the store.
const TurnDir = "agent"

// Turn is the note a prompt leaves for the checkpoint its turn may open:
// the prompt arrives in one hook process, the first tool call that
// changes files in another.
type Turn struct {
	Version int       `json:"version"`
	Harness string    `json:"harness"`
	Session string    `json:"session"`
	Message string    `json:"message"`
	Noted   time.Time `json:"noted"`
}

// turnPath names a session's note by a hash: the session id comes from
// the payload and is no file name to trust.
func turnPath(store, harness, session string) string {
	sum := sha256.Sum256([]byte(harness + "\x00" + session))
	return filepath.Join(store, TurnDir, "turn-"+hex.EncodeToString(sum[:16])+".json")
}

// SaveTurn writes the note of a session's current turn into store (the
// .snapback directory), replacing the previous turn's.
func SaveTurn(store string, t Turn) error {
	t.Version = 1
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("turn note: %w", err)
	}
	p := turnPath(store, t.Harness, t.Session)
	fsutil.Mutating()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("turn note: %w", err)
	}
	if err := fsutil.WriteFileAtomic(p, b, 0o600); err != nil {
		return err
	}
	pruneTurns(filepath.Dir(p), time.Now())
	return nil
}

// staleTurn is the age past which a note goes: its session ended without
// saying so (the harness was killed), or long ago.
const staleTurn = 30 * 24 * time.Hour

// pruneTurns removes the notes not written for staleTurn, so that
// sessions that never sent their end leave nothing behind for ever.
func pruneTurns(dir string, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return // pruning is housekeeping: the next note tries again
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !e.Type().IsRegular() || now.Sub(info.ModTime()) < staleTurn {
			continue
		}
		if name := e.Name(); strings.HasPrefix(name, "turn-") && strings.HasSuffix(name, ".json") {
			fsutil.Mutating()
			_ = os.Remove(filepath.Join(dir, name)) // housekeeping, as above
		}
	}
}

// maxTurn bounds a note read back: it holds one message of MaxMessage
// bytes, escaped.
const maxTurn = 64 << 10

// LoadTurn reads a session's note; a session without one (a harness that
// sends no prompt event, hooks installed mid-session) has the zero Turn.
// A note that cannot be read, or is not this session's, is an error.
func LoadTurn(store, harness, session string) (Turn, error) {
	p := turnPath(store, harness, session)
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return Turn{}, nil
	}
	if err != nil {
		return Turn{}, fmt.Errorf("turn note: %w", err)
	}
	defer f.Close() // read-only
	b, err := io.ReadAll(io.LimitReader(f, maxTurn+1))
	if err != nil {
		return Turn{}, fmt.Errorf("turn note %s: %w", p, err)
	}
	var t Turn
	if len(b) > maxTurn {
		return Turn{}, fmt.Errorf("turn note %s: over %d bytes", p, maxTurn)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return Turn{}, fmt.Errorf("turn note %s: %w", p, err)
	}
	if t.Version != 1 || t.Harness != harness || t.Session != session || len(t.Message) > 4*MaxMessage {
		return Turn{}, fmt.Errorf("turn note %s: not this session's note", p)
	}
	return t, nil
}

// DropTurn removes a session's note (at the session's end).
func DropTurn(store, harness, session string) error {
	fsutil.Mutating()
	err := os.Remove(turnPath(store, harness, session))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("turn note: %w", err)
	}
	return nil
}
