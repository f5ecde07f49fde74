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

	sqlite "modernc.org/sqlite"
)

// SQLite snapshots a SQLite database file, even one held open by a live
// application: the online backup API copies it in one step (Step(-1):
// stepping in small pieces restarts for ever under a steady writer), the
// copy passes PRAGMA integrity_check, and a restore goes back through the
// backup API into the live file, so that connections the application holds
// see the restored data. A restore is one write transaction of SQLite's:
// it completes or changes nothing.
type SQLite struct{}

var _ Backend = (*SQLite)(nil)

const sqlitePayload = "db.sqlite"

// Name implements Backend.
func (*SQLite) Name() string { return "sqlite" }

// Available implements Backend: the driver is pure Go, always here.
func (*SQLite) Available() (bool, string) { return true, "" }

// Check implements Backend: the file exists, can be read, and is a SQLite
// database.
func (s *SQLite) Check(ctx context.Context, t Target, root string) error {
	p, err := TargetPath(t, root)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return targetErr(t, "%s does not exist", p)
		}
		return targetErr(t, "%v", err)
	}
	defer f.Close() // read-only
	head := make([]byte, 16)
	if _, err := io.ReadFull(f, head); err != nil || string(head) != "SQLite format 3\x00" {
		return targetErr(t, "%s is not a SQLite database", p)
	}
	return nil
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
	if err := s.Check(ctx, t, root); err != nil {
		return err
	}
	p, _ := TargetPath(t, root) // checked above
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

// Restore implements Backend. A database file that is gone is made anew.
func (s *SQLite) Restore(ctx context.Context, t Target, root, dir string) error {
	p, err := TargetPath(t, root)
	if err != nil {
		return err
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
