package backends

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
	"github.com/snapback/snapback/fsutil"
)

// MySQL snapshots one database (schema) of a MySQL or MariaDB server, named
// by the target's dsn: go-sql-driver's form user:pw@tcp(host:port)/db or
// a URL mysql://user:pw@host:port/db.
//
// # Snapshot
//
// One connection opens a REPEATABLE READ transaction WITH CONSISTENT
// SNAPSHOT and, inside it, reads every table's SHOW CREATE TABLE and its
// rows, so the payload is exactly one committed state while writers go on.
// Rows are read over the binary protocol (a prepared statement): FLOAT and
// DOUBLE arrive as their exact bits, which the text protocol rounds. Each
// table's rows go, streamed, to a file of length-prefixed values (uvarint
// length+1, 0 for NULL); manifest.json (tables, columns, row counts, CRC-32C
// of each file, views, triggers, server version) is written last,
// atomically: a payload without it is incomplete.
//
// Only InnoDB can give a consistent snapshot: Check and Snapshot refuse a
// database holding a table of another engine (MyISAM, Aria, MEMORY…), a
// sequence or a system-versioned table, naming them. Views and triggers are
// covered; stored routines and events are not (they are code, not data, and
// are left as they are).
//
// # Restore
//
// The snapshot is loaded into a side schema, <db>_snapback_new (multi-row
// INSERTs over a few connections, foreign key checks off, strict SQL mode so
// that nothing is silently changed; secondary keys of tables outside foreign
// keys are added after the rows), then one RENAME TABLE statement (atomic,
// and crash-safe since MySQL 8.0 and MariaDB 10.6) moves the current tables
// (including those made after the snapshot) to <db>_snapback_old and the
// loaded ones into <db>; then views and triggers are put back and both side
// schemas dropped. The rename waits for transactions using the tables, and
// applications see the old tables before it and the restored ones after.
// Until the rename the database's data is untouched; after it, it is the
// snapshot's. A restore that was interrupted leaves side schemas behind,
// which the next restore drops before it starts over; both names are
// snapback's (hashed when <db> is long). A cancelled restore stops only
// before the swap; a killed one may still see its last statement, the
// swap among them, completed by the server. MySQL refuses to move a table with
// triggers to another schema, so the database's triggers are dropped just
// before the rename and the snapshot's created just after it: a crash in
// between leaves the data without triggers until the restore is run again.
//
// # Limits
//
// DDL on a table while a snapshot reads it makes the snapshot fail (InnoDB:
// "table definition has changed"). The manifest keeps DEFINER clauses as
// they are, so views and triggers of another definer need the privilege to
// set one. A single row larger than half of max_allowed_packet may fail to
// load. Grants through roles are not seen by Check.
//
// Release has nothing to free: the payload is its directory.
type MySQL struct{}

var _ Backend = (*MySQL)(nil)

const (
	mysqlManifestName = "manifest.json"
	mysqlFormat       = 1
	// mysqlStmtMax bounds one INSERT statement (and max_allowed_packet/2).
	mysqlStmtMax = 4 << 20
	// mysqlLoaders is how many connections load rows at once.
	mysqlLoaders = 3
)

// mysqlManifest describes a payload; it is written last.
type mysqlManifest struct {
	Format    int           `json:"format"`
	Server    string        `json:"server"`
	Database  string        `json:"database"`
	Charset   string        `json:"charset"`
	Collation string        `json:"collation"`
	Tables    []mysqlTable  `json:"tables"`
	Views     []mysqlObject `json:"views,omitempty"`
	Triggers  []mysqlObject `json:"triggers,omitempty"`
}

type mysqlTable struct {
	Name    string   `json:"name"`
	File    string   `json:"file"`
	Create  string   `json:"create"`
	Columns []string `json:"columns"`
	// Kinds has one letter per column: n a number (written bare), j JSON
	// (a utf8mb4 string), s anything else (a binary string).
	Kinds string `json:"kinds"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
	CRC   uint32 `json:"crc32c"`
}

type mysqlObject struct {
	Name    string `json:"name"`
	Create  string `json:"create"`
	SQLMode string `json:"sql_mode,omitempty"`
}

// mysqlTarget is a parsed target: the connection settings without a
// default database, and the database to protect.
type mysqlTarget struct {
	t   Target
	cfg *mysql.Config
	db  string
}

// Name implements Backend.
func (*MySQL) Name() string { return "mysql" }

// Available implements Backend: the driver is pure Go; whether a server
// answers is Check's business.
func (*MySQL) Available() (bool, string) { return true, "" }

func parseMySQL(t Target) (*mysqlTarget, error) {
	if t.DSN == "" {
		return nil, targetErr(t, "no dsn")
	}
	dsn := t.DSN
	if i := strings.Index(dsn, "://"); i > 0 {
		scheme := dsn[:i]
		if scheme != "mysql" && scheme != "mariadb" {
			return nil, targetErr(t, "dsn: unknown scheme %q (want mysql://)", scheme)
		}
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, targetErr(t, "dsn: %v", errors.Unwrap(err))
		}
		c := mysql.NewConfig()
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password() // no password is an empty one
		c.Net = "tcp"
		c.Addr = u.Host
		if u.Port() == "" {
			c.Addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		c.DBName = strings.TrimPrefix(u.Path, "/")
		dsn = c.FormatDSN()
		if u.RawQuery != "" {
			sep := "?"
			if strings.Contains(dsn, "?") {
				sep = "&"
			}
			dsn += sep + u.RawQuery
		}
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, targetErr(t, "dsn: %v", err)
	}
	if cfg.DBName == "" {
		return nil, targetErr(t, "the dsn names no database")
	}
	m := &mysqlTarget{t: t, cfg: cfg, db: cfg.DBName}
	cfg.DBName = ""
	cfg.ParseTime = false
	cfg.InterpolateParams = false
	cfg.MultiStatements = false
	cfg.MaxAllowedPacket = 0 // learn the server's
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	return m, nil
}

// side names the schema a restore builds in (suffix "new") or moves the
// replaced tables to ("old"), hashing long names into MySQL's 64.
func (m *mysqlTarget) side(suffix string) string {
	s := m.db + "_snapback_" + suffix
	if utf8.RuneCountInString(s) <= 64 {
		return s
	}
	sum := sha256.Sum256([]byte(m.db))
	tail := "_" + hex.EncodeToString(sum[:4]) + "_snapback_" + suffix
	r := []rune(m.db)
	return string(r[:64-len(tail)]) + tail
}

func mysqlIdent(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// open connects one session with the settings every statement here
// relies on. Errors are target errors: the server or the account is wrong.
func (m *mysqlTarget) open(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	conn, err := db.Conn(ctx)
	if err == nil {
		err = conn.PingContext(ctx)
	}
	if err != nil {
		if conn != nil {
			conn.Close() // broken anyway
		}
		var me *mysql.MySQLError
		if errors.As(err, &me) {
			return nil, targetErr(m.t, "server %s: %s", m.cfg.Addr, me.Message)
		}
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, targetErr(m.t, "cannot reach the server at %s: %v", m.cfg.Addr, err)
	}
	for _, q := range []string{
		"SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,ALLOW_INVALID_DATES'",
		"SET SESSION time_zone = '+00:00'",
		"SET SESSION sql_quote_show_create = 1",
		"SET SESSION foreign_key_checks = 0",
		"SET NAMES utf8mb4",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			conn.Close() // unusable
			return nil, fmt.Errorf("mysql %s: %s: %w", m.db, q, err)
		}
	}
	return conn, nil
}

func (m *mysqlTarget) connect() *sql.DB {
	c, _ := mysql.NewConnector(m.cfg) // the config was parsed and checked
	return sql.OpenDB(c)
}

// Check implements Backend: the dsn parses and names a database, the
// server answers, the account gets in, the database exists, holds only
// what a snapshot covers, and the account has what snapshot and restore
// need. It changes nothing.
func (*MySQL) Check(ctx context.Context, t Target, root string) error {
	m, err := parseMySQL(t)
	if err != nil {
		return err
	}
	db := m.connect()
	defer db.Close()
	conn, err := m.open(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close()
	return m.check(ctx, conn)
}

// check runs the database-level checks of Check on an open session.
func (m *mysqlTarget) check(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "USE "+mysqlIdent(m.db)); err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) {
			return targetErr(m.t, "%s", me.Message)
		}
		return fmt.Errorf("mysql %s: %w", m.db, err)
	}
	tables, err := m.objects(ctx, conn, m.db)
	if err != nil {
		return err
	}
	var bad []string
	views := false
	for _, o := range tables {
		switch {
		case o.kind == "VIEW":
			views = true
		case o.kind != "BASE TABLE":
			bad = append(bad, fmt.Sprintf("%s (%s)", o.name, strings.ToLower(o.kind)))
		case !strings.EqualFold(o.engine, "InnoDB"):
			bad = append(bad, fmt.Sprintf("%s (%s)", o.name, o.engine))
		}
	}
	if len(bad) > 0 {
		return targetErr(m.t, "only InnoDB tables can be snapshotted consistently: %s", strings.Join(bad, ", "))
	}
	var triggers int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?", m.db).Scan(&triggers); err != nil {
		return fmt.Errorf("mysql %s: %w", m.db, err)
	}
	need := []string{"SELECT", "INSERT", "CREATE", "DROP", "ALTER"}
	if views {
		need = append(need, "SHOW VIEW", "CREATE VIEW")
	}
	if triggers > 0 {
		need = append(need, "TRIGGER")
	}
	for _, schema := range []string{m.db, m.side("new"), m.side("old")} {
		missing, err := m.missingPrivileges(ctx, conn, schema, need)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return targetErr(m.t, "the account lacks %s on %s", strings.Join(missing, ", "), mysqlIdent(schema))
		}
	}
	return nil
}

// missingPrivileges lists what the account lacks on schema among need,
// from its global and schema-level grants (grants through roles are not
// seen: they count as missing).
func (m *mysqlTarget) missingPrivileges(ctx context.Context, conn *sql.Conn, schema string, need []string) ([]string, error) {
	const grantee = `CONCAT("'", SUBSTRING_INDEX(CURRENT_USER(), '@', 1), "'@'", SUBSTRING_INDEX(CURRENT_USER(), '@', -1), "'")`
	rows, err := conn.QueryContext(ctx, `SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = `+grantee+`
		UNION SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = `+grantee+` AND ? LIKE TABLE_SCHEMA`, schema)
	if err != nil {
		return nil, fmt.Errorf("mysql %s: privileges: %w", m.db, err)
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("mysql %s: privileges: %w", m.db, err)
		}
		have[strings.ToUpper(p)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql %s: privileges: %w", m.db, err)
	}
	var missing []string
	for _, p := range need {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

type mysqlObj struct{ name, kind, engine string }

// objects lists a schema's tables and views.
func (m *mysqlTarget) objects(ctx context.Context, conn *sql.Conn, schema string) ([]mysqlObj, error) {
	rows, err := conn.QueryContext(ctx, "SELECT TABLE_NAME, TABLE_TYPE, COALESCE(ENGINE, '') FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME", schema)
	if err != nil {
		return nil, fmt.Errorf("mysql %s: list tables: %w", m.db, err)
	}
	defer rows.Close()
	var out []mysqlObj
	for rows.Next() {
		var o mysqlObj
		if err := rows.Scan(&o.name, &o.kind, &o.engine); err != nil {
			return nil, fmt.Errorf("mysql %s: list tables: %w", m.db, err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql %s: list tables: %w", m.db, err)
	}
	return out, nil
}

// Snapshot implements Backend.
func (*MySQL) Snapshot(ctx context.Context, t Target, root, dir string) error {
	m, err := parseMySQL(t)
	if err != nil {
		return err
	}
	db := m.connect()
	defer db.Close()
	conn, err := m.open(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := m.check(ctx, conn); err != nil {
		return err
	}
	if err := m.snapshot(ctx, conn, dir); err != nil {
		return fmt.Errorf("snapshot mysql %s: %w", m.db, err)
	}
	return nil
}

func (m *mysqlTarget) snapshot(ctx context.Context, conn *sql.Conn, dir string) error {
	man := mysqlManifest{Format: mysqlFormat, Database: m.db}
	if err := conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&man.Server); err != nil {
		return err
	}
	if err := conn.QueryRowContext(ctx, "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", m.db).Scan(&man.Charset, &man.Collation); err != nil {
		return err
	}
	for _, q := range []string{
		"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
		"START TRANSACTION WITH CONSISTENT SNAPSHOT",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	// Read-only: nothing to keep. A failed rollback dies with the session.
	defer conn.ExecContext(context.Background(), "ROLLBACK")
	objs, err := m.objects(ctx, conn, m.db)
	if err != nil {
		return err
	}
	// Opening each table now holds its metadata lock to the end of the
	// transaction: no DDL changes a table between its definition and rows.
	for _, o := range objs {
		if o.kind == "VIEW" {
			continue
		}
		if o.kind != "BASE TABLE" || !strings.EqualFold(o.engine, "InnoDB") {
			return targetErr(m.t, "%s is a %s %s, not an InnoDB table: it cannot be snapshotted consistently", mysqlIdent(o.name), o.engine, strings.ToLower(o.kind))
		}
		if _, err := conn.ExecContext(ctx, "SELECT 1 FROM "+mysqlIdent(m.db)+"."+mysqlIdent(o.name)+" LIMIT 0"); err != nil {
			return fmt.Errorf("open %s: %w", o.name, err)
		}
	}
	for i, o := range objs {
		if o.kind == "VIEW" {
			var name, create, cs, coll string
			if err := conn.QueryRowContext(ctx, "SHOW CREATE VIEW "+mysqlIdent(m.db)+"."+mysqlIdent(o.name)).Scan(&name, &create, &cs, &coll); err != nil {
				return fmt.Errorf("view %s: %w", o.name, err)
			}
			man.Views = append(man.Views, mysqlObject{Name: o.name, Create: create})
			continue
		}
		tb := mysqlTable{Name: o.name, File: fmt.Sprintf("t%04d.rows", i)}
		var name string
		if err := conn.QueryRowContext(ctx, "SHOW CREATE TABLE "+mysqlIdent(m.db)+"."+mysqlIdent(o.name)).Scan(&name, &tb.Create); err != nil {
			return fmt.Errorf("table %s: %w", o.name, err)
		}
		if err := m.columns(ctx, conn, &tb); err != nil {
			return err
		}
		man.Tables = append(man.Tables, tb)
	}
	trig, err := m.triggers(ctx, conn)
	if err != nil {
		return err
	}
	man.Triggers = trig
	// Values travel as the bytes stored, with no conversion.
	if _, err := conn.ExecContext(ctx, "SET NAMES binary"); err != nil {
		return err
	}
	for i := range man.Tables {
		if err := m.dumpTable(ctx, conn, &man.Tables[i], dir); err != nil {
			return fmt.Errorf("table %s: %w", man.Tables[i].Name, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	data, err := json.MarshalIndent(man, "", "\t")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, mysqlManifestName), data, 0o600)
}

// columns fills in the columns a table's rows are read and written by:
// every stored column (generated ones are computed again on insert,
// invisible ones are named), and how each value is written back.
func (m *mysqlTarget) columns(ctx context.Context, conn *sql.Conn, tb *mysqlTable) error {
	rows, err := conn.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, EXTRA FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, m.db, tb.Name)
	if err != nil {
		return fmt.Errorf("columns of %s: %w", tb.Name, err)
	}
	defer rows.Close()
	var kinds strings.Builder
	for rows.Next() {
		var name, typ, extra string
		if err := rows.Scan(&name, &typ, &extra); err != nil {
			return fmt.Errorf("columns of %s: %w", tb.Name, err)
		}
		extra = strings.ToUpper(extra)
		if strings.Contains(extra, "VIRTUAL") || strings.Contains(extra, "STORED GENERATED") || strings.Contains(extra, "PERSISTENT") {
			continue
		}
		tb.Columns = append(tb.Columns, name)
		switch strings.ToLower(typ) {
		case "tinyint", "smallint", "mediumint", "int", "integer", "bigint",
			"decimal", "numeric", "float", "double", "real", "year":
			kinds.WriteByte('n')
		case "json":
			kinds.WriteByte('j')
		default:
			kinds.WriteByte('s')
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("columns of %s: %w", tb.Name, err)
	}
	tb.Kinds = kinds.String()
	return nil
}

func (m *mysqlTarget) triggers(ctx context.Context, conn *sql.Conn) ([]mysqlObject, error) {
	rows, err := conn.QueryContext(ctx, "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? ORDER BY EVENT_OBJECT_TABLE, ACTION_ORDER", m.db)
	if err != nil {
		return nil, fmt.Errorf("triggers: %w", err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("triggers: %w", err)
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("triggers: %w", err)
	}
	var out []mysqlObject
	for _, n := range names {
		r, err := conn.QueryContext(ctx, "SHOW CREATE TRIGGER "+mysqlIdent(m.db)+"."+mysqlIdent(n))
		if err != nil {
			return nil, fmt.Errorf("trigger %s: %w", n, err)
		}
		cols, _ := r.Columns() // the query succeeded
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		o := mysqlObject{Name: n}
		if r.Next() {
			err = r.Scan(ptrs...)
			o.SQLMode, o.Create = vals[1].String, vals[2].String // Trigger, sql_mode, SQL Original Statement, …
		}
		r.Close()
		if err != nil || o.Create == "" {
			return nil, fmt.Errorf("trigger %s: %v", n, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// dumpTable streams a table's rows, read over the binary protocol, into
// its file.
func (m *mysqlTarget) dumpTable(ctx context.Context, conn *sql.Conn, tb *mysqlTable, dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, tb.File), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close() // closed and checked below; this is for errors
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	cw := &mysqlCounter{w: io.MultiWriter(f, crc)}
	w := bufio.NewWriterSize(cw, 1<<20)
	cols := make([]string, len(tb.Columns))
	for i, c := range tb.Columns {
		cols[i] = mysqlIdent(c)
	}
	q := "SELECT " + strings.Join(cols, ", ") + " FROM " + mysqlIdent(m.db) + "." + mysqlIdent(tb.Name)
	if len(cols) == 0 {
		q = "SELECT 1 FROM " + mysqlIdent(m.db) + "." + mysqlIdent(tb.Name)
	}
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(driver.ConnPrepareContext)
		if !ok {
			return fmt.Errorf("mysql driver cannot prepare (%T)", dc)
		}
		st, err := pc.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		defer st.Close() // the rows are read; a close error loses nothing
		rows, err := st.(driver.StmtQueryContext).QueryContext(ctx, nil)
		if err != nil {
			return err
		}
		defer rows.Close()
		dest := make([]driver.Value, len(rows.Columns()))
		var num [binary.MaxVarintLen64]byte
		var scratch []byte
		for {
			if err := rows.Next(dest); err == io.EOF {
				break
			} else if err != nil {
				return err
			}
			tb.Rows++
			if len(cols) == 0 {
				continue
			}
			for _, v := range dest {
				var b []byte
				switch v := v.(type) {
				case nil:
					w.WriteByte(0)
					continue
				case []byte:
					b = v
				case int64:
					b = strconv.AppendInt(scratch[:0], v, 10)
				case uint64:
					b = strconv.AppendUint(scratch[:0], v, 10)
				case float32:
					// As a double, exact: no second rounding on the way back.
					b = strconv.AppendFloat(scratch[:0], float64(v), 'g', -1, 64)
				case float64:
					b = strconv.AppendFloat(scratch[:0], v, 'g', -1, 64)
				default:
					return fmt.Errorf("unexpected value of type %T", v)
				}
				n := binary.PutUvarint(num[:], uint64(len(b))+1)
				w.Write(num[:n])
				w.Write(b)
				if cap(b) > cap(scratch) {
					scratch = b
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	tb.Bytes, tb.CRC = cw.n, crc.Sum32()
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

type mysqlCounter struct {
	w io.Writer
	n int64
}

func (c *mysqlCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Restore implements Backend.
func (*MySQL) Restore(ctx context.Context, t Target, root, dir string) error {
	m, err := parseMySQL(t)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, mysqlManifestName))
	if err != nil {
		return fmt.Errorf("restore mysql %s: the snapshot is incomplete: %w", m.db, err)
	}
	var man mysqlManifest
	if err := json.Unmarshal(data, &man); err != nil {
		return fmt.Errorf("restore mysql %s: manifest: %w", m.db, err)
	}
	if man.Format != mysqlFormat {
		return fmt.Errorf("restore mysql %s: manifest format %d, want %d", m.db, man.Format, mysqlFormat)
	}
	if man.Database != m.db {
		return targetErr(t, "the snapshot is of database %q, the dsn names %q", man.Database, m.db)
	}
	db := m.connect()
	defer db.Close()
	conn, err := m.open(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := m.restore(ctx, db, conn, &man, dir); err != nil {
		return fmt.Errorf("restore mysql %s: %w", m.db, err)
	}
	return nil
}

func (m *mysqlTarget) restore(ctx context.Context, db *sql.DB, conn *sql.Conn, man *mysqlManifest, dir string) error {
	newS, oldS := m.side("new"), m.side("old")
	charset := " CHARACTER SET " + man.Charset + " COLLATE " + man.Collation
	for _, q := range []string{
		// A database dropped since the snapshot is made again.
		"CREATE DATABASE IF NOT EXISTS " + mysqlIdent(m.db) + charset,
		// Leftovers of an interrupted restore: the database itself is
		// whole (the swap is one statement), these are scratch.
		"DROP DATABASE IF EXISTS " + mysqlIdent(newS),
		"DROP DATABASE IF EXISTS " + mysqlIdent(oldS),
		"CREATE DATABASE " + mysqlIdent(newS) + charset,
		"CREATE DATABASE " + mysqlIdent(oldS) + charset,
		"USE " + mysqlIdent(newS),
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	// Secondary keys are added after the rows where they can be: building
	// an index by sorting is much faster than growing it row by row.
	// Tables in a foreign key keep theirs.
	var all strings.Builder
	for _, tb := range man.Tables {
		all.WriteString(tb.Create)
	}
	later := make([][]string, len(man.Tables))
	for i, tb := range man.Tables {
		create := tb.Create
		if !strings.Contains(create, "FOREIGN KEY") && !strings.Contains(all.String(), "REFERENCES "+mysqlIdent(tb.Name)) {
			create, later[i] = mysqlSplitKeys(create)
		}
		_, err := conn.ExecContext(ctx, create)
		if err != nil && later[i] != nil {
			// Some key the table needs from the start (an AUTO_INCREMENT
			// column's): it keeps them all.
			later[i] = nil
			_, err = conn.ExecContext(ctx, tb.Create)
		}
		if err != nil {
			return fmt.Errorf("create %s: %w", tb.Name, err)
		}
	}
	if err := m.load(ctx, db, man, dir, newS); err != nil {
		return err
	}
	for i, keys := range later {
		if len(keys) == 0 {
			continue
		}
		q := "ALTER TABLE " + mysqlIdent(man.Tables[i].Name) + " ADD " + strings.Join(keys, ", ADD ")
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("keys of %s: %w", man.Tables[i].Name, err)
		}
	}

	// The swap. MySQL refuses to move a table with triggers to another
	// schema: they go first, and come back from the snapshot after. From
	// here on a cancellation would only leave work half done: it waits.
	ctx = context.WithoutCancel(ctx)
	if _, err := conn.ExecContext(ctx, "USE "+mysqlIdent(m.db)); err != nil {
		return err
	}
	rows, err := conn.QueryContext(ctx, "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?", m.db)
	if err != nil {
		return err
	}
	var drops []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		drops = append(drops, "DROP TRIGGER IF EXISTS "+mysqlIdent(m.db)+"."+mysqlIdent(n))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	cur, err := m.objects(ctx, conn, m.db)
	if err != nil {
		return err
	}
	snapTables, snapViews := map[string]bool{}, map[string]bool{}
	for _, tb := range man.Tables {
		snapTables[tb.Name] = true
	}
	for _, v := range man.Views {
		snapViews[v.Name] = true
	}
	var renames []string
	for _, o := range cur {
		switch {
		case o.kind != "VIEW":
			renames = append(renames, mysqlIdent(m.db)+"."+mysqlIdent(o.name)+" TO "+mysqlIdent(oldS)+"."+mysqlIdent(o.name))
		case snapTables[o.name] || !snapViews[o.name]:
			// Views stay in their schema; those the snapshot has not, or
			// that stand where a table comes back, go.
			drops = append(drops, "DROP VIEW IF EXISTS "+mysqlIdent(m.db)+"."+mysqlIdent(o.name))
		}
	}
	for _, tb := range man.Tables {
		renames = append(renames, mysqlIdent(newS)+"."+mysqlIdent(tb.Name)+" TO "+mysqlIdent(m.db)+"."+mysqlIdent(tb.Name))
	}
	for _, q := range drops {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	if len(renames) > 0 {
		if _, err := conn.ExecContext(ctx, "RENAME TABLE "+strings.Join(renames, ", ")); err != nil {
			return fmt.Errorf("swap: %w", err)
		}
	}
	if err := m.createViews(ctx, conn, man.Views); err != nil {
		return err
	}
	for _, tr := range man.Triggers {
		for _, q := range []string{"SET SESSION sql_mode = '" + strings.ReplaceAll(tr.SQLMode, "'", "''") + "'", tr.Create} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("trigger %s: %w", tr.Name, err)
			}
		}
	}
	for _, s := range []string{oldS, newS} {
		if _, err := conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+mysqlIdent(s)); err != nil {
			return fmt.Errorf("drop %s: %w", s, err)
		}
	}
	return nil
}

// mysqlSplitKeys takes the plain and unique secondary keys out of a SHOW
// CREATE TABLE statement (one definition a line), returning the statement
// without them and the keys.
func mysqlSplitKeys(create string) (string, []string) {
	lines := strings.Split(create, "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[len(lines)-1], ")") {
		return create, nil
	}
	var defs, keys []string
	for _, l := range lines[1 : len(lines)-1] {
		d := strings.TrimSuffix(strings.TrimSpace(l), ",")
		if strings.HasPrefix(d, "KEY ") || strings.HasPrefix(d, "UNIQUE KEY ") {
			keys = append(keys, d)
		} else {
			defs = append(defs, "  "+d)
		}
	}
	if len(keys) == 0 || len(defs) == 0 {
		return create, nil
	}
	return lines[0] + "\n" + strings.Join(defs, ",\n") + "\n" + lines[len(lines)-1], keys
}

// createViews makes the snapshot's views in the current schema, over and
// over while some wait for others they select from.
func (m *mysqlTarget) createViews(ctx context.Context, conn *sql.Conn, views []mysqlObject) error {
	for len(views) > 0 {
		var later []mysqlObject
		var lastErr error
		for _, v := range views {
			if _, err := conn.ExecContext(ctx, "DROP VIEW IF EXISTS "+mysqlIdent(m.db)+"."+mysqlIdent(v.Name)); err != nil {
				return fmt.Errorf("view %s: %w", v.Name, err)
			}
			if _, err := conn.ExecContext(ctx, v.Create); err != nil {
				later, lastErr = append(later, v), fmt.Errorf("view %s: %w", v.Name, err)
			}
		}
		if len(later) == len(views) {
			return lastErr
		}
		views = later
	}
	return nil
}

// load fills the side schema's tables from the payload: one reader makes
// multi-row INSERT statements, a few connections run them.
func (m *mysqlTarget) load(ctx context.Context, db *sql.DB, man *mysqlManifest, dir, schema string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var maxPacket int
	if err := db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		return err
	}
	limit := min(mysqlStmtMax, maxPacket/2)
	type stmt struct {
		table int
		q     string
	}
	work := make(chan stmt, mysqlLoaders)
	counts := make([]atomic.Int64, len(man.Tables))
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	fail := func(err error) {
		once.Do(func() { firstErr = err; cancel() })
	}
	for range mysqlLoaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := m.open(ctx, db)
			if err != nil {
				fail(err)
				for range work {
				}
				return
			}
			defer conn.Close()
			// unique_checks stays on: off (with foreign key checks off)
			// MariaDB takes a first INSERT into an empty table as a bulk
			// load that locks the table, and parallel ones deadlock.
			for _, q := range []string{"SET NAMES binary", "USE " + mysqlIdent(schema)} {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					fail(err)
				}
			}
			for s := range work {
				if ctx.Err() != nil {
					continue
				}
				res, err := conn.ExecContext(ctx, s.q)
				for try := 0; try < 3 && mysqlDeadlock(err); try++ {
					// InnoDB rolled the statement back whole: run it again.
					res, err = conn.ExecContext(ctx, s.q)
				}
				if err != nil {
					fail(fmt.Errorf("load %s: %w", man.Tables[s.table].Name, err))
					continue
				}
				n, _ := res.RowsAffected() // the driver always has it
				counts[s.table].Add(n)
			}
		}()
	}
	for i := range man.Tables {
		if ctx.Err() != nil {
			break
		}
		err := mysqlReadTable(&man.Tables[i], dir, limit, func(q string) bool {
			select {
			case work <- stmt{i, q}:
				return true
			case <-ctx.Done():
				return false
			}
		})
		if err != nil {
			fail(fmt.Errorf("table %s: %w", man.Tables[i].Name, err))
			break
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, tb := range man.Tables {
		if len(tb.Columns) > 0 && counts[i].Load() != tb.Rows {
			return fmt.Errorf("table %s: loaded %d rows of %d", tb.Name, counts[i].Load(), tb.Rows)
		}
	}
	return nil
}

func mysqlDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213 // ER_LOCK_DEADLOCK
}

// mysqlReadTable reads a table's file, checks it against the manifest, and
// hands out INSERT statements of about limit bytes; send returns false to
// stop.
func mysqlReadTable(tb *mysqlTable, dir string, limit int, send func(string) bool) error {
	if len(tb.Columns) == 0 {
		return nil
	}
	f, err := os.Open(filepath.Join(dir, tb.File))
	if err != nil {
		return err
	}
	defer f.Close() // read-only
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	r := bufio.NewReaderSize(io.TeeReader(f, crc), 1<<20)
	cols := make([]string, len(tb.Columns))
	for i, c := range tb.Columns {
		cols[i] = mysqlIdent(c)
	}
	head := "INSERT INTO " + mysqlIdent(tb.Name) + " (" + strings.Join(cols, ", ") + ") VALUES "
	var sb strings.Builder
	var val []byte
	var rows int64
	for {
		if _, err := r.Peek(1); err == io.EOF {
			break
		}
		if sb.Len() == 0 {
			sb.Grow(limit + limit/8)
			sb.WriteString(head)
		} else {
			sb.WriteByte(',')
		}
		sb.WriteByte('(')
		for i := range cols {
			if i > 0 {
				sb.WriteByte(',')
			}
			n, err := binary.ReadUvarint(r)
			if err != nil {
				return fmt.Errorf("%s: row %d: %w", tb.File, rows, mysqlNoEOF(err))
			}
			if n == 0 {
				sb.WriteString("NULL")
				continue
			}
			if n-1 > 1<<30 {
				return fmt.Errorf("%s: row %d: value of %d bytes", tb.File, rows, n-1)
			}
			if uint64(cap(val)) < n-1 {
				val = make([]byte, n-1)
			}
			val = val[:n-1]
			if _, err := io.ReadFull(r, val); err != nil {
				return fmt.Errorf("%s: row %d: %w", tb.File, rows, mysqlNoEOF(err))
			}
			switch tb.Kinds[i] {
			case 'n':
				if !mysqlNumber(val) {
					return fmt.Errorf("%s: row %d: %q is not a number", tb.File, rows, val)
				}
				sb.Write(val)
			case 'j':
				sb.WriteString("_utf8mb4")
				mysqlQuote(&sb, val)
			default:
				mysqlQuote(&sb, val)
			}
		}
		sb.WriteByte(')')
		rows++
		if sb.Len() >= limit {
			if !send(sb.String()) {
				return nil
			}
			sb = strings.Builder{}
		}
	}
	if sb.Len() > 0 && !send(sb.String()) {
		return nil
	}
	if rows != tb.Rows || crc.Sum32() != tb.CRC {
		return fmt.Errorf("%s: %d rows, crc %08x; the manifest says %d rows, crc %08x", tb.File, rows, crc.Sum32(), tb.Rows, tb.CRC)
	}
	return nil
}

func mysqlNoEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func mysqlNumber(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			return false
		}
	}
	return true
}

// mysqlQuote writes b as a string literal, every byte as it is (the
// session's character set is binary, so no byte starts a multi-byte
// character).
func mysqlQuote(sb *strings.Builder, b []byte) {
	sb.WriteByte('\'')
	start := 0
	for i, c := range b {
		var esc string
		switch c {
		case 0:
			esc = `\0`
		case '\'':
			esc = `\'`
		case '\\':
			esc = `\\`
		case '\n':
			esc = `\n`
		case '\r':
			esc = `\r`
		case 0x1a:
			esc = `\Z`
		default:
			continue
		}
		sb.Write(b[start:i])
		sb.WriteString(esc)
		start = i + 1
	}
	sb.Write(b[start:])
	sb.WriteByte('\'')
}

// Release implements Backend: a payload is only its directory.
func (*MySQL) Release(context.Context, Target, string, string) error { return nil }
