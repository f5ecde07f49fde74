package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
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

// turnName names a session's note by a hash: the session id comes from
// the payload and is no file name to trust.
func turnName(harness, session string) string {
	sum := sha256.Sum256([]byte(harness + "\x00" + session))
	return "turn-" + hex.EncodeToString(sum[:16]) + ".json"
}

// turnDir opens the store's TurnDir (made when make is set) without
// following a symbolic link: a store is input from outside, and an
// `agent` that leads elsewhere must not take the notes there. It returns
// nil, nil when the directory is absent and make is unset.
func turnDir(store string, make bool) (*fsutil.Dir, error) {
	root, err := fsutil.OpenRoot(store)
	if err != nil {
		return nil, fmt.Errorf("turn note: %w", err)
	}
	defer root.Close() // read-only handle
	d, err := root.OpenDir(TurnDir)
	if errors.Is(err, fs.ErrNotExist) && make {
		if err = root.Mkdir(TurnDir, 0o700); err == nil || errors.Is(err, fs.ErrExist) {
			d, err = root.OpenDir(TurnDir)
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("turn note: %w", err)
	}
	return d, nil
}

// SaveTurn writes the note of a session's current turn into store (the
// .snapback directory), replacing the previous turn's, atomically: a
// temporary file in the same directory, synced, renamed over the note.
func SaveTurn(store string, t Turn) error {
	t.Version = 1
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("turn note: %w", err)
	}
	d, err := turnDir(store, true)
	if err != nil {
		return err
	}
	defer d.Close() // a directory handle: nothing to flush
	if err := writeSmall(d, turnName(t.Harness, t.Session), b); err != nil {
		return fmt.Errorf("turn note: %w", err)
	}
	pruneTurns(d, "turn-", time.Now())
	return nil
}

// writeSmall replaces the file name in d with b atomically: a temporary
// file in d, synced, renamed over name, then d synced.
func writeSmall(d *fsutil.Dir, name string, b []byte) error {
	tmp := ".tmp-" + name + "-" + fmt.Sprint(os.Getpid())
	f, err := d.Open(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	fsutil.Mutating()
	_, err = f.Write(b)
	if err == nil {
		fsutil.Mutating()
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.Rename(tmp, d, name)
	}
	if err != nil {
		_ = d.Unlink(tmp) // already failing: a leftover temp is only clutter
		return err
	}
	return d.Sync()
}

// staleTurn is the age past which a note goes: its session ended without
// saying so (the harness was killed), or long ago.
const staleTurn = 30 * 24 * time.Hour

// pruneTurns removes the notes not written for staleTurn, so that
// sessions that never sent their end leave nothing behind for ever.
func pruneTurns(d *fsutil.Dir, prefix string, now time.Time) {
	names, err := d.ReadDirNames()
	if err != nil {
		return // pruning is housekeeping: the next note tries again
	}
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ".json") {
			continue
		}
		st, err := d.Lstat(name)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || now.Sub(time.Unix(st.Mtim.Unix())) < staleTurn {
			continue
		}
		_ = d.Unlink(name) // housekeeping, as above
	}
}

// maxTurn bounds a note read back: it holds one message of MaxMessage
// bytes, escaped.
const maxTurn = 64 << 10

// LoadTurn reads a session's note; a session without one (a harness that
// sends no prompt event, hooks installed mid-session) has the zero Turn.
// A note that cannot be read, or is not this session's, is an error; so
// is anything but a regular file of at most maxTurn bytes in its place
// (a FIFO, a symbolic link, a device), refused without blocking: a hook
// that waited there would stall the agent.
func LoadTurn(store, harness, session string) (Turn, error) {
	d, err := turnDir(store, false)
	if d == nil || err != nil {
		return Turn{}, err
	}
	defer d.Close() // read-only
	name := turnName(harness, session)
	b, err := d.ReadFileLimit(name, maxTurn, nil) // bounded, no-follow, non-blocking, regular only
	if errors.Is(err, fs.ErrNotExist) {
		return Turn{}, nil
	}
	if err != nil {
		return Turn{}, fmt.Errorf("turn note: %w", err)
	}
	p := d.Name() + "/" + name
	var t Turn
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
	d, err := turnDir(store, false)
	if d == nil || err != nil {
		return err
	}
	defer d.Close() // a directory handle
	err = d.Unlink(turnName(harness, session))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("turn note: %w", err)
	}
	return nil
}
