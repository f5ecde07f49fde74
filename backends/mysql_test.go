package backends_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/snapback/snapback/backends"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/internal/treetest"
)

func init() { fixtures["mysql"] = mysqlFixture }

// mysqlBase is the test server's DSN without a database
// (SNAPBACK_TEST_MYSQL, e.g. snapback:snapback@tcp(127.0.0.1:3306)/).
func mysqlBase(t testing.TB) *mysql.Config {
	t.Helper()
	cfg, err := mysql.ParseDSN(os.Getenv("SNAPBACK_TEST_MYSQL"))
	treetest.Must(t, err)
	return cfg
}

func mysqlNeed() (bool, string) {
	dsn := os.Getenv("SNAPBACK_TEST_MYSQL")
	if dsn == "" {
		return false, "SNAPBACK_TEST_MYSQL is not set"
	}
	db, err := sql.Open("mysql", dsn)
	if err == nil {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = db.PingContext(ctx)
	}
	if err != nil {
		return false, "the server of SNAPBACK_TEST_MYSQL does not answer: " + err.Error()
	}
	return true, ""
}

// mysqlRequire skips or fails (per SNAPBACK_REQUIRE) without a server.
func mysqlRequire(t *testing.T) {
	t.Helper()
	ok, why := mysqlNeed()
	if !treetest.Require(t, "mysql", ok, why) {
		t.Skip("SNAPBACK_REQUIRE does not name mysql: " + why)
	}
}

// mysqlDB opens the named database (the server alone when "").
func mysqlDB(t testing.TB, name string) *sql.DB {
	t.Helper()
	cfg := mysqlBase(t)
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	treetest.Must(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func mysqlExec(t testing.TB, db *sql.DB, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// mysqlTarget makes a fresh database, dropped (with a restore's side
// schemas) when the test ends, and a target naming it.
func mysqlNewTarget(t testing.TB) (backends.Target, string) {
	t.Helper()
	return mysqlNewTargetPad(t, 0)
}

// mysqlNewTargetPad is mysqlNewTarget with a name padded to pad
// characters.
func mysqlNewTargetPad(t testing.TB, pad int) (backends.Target, string) {
	t.Helper()
	prefix := fmt.Sprintf("sbtest_%d_%d", time.Now().UnixNano()%1e9, rand.IntN(1e6))
	name := prefix + strings.Repeat("x", max(0, pad-len(prefix)))
	admin := mysqlDB(t, "")
	mysqlExec(t, admin, "CREATE DATABASE "+name)
	t.Cleanup(func() {
		// The database and a restore's side schemas.
		rows, err := admin.Query("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE ?", prefix+"%")
		treetest.Must(t, err)
		var names []string
		for rows.Next() {
			var s string
			treetest.Must(t, rows.Scan(&s))
			names = append(names, s)
		}
		rows.Close()
		for _, s := range names {
			if _, err := admin.Exec("DROP DATABASE IF EXISTS `" + s + "`"); err != nil {
				t.Errorf("drop %s: %v", s, err)
			}
		}
	})
	cfg := mysqlBase(t)
	cfg.DBName = name
	return backends.Target{Name: "db", Backend: "mysql", DSN: cfg.FormatDSN()}, name
}

func mysqlName(tg backends.Target) string {
	cfg, _ := mysql.ParseDSN(tg.DSN)
	return cfg.DBName
}

// The writer's invariant: meta.n counts the rows of t, and every row's v
// is its id squared; each transaction adds two rows and bumps n by two.
var mysqlFixture = fixture{
	need: mysqlNeed,
	setup: func(t *testing.T, root string) backends.Target {
		tg, name := mysqlNewTarget(t)
		db := mysqlDB(t, name)
		mysqlExec(t, db,
			"CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB",
			"CREATE TABLE meta (n BIGINT NOT NULL) ENGINE=InnoDB",
			"INSERT INTO meta VALUES (0)")
		return tg
	},
	bad: func(t *testing.T, root string) map[string]backends.Target {
		cfg := mysqlBase(t)
		cfg.DBName = "snapback_no_such_db"
		missing := cfg.FormatDSN()
		cfg = mysqlBase(t)
		cfg.DBName = "mysql"
		cfg.Passwd = "wrong-password"
		wrongPw := cfg.FormatDSN()
		cfg = mysqlBase(t)
		cfg.DBName = "mysql"
		cfg.Addr = "127.0.0.1:1"
		unreachable := cfg.FormatDSN()
		return map[string]backends.Target{
			"wrong password":   {Backend: "mysql", DSN: wrongPw},
			"unreachable port": {Backend: "mysql", DSN: unreachable},
			"missing database": {Backend: "mysql", DSN: missing},
			"garbage dsn":      {Backend: "mysql", DSN: "this is :: not a dsn"},
			"no database":      {Backend: "mysql", DSN: mysqlBase(t).FormatDSN()},
			"no dsn":           {Backend: "mysql"},
			"bad url":          {Backend: "mysql", DSN: "mysql://snapback:snapback@127.0.0.1:3306/"},
		}
	},
	state: func(t *testing.T, tg backends.Target, root string) (string, bool) {
		db := mysqlDB(t, mysqlName(tg))
		var n, rows, bad int64
		treetest.Must(t, db.QueryRow("SELECT n FROM meta").Scan(&n))
		treetest.Must(t, db.QueryRow("SELECT COUNT(*), COALESCE(SUM(v <> id*id), 0) FROM t").Scan(&rows, &bad))
		return fmt.Sprintf("n=%d rows=%d", n, rows), n == rows && bad == 0
	},
	write: func(t *testing.T, tg backends.Target, root string) error {
		db := mysqlDB(t, mysqlName(tg))
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		defer tx.Rollback() // after Commit, a no-op
		var n int64
		if err := tx.QueryRow("SELECT n FROM meta FOR UPDATE").Scan(&n); err != nil {
			return err
		}
		if _, err := tx.Exec("INSERT INTO t VALUES (?, ?), (?, ?)", n+1, (n+1)*(n+1), n+2, (n+2)*(n+2)); err != nil {
			return err
		}
		if _, err := tx.Exec("UPDATE meta SET n = n + 2"); err != nil {
			return err
		}
		return tx.Commit()
	},
}

// mysqlRows fingerprints a query's result read over the binary protocol
// (an argument makes it a prepared statement), where FLOAT and DOUBLE keep
// their exact bits.
func mysqlRows(t testing.TB, db *sql.DB, q string) string {
	t.Helper()
	rows, err := db.Query(q+" AND ? = 1", 1)
	treetest.Must(t, err)
	defer rows.Close()
	cols, _ := rows.Columns()
	var sb strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		treetest.Must(t, rows.Scan(ptrs...))
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				fmt.Fprintf(&sb, "%s=%q ", cols[i], b)
			} else {
				fmt.Fprintf(&sb, "%s=%T:%v ", cols[i], v, v)
			}
		}
		sb.WriteString("\n")
	}
	treetest.Must(t, rows.Err())
	return sb.String()
}

// TestMySQLTypesRoundTrip: every value comes back bit for bit: binary
// bytes, empty against NULL, utf8mb4 and latin1 text, decimals, floats,
// dates and times with fractions, BIT, ENUM, SET, JSON; generated and
// invisible columns; foreign keys; views and triggers.
func TestMySQLTypesRoundTrip(t *testing.T) {
	mysqlRequire(t)
	ctx := context.Background()
	tg, name := mysqlNewTarget(t)
	db := mysqlDB(t, name)
	mysqlExec(t, db,
		`CREATE TABLE odd (
			id INT PRIMARY KEY,
			vb VARBINARY(64), bl LONGBLOB, bn BINARY(4),
			tx TEXT CHARACTER SET utf8mb4, l1 VARCHAR(20) CHARACTER SET latin1,
			dc DECIMAL(40,12), fl FLOAT, db DOUBLE, u BIGINT UNSIGNED, i8 TINYINT,
			dt DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME(3), da DATE, y YEAR,
			bt BIT(10), en ENUM('a','é','z'), st SET('x','y','ü'), js JSON,
			gen INT AS (id * 2) VIRTUAL, gs VARCHAR(30) AS (CONCAT('g', id)) PERSISTENT,
			hid INT INVISIBLE DEFAULT 7
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		`CREATE TABLE child (id INT PRIMARY KEY, odd INT, FOREIGN KEY (odd) REFERENCES odd(id)) ENGINE=InnoDB`,
		`CREATE TABLE empty_one (a INT) ENGINE=InnoDB`,
		`CREATE TABLE keyed (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(50), c DATETIME,
			UNIQUE KEY ua (a), KEY bc (b(10), c DESC), KEY c (c)) ENGINE=InnoDB`,
		`INSERT INTO keyed VALUES (1, 10, 'x', NULL), (2, 20, 'y', '2020-01-01'), (3, 30, NULL, '2021-01-01')`,
		`CREATE TABLE autokey (id INT PRIMARY KEY, n INT AUTO_INCREMENT, KEY (n)) ENGINE=InnoDB`,
		`INSERT INTO autokey (id) VALUES (1), (2)`,
		`CREATE TABLE audit (n INT) ENGINE=InnoDB`,
		`INSERT INTO audit VALUES (0)`,
		`CREATE TRIGGER count_child AFTER INSERT ON child FOR EACH ROW UPDATE audit SET n = n + 1`,
		`CREATE VIEW odd_ids AS SELECT id, gen FROM odd`,
		`CREATE VIEW odd_ids2 AS SELECT id FROM odd_ids`,
	)
	_, err := db.Exec(`INSERT INTO odd (id, vb, bl, bn, tx, l1, dc, fl, db, u, i8, dt, ts, tm, da, y, bt, en, st, js, hid) VALUES
		(1, ?, ?, ?, 'héllo 🦀 '' " \\ end', 'café', '-1234567890123456789012345678.123456789012', 3.1415927, 0.30000000000000004, 18446744073709551615, -128,
		 '2024-02-29 23:59:59.999999', '2038-01-19 03:14:07.123456', '-838:59:59.000', '0000-00-00', 0, b'1010101010', 'é', 'x,ü', '{"k": "üé", "n": [1, 2.5e300]}', 42),
		(2, '', '', '', '', '', 0, -0.0, 1e-300, 0, 0, '1000-01-01 00:00:00', NULL, '00:00:00.001', '9999-12-31', 2155, b'0', 'a', '', '[]', NULL),
		(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
		[]byte{0, '\'', '\\', '\n', '\r', 0x1a, 0xff, 0xfe, '"'}, []byte(strings.Repeat("\x00\xff blob ", 100000)), []byte{1, 0, 2, 0})
	treetest.Must(t, err)
	mysqlExec(t, db, "INSERT INTO child VALUES (1, 1), (2, 2), (3, NULL)")

	fp := func() string {
		return mysqlRows(t, db, "SELECT id, vb, bl, bn, tx, l1, dc, fl, db, u, i8, dt, ts, tm, da, y, bt, en, st, js, gen, gs, hid FROM odd WHERE 1") +
			mysqlRows(t, db, "SELECT * FROM child WHERE 1") +
			mysqlRows(t, db, "SELECT * FROM audit WHERE 1") +
			mysqlRows(t, db, "SELECT TABLE_NAME, VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_SCHEMA = '"+name+"'") +
			mysqlRows(t, db, "SELECT TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = '"+name+"'") +
			mysqlRows(t, db, "SELECT COUNT(*) FROM empty_one WHERE 1") +
			mysqlRows(t, db, "SELECT * FROM keyed WHERE 1") +
			mysqlRows(t, db, "SELECT * FROM autokey WHERE 1") +
			mysqlCreates(t, db)
	}
	before := fp()
	b := &backends.MySQL{}
	treetest.Must(t, b.Check(ctx, tg, ""))
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))

	mysqlExec(t, db,
		"UPDATE odd SET vb = 'x', fl = 1, db = 2, dc = 3, tx = 'changed', bt = b'1', js = '{}', hid = 0",
		"ALTER TABLE keyed DROP KEY c",
		"INSERT INTO child VALUES (4, 1)",
		"INSERT INTO empty_one VALUES (1)",
		"DROP VIEW odd_ids2",
		"DROP TRIGGER count_child")
	if fp() == before {
		t.Fatal("changes after the snapshot changed nothing")
	}
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if got := fp(); got != before {
		t.Fatalf("after restore:\n%s\nwant:\n%s", got, before)
	}
	if got := mysqlRows(t, db, "SELECT * FROM odd_ids2 WHERE 1"); got != "id=int64:1 \nid=int64:2 \nid=int64:3 \n" {
		t.Errorf("view over a view after restore: %q", got)
	}
	// The trigger is back and fires; the foreign key holds.
	mysqlExec(t, db, "INSERT INTO child VALUES (5, 2)")
	var n int
	treetest.Must(t, db.QueryRow("SELECT n FROM audit").Scan(&n))
	if n != 4 {
		t.Errorf("audit.n = %d after one more insert, want 4: the trigger is not back", n)
	}
	if _, err := db.Exec("INSERT INTO child VALUES (6, 99)"); err == nil {
		t.Error("the foreign key does not hold after restore")
	}
}

// mysqlCreates lists the SHOW CREATE TABLE of every table.
func mysqlCreates(t testing.TB, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME")
	treetest.Must(t, err)
	var names []string
	for rows.Next() {
		var n string
		treetest.Must(t, rows.Scan(&n))
		names = append(names, n)
	}
	rows.Close()
	var sb strings.Builder
	for _, n := range names {
		var name, create string
		treetest.Must(t, db.QueryRow("SHOW CREATE TABLE "+n).Scan(&name, &create))
		sb.WriteString(create + "\n")
	}
	return sb.String()
}

// TestMySQLRestoreRemovesLaterTables: tables and views made after the
// snapshot are gone after a restore, and so are the side schemas.
func TestMySQLRestoreRemovesLaterTables(t *testing.T) {
	mysqlRequire(t)
	ctx := context.Background()
	tg := mysqlFixture.setup(t, "")
	name := mysqlName(tg)
	treetest.Must(t, mysqlFixture.write(t, tg, ""))
	b := &backends.MySQL{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	db := mysqlDB(t, name)
	mysqlExec(t, db,
		"CREATE TABLE later (a INT) ENGINE=InnoDB",
		"INSERT INTO later VALUES (1)",
		"CREATE VIEW later_view AS SELECT a FROM later",
		"DROP TABLE meta",
		"CREATE VIEW meta AS SELECT 1 AS n")
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	var tables []string
	rows, err := db.Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME", name)
	treetest.Must(t, err)
	for rows.Next() {
		var s string
		treetest.Must(t, rows.Scan(&s))
		tables = append(tables, s)
	}
	rows.Close()
	if got := strings.Join(tables, ","); got != "meta,t" {
		t.Fatalf("tables after restore: %s, want meta,t", got)
	}
	if st, ok := mysqlFixture.state(t, tg, ""); st != "n=2 rows=2" || !ok {
		t.Fatalf("state after restore: %s (consistent %v)", st, ok)
	}
	mysqlNoSides(t, name)
}

// TestMySQLRestoreDroppedDatabase: a database dropped since the snapshot
// is made again, with its character set.
func TestMySQLRestoreDroppedDatabase(t *testing.T) {
	mysqlRequire(t)
	ctx := context.Background()
	tg := mysqlFixture.setup(t, "")
	name := mysqlName(tg)
	admin := mysqlDB(t, "")
	mysqlExec(t, admin, "ALTER DATABASE "+name+" CHARACTER SET latin1 COLLATE latin1_swedish_ci")
	treetest.Must(t, mysqlFixture.write(t, tg, ""))
	b := &backends.MySQL{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	mysqlExec(t, admin, "DROP DATABASE "+name)
	if err := b.Check(ctx, tg, ""); !errors.Is(err, config.ErrTarget) {
		t.Fatalf("Check of a dropped database: %v", err)
	}
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if st, ok := mysqlFixture.state(t, tg, ""); st != "n=2 rows=2" || !ok {
		t.Fatalf("state after restore: %s (consistent %v)", st, ok)
	}
	var cs string
	treetest.Must(t, admin.QueryRow("SELECT DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&cs))
	if cs != "latin1" {
		t.Errorf("the database comes back with character set %s, want latin1", cs)
	}
	mysqlNoSides(t, name)
}

func mysqlNoSides(t *testing.T, name string) {
	t.Helper()
	var n int
	treetest.Must(t, mysqlDB(t, "").QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE ?",
		name[:20]+"%snapback%").Scan(&n))
	if n != 0 {
		t.Fatalf("%d side schemas left after restore", n)
	}
}

// TestMySQLRestoreUnderWriter: a restore while an application keeps
// writing waits for its transactions, swaps between two of them, and
// leaves one consistent state: the snapshot's, plus what was written after.
func TestMySQLRestoreUnderWriter(t *testing.T) {
	mysqlRequire(t)
	ctx := context.Background()
	tg := mysqlFixture.setup(t, "")
	treetest.Must(t, mysqlFixture.write(t, tg, ""))
	b := &backends.MySQL{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	for i := 0; i < 20; i++ {
		treetest.Must(t, mysqlFixture.write(t, tg, ""))
	}
	db := mysqlDB(t, mysqlName(tg))
	mysqlExec(t, db, "CREATE TABLE later (a INT)")
	var stop atomic.Bool
	var writes, failures atomic.Int64
	var lastErr atomic.Value
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if err := mysqlFixture.write(t, tg, ""); err != nil {
				failures.Add(1)
				lastErr.Store(err.Error())
			} else {
				writes.Add(1)
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	err := b.Restore(ctx, tg, "", payload)
	time.Sleep(20 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	treetest.Must(t, err)
	t.Logf("%d writes, %d failed (last: %v)", writes.Load(), failures.Load(), lastErr.Load())
	st, ok := mysqlFixture.state(t, tg, "")
	if !ok {
		t.Fatalf("after a restore under a writer: %s, inconsistent", st)
	}
	if _, err := db.Exec("SELECT * FROM later"); err == nil {
		t.Fatal("a table made after the snapshot survived the restore")
	}
}

// TestMySQLLongName: a database with a name of MySQL's 64 characters
// restores through side schemas of hashed names.
func TestMySQLLongName(t *testing.T) {
	mysqlRequire(t)
	ctx := context.Background()
	tg, name := mysqlNewTargetPad(t, 64)
	db := mysqlDB(t, name)
	mysqlExec(t, db, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)")
	b := &backends.MySQL{}
	treetest.Must(t, b.Check(ctx, tg, ""))
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	mysqlExec(t, db, "INSERT INTO t VALUES (2)", "CREATE TABLE later (a INT)")
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	var n, later int
	treetest.Must(t, db.QueryRow("SELECT COUNT(*) FROM t").Scan(&n))
	treetest.Must(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'later'", name).Scan(&later))
	if n != 1 || later != 0 {
		t.Fatalf("after restore: %d rows, later table %d; want 1, 0", n, later)
	}
	mysqlNoSides(t, name)
}

// TestMySQLInterruptedRestore: a restore whose connection is killed in
// the middle of loading rows, or whose context is cancelled, leaves the
// database as it was; the next restore cleans up and finishes the job.
func TestMySQLInterruptedRestore(t *testing.T) {
	mysqlRequire(t)
	ctx := context.Background()
	tg := mysqlFixture.setup(t, "")
	name := mysqlName(tg)
	db := mysqlDB(t, name)
	treetest.Must(t, mysqlFixture.write(t, tg, ""))
	mysqlBig(t, db)
	b := &backends.MySQL{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	want, _ := mysqlFixture.state(t, tg, "")
	treetest.Must(t, mysqlFixture.write(t, tg, ""))
	mysqlExec(t, db, "DELETE FROM big WHERE id > 100", "CREATE TABLE later (a INT) ENGINE=InnoDB")
	changed, _ := mysqlFixture.state(t, tg, "")
	bigCount := func() int {
		var n int
		treetest.Must(t, db.QueryRow("SELECT COUNT(*) FROM big").Scan(&n))
		return n
	}

	// Kill the loading connection from another one.
	admin := mysqlDB(t, "")
	done := make(chan error, 1)
	go func() { done <- b.Restore(ctx, tg, "", payload) }()
	killed := false
	for !killed {
		select {
		case err := <-done:
			t.Fatalf("restore ended (%v) before its load could be killed", err)
		default:
		}
		var id int64
		err := admin.QueryRow("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND INFO LIKE 'INSERT INTO%' LIMIT 1", name+"_snapback_new").Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			time.Sleep(time.Millisecond)
			continue
		}
		treetest.Must(t, err)
		mysqlExec(t, admin, fmt.Sprintf("KILL %d", id))
		killed = true
	}
	if err := <-done; err == nil {
		t.Fatal("a restore whose connection was killed succeeded")
	} else {
		t.Logf("killed restore: %v", err)
	}
	if st, _ := mysqlFixture.state(t, tg, ""); st != changed || bigCount() != 100 {
		t.Fatalf("after a killed restore: %s, big %d rows; want %s, 100 rows (as before)", st, bigCount(), changed)
	}

	// Cancel another one mid-load (its own load: statements of the killed
	// one may still be running, on older connections).
	var since int64
	treetest.Must(t, admin.QueryRow("SELECT MAX(ID) FROM information_schema.PROCESSLIST").Scan(&since))
	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- b.Restore(cctx, tg, "", payload) }()
	for {
		var id int64
		err := admin.QueryRow("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND INFO LIKE 'INSERT INTO%' AND ID > ? LIMIT 1", name+"_snapback_new", since).Scan(&id)
		if err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled restore succeeded")
	}
	if st, _ := mysqlFixture.state(t, tg, ""); st != changed || bigCount() != 100 {
		t.Fatalf("after a cancelled restore: %s, big %d rows; want %s, 100 rows (as before)", st, bigCount(), changed)
	}
	var sides int
	treetest.Must(t, admin.QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name+"_snapback_new").Scan(&sides))
	if sides != 1 {
		t.Fatal("an interrupted restore left no side schema: the test interrupted nothing")
	}

	// Leftovers of a restore interrupted after its swap, too.
	mysqlExec(t, admin, "CREATE DATABASE IF NOT EXISTS "+name+"_snapback_old", "CREATE TABLE "+name+"_snapback_old.junk (a INT)")
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if st, ok := mysqlFixture.state(t, tg, ""); st != want || !ok || bigCount() != 64000 {
		t.Fatalf("after the next restore: %s (consistent %v), big %d rows; want %s, 64000 rows", st, ok, bigCount(), want)
	}
	var later int
	treetest.Must(t, admin.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'later'", name).Scan(&later))
	if later != 0 {
		t.Fatal("a table made after the snapshot survived the restore")
	}
	mysqlNoSides(t, name)
}

// mysqlBig adds a table of 64,000 rows of 1 KB: enough that loading it
// takes a while.
func mysqlBig(t testing.TB, db *sql.DB) {
	t.Helper()
	mysqlExec(t, db, "CREATE TABLE big (id INT PRIMARY KEY, pad VARCHAR(2000), KEY (pad(20))) ENGINE=InnoDB")
	var sb strings.Builder
	sb.WriteString("INSERT INTO big VALUES ")
	for i := 1; i <= 1000; i++ {
		if i > 1 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "(%d, REPEAT('%c', 1000))", i, 'A'+i%26)
	}
	mysqlExec(t, db, sb.String())
	for n := 1000; n < 64000; n *= 2 {
		mysqlExec(t, db, fmt.Sprintf("INSERT INTO big SELECT id + %d, pad FROM big", n))
	}
}

// mysqlRestoreHelper is the process TestMySQLKilledRestore kills (TestMain
// runs it when SNAPBACK_MYSQL_HELPER_DSN is set): it restores the payload
// SNAPBACK_MYSQL_HELPER_DIR to the target SNAPBACK_MYSQL_HELPER_DSN.
func mysqlRestoreHelper(dsn string) int {
	err := (&backends.MySQL{}).Restore(context.Background(), backends.Target{Backend: "mysql", DSN: dsn}, "", os.Getenv("SNAPBACK_MYSQL_HELPER_DIR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestMySQLKilledRestore: a process restoring is SIGKILLed at random
// moments; each time the database holds either its state before the
// restore or the snapshot's, whole, and the next restore finishes the job.
func TestMySQLKilledRestore(t *testing.T) {
	mysqlRequire(t)
	ctx := context.Background()
	tg := mysqlFixture.setup(t, "")
	name := mysqlName(tg)
	db := mysqlDB(t, name)
	treetest.Must(t, mysqlFixture.write(t, tg, ""))
	mysqlBig(t, db)
	b := &backends.MySQL{}
	payload := t.TempDir()
	treetest.Must(t, b.Snapshot(ctx, tg, "", payload))
	state := func() string {
		st, ok := mysqlFixture.state(t, tg, "")
		var big, bytes, later int
		treetest.Must(t, db.QueryRow("SELECT COUNT(*), COALESCE(SUM(LENGTH(pad)), 0) FROM big").Scan(&big, &bytes))
		treetest.Must(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'later'", name).Scan(&later))
		return fmt.Sprintf("%s consistent=%v big=%d/%d later=%d", st, ok, big, bytes, later)
	}
	want := state()
	change := func() string {
		treetest.Must(t, mysqlFixture.write(t, tg, ""))
		mysqlExec(t, db, "DELETE FROM big WHERE id > 100", "CREATE TABLE IF NOT EXISTS later (a INT)")
		return state()
	}
	child := func(kill time.Duration) error {
		cmd := exec.Command(os.Args[0], "-test.run", "^$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SNAPBACK_MYSQL_HELPER_DSN="+tg.DSN, "SNAPBACK_MYSQL_HELPER_DIR="+payload)
		treetest.Must(t, cmd.Start())
		if kill > 0 {
			time.AfterFunc(kill, func() { cmd.Process.Kill() }) // fails only if it has exited
		}
		return cmd.Wait()
	}
	change()
	start := time.Now()
	treetest.Must(t, child(0))
	full := time.Since(start)
	if got := state(); got != want {
		t.Fatalf("after a restore by the child: %s, want %s", got, want)
	}
	killed, done := 0, 0
	for i := 0; i < 6; i++ {
		before := change()
		at := rand.Int64N(int64(full))
		if i%2 == 1 { // near the end: around the swap
			at = int64(full)*8/10 + rand.Int64N(int64(full)/4)
		}
		if child(time.Duration(at)) != nil {
			killed++
		}
		// The server finishes the statement a killed process was running
		// (maybe the swap): look once it has.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			var running int
			treetest.Must(t, db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
				WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Sleep' AND (DB LIKE ? OR INFO LIKE ?)`, name+"%", "%"+name+"%").Scan(&running))
			if running == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the killed restore's statements still run after a minute")
			}
		}
		switch got := state(); got {
		case want:
			done++
		case before:
		default:
			t.Fatalf("after a restore killed: %s; want %s (before) or %s (restored)", got, before, want)
		}
	}
	t.Logf("a restore takes %v; %d of 6 killed, %d found restored", full, killed, done)
	treetest.Must(t, b.Restore(ctx, tg, "", payload))
	if got := state(); got != want {
		t.Fatalf("after the next restore: %s, want %s", got, want)
	}
	mysqlNoSides(t, name)
}

// TestMySQLCheck: the URL form of the dsn works; Check refuses a table
// that cannot be snapshotted consistently, and a snapshot does too.
func TestMySQLCheck(t *testing.T) {
	mysqlRequire(t)
	ctx := context.Background()
	tg, name := mysqlNewTarget(t)
	cfg := mysqlBase(t)
	b := &backends.MySQL{}
	url := backends.Target{Backend: "mysql", DSN: fmt.Sprintf("mysql://%s:%s@%s/%s", cfg.User, cfg.Passwd, cfg.Addr, name)}
	treetest.Must(t, b.Check(ctx, url, ""))
	mysqlExec(t, mysqlDB(t, name), "CREATE TABLE old_style (a INT) ENGINE=MyISAM")
	err := b.Check(ctx, tg, "")
	if !errors.Is(err, config.ErrTarget) || !strings.Contains(err.Error(), "old_style") {
		t.Fatalf("Check with a MyISAM table: %v", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("Check's error is more than one line: %q", err)
	}
	if err := b.Snapshot(ctx, tg, "", t.TempDir()); !errors.Is(err, config.ErrTarget) {
		t.Fatalf("Snapshot with a MyISAM table: %v", err)
	}
	// An account that may not see the database.
	user := fmt.Sprintf("sbtest_%d", rand.IntN(1e9))
	admin := mysqlDB(t, "")
	// Its password has the characters DSNs use; the server's answer says
	// it got in (access to the database denied, not the password).
	const pw = "p@ss/w:rd?#%"
	mysqlExec(t, admin, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+pw+"'")
	t.Cleanup(func() { mysqlExec(t, admin, "DROP USER '"+user+"'@'%'") })
	for _, dsn := range []string{
		fmt.Sprintf("%s:%s@tcp(%s)/%s", user, pw, cfg.Addr, name),
		(&neturl.URL{Scheme: "mysql", User: neturl.UserPassword(user, pw), Host: cfg.Addr, Path: "/" + name}).String(),
	} {
		err := b.Check(ctx, backends.Target{Backend: "mysql", DSN: dsn}, "")
		if !errors.Is(err, config.ErrTarget) || !strings.Contains(err.Error(), "to database") {
			t.Errorf("Check as an account without privileges (%s): %v", dsn, err)
		}
	}
	for _, bad := range mysqlFixture.bad(t, "") {
		if err := b.Check(ctx, bad, ""); err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "target") {
			t.Errorf("Check(%s): %v: want one line naming the target", bad.DSN, err)
		}
	}
}

// A restore refuses a payload without its manifest (an interrupted
// snapshot).
func TestMySQLRestoreIncomplete(t *testing.T) {
	mysqlRequire(t)
	tg, _ := mysqlNewTarget(t)
	dir := t.TempDir()
	treetest.Must(t, os.WriteFile(filepath.Join(dir, "t0000.rows"), nil, 0o600))
	if err := (&backends.MySQL{}).Restore(context.Background(), tg, "", dir); err == nil {
		t.Fatal("restored a payload without a manifest")
	}
}

// BenchmarkMySQL snapshots and restores the database named by
// SNAPBACK_BENCH_MYSQL_DB (scripts/bench-mysql.sh builds one) and reports
// the seconds of each.
func BenchmarkMySQL(b *testing.B) {
	name := os.Getenv("SNAPBACK_BENCH_MYSQL_DB")
	if name == "" {
		b.Skip("SNAPBACK_BENCH_MYSQL_DB is not set")
	}
	cfg := mysqlBase(b)
	cfg.DBName = name
	tg := backends.Target{Backend: "mysql", DSN: cfg.FormatDSN()}
	be := &backends.MySQL{}
	ctx := context.Background()
	var snap, rest time.Duration
	var size int64
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		start := time.Now()
		treetest.Must(b, be.Snapshot(ctx, tg, "", dir))
		snap += time.Since(start)
		entries, err := os.ReadDir(dir)
		treetest.Must(b, err)
		for _, e := range entries {
			info, err := e.Info()
			treetest.Must(b, err)
			size += info.Size()
		}
		start = time.Now()
		treetest.Must(b, be.Restore(ctx, tg, "", dir))
		rest += time.Since(start)
	}
	b.ReportMetric(snap.Seconds()/float64(b.N), "snapshot-s")
	b.ReportMetric(rest.Seconds()/float64(b.N), "restore-s")
	b.ReportMetric(float64(size)/float64(b.N)/(1<<20), "payload-MiB")
}
