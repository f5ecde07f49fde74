package backends

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/snapback/snapback/config"
	"github.com/snapback/snapback/fsutil"
)

// Postgres snapshots one PostgreSQL database, named by the target's dsn (a
// postgres:// URL or a keyword DSN).
//
// # Snapshot
//
// The snapshot is a copy on the same server: CREATE DATABASE
// snapback_<hash> TEMPLATE <db> (STRATEGY FILE_COPY past 64 MiB), run from
// a session connected to <db> itself. While it copies, the server holds a
// share lock on <db> that makes new connections to it wait (not fail) until
// the copy is done: new connections are blocked for exactly the moment the
// copy needs, and nothing is left to undo if snapback dies meanwhile (no
// ALLOW_CONNECTIONS to re-enable: the lock goes with the session). A
// template copy needs every other session to leave <db>: snapback waits up
// to a second for them and never ends an application's session for a
// snapshot. When they stay (a connection pool), the snapshot falls back to
// pg_dump -Fc into the payload directory: one repeatable-read transaction,
// one committed state under a live writer. The copy itself refuses
// connections (ALLOW_CONNECTIONS false), so nothing changes it or keeps it
// from serving as a template, and carries a comment naming <db> and the
// payload directory for whoever lists the server's databases.
//
// The payload directory holds postgres.json (method, the copy's name, the
// database and its owner, the server's identity), written atomically
// before the copy is made, so that Release finds a copy even from a
// snapshot interrupted half-way; and, for the fallback, db.dump.
//
// # Restore
//
// A restore builds the whole database first, under a side name,
// <db>_snapback_new: a template copy of the snapshot's copy, or a fresh
// database filled by pg_restore. It takes the current database's owner,
// connection limit, grants, comment and per-database settings. Then one
// transaction renames <db> to <db>_snapback_old and the new one to <db>: <db>
// is never missing, and nothing created after the snapshot survives (as it
// would a pg_restore --clean). Renaming needs <db> to have no sessions: the
// restore terminates every session connected to <db> (an application's open
// connections are cut, as when its database is replaced) while the rename
// waits holding the lock that keeps new connections out; those get an error
// once the names are swapped, and reconnect to the restored database. Last,
// the old database is dropped. A database dropped since the snapshot is
// made anew, owned by its owner then. A restore cut at any point leaves <db>
// as it was or fully restored; the next Restore drops the leftovers (a
// half-built _new, an _old) first.
//
// The role needs CREATEDB and must own <db> (or be a superuser): a restore
// renames <db>, so Check refuses a role without them rather than let it
// take snapshots it could never restore. It may only terminate sessions of
// roles it is a member of, unless it has pg_signal_backend.
type Postgres struct{}

var _ Backend = (*Postgres)(nil)

const (
	pgPayloadFile = "postgres.json"
	pgDumpFile    = "db.dump"
	// pgAloneWait bounds the wait for other sessions to leave <db> before
	// a template copy; past it the snapshot falls back to pg_dump.
	pgAloneWait = time.Second
	// pgConnectTimeout bounds connecting when the dsn sets no timeout.
	pgConnectTimeout = 10 * time.Second
)

// pgPayload is postgres.json.
type pgPayload struct {
	// Method is "template" (a copy on the server) or "dump" (db.dump).
	Method string `json:"method"`
	// Snapshot names the copy (method template).
	Snapshot string `json:"snapshot,omitempty"`
	// Database is the database snapshotted, Owner its owner.
	Database string `json:"database"`
	Owner    string `json:"owner,omitempty"`
	// Server is the cluster's system identifier, when the role may read it.
	Server string `json:"server,omitempty"`
	// Complete is false while the snapshot is being made.
	Complete bool `json:"complete"`
}

// Name implements Backend.
func (*Postgres) Name() string { return "postgres" }

// Available implements Backend: the driver is pure Go, so template copies
// are always possible; the note says when the pg_dump fallback is not.
func (*Postgres) Available() (bool, string) {
	for _, tool := range []string{"pg_dump", "pg_restore"} {
		if _, err := pgTool(tool); err != nil {
			return true, "no pg_dump fallback: a snapshot fails while other sessions stay on the database (" + err.Error() + ")"
		}
	}
	return true, ""
}

// pgTool finds a PostgreSQL client program: the newest of
// /usr/lib/postgresql/*/bin first (a newer pg_dump reads older servers,
// not the reverse), then PATH.
func pgTool(name string) (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin") // the pattern is valid
	ver := func(d string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64) // not a version: sorts first
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return ver(dirs[i]) > ver(dirs[j]) })
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed (Debian: postgresql-client)", name)
	}
	return p, nil
}

// pgConfig parses the target's dsn.
func pgConfig(t Target) (*pgx.ConnConfig, error) {
	if t.DSN == "" {
		return nil, targetErr(t, "no dsn")
	}
	cfg, err := pgx.ParseConfig(t.DSN)
	if err != nil {
		return nil, targetErr(t, "dsn: %s", pgOneLine(err))
	}
	if cfg.Database == "" {
		return nil, targetErr(t, "the dsn names no database")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = pgConnectTimeout
	}
	cfg.RuntimeParams["application_name"] = "snapback"
	return cfg, nil
}

// pgOneLine is err's message on one line, for a target error.
func pgOneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// pgConnectMessage says why connecting failed, once: pgx's own message
// names the server three times ("failed to connect to `user=u
// database=d`: 127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1:
// connect: connection refused"). This one names the dsn's host, port,
// user and database (never its password) and the cause.
func pgConnectMessage(c *pgx.ConnConfig, err error) string {
	where := net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
	if strings.HasPrefix(c.Host, "/") {
		where = fmt.Sprintf("socket %s/.s.PGSQL.%d", c.Host, c.Port)
	}
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	var errno syscall.Errno
	var netErr net.Error
	cause := ""
	switch {
	case errors.As(err, &pgErr):
		cause = pgErr.Message // password authentication failed for user "x"
	case errors.As(err, &dnsErr):
		cause = "unknown host " + dnsErr.Name
	case errors.As(err, &errno):
		cause = errno.Error() // connection refused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		cause = fmt.Sprintf("no answer within %s", c.ConnectTimeout)
	default:
		// Something else: the innermost message, which says it once.
		inner := err
		for u := errors.Unwrap(inner); u != nil; u = errors.Unwrap(inner) {
			inner = u
		}
		cause = pgOneLine(inner)
	}
	return fmt.Sprintf("cannot connect to %s (user %s, database %s): %s", where, c.User, c.Database, cause)
}

// pgConnect connects to database db (the target's when empty); failing to
// is a target error.
func pgConnect(ctx context.Context, t Target, cfg *pgx.ConnConfig, db string) (*pgx.Conn, error) {
	c := cfg.Copy()
	if db != "" {
		c.Database = db
	}
	conn, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, targetErr(t, "%s", pgConnectMessage(c, err))
	}
	// A session whose client died stops within a second instead of
	// finishing a long CREATE DATABASE for no one (PostgreSQL 14+, Linux;
	// elsewhere the setting is refused and the session works as before).
	_, _ = conn.Exec(ctx, "SET client_connection_check_interval = 1000")
	return conn, nil
}

// pgMaintenance connects to a database other than the target's, from
// which the target's can be renamed, created and dropped.
func pgMaintenance(ctx context.Context, t Target, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	var last error
	for _, db := range []string{"postgres", "template1"} {
		if db == cfg.Database {
			continue
		}
		conn, err := pgConnect(ctx, t, cfg, db)
		if err == nil {
			return conn, nil
		}
		last = err
	}
	return nil, fmt.Errorf("%w (connecting to a maintenance database, postgres or template1)", last)
}

// Check implements Backend: the dsn parses, the server answers, the role
// authenticates and may connect to the database and to a maintenance
// database (restores rename the target from there).
func (*Postgres) Check(ctx context.Context, t Target, root string) error {
	cfg, err := pgConfig(t)
	if err != nil {
		return err
	}
	conn, err := pgConnect(ctx, t, cfg, "")
	if err != nil {
		return err
	}
	_, err = pgMayRestore(ctx, t, conn)
	_ = conn.Close(ctx) // nothing was changed: closing cannot lose anything
	if err != nil {
		return err
	}
	conn, err = pgMaintenance(ctx, t, cfg)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// pgEndOrphans terminates, and waits out, the sessions of an earlier
// snapback killed while working on the databases names: the server runs a
// statement on until it notices its client gone, and a CREATE DATABASE
// left running would commit after the leftovers are dropped. No live
// snapback works on them meanwhile: one target is never worked on by two
// calls at once.
func pgEndOrphans(ctx context.Context, conn *pgx.Conn, names ...string) error {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = pgIdent(n)
	}
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = 'snapback' AND pid <> pg_backend_pid()
			AND EXISTS (SELECT FROM unnest($1::text[]) q WHERE strpos(query, q) > 0)`, quoted).Scan(&n)
		if err != nil {
			return fmt.Errorf("ending the sessions of an interrupted snapback: %w", err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pgMayRestore checks that the role of conn may restore its database (and
// so copy it): renaming a database takes CREATEDB and its ownership (or a
// superuser). A snapshot that could never be restored is refused up
// front. It returns the database's owner.
func pgMayRestore(ctx context.Context, t Target, conn *pgx.Conn) (string, error) {
	var may bool
	var owner, role string
	err := conn.QueryRow(ctx, `SELECT r.rolsuper OR (r.rolcreatedb AND pg_has_role(d.datdba, 'USAGE')), pg_get_userbyid(d.datdba), current_user
		FROM pg_roles r, pg_database d WHERE r.rolname = current_user AND d.datname = current_database()`).Scan(&may, &owner, &role)
	if err != nil {
		return "", fmt.Errorf("postgres %q: reading privileges: %w", conn.Config().Database, err)
	}
	if !may {
		return "", targetErr(t, "role %s may not restore database %s: that takes CREATEDB and owning it (owner: %s), or a superuser",
			role, conn.Config().Database, owner)
	}
	return owner, nil
}

// pgServerID identifies the cluster, so that a payload is never restored
// into, or released on, another server; "" when the role may not read it.
func pgServerID(ctx context.Context, conn *pgx.Conn) string {
	var id string
	if err := conn.QueryRow(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&id); err != nil {
		return "" // not readable by this role: the check is skipped
	}
	return id
}

func (pl *pgPayload) sameServer(ctx context.Context, t Target, conn *pgx.Conn) error {
	if id := pgServerID(ctx, conn); pl.Server != "" && id != "" && id != pl.Server {
		return targetErr(t, "the snapshot was taken on another server (system identifier %s, this one is %s)", pl.Server, id)
	}
	return nil
}

func writePgPayload(dir string, pl pgPayload) error {
	b, err := json.MarshalIndent(pl, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, pgPayloadFile), append(b, '\n'), 0o644)
}

// readPgPayload reads postgres.json; ok is false when there is none.
func readPgPayload(dir string) (pl pgPayload, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, pgPayloadFile))
	if errors.Is(err, os.ErrNotExist) {
		return pl, false, nil
	}
	if err != nil {
		return pl, false, err
	}
	if err := json.Unmarshal(b, &pl); err != nil {
		return pl, false, fmt.Errorf("%s: %w", filepath.Join(dir, pgPayloadFile), err)
	}
	return pl, true, nil
}

// pgSnapName names the copy of a snapshot: the same for the same payload
// directory on the same machine (a rerun replaces its own leftover), and
// distinct across payloads.
func pgSnapName(dir string) string {
	abs, _ := filepath.Abs(dir) // an error leaves dir as given: still distinct
	host, _ := os.Hostname()    // no hostname: the directory alone
	sum := sha256.Sum256([]byte(host + "\x00" + abs))
	return "snapback_" + hex.EncodeToString(sum[:12])
}

// pgSideName is the name of <db>'s side database for suffix ("new",
// "old"), within PostgreSQL's 63 bytes: a name too long is cut and marked
// with a hash of itself, so that two long names never share a side.
func pgSideName(db, suffix string) string {
	suffix = "_snapback_" + suffix
	if len(db)+len(suffix) <= 63 {
		return db + suffix
	}
	sum := sha256.Sum256([]byte(db))
	mark := "_" + hex.EncodeToString(sum[:4])
	cut := db
	for len(cut)+len(mark)+len(suffix) > 63 {
		_, n := utf8.DecodeLastRuneInString(cut)
		cut = cut[:len(cut)-n]
	}
	return cut + mark + suffix
}

func pgIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Snapshot implements Backend.
func (*Postgres) Snapshot(ctx context.Context, t Target, root, dir string) error {
	cfg, err := pgConfig(t)
	if err != nil {
		return err
	}
	db := cfg.Database
	conn, err := pgConnect(ctx, t, cfg, "")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background()) // every statement is over by then
	pl := pgPayload{Database: db, Server: pgServerID(ctx, conn)}

	if pl.Owner, err = pgMayRestore(ctx, t, conn); err != nil {
		return err
	}
	alone, err := pgWaitAlone(ctx, conn, pgAloneWait)
	if err != nil {
		return fmt.Errorf("snapshot postgres %q: %w", db, err)
	}
	if alone {
		pl.Method, pl.Snapshot = "template", pgSnapName(dir)
		err := pgTemplateSnapshot(ctx, conn, dir, pl)
		if err == nil {
			return nil
		}
		if pgCode(err) != "55006" { // other sessions came in the meantime: fall back
			return fmt.Errorf("snapshot postgres %q: %w", db, err)
		}
	}
	pl.Method, pl.Snapshot = "dump", ""
	if err := pgDump(ctx, cfg, dir); err != nil {
		return fmt.Errorf("snapshot postgres %q: pg_dump: %w", db, err)
	}
	pl.Complete = true
	return writePgPayload(dir, pl)
}

// pgWaitAlone waits up to d for conn to be the only session on its
// database.
func pgWaitAlone(ctx context.Context, conn *pgx.Conn, d time.Duration) (bool, error) {
	deadline := time.Now().Add(d)
	// Other roles' sessions show no backend_type to us, so workers are
	// told by their lack of a role: autovacuum workers, which CREATE
	// DATABASE ends itself, do not count.
	for {
		var others int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND usesysid IS NOT NULL`).Scan(&others)
		if err != nil || others == 0 {
			return err == nil, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pgTemplateSnapshot copies conn's database to pl.Snapshot, recording the
// intent first so that Release finds the copy whatever happens next.
func pgTemplateSnapshot(ctx context.Context, conn *pgx.Conn, dir string, pl pgPayload) error {
	if err := writePgPayload(dir, pl); err != nil {
		return err
	}
	snap := pgIdent(pl.Snapshot)
	if err := pgEndOrphans(ctx, conn, pl.Snapshot); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+snap); err != nil {
		return err
	}
	strategy, err := pgStrategy(ctx, conn, pl.Database)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+snap+" TEMPLATE "+pgIdent(pl.Database)+" ALLOW_CONNECTIONS false"+strategy); err != nil {
		return err
	}
	var comment string
	err = conn.QueryRow(ctx, "SELECT format('COMMENT ON DATABASE %I IS %L', $1::text, $2::text)", pl.Snapshot,
		fmt.Sprintf("snapback snapshot of database %q, payload %s", pl.Database, dir)).Scan(&comment)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, comment); err != nil {
		return err
	}
	pl.Complete = true
	return writePgPayload(dir, pl)
}

// pgStrategy is the CREATE DATABASE option that copies template fastest:
// FILE_COPY past 64 MiB (copying files after a checkpoint: 1.4-3.3 s for
// a 1 GiB database where WAL_LOG, the default since PostgreSQL 15, took
// 5-9 s, writing it all to the WAL), WAL_LOG below (no checkpoint).
func pgStrategy(ctx context.Context, conn *pgx.Conn, template string) (string, error) {
	var s string
	err := conn.QueryRow(ctx, `SELECT CASE WHEN current_setting('server_version_num')::int >= 150000
		AND pg_database_size($1::text) > 64 << 20 THEN ' STRATEGY FILE_COPY' ELSE '' END`, template).Scan(&s)
	return s, err
}

// pgEnv is the environment of pg_dump and pg_restore for cfg, connecting
// to database db: the password goes in PGPASSWORD, never on a command line.
func pgEnv(cfg *pgx.ConnConfig, db string) []string {
	// The settings below win over the environment's (exec keeps the last
	// of duplicates), which pgx read too (PGSSLROOTCERT, PGPASSFILE, ...),
	// except a service file, which would win over them in libpq.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PGSERVICE") {
			env = append(env, kv)
		}
	}
	sslmode := "disable"
	if tc := cfg.TLSConfig; tc != nil {
		switch {
		case tc.InsecureSkipVerify && tc.VerifyPeerCertificate != nil:
			sslmode = "verify-ca"
		case tc.InsecureSkipVerify:
			sslmode = "require"
		default:
			sslmode = "verify-full"
		}
		for _, fb := range cfg.Fallbacks {
			if fb.TLSConfig == nil {
				sslmode = "prefer"
			}
		}
	}
	env = append(env,
		"PGHOST="+cfg.Host, "PGPORT="+strconv.Itoa(int(cfg.Port)), "PGUSER="+cfg.User,
		"PGDATABASE="+db, "PGSSLMODE="+sslmode,
		"PGAPPNAME=snapback", "PGCONNECT_TIMEOUT="+strconv.Itoa(int(cfg.ConnectTimeout/time.Second)))
	if cfg.Password != "" {
		env = append(env, "PGPASSWORD="+cfg.Password)
	}
	return env
}

func pgRun(ctx context.Context, env []string, tool string, args ...string) error {
	p, err := pgTool(tool)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return fmt.Errorf("%w: %s", err, msg)
		}
		return err
	}
	return nil
}

// pgDump writes db.dump: pg_dump's custom format, from one repeatable-read
// transaction; it appears only once complete and synced.
func pgDump(ctx context.Context, cfg *pgx.ConnConfig, dir string) error {
	tmp := filepath.Join(dir, pgDumpFile+".tmp")
	// pg_dump syncs the file itself (its default since PostgreSQL 12).
	if err := pgRun(ctx, pgEnv(cfg, cfg.Database), "pg_dump", "-Fc", "-f", tmp); err != nil {
		_ = os.Remove(tmp) // a partial dump is useless
		return err
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, pgDumpFile)); err != nil {
		return err
	}
	return fsutil.SyncDir(dir)
}

// pgExists reports whether database name exists.
func pgExists(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var n int
	err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n)
	return n > 0, err
}

// Restore implements Backend.
func (*Postgres) Restore(ctx context.Context, t Target, root, dir string) error {
	cfg, err := pgConfig(t)
	if err != nil {
		return err
	}
	db := cfg.Database
	pl, ok, err := readPgPayload(dir)
	if err != nil {
		return fmt.Errorf("restore postgres %q: %w", db, err)
	}
	if !ok || !pl.Complete {
		return fmt.Errorf("restore postgres %q: %s holds no complete snapshot", db, dir)
	}
	if pl.Database != db {
		return targetErr(t, "the snapshot is of database %q, the dsn names %q", pl.Database, db)
	}
	conn, err := pgMaintenance(ctx, t, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background()) // every change is committed or rolled back by then
	if err := pl.sameServer(ctx, t, conn); err != nil {
		return err
	}
	if err := pgRestore(ctx, cfg, conn, dir, pl); err != nil {
		return fmt.Errorf("restore postgres %q: %w", db, err)
	}
	return nil
}

func pgRestore(ctx context.Context, cfg *pgx.ConnConfig, conn *pgx.Conn, dir string, pl pgPayload) error {
	db, newDB, oldDB := pl.Database, pgSideName(pl.Database, "new"), pgSideName(pl.Database, "old")
	// Leftovers of an interrupted restore: its session, a half-built copy,
	// or the old database a finished swap had yet to drop.
	if err := pgEndOrphans(ctx, conn, newDB, oldDB); err != nil {
		return err
	}
	for _, side := range []string{newDB, oldDB} {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgIdent(side)); err != nil {
			return fmt.Errorf("dropping the leftover %s: %w", side, err)
		}
	}
	var oid uint32 // 0: db is gone (dropped since the snapshot), made anew
	err := conn.QueryRow(ctx, "SELECT oid FROM pg_database WHERE datname = $1", db).Scan(&oid)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	err = pgBuild(ctx, cfg, conn, dir, pl, newDB, oid != 0)
	if err == nil {
		err = pgSwap(ctx, cfg, conn, oid, db, oldDB, newDB)
	}
	if err != nil {
		if !conn.IsClosed() {
			// Best effort: the next restore drops it anyway.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_, _ = conn.Exec(dctx, "DROP DATABASE IF EXISTS "+pgIdent(newDB))
			cancel()
		}
		return err
	}
	if oid == 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE "+pgIdent(oldDB)); err != nil {
		return fmt.Errorf("restored, but dropping the old database %s failed (the next restore drops it): %w", oldDB, err)
	}
	return nil
}

// pgBuild makes newDB: the snapshot's content with the current database's
// owner, connection limit, grants, comment and settings (the owner at the
// snapshot when the database is gone).
func pgBuild(ctx context.Context, cfg *pgx.ConnConfig, conn *pgx.Conn, dir string, pl pgPayload, newDB string, exists bool) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("building %s: %w", newDB, err)
		}
	}()
	var create string
	switch pl.Method {
	case "template":
		var found bool
		if found, err = pgExists(ctx, conn, pl.Snapshot); err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("the snapshot's copy, database %s, is gone", pl.Snapshot)
		}
		if ours, err := pgIsCopy(ctx, conn, pl); err != nil || !ours {
			if err == nil {
				err = fmt.Errorf("%w: database %s is not a copy snapback made of %s: not restored from", config.ErrTarget, pl.Snapshot, pl.Database)
			}
			return err
		}
		var strategy string
		if strategy, err = pgStrategy(ctx, conn, pl.Snapshot); err != nil {
			return err
		}
		create = "CREATE DATABASE " + pgIdent(newDB) + " TEMPLATE " + pgIdent(pl.Snapshot) + strategy
	case "dump":
		if _, err := os.Stat(filepath.Join(dir, pgDumpFile)); err != nil {
			return err
		}
		like := pl.Database // encoding and locale
		if !exists {
			like = "template0"
		}
		err = conn.QueryRow(ctx, `SELECT format('CREATE DATABASE %I TEMPLATE template0 ENCODING %L LC_COLLATE %L LC_CTYPE %L',
				$2::text, pg_encoding_to_char(d.encoding), d.datcollate, d.datctype) ||
			CASE j->>'datlocprovider'
				WHEN 'i' THEN format(' LOCALE_PROVIDER icu ICU_LOCALE %L', coalesce(j->>'daticulocale', j->>'datlocale'))
				WHEN 'b' THEN format(' LOCALE_PROVIDER builtin BUILTIN_LOCALE %L', j->>'datlocale')
				ELSE '' END
			FROM pg_database d, to_jsonb(d) j WHERE d.datname = $1`, like, newDB).Scan(&create)
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown snapshot method %q", pl.Method)
	}
	template := pl.Snapshot
	if pl.Method == "dump" {
		template = "template0"
	}
	var props string
	if exists {
		// A tablespace named needs CREATE on it even when it is the template's.
		err = conn.QueryRow(ctx, `SELECT format(' OWNER %I CONNECTION LIMIT %s IS_TEMPLATE %s ALLOW_CONNECTIONS %s',
				pg_get_userbyid(d.datdba), d.datconnlimit, d.datistemplate::text, d.datallowconn::text) ||
			CASE WHEN d.dattablespace = (SELECT dattablespace FROM pg_database WHERE datname = $2) THEN ''
				ELSE format(' TABLESPACE %I', t.spcname) END
			FROM pg_database d JOIN pg_tablespace t ON t.oid = d.dattablespace WHERE d.datname = $1`, pl.Database, template).Scan(&props)
		if err != nil {
			return err
		}
	} else if pl.Owner != "" {
		props = " OWNER " + pgIdent(pl.Owner)
	}
	if _, err := conn.Exec(ctx, create+props); err != nil {
		return err
	}
	if pl.Method == "dump" {
		jobs := strconv.Itoa(min(4, runtime.NumCPU()))
		if err := pgRun(ctx, pgEnv(cfg, newDB), "pg_restore", "--exit-on-error", "-j", jobs, "-d", newDB, filepath.Join(dir, pgDumpFile)); err != nil {
			return fmt.Errorf("pg_restore: %w", err)
		}
	}
	// Grants, comment and settings of the database itself: they belong to
	// the database, not to the snapshot's content, so the current ones stay.
	rows, err := conn.Query(ctx, `SELECT s FROM (
		SELECT 1 AS k, format('REVOKE ALL ON DATABASE %I FROM PUBLIC, %I', $2::text, pg_get_userbyid(d.datdba)) AS s
			FROM pg_database d WHERE d.datname = $1 AND d.datacl IS NOT NULL
		UNION ALL
		SELECT 2, format('GRANT %s ON DATABASE %I TO %s%s', a.privilege_type, $2::text,
				CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
				CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
			FROM pg_database d, aclexplode(d.datacl) a WHERE d.datname = $1
		UNION ALL
		SELECT 3, format('COMMENT ON DATABASE %I IS %L', $2::text, c.description)
			FROM pg_database d JOIN pg_shdescription c ON c.objoid = d.oid AND c.classoid = 'pg_database'::regclass
			WHERE d.datname = $1
		UNION ALL
		SELECT 4, format('ALTER %sDATABASE %I SET %s TO %s',
				CASE WHEN r.setrole <> 0 THEN format('ROLE %I IN ', pg_get_userbyid(r.setrole)) ELSE '' END,
				$2::text, split_part(c, '=', 1),
				-- list settings are stored quoted element by element, as SET takes them
				CASE WHEN split_part(c, '=', 1) IN ('search_path', 'temp_tablespaces', 'session_preload_libraries', 'local_preload_libraries')
					THEN substr(c, strpos(c, '=') + 1) ELSE quote_literal(substr(c, strpos(c, '=') + 1)) END)
			FROM pg_database d JOIN pg_db_role_setting r ON r.setdatabase = d.oid, unnest(r.setconfig) c
			WHERE d.datname = $1
	) q ORDER BY k`, pl.Database, newDB)
	if err != nil {
		return err
	}
	stmts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// pgSwap renames db (of oid dbOID) to oldDB and newDB to db in one
// transaction. The first rename takes the lock that keeps new sessions
// out of db and waits (up to the server's five seconds) for the sessions
// inside to go, which a second connection meanwhile terminates.
func pgSwap(ctx context.Context, cfg *pgx.ConnConfig, conn *pgx.Conn, dbOID uint32, db, oldDB, newDB string) error {
	if dbOID == 0 {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgIdent(newDB)+" RENAME TO "+pgIdent(db)); err != nil {
			return fmt.Errorf("renaming %s to %s: %w", newDB, db, err)
		}
		return nil
	}
	kctx, stop := context.WithCancel(ctx)
	killed := make(chan error, 1)
	go func() { killed <- pgTerminate(kctx, cfg, conn.Config().Database, dbOID) }()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "ALTER DATABASE "+pgIdent(db)+" RENAME TO "+pgIdent(oldDB)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "ALTER DATABASE "+pgIdent(newDB)+" RENAME TO "+pgIdent(db))
		return err
	})
	stop()
	kerr := <-killed
	if err != nil {
		if kerr != nil {
			return fmt.Errorf("swapping in %s: %w (ending the sessions on %s: %v)", newDB, err, db, kerr)
		}
		return fmt.Errorf("swapping in %s: %w", newDB, err)
	}
	return nil
}

// pgTerminate terminates every session on the database of oid dbOID until
// ctx ends, and reports the last failure to.
func pgTerminate(ctx context.Context, cfg *pgx.ConnConfig, maint string, dbOID uint32) error {
	c := cfg.Copy()
	c.Database = maint
	conn, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer conn.Close(context.Background()) // it only read and signalled
	var last error
	for {
		_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datid = $1 AND pid <> pg_backend_pid() AND usesysid IS NOT NULL`, dbOID) // not autovacuum: see pgWaitAlone
		if ctx.Err() != nil {
			return last
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Release implements Backend: drops the snapshot's copy (a dump lives in
// dir alone).
func (*Postgres) Release(ctx context.Context, t Target, root, dir string) error {
	pl, ok, err := readPgPayload(dir)
	if err != nil {
		return fmt.Errorf("release postgres: %w", err)
	}
	if !ok || pl.Method != "template" || pl.Snapshot == "" {
		return nil
	}
	cfg, err := pgConfig(t)
	if err != nil {
		return err
	}
	conn, err := pgMaintenance(ctx, t, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background()) // the drop is committed or not
	if err := pl.sameServer(ctx, t, conn); err != nil {
		return err
	}
	// A killed snapshot's CREATE DATABASE may still run: end it before
	// looking, or it commits a copy after the look found none.
	if strings.HasPrefix(pl.Snapshot, "snapback_") {
		if err := pgEndOrphans(ctx, conn, pl.Snapshot); err != nil {
			return err
		}
	}
	if ours, err := pgIsCopy(ctx, conn, pl); err != nil || !ours {
		return err // gone already, or not a copy snapback made: left alone
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgIdent(pl.Snapshot)); err != nil {
		return fmt.Errorf("release postgres %q: dropping %s: %w", pl.Database, pl.Snapshot, err)
	}
	return nil
}

// pgIsCopy reports whether the database a payload names as its copy is
// one snapback made of pl.Database: postgres.json is read from the store,
// input from outside, and must not get another database dropped or
// restored from. A copy carries snapback's name and comment; one whose
// snapshot was killed between CREATE DATABASE and COMMENT (the payload
// not complete) has no comment yet, and is known by what that CREATE
// gave it: no connections allowed, and the current role its owner.
func pgIsCopy(ctx context.Context, conn *pgx.Conn, pl pgPayload) (bool, error) {
	if !strings.HasPrefix(pl.Snapshot, "snapback_") {
		return false, nil
	}
	var comment *string
	var halfMade bool
	err := conn.QueryRow(ctx, `SELECT shobj_description(oid, 'pg_database'), NOT datallowconn AND datdba = (SELECT oid FROM pg_roles WHERE rolname = current_user)
		FROM pg_database WHERE datname = $1`, pl.Snapshot).Scan(&comment, &halfMade)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if comment == nil {
		return !pl.Complete && halfMade, nil
	}
	return strings.HasPrefix(*comment, fmt.Sprintf("snapback snapshot of database %q, payload ", pl.Database)), nil
}
