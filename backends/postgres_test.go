package backends_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/treetest"
)

func init() {
	fixtures["postgres"] = postgresFixture
	// The test binary as a snapback that the Killed tests kill.
	if dir := os.Getenv("SNAPBACK_PG_CHILD_DIR"); dir != "" {
		tg := backends.Target{Backend: "postgres", DSN: os.Getenv("SNAPBACK_PG_CHILD_DSN")}
		op := (&backends.Postgres{}).Restore
		if os.Getenv("SNAPBACK_PG_CHILD_OP") == "snapshot" {
			op = (&backends.Postgres{}).Snapshot
		}
		if err := op(context.Background(), tg, "", dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// pgServer is the server the tests use: SNAPBACK_TEST_POSTGRES, a URL
// naming a role with CREATEDB (scripts/test.sh sets it).
func pgServer() string { return os.Getenv("SNAPBACK_TEST_POSTGRES") }

func pgNeed() (bool, string) {
	if pgServer() == "" {
		return false, "SNAPBACK_TEST_POSTGRES is not set"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgServer())
	if err != nil {
		return false, "the server of SNAPBACK_TEST_POSTGRES does not answer: " + err.Error()
	}
	conn.Close(ctx)
	return true, ""
}

// pgRequire skips or fails (per SNAPBACK_REQUIRE) without a server.
func pgRequire(t *testing.T) {
	t.Helper()
	ok, why := pgNeed()
	if !treetest.Require(t, "postgres", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name postgres: " + why)
	}
}

// pgDSN is the server's URL with database db (and password pw, when set).
func pgDSN(t testing.TB, db, pw string) string {
	t.Helper()
	u, err := url.Parse(pgServer())
	treetest.Must(t, err)
	u.Path = "/" + db
	if pw != "" {
		u.User = url.UserPassword(u.User.Username(), pw)
	}
	return u.String()
}

func pgConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	treetest.Must(t, err)
	return conn
}

func pgExec(t testing.TB, dsn string, sqls ...string) {
	t.Helper()
	conn := pgConn(t, dsn)
	defer conn.Close(context.Background())
	for _, s := range sqls {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

var pgSeq atomic.Int32

// pgNewDB creates a fresh database with the writer's tables; it is dropped
// at the end of the test with every database snapback made of it.
func pgNewDB(t testing.TB) (name, dsn string) {
	t.Helper()
	return pgMakeDB(t, fmt.Sprintf("sbtest_%d_%d", os.Getpid(), pgSeq.Add(1)))
}

func pgMakeDB(t testing.TB, name string) (string, string) {
	t.Helper()
	admin := pgDSN(t, "postgres", "")
	q := pgx.Identifier{name}.Sanitize()
	pgExec(t, admin, "DROP DATABASE IF EXISTS "+q+" WITH (FORCE)", "CREATE DATABASE "+q)
	t.Cleanup(func() {
		conn := pgConn(t, admin)
		defer conn.Close(context.Background())
		ctx := context.Background()
		rows, err := conn.Query(ctx, `SELECT datname FROM pg_database
			WHERE datname IN ($1::text, $1::text || '_snapback_new', $1::text || '_snapback_old')
			   OR (length($1::text) > 40 AND datname LIKE left($1::text, 30) || '%')
			   OR shobj_description(oid, 'pg_database') LIKE '%database "' || $1::text || '"%'`, name)
		treetest.Must(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		treetest.Must(t, err)
		// Not WITH (FORCE): it fails on an autovacuum worker, which a
		// plain DROP DATABASE ends itself.
		_, err = conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ANY($1) AND usename = current_user", names)
		treetest.Must(t, err)
		for _, n := range names {
			if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{n}.Sanitize()); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	dsn := pgDSN(t, name, "")
	pgExec(t, dsn, `CREATE TABLE t(id bigserial PRIMARY KEY, v bigint); CREATE TABLE meta(n bigint); INSERT INTO meta VALUES (0)`)
	return name, dsn
}

// pgState fingerprints the writer's tables; consistent when meta.n counts
// the rows of t and every v is its id squared.
func pgState(t testing.TB, dsn string) (string, bool) {
	t.Helper()
	conn := pgConn(t, dsn)
	defer conn.Close(context.Background())
	var n, rows, bad, sum int64
	treetest.Must(t, conn.QueryRow(context.Background(), `SELECT (SELECT n FROM meta), count(*),
		coalesce(sum((v <> id*id)::int), 0), coalesce(sum(id), 0) FROM t`).Scan(&n, &rows, &bad, &sum))
	return fmt.Sprintf("n=%d rows=%d sum=%d", n, rows, sum), n == rows && bad == 0
}

// pgWrite is one multi-row transaction of the writer's, on conn.
func pgWrite(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO t(v) VALUES (0), (0)`)
		if err == nil {
			_, err = tx.Exec(ctx, `UPDATE t SET v = id*id WHERE v = 0`)
		}
		if err == nil {
			_, err = tx.Exec(ctx, `UPDATE meta SET n = n + 2`)
		}
		return err
	})
}

// The writer opens a connection for each transaction, so a snapshot under
// it can take the template path (the other tests hold connections open to
// force the pg_dump path).
var postgresFixture = fixture{
	need: pgNeed,
	setup: func(t *testing.T, root string) backends.Target {
		_, dsn := pgNewDB(t)
		return backends.Target{Name: "pg", Backend: "postgres", DSN: dsn}
	},
	bad: func(t *testing.T, root string) map[string]backends.Target {
		u, err := url.Parse(pgDSN(t, "postgres", ""))
		treetest.Must(t, err)
		u.Host = "127.0.0.1:1"
		return map[string]backends.Target{
			"wrong password":   {Backend: "postgres", DSN: pgDSN(t, "postgres", "not-the-password")},
			"unreachable port": {Backend: "postgres", DSN: u.String()},
			"missing database": {Backend: "postgres", DSN: pgDSN(t, "sbtest_no_such_database", "")},
			"garbage dsn":      {Backend: "postgres", DSN: "postgres://[::1"},
			"no database":      {Backend: "postgres", DSN: "host=127.0.0.1 user=nobody-at-all-here"},
			"no dsn":           {Backend: "postgres"},
		}
	},
	state: func(t *testing.T, tg backends.Target, root string) (string, bool) { return pgState(t, tg.DSN) },
	write: func(t *testing.T, tg backends.Target, root string) error {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, tg.DSN)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return pgWrite(ctx, conn)
	},
}

func pgPayloadMethod(t testing.TB, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "postgres.json"))
	treetest.Must(t, err)
	var pl struct{ Method, Snapshot string }
	treetest.Must(t, json.Unmarshal(b, &pl))
	return pl.Method
}

// pgSetup makes a target with n writes done.
func pgSetup(t *testing.T, n int) (backends.Target, string) {
	pgRequire(t)
	name, dsn := pgNewDB(t)
	tg := backends.Target{Name: "pg", Backend: "postgres", DSN: dsn}
	for i := 0; i < n; i++ {
		treetest.Must(t, postgresFixture.write(t, tg, ""))
	}
	return tg, name
}

func pgTableExists(t testing.TB, dsn, table string) bool {
	t.Helper()
	conn := pgConn(t, dsn)
	defer conn.Close(context.Background())
	var ok bool
	treetest.Must(t, conn.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok))
	return ok
}

// TestPostgresRestoreIsARollback: with either method, tables created after
// the snapshot are gone after a restore (pg_restore --clean would keep
// them), the data is back, and Release frees the copy.
func TestPostgresRestoreIsARollback(t *testing.T) {
	for _, method := range []string{"template", "dump"} {
		t.Run(method, func(t *testing.T) {
			ctx := context.Background()
			tg, name := pgSetup(t, 2)
			b := &backends.Postgres{}
			before, _ := pgState(t, tg.DSN)
			payload := t.TempDir()
			if method == "dump" {
				// An application's open session keeps the template copy
				// from starting: the snapshot falls back to pg_dump.
				app := pgConn(t, tg.DSN)
				treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
				app.Close(ctx)
			} else {
				treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
			}
			if got := pgPayloadMethod(t, payload); got != method {
				t.Fatalf("snapshot method %s, want %s", got, method)
			}
			treetest.Must(t, postgresFixture.write(t, tg, ""))
			pgExec(t, tg.DSN, "CREATE TABLE later(x int); INSERT INTO later VALUES (1)", "CREATE SCHEMA later_schema")
			treetest.Must(t, b.Restore(ctx, tg, "", payload))
			if got, ok := pgState(t, tg.DSN); got != before || !ok {
				t.Fatalf("after restore: %s (consistent %v), want %s", got, ok, before)
			}
			if pgTableExists(t, tg.DSN, "later") || pgTableExists(t, tg.DSN, "later_schema.x") {
				t.Fatal("a table created after the snapshot survived the restore")
			}
			pgNoLeftovers(t, name)
			treetest.Must(t, b.Release(ctx, tg, "", payload))
			treetest.Must(t, b.Release(ctx, tg, "", payload))
			if n := pgCount(t, `SELECT count(*) FROM pg_database WHERE datname LIKE 'snapback\_%' AND shobj_description(oid, 'pg_database') LIKE '%database "`+name+`"%'`); n != 0 {
				t.Fatalf("%d snapshot copies left after Release", n)
			}
		})
	}
}

// TestPostgresRestoreDroppedDatabase: a database dropped after the
// snapshot comes back, by either method.
func TestPostgresRestoreDroppedDatabase(t *testing.T) {
	for _, method := range []string{"template", "dump"} {
		t.Run(method, func(t *testing.T) {
			ctx := context.Background()
			tg, name := pgSetup(t, 2)
			b := &backends.Postgres{}
			before, _ := pgState(t, tg.DSN)
			payload := t.TempDir()
			app := pgConn(t, tg.DSN)
			if method == "template" {
				app.Close(ctx)
			}
			treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
			app.Close(ctx)
			if got := pgPayloadMethod(t, payload); got != method {
				t.Fatalf("snapshot method %s, want %s", got, method)
			}
			pgExec(t, pgDSN(t, "postgres", ""), "DROP DATABASE "+name)
			treetest.Must(t, b.Restore(ctx, tg, "", payload))
			if got, ok := pgState(t, tg.DSN); got != before || !ok {
				t.Fatalf("after restore: %s (consistent %v), want %s", got, ok, before)
			}
			treetest.Must(t, b.Release(ctx, tg, "", payload))
		})
	}
}

func pgCount(t testing.TB, query string) int {
	t.Helper()
	conn := pgConn(t, pgDSN(t, "postgres", ""))
	defer conn.Close(context.Background())
	var n int
	treetest.Must(t, conn.QueryRow(context.Background(), query).Scan(&n))
	return n
}

func pgNoLeftovers(t testing.TB, name string) {
	t.Helper()
	if n := pgCount(t, `SELECT count(*) FROM pg_database WHERE datname IN ('`+name+`_snapback_new', '`+name+`_snapback_old')`); n != 0 {
		t.Fatalf("%d side databases left after a restore", n)
	}
}

// TestPostgresDumpUnderLiveWriter: a writer that keeps its connection
// forces the pg_dump path, which still captures one committed state.
func TestPostgresDumpUnderLiveWriter(t *testing.T) {
	ctx := context.Background()
	tg, _ := pgSetup(t, 3)
	b := &backends.Postgres{}
	writer := pgConn(t, tg.DSN)
	defer writer.Close(ctx)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var werr error
	var writes int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if werr = pgWrite(ctx, writer); werr != nil {
				return
			}
			writes++
		}
	}()
	time.Sleep(50 * time.Millisecond)
	payload := t.TempDir()
	err := b.Snapshot(ctx, tg, "", payload)
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	treetest.Must(t, err)
	treetest.Must(t, werr)
	if m := pgPayloadMethod(t, payload); m != "dump" {
		t.Fatalf("snapshot method %s under a connected writer, want dump", m)
	}
	t.Logf("%d writes during the snapshot", writes)
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if st, ok := pgState(t, tg.DSN); !ok {
		t.Fatalf("restored an inconsistent state: %s", st)
	}
	if _, err := writer.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("the writer's session survived the restore")
	}
}

// TestPostgresRestoreEndsSessionsKeepsSettings: an application's open
// session is terminated by the restore, the database is whole afterwards
// and keeps its owner, grants, comment and settings.
func TestPostgresRestoreEndsSessionsKeepsSettings(t *testing.T) {
	ctx := context.Background()
	tg, name := pgSetup(t, 2)
	b := &backends.Postgres{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	before, _ := pgState(t, tg.DSN)
	treetest.Must(t, postgresFixture.write(t, tg, ""))
	admin := pgDSN(t, "postgres", "")
	pgExec(t, admin,
		"ALTER DATABASE "+name+" SET work_mem = '7MB'",
		"ALTER DATABASE "+name+` SET search_path = "$user", public, "Odd Schema"`,
		"ALTER DATABASE "+name+" CONNECTION LIMIT 50",
		"COMMENT ON DATABASE "+name+" IS 'the app''s data'",
		"REVOKE TEMPORARY ON DATABASE "+name+" FROM PUBLIC")
	props := func() string {
		conn := pgConn(t, admin)
		defer conn.Close(ctx)
		var s string
		treetest.Must(t, conn.QueryRow(ctx, `SELECT format('%s %s %s %s %s', pg_get_userbyid(datdba), datconnlimit, datacl,
			shobj_description(oid, 'pg_database'), (SELECT setconfig FROM pg_db_role_setting WHERE setdatabase = d.oid))
			FROM pg_database d WHERE datname = $1`, name).Scan(&s))
		return s
	}
	want := props()
	app := pgConn(t, tg.DSN)
	defer app.Close(ctx)
	tx, err := app.Begin(ctx) // an open transaction, even
	treetest.Must(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO t(v) VALUES (1)")
	treetest.Must(t, err)

	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if _, err := app.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("the application's session survived the restore")
	}
	if got, ok := pgState(t, tg.DSN); got != before || !ok {
		t.Fatalf("after restore: %s (consistent %v), want %s", got, ok, before)
	}
	if got := props(); got != want {
		t.Fatalf("database properties after restore:\n %s\nwant\n %s", got, want)
	}
	pgNoLeftovers(t, name)
}

// pgKillWhen terminates the first session of snapback's whose query
// matches like, and reports whether it found one before stop closes.
func pgKillWhen(t *testing.T, like string, stop <-chan struct{}) <-chan bool {
	killed := make(chan bool, 1)
	conn := pgConn(t, pgDSN(t, "postgres", ""))
	go func() {
		defer conn.Close(context.Background())
		for {
			var n int
			err := conn.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name = 'snapback' AND query LIKE $1 AND state = 'active'`, like).Scan(&n)
			if err == nil && n > 0 {
				killed <- true
				return
			}
			select {
			case <-stop:
				killed <- false
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return killed
}

// pgPad makes the database big enough for its copy to take a while.
func pgPad(t *testing.T, dsn string) {
	pgExec(t, dsn, "CREATE TABLE pad AS SELECT g AS id, repeat('x', 200) AS s FROM generate_series(1, 200000) g")
}

// TestPostgresRestoreInterrupted: a restore whose session is terminated
// while it builds the copy, or whose context ends at any moment, leaves
// the database as it was or restored, whole; the next Restore finishes.
func TestPostgresRestoreInterrupted(t *testing.T) {
	ctx := context.Background()
	tg, name := pgSetup(t, 2)
	pgPad(t, tg.DSN)
	b := &backends.Postgres{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	snap, _ := pgState(t, tg.DSN)

	treetest.Must(t, postgresFixture.write(t, tg, ""))
	changed, _ := pgState(t, tg.DSN)
	stop := make(chan struct{})
	killed := pgKillWhen(t, "CREATE DATABASE %"+name+"_snapback_new%", stop)
	err := b.Restore(ctx, tg, "", payload)
	close(stop)
	if !<-killed {
		t.Fatalf("the restore's copy was never seen running (restore: %v)", err)
	}
	if err == nil {
		t.Fatal("a restore whose session was terminated succeeded")
	}
	t.Logf("terminated restore: %v", err)
	if got, ok := pgState(t, tg.DSN); got != changed || !ok {
		t.Fatalf("after the terminated restore: %s (consistent %v), want %s as before", got, ok, changed)
	}
	t0 := time.Now()
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	full := time.Since(t0)
	if got, ok := pgState(t, tg.DSN); got != snap || !ok {
		t.Fatalf("after the next restore: %s (consistent %v), want %s", got, ok, snap)
	}
	pgNoLeftovers(t, name)

	// A context ending at any point: before, during the copy, the swap,
	// the drop (an open session makes the swap wait for its end).
	for i := 0; i <= 7; i++ {
		treetest.Must(t, postgresFixture.write(t, tg, ""))
		changed, _ := pgState(t, tg.DSN)
		app := pgConn(t, tg.DSN)
		d := full * time.Duration(i) / 6
		cctx, cancel := context.WithTimeout(ctx, d)
		err := b.Restore(cctx, tg, "", payload)
		cancel()
		app.Close(ctx)
		t.Logf("restore cut after %v: %v", d.Round(time.Millisecond), err)
		got, ok := pgStateSettled(t, tg.DSN)
		if !ok || (got != changed && got != snap) {
			t.Fatalf("restore cut after %v (%v): %s (consistent %v), want %s or %s", d, err, got, ok, changed, snap)
		}
		treetest.Must(t, b.Restore(ctx, tg, "", payload))
		if got, _ := pgState(t, tg.DSN); got != snap {
			t.Fatalf("restore after one cut after %v: %s, want %s", d, got, snap)
		}
		pgNoLeftovers(t, name)
	}
}

// pgStateSettled is pgState once a restore cut short has settled: its
// session may still be committing the swap, and a connection that waited
// for it fails (database "does not exist ... just renamed"), as an
// application's does, and retries.
func pgStateSettled(t testing.TB, dsn string) (string, bool) {
	t.Helper()
	for i := 0; ; i++ {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			conn.Close(context.Background())
			return pgState(t, dsn)
		}
		if i == 50 || !strings.Contains(err.Error(), "3D000") {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPostgresRestoreKilled: a snapback process killed (SIGKILL) while its
// restore builds the copy leaves the database as it was, one killed while
// it drops the old database leaves it restored; either way the next
// Restore finishes and leaves no side database behind.
func TestPostgresRestoreKilled(t *testing.T) {
	ctx := context.Background()
	tg, name := pgSetup(t, 2)
	pgPad(t, tg.DSN)
	b := &backends.Postgres{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	snap, _ := pgState(t, tg.DSN)
	watch := pgConn(t, pgDSN(t, "postgres", ""))
	defer watch.Close(ctx)
	for _, phase := range []struct{ like, want string }{
		{"CREATE DATABASE %" + name + "_snapback_new%", "as before"},
		{`DROP DATABASE "` + name + `_snapback_old"`, "restored"}, // not the IF EXISTS of leftovers
	} {
		treetest.Must(t, postgresFixture.write(t, tg, ""))
		changed, _ := pgState(t, tg.DSN)
		pgKillChild(t, watch, "restore", payload, tg.DSN, phase.like)
		want := changed
		if phase.want == "restored" {
			want = snap
		}
		if got, ok := pgState(t, tg.DSN); got != want || !ok {
			t.Fatalf("killed during %q: %s (consistent %v), want %s (%s)", phase.like, got, ok, want, phase.want)
		}
		treetest.Must(t, b.Restore(ctx, tg, "", payload))
		if got, _ := pgState(t, tg.DSN); got != snap {
			t.Fatalf("the restore after a kill during %q: %s, want %s", phase.like, got, snap)
		}
		pgNoLeftovers(t, name)
	}
}

// pgKillChild runs the test binary as a snapback doing op (restore or
// snapshot) with dir, and kills it (SIGKILL) once watch sees it run a
// query like like.
func pgKillChild(t *testing.T, watch *pgx.Conn, op, dir, dsn, like string) {
	t.Helper()
	ctx := context.Background()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "SNAPBACK_PG_CHILD_OP="+op, "SNAPBACK_PG_CHILD_DIR="+dir, "SNAPBACK_PG_CHILD_DSN="+dsn)
	treetest.Must(t, child.Start())
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	for {
		var n int
		treetest.Must(t, watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'snapback' AND query LIKE $1 AND state = 'active'`, like).Scan(&n))
		if n > 0 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the %s ended (%v) before it was seen running %s", op, err, like)
		default:
		}
	}
	treetest.Must(t, child.Process.Kill())
	<-exited
}

// TestPostgresSnapshotKilled: a snapback killed while its snapshot copies
// the database leaves it taking connections, and Release frees the copy
// even if the server finishes it after the kill.
func TestPostgresSnapshotKilled(t *testing.T) {
	ctx := context.Background()
	tg, name := pgSetup(t, 2)
	pgPad(t, tg.DSN)
	b := &backends.Postgres{}
	watch := pgConn(t, pgDSN(t, "postgres", ""))
	defer watch.Close(ctx)
	payload := t.TempDir()
	pgKillChild(t, watch, "snapshot", payload, tg.DSN, `CREATE DATABASE "snapback\_%`)
	if _, ok := pgState(t, tg.DSN); !ok {
		t.Fatal("inconsistent after a killed snapshot")
	}
	b2, err := os.ReadFile(filepath.Join(payload, "postgres.json"))
	treetest.Must(t, err)
	var pl struct{ Snapshot string }
	treetest.Must(t, json.Unmarshal(b2, &pl))
	treetest.Must(t, b.Release(ctx, tg, "", payload))
	time.Sleep(1500 * time.Millisecond) // past client_connection_check_interval: an orphan would have committed
	if n := pgCount(t, "SELECT count(*) FROM pg_database WHERE datname = '"+pl.Snapshot+"'"); pl.Snapshot == "" || n != 0 {
		t.Fatalf("copy %q left after releasing a killed snapshot", pl.Snapshot)
	}
	if n := pgCount(t, "SELECT count(*) FROM pg_database WHERE datname = '"+name+"' AND datallowconn"); n != 1 {
		t.Fatal("the database does not take connections after a killed snapshot")
	}
}

// TestPostgresSnapshotInterrupted: a snapshot whose session is terminated
// in the middle of the copy leaves the database open to connections (the
// lock that held them off goes with the session: there is no
// ALLOW_CONNECTIONS to repair), Release frees whatever it made, and the
// next snapshot works.
func TestPostgresSnapshotInterrupted(t *testing.T) {
	ctx := context.Background()
	tg, name := pgSetup(t, 2)
	pgPad(t, tg.DSN)
	b := &backends.Postgres{}
	payload := t.TempDir()
	stop := make(chan struct{})
	killed := pgKillWhen(t, "CREATE DATABASE %", stop)
	err := b.Snapshot(ctx, tg, "", payload)
	close(stop)
	if !<-killed || err == nil {
		t.Fatalf("the snapshot's copy was not cut (snapshot: %v)", err)
	}
	t.Logf("terminated snapshot: %v", err)
	if n := pgCount(t, "SELECT count(*) FROM pg_database WHERE datname = '"+name+"' AND datallowconn AND datconnlimit = -1"); n != 1 {
		t.Fatal("the database does not take connections after an interrupted snapshot")
	}
	if _, ok := pgState(t, tg.DSN); !ok {
		t.Fatal("inconsistent after an interrupted snapshot")
	}
	treetest.Must(t, b.Release(ctx, tg, "", payload))
	if n := pgCount(t, `SELECT count(*) FROM pg_database WHERE datname LIKE 'snapback\_%' AND shobj_description(oid, 'pg_database') LIKE '%database "`+name+`"%'`); n != 0 {
		t.Fatalf("%d copies left after releasing an interrupted snapshot", n)
	}
	again := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", again))
	treetest.Must(t, b.Release(ctx, tg, "", again))
}

// pgSuper runs SQL as the server's superuser, through su postgres as
// root; it skips (or fails, per SNAPBACK_REQUIRE=root) where it cannot.
func pgSuper(t *testing.T, sql string) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "reaching the postgres superuser (su postgres) needs root"
	} else if _, err := exec.LookPath("psql"); err != nil {
		why = "psql is not installed"
	}
	if !treetest.Require(t, "root", why == "", why) {
		t.Skip("SNAPBACK_REQUIRE does not name root: " + why)
	}
	cmd := exec.Command("su", "postgres", "-c", "psql -X -q -v ON_ERROR_STOP=1")
	cmd.Stdin = strings.NewReader(sql)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("su postgres psql: %s: %v\n%s", sql, err, out)
	}
}

// TestPostgresRefusesRoleThatCannotRestore: a role without CREATEDB, or
// one that does not own the database, could take a pg_dump but never
// restore it (a restore renames the database): Check and Snapshot refuse
// it with a target error.
func TestPostgresRefusesRoleThatCannotRestore(t *testing.T) {
	pgRequire(t)
	ctx := context.Background()
	name, _ := pgNewDB(t)
	role := fmt.Sprintf("sbtest_role_%d", os.Getpid())
	pgSuper(t, "DROP ROLE IF EXISTS "+role+"; CREATE ROLE "+role+" LOGIN PASSWORD 'pw'")
	t.Cleanup(func() { pgSuper(t, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE); DROP ROLE IF EXISTS "+role) })
	u, err := url.Parse(pgDSN(t, name, ""))
	treetest.Must(t, err)
	u.User = url.UserPassword(role, "pw")
	tg := backends.Target{Name: "pg", Backend: "postgres", DSN: u.String()}
	b := &backends.Postgres{}
	for _, setup := range []string{"", "ALTER DATABASE " + name + " OWNER TO " + role} {
		if setup != "" {
			pgSuper(t, setup) // the owner, still without CREATEDB
		}
		err := b.Check(ctx, tg, "")
		if !errors.Is(err, config.ErrTarget) || !strings.Contains(err.Error(), "CREATEDB") {
			t.Fatalf("Check: %v, want a target error about CREATEDB", err)
		}
		t.Log(err)
		if err := b.Snapshot(ctx, tg, "", t.TempDir()); !errors.Is(err, config.ErrTarget) {
			t.Fatalf("Snapshot: %v, want a target error", err)
		}
	}
}

// TestPostgresRestoreSwapBlocked: a session the restore may not terminate
// (another role's) holds the swap off; a restore cut while it waits, or
// one that gives up, leaves the database as it was and the session alive.
func TestPostgresRestoreSwapBlocked(t *testing.T) {
	pgRequire(t)
	ctx := context.Background()
	tg, name := pgSetup(t, 2)
	role := fmt.Sprintf("sbtest_other_%d", os.Getpid())
	pgSuper(t, "DROP ROLE IF EXISTS "+role+"; CREATE ROLE "+role+" LOGIN PASSWORD 'pw'")
	t.Cleanup(func() { pgSuper(t, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE); DROP ROLE IF EXISTS "+role) })
	b := &backends.Postgres{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	snap, _ := pgState(t, tg.DSN)
	treetest.Must(t, postgresFixture.write(t, tg, ""))
	changed, _ := pgState(t, tg.DSN)
	u, err := url.Parse(tg.DSN)
	treetest.Must(t, err)
	u.User = url.UserPassword(role, "pw")
	other := pgConn(t, u.String())
	defer other.Close(ctx)

	// The snapshot sees that session (which pg_stat_activity shows
	// snapback without its type) and takes pg_dump at once, not after
	// the server's five seconds of waiting.
	t0 := time.Now()
	dumped := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", dumped))
	if m, d := pgPayloadMethod(t, dumped), time.Since(t0); m != "dump" || d > 4*time.Second {
		t.Fatalf("snapshot with another role's session: method %s in %v, want dump within 4s", m, d)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	err = b.Restore(cctx, tg, "", payload)
	cancel()
	t.Logf("cut while the swap waits: %v", err)
	err = b.Restore(ctx, tg, "", payload)
	t.Logf("gave up waiting: %v", err)
	if err == nil || !strings.Contains(err.Error(), "accessed by other users") || !strings.Contains(err.Error(), "pg_signal_backend") {
		t.Fatalf("restore with a session it may not end: %v", err)
	}
	if got, ok := pgState(t, tg.DSN); got != changed || !ok {
		t.Fatalf("after the blocked restores: %s (consistent %v), want %s as before", got, ok, changed)
	}
	if _, err := other.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the other role's session did not survive: %v", err)
	}
	pgNoLeftovers(t, name)
	other.Close(ctx)
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if got, _ := pgState(t, tg.DSN); got != snap {
		t.Fatalf("after the session left: %s, want %s", got, snap)
	}
	treetest.Must(t, b.Release(ctx, tg, "", payload))
}

// TestPostgresLongName: a database name of PostgreSQL's full 63 bytes,
// not all ASCII, has side databases of its own (cut and marked by a hash).
func TestPostgresLongName(t *testing.T) {
	pgRequire(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("sbtest_%d_%d_é", os.Getpid(), pgSeq.Add(1))
	name := prefix + strings.Repeat("x", 63-len(prefix))
	_, dsn := pgMakeDB(t, name)
	tg := backends.Target{Name: "pg", Backend: "postgres", DSN: dsn}
	treetest.Must(t, postgresFixture.write(t, tg, ""))
	b := &backends.Postgres{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	before, _ := pgState(t, dsn)
	treetest.Must(t, postgresFixture.write(t, tg, ""))
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if got, ok := pgState(t, dsn); got != before || !ok {
		t.Fatalf("after restore: %s (consistent %v), want %s", got, ok, before)
	}
	if n := pgCount(t, "SELECT count(*) FROM pg_database WHERE datname LIKE '"+prefix+"%'"); n != 1 {
		t.Fatalf("%d databases named like %s after the restore, want 1", n, prefix)
	}
	treetest.Must(t, b.Release(ctx, tg, "", payload))
}

// TestPostgresRestoreChecksPayload: a payload of another database, or an
// incomplete one, is refused and changes nothing.
func TestPostgresRestoreChecksPayload(t *testing.T) {
	ctx := context.Background()
	tg, _ := pgSetup(t, 1)
	other, _ := pgSetup(t, 3)
	b := &backends.Postgres{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	defer b.Release(ctx, tg, "", payload)
	st, _ := pgState(t, other.DSN)
	if err := b.Restore(ctx, other, "", payload); !errors.Is(err, config.ErrTarget) || !strings.Contains(err.Error(), "snapshot is of database") {
		t.Fatalf("restoring another database's snapshot: %v", err)
	}
	if err := b.Restore(ctx, tg, "", t.TempDir()); err == nil {
		t.Fatal("restoring an empty payload succeeded")
	}
	if got, _ := pgState(t, other.DSN); got != st {
		t.Fatal("a refused restore changed the database")
	}
}

// BenchmarkPostgres times a snapshot and a restore of the database named
// by SNAPBACK_BENCH_POSTGRES_DB on the server of SNAPBACK_TEST_POSTGRES,
// by each method (scripts/bench-postgres.sh runs it on 1 GiB next to
// pg_dump and pg_restore). The restore puts back the same content.
func BenchmarkPostgres(b *testing.B) {
	db := os.Getenv("SNAPBACK_BENCH_POSTGRES_DB")
	if db == "" || pgServer() == "" {
		b.Skip("SNAPBACK_BENCH_POSTGRES_DB and SNAPBACK_TEST_POSTGRES name the database to time")
	}
	ctx := context.Background()
	tg := backends.Target{Name: "bench", Backend: "postgres", DSN: pgDSN(b, db, "")}
	pg := &backends.Postgres{}
	for _, method := range []string{"template", "dump"} {
		b.Run(method, func(b *testing.B) {
			var snap, restore time.Duration
			for i := 0; i < b.N; i++ {
				dir := b.TempDir()
				t0 := time.Now()
				if method == "dump" {
					app := pgConn(b, tg.DSN) // keeps the template copy from starting
					treetest.Must(b, pg.Snapshot(ctx, tg, "", dir))
					app.Close(ctx)
				} else {
					treetest.Must(b, pg.Snapshot(ctx, tg, "", dir))
				}
				t1 := time.Now()
				treetest.Must(b, pg.Restore(ctx, tg, "", dir))
				t2 := time.Now()
				if m := pgPayloadMethod(b, dir); m != method {
					b.Fatalf("snapshot method %s, want %s", m, method)
				}
				treetest.Must(b, pg.Release(ctx, tg, "", dir))
				snap += t1.Sub(t0)
				restore += t2.Sub(t1)
			}
			b.ReportMetric(snap.Seconds()/float64(b.N), "snapshot-s")
			b.ReportMetric(restore.Seconds()/float64(b.N), "restore-s")
		})
	}
}

// TestPostgresConnectErrorOneLine: failing to connect says so once, in
// one line naming the target, the dsn's host and port, user and database
// and the cause; never the password, and never the server three times
// over as pgx's own message does.
func TestPostgresConnectErrorOneLine(t *testing.T) {
	// A port nothing listens on: one just freed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	treetest.Must(t, err)
	closed := l.Addr().String()
	treetest.Must(t, l.Close())
	const secret = "s3cr3t-pw"
	cases := []struct {
		name, dsn, where, cause string
	}{
		{"closed port", "postgres://app:" + secret + "@" + closed + "/shop?sslmode=disable", closed, "connection refused"},
	}
	if ok, why := pgNeed(); treetest.Require(t, "postgres", ok, why) {
		u, err := url.Parse(pgServer())
		treetest.Must(t, err)
		u.User = url.UserPassword(u.User.Username(), secret) // a wrong password
		cases = append(cases, struct{ name, dsn, where, cause string }{
			"wrong password", u.String(), u.Host, "password authentication failed for user \"" + u.User.Username() + "\""})
	} else {
		t.Log("no server (SNAPBACK_TEST_POSTGRES): only the closed port is tried")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := backends.Target{Name: "shopdb", Backend: "postgres", DSN: c.dsn}
			err := (&backends.Postgres{}).Check(context.Background(), tg, t.TempDir())
			if err == nil {
				t.Fatal("Check succeeded")
			}
			msg := err.Error()
			t.Log(msg)
			if strings.Contains(msg, "\n") || strings.Contains(msg, secret) {
				t.Errorf("error %q spans lines or shows the password", msg)
			}
			if !strings.Contains(msg, "target shopdb") || !strings.Contains(msg, "cannot connect to "+c.where) || !strings.HasSuffix(msg, ": "+c.cause) {
				t.Errorf("error %q does not name the target, %s and the cause %q", msg, c.where, c.cause)
			}
			host, _, _ := strings.Cut(c.where, ":")
			if n := strings.Count(msg, host); n != 1 {
				t.Errorf("error %q names the host %d times, want once", msg, n)
			}
			if !errors.Is(err, config.ErrTarget) {
				t.Errorf("error %v is not a target error", err)
			}
		})
	}
}

// TestPostgresPayloadNamesOtherDatabase: postgres.json is read from the
// store (input from outside, a cloned repository's included). One whose
// copy names another database of the server — not a copy snapback made
// — gets that database neither dropped by Release nor restored from.
func TestPostgresPayloadNamesOtherDatabase(t *testing.T) {
	ctx := context.Background()
	tg, name := pgSetup(t, 1)
	_, victim := pgSetup(t, 3)
	// A victim with snapback's prefix, too: the name alone proves nothing.
	prefixed, _ := pgMakeDB(t, fmt.Sprintf("snapback_victim_%d", os.Getpid()))
	b := &backends.Postgres{}
	for _, v := range []string{victim, prefixed} {
		payload := t.TempDir()
		pl, err := json.Marshal(map[string]any{"method": "template", "snapshot": v, "database": name, "complete": true})
		treetest.Must(t, err)
		treetest.Must(t, os.WriteFile(filepath.Join(payload, "postgres.json"), pl, 0o600))
		st, _ := pgState(t, tg.DSN)
		if err := b.Restore(ctx, tg, "", payload); !errors.Is(err, config.ErrTarget) || !strings.Contains(err.Error(), "not a copy snapback made") {
			t.Errorf("restoring from database %s: %v", v, err)
		}
		if got, _ := pgState(t, tg.DSN); got != st {
			t.Errorf("a refused restore from %s changed the database", v)
		}
		treetest.Must(t, b.Release(ctx, tg, "", payload))
		if pgCount(t, fmt.Sprintf("SELECT count(*) FROM pg_database WHERE datname = '%s'", v)) != 1 {
			t.Fatalf("Release dropped database %s, which the payload named", v)
		}
	}
}
