package backends_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/internal/treetest"
	_ "modernc.org/sqlite"
)

func sqliteOpen(t *testing.T, p string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	treetest.Must(t, err)
	return db
}

// The writer's invariant: meta.n counts the rows of t, and every row's v
// is its id squared; each transaction adds two rows and bumps n by two.
var sqliteFixture = fixture{
	setup: func(t *testing.T, root string) backends.Target {
		db := sqliteOpen(t, filepath.Join(root, "app.db"))
		defer db.Close()
		_, err := db.Exec(`CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER); CREATE TABLE meta(n INTEGER); INSERT INTO meta VALUES (0);`)
		treetest.Must(t, err)
		return backends.Target{Backend: "sqlite", Path: "app.db"}
	},
	bad: func(t *testing.T, root string) map[string]backends.Target {
		writeFile(t, filepath.Join(root, "not-a-db.db"), "hello, I am text\n")
		return map[string]backends.Target{
			"missing directory": {Backend: "sqlite", Path: "nope/nope.db"},
			"a directory":       {Backend: "sqlite", Path: "."},
			"not sqlite":        {Backend: "sqlite", Path: "not-a-db.db"},
			"no path":           {Backend: "sqlite"},
		}
	},
	absent: func(t *testing.T, root string) (backends.Target, func(), func() bool) {
		p := filepath.Join(root, "first.db")
		create := func() {
			db := sqliteOpen(t, p)
			defer db.Close()
			_, err := db.Exec(`CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER); CREATE TABLE meta(n INTEGER); INSERT INTO meta VALUES (0);`)
			treetest.Must(t, err)
		}
		exists := func() bool {
			for _, q := range []string{p, p + "-wal", p + "-shm", p + "-journal"} {
				if _, err := os.Lstat(q); err == nil {
					return true
				}
			}
			return false
		}
		return backends.Target{Backend: "sqlite", Path: "first.db"}, create, exists
	},
	state: func(t *testing.T, tg backends.Target, root string) (string, bool) {
		db := sqliteOpen(t, filepath.Join(root, tg.Path))
		defer db.Close()
		var n, rows, bad int
		treetest.Must(t, db.QueryRow(`SELECT n FROM meta`).Scan(&n))
		treetest.Must(t, db.QueryRow(`SELECT count(*), coalesce(sum(v != id*id), 0) FROM t`).Scan(&rows, &bad))
		var check string
		treetest.Must(t, db.QueryRow(`PRAGMA integrity_check`).Scan(&check))
		return fmt.Sprintf("n=%d rows=%d", n, rows), n == rows && bad == 0 && check == "ok"
	},
	write: func(t *testing.T, tg backends.Target, root string) error {
		db := sqliteOpen(t, filepath.Join(root, tg.Path))
		defer db.Close()
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		for i := 0; i < 2; i++ {
			if _, err := tx.Exec(`INSERT INTO t(v) VALUES (0); UPDATE t SET v = id*id WHERE id = last_insert_rowid();`); err != nil {
				tx.Rollback()
				return err
			}
		}
		if _, err := tx.Exec(`UPDATE meta SET n = n + 2`); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	},
}

// TestSQLiteRestoreReachesOpenConnections: an application holding the
// database open sees the restored data on its next query.
func TestSQLiteRestoreReachesOpenConnections(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tg := sqliteFixture.setup(t, root)
	treetest.Must(t, sqliteFixture.write(t, tg, root))
	b := &backends.SQLite{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, root, payload))
	app := sqliteOpen(t, filepath.Join(root, tg.Path))
	defer app.Close()
	app.SetMaxOpenConns(1)
	for i := 0; i < 3; i++ {
		treetest.Must(t, sqliteFixture.write(t, tg, root))
	}
	var n int
	treetest.Must(t, app.QueryRow(`SELECT n FROM meta`).Scan(&n))
	if n != 8 {
		t.Fatalf("n = %d before restore, want 8", n)
	}
	treetest.Must(t, b.Restore(ctx, tg, root, payload))
	treetest.Must(t, app.QueryRow(`SELECT n FROM meta`).Scan(&n))
	if n != 2 {
		t.Fatalf("the open connection sees n = %d after restore, want 2", n)
	}
}

// TestSQLiteEmptyFile: an empty file (what `touch app.db` leaves, or a
// tool that opens the database before making it) is a state: saved, and
// a restore empties the database again, leaving no journal beside it.
func TestSQLiteEmptyFile(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	p := filepath.Join(root, "app.db")
	treetest.Must(t, os.WriteFile(p, nil, 0o644))
	tg := backends.Target{Backend: "sqlite", Path: "app.db"}
	b := &backends.SQLite{}
	treetest.Must(t, b.Check(ctx, tg, root))
	empty := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, root, empty))
	if st, err := os.Stat(p); err != nil || st.Size() != 0 {
		t.Fatalf("Snapshot changed the empty file: %v, %v", st, err)
	}
	db := sqliteOpen(t, p)
	_, err := db.Exec(`CREATE TABLE t(v TEXT); INSERT INTO t VALUES ('x')`)
	treetest.Must(t, err)
	treetest.Must(t, db.Close())
	treetest.Must(t, b.Restore(ctx, tg, root, empty))
	st, err := os.Lstat(p)
	treetest.Must(t, err)
	if !st.Mode().IsRegular() || st.Size() != 0 {
		t.Fatalf("after restore: %v, size %d; want an empty file", st.Mode(), st.Size())
	}
	for _, j := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Lstat(p + j); err == nil {
			t.Errorf("after restore %s is left", p+j)
		}
	}
	treetest.Must(t, b.Check(ctx, tg, root))
}
