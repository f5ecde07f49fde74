package backends

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/snapback/snapback/fsutil"
	sqlite "modernc.org/sqlite"
)

// SQLite snapshots a SQLite database file, even one held open by a live
// application: the online backup API copies it in one step (Step(-1):
// stepping in small pieces restarts for ever under a steady writer), the
// copy passes PRAGMA integrity_check, and a restore goes back through the
// backup API into the live file, so that connections the application holds
// see the restored data. A restore is one write transaction of SQLite's:
// it completes or changes nothing.
//
// A database that does not exist yet (its directory does), or an empty
// file, is a state like any other: the first migration, which creates the
// database, runs under snapback, and its undo removes the database (or
// empties the file) again.
type SQLite struct{}

var _ Backend = (*SQLite)(nil)

const (
	sqlitePayload = "db.sqlite"
	// Markers a payload holds instead of a copy: the file was absent, or
	// empty (0 bytes, no write-ahead log).
	sqliteAbsent = "absent"
	sqliteEmpty  = "empty"
)

// Name implements Backend.
func (*SQLite) Name() string { return "sqlite" }

// Available implements Backend: the driver is pure Go, always here.
func (*SQLite) Available() (bool, string) { return true, "" }

// Check implements Backend: the file is a SQLite database, or empty, or
// absent from a directory that exists.
func (s *SQLite) Check(ctx context.Context, t Target, root string) error {
	p, err := TargetPath(t, root)
	if err != nil {
		return err
	}
	_, err = sqliteState(t, p)
	return err
}

// sqliteState says what the database file at p is: a database (""),
// sqliteAbsent or sqliteEmpty; anything else is a config.ErrTarget.
func sqliteState(t Target, p string) (string, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		if st, derr := os.Stat(filepath.Dir(p)); derr != nil || !st.IsDir() {
			return "", targetErr(t, "%s does not exist, nor does its directory", p)
		}
		return sqliteAbsent, nil
	}
	if err != nil {
		return "", targetErr(t, "%v", err)
	}
	defer f.Close() // read-only
	st, err := f.Stat()
	if err != nil {
		return "", targetErr(t, "%v", err)
	}
	if !st.Mode().IsRegular() {
		return "", targetErr(t, "%s is not a SQLite database (not a regular file)", p)
	}
	if st.Size() == 0 {
		// A write-ahead log may hold all of a database whose file is
		// still empty: then it is a database, copied as one.
		if wal, err := os.Stat(p + "-wal"); err == nil && wal.Size() > 0 {
			return "", nil
		}
		return sqliteEmpty, nil
	}
	head := make([]byte, 16)
	if _, err := io.ReadFull(f, head); err != nil || string(head) != "SQLite format 3\x00" {
		return "", targetErr(t, "%s is not a SQLite database", p)
	}
	return "", nil
}

func openSQLite(p string, readOnly bool) (*sql.DB, error) {
	dsn := "file:" + p + "?_pragma=busy_timeout(10000)"
	if readOnly {
		dsn += "&mode=ro"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

type backupConn interface {
	NewBackup(dstURI string) (*sqlite.Backup, error)
	NewRestore(srcURI string) (*sqlite.Backup, error)
}

// copyDB runs the backup API between the database open as db and the file
// other: into other (restore false) or from it (restore true).
func copyDB(ctx context.Context, db *sql.DB, other string, restore bool) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		bc, ok := dc.(backupConn)
		if !ok {
			return fmt.Errorf("sqlite driver has no backup API (%T)", dc)
		}
		var b *sqlite.Backup
		if restore {
			b, err = bc.NewRestore(other)
		} else {
			b, err = bc.NewBackup(other)
		}
		if err != nil {
			return err
		}
		_, err := b.Step(-1)
		if ferr := b.Finish(); err == nil {
			err = ferr
		}
		return err
	})
}

func integrity(ctx context.Context, p string) error {
	db, err := openSQLite(p, true)
	if err != nil {
		return err
	}
	defer db.Close()
	var res string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res); err != nil {
		return err
	}
	if res != "ok" {
		return fmt.Errorf("integrity_check: %s", res)
	}
	return nil
}

// Snapshot implements Backend.
func (s *SQLite) Snapshot(ctx context.Context, t Target, root, dir string) error {
	p, err := TargetPath(t, root)
	if err != nil {
		return err
	}
	state, err := sqliteState(t, p)
	if err != nil {
		return err
	}
	if state != "" {
		// Opened, it would be made (a database of no pages): only
		// the marker is saved.
		return fsutil.WriteFileAtomic(filepath.Join(dir, state), nil, 0o600)
	}
	db, err := openSQLite(p, false)
	if err != nil {
		return fmt.Errorf("snapshot sqlite %s: %w", p, err)
	}
	defer db.Close()
	out := filepath.Join(dir, sqlitePayload)
	if err := copyDB(ctx, db, out, false); err != nil {
		return fmt.Errorf("snapshot sqlite %s: %w", p, err)
	}
	if err := integrity(ctx, out); err != nil {
		return fmt.Errorf("snapshot sqlite %s: the copy fails its check: %w", p, err)
	}
	return syncFile(out)
}

// Restore implements Backend. A database file that is gone is made anew;
// one that was absent (or empty) when saved is removed (or emptied).
func (s *SQLite) Restore(ctx context.Context, t Target, root, dir string) error {
	p, err := TargetPath(t, root)
	if err != nil {
		return err
	}
	for _, marker := range []string{sqliteAbsent, sqliteEmpty} {
		if _, err := os.Lstat(filepath.Join(dir, marker)); err == nil {
			if err := removeDB(ctx, p, marker == sqliteEmpty); err != nil {
				return fmt.Errorf("restore sqlite %s: %w", p, err)
			}
			return nil
		}
	}
	in := filepath.Join(dir, sqlitePayload)
	if err := integrity(ctx, in); err != nil {
		return fmt.Errorf("restore sqlite %s: the snapshot fails its check: %w", p, err)
	}
	db, err := openSQLite(p, false)
	if err != nil {
		return fmt.Errorf("restore sqlite %s: %w", p, err)
	}
	defer db.Close()
	if err := copyDB(ctx, db, in, true); err != nil {
		return fmt.Errorf("restore sqlite %s: %w", p, err)
	}
	return nil
}

// removeDB takes the database at p back to absent, or to an empty file
// (empty), so that a kill at any point leaves it as it was or as wanted:
// first SQLite itself moves what its journal files hold into the file
// (rolling back a hot journal, checkpointing the write-ahead log), so
// that removing them changes no data; then the file goes, in one unlink
// or one rename of an empty file over it. Nothing is followed: a symlink
// at p is removed or replaced, never its target.
func removeDB(ctx context.Context, p string, empty bool) error {
	st, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case st.Mode().IsRegular() && st.Size() > 0:
		if err := settleJournals(ctx, p); err != nil {
			return err
		}
	}
	for _, j := range []string{"-wal", "-shm", "-journal"} {
		fsutil.Mutating()
		if err := os.Remove(p + j); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if empty {
		if st != nil && st.Mode().IsRegular() && st.Size() == 0 {
			return nil
		}
		return fsutil.WriteFileAtomic(p, nil, 0o644)
	}
	fsutil.Mutating()
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(p))
}

// settleJournals leaves the whole of the database at p in its file: a
// read rolls back a hot journal, a truncating checkpoint empties the
// write-ahead log into it.
func settleJournals(ctx context.Context, p string) error {
	db, err := openSQLite(p, false)
	if err != nil {
		return err
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&n); err != nil {
		return err
	}
	var busy, frames, done int
	if err := db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &done); err != nil {
		return err
	}
	if busy != 0 {
		return fmt.Errorf("its write-ahead log is in use: cannot empty it into the file")
	}
	return nil
}

// Release implements Backend: the payload is only the file in dir.
func (*SQLite) Release(context.Context, Target, string, string) error { return nil }

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close() // read-only
	return f.Sync()
}
