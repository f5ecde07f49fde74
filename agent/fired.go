package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"
)

// A harness may run no hook of the ones install wrote, without a word:
// Codex CLI skips hooks the user has not trusted in its /hooks screen, a
// running Claude Code session does not take up new ones. So each hook
// that acts stamps the time in the project's store, and doctor and
// checkpoint status say of hooks installed but never fired here.

// Fired is a harness's stamp: when one of its hooks last acted on the
// project.
type Fired struct {
	Version int       `json:"version"`
	Harness string    `json:"harness"`
	At      time.Time `json:"at"`
}

// firedName is a harness's stamp in the store's TurnDir; the name comes
// from the harness table, not from a payload.
func firedName(harness string) string { return "fired-" + harness + ".json" }

// firedFresh: a stamp younger than this is not written again, so that a
// turn's many tool calls do not each rewrite it.
const firedFresh = 10 * time.Minute

// MarkFired stamps now as when a hook of harness last acted on the
// project whose store is store.
func MarkFired(store, harness string, now time.Time) error {
	d, err := turnDir(store, true)
	if err != nil {
		return err
	}
	defer d.Close() // a directory handle
	name := firedName(harness)
	if st, err := d.Lstat(name); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && now.Sub(time.Unix(st.Mtim.Unix())).Abs() < firedFresh {
		return nil
	}
	b, err := json.Marshal(Fired{Version: 1, Harness: harness, At: now.UTC()})
	if err != nil {
		return fmt.Errorf("hook stamp: %w", err)
	}
	if err := writeSmall(d, name, b); err != nil {
		return fmt.Errorf("hook stamp: %w", err)
	}
	return nil
}

// maxFired bounds a stamp read back.
const maxFired = 4 << 10

// LastFired returns when a hook of harness last acted on the project
// whose store is store: the zero time when none ever did (or the store
// is not there). A stamp that is not a regular file of at most maxFired
// bytes holding this harness's stamp is an error naming it.
func LastFired(store, harness string) (time.Time, error) {
	d, err := turnDir(store, false)
	if d == nil || err != nil {
		return time.Time{}, err
	}
	defer d.Close() // read-only
	name := firedName(harness)
	b, err := d.ReadFileLimit(name, maxFired, nil) // bounded, no-follow, non-blocking, regular only
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("hook stamp: %w", err)
	}
	var f Fired
	if err := json.Unmarshal(b, &f); err != nil || f.Version != 1 || f.Harness != harness || f.At.IsZero() {
		return time.Time{}, fmt.Errorf("hook stamp %s/%s: not %s's stamp", d.Name(), name, harness)
	}
	return f.At, nil
}
