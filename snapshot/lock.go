package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLocked is returned when another snapback holds the store's lock for
// longer than the caller is willing to wait.
var ErrLocked = errors.New("store is locked")

// Lock takes the store's lock, waiting up to wait for another snapback
// process to finish. what describes this process to whoever waits on it.
// The lock is an flock, so it dies with its holder.
func (s *Store) Lock(wait time.Duration, what string) error {
	f, err := s.openLockFile("lock")
	if err != nil {
		return err
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
			holder := make([]byte, 512) // the holder line, for the message only
			n, _ := f.ReadAt(holder, 0)
			f.Close()
			h := strings.TrimSpace(string(holder[:n]))
			if h == "" {
				h = "another snapback process"
			}
			return fmt.Errorf("%w by %s", ErrLocked, h)
		}
		s.waited = true
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

// openLockFile opens (creating it) the lock file at rel in the store
// (slash-separated), as a regular file of the store's owner: never
// through a symlink, never blocking on a FIFO put there.
func (s *Store) openLockFile(rel string) (*os.File, error) {
	dir, name := path.Split(rel)
	d, err := s.openDir(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, fmt.Errorf("lock store: %w", err)
	}
	defer d.Close()
	f, err := d.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_NONBLOCK|unix.O_NOCTTY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock store: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock store: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || !s.trusted(st.Uid) {
		f.Close()
		return nil, &UntrustedError{Path: f.Name(), Reason: "is not a regular file of the store's owner"}
	}
	return f, nil
}
