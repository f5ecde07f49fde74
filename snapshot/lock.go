package snapshot

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/snapback/snapback/fsutil"
	"golang.org/x/sys/unix"
)

// ErrLocked is returned when another snapback holds the store's lock for
// longer than the caller is willing to wait.
var ErrLocked = errors.New("store is locked")

// Lock takes the store's lock, waiting up to wait for another snapback
// process to finish. what describes this process to whoever waits on it.
// The lock is an flock, so it dies with its holder.
func (s *Store) Lock(wait time.Duration, what string) error {
	fsutil.Mutating()
	f, err := os.OpenFile(s.path("lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("lock store: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return fmt.Errorf("lock store: %w", err)
		}
		if time.Now().After(deadline) {
			holder, _ := os.ReadFile(s.path("lock")) // for the message only
			f.Close()
			h := strings.TrimSpace(string(holder))
			if h == "" {
				h = "another snapback process"
			}
			return fmt.Errorf("%w by %s", ErrLocked, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
	info := fmt.Sprintf("pid %d (%s) since %s\n", os.Getpid(), what, time.Now().Format(time.RFC3339))
	// The holder line is informational; failing to write it is harmless.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(info), 0)
	s.lock = f
	return nil
}

// Unlock releases the lock taken by Lock.
func (s *Store) Unlock() {
	if s.lock == nil {
		return
	}
	_ = s.lock.Truncate(0) // informational line only
	s.lock.Close()         // closing releases the flock
	s.lock = nil
}
