//go:build linux

package main

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/snapback/snapback/internal/treetest"
)

// targetCase is one backend driven end to end through the CLI: a target
// in snapback.toml, a shell command that changes it, and a way to read
// its state.
type targetCase struct {
	capability string
	// setup makes a fresh target and returns its snapback.toml entry, the
	// command that changes it (sh -c), and how to read its state.
	setup func(t *testing.T, root string) (toml, change string, state func() string)
}

var targetCases = map[string]targetCase{
	"postgres": {capability: "postgres", setup: func(t *testing.T, root string) (string, string, func() string) {
		server := os.Getenv("SNAPBACK_TEST_POSTGRES")
		if !treetest.Require(t, "postgres", server != "", "SNAPBACK_TEST_POSTGRES is not set") {
			t.Skip("SNAPBACK_REQUIRE does not name postgres")
		}
		admin, err := sql.Open("pgx", server)
		treetest.Must(t, err)
		t.Cleanup(func() { admin.Close() })
		name := fmt.Sprintf("sbe2e_%d", os.Getpid())
		admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		_, err = admin.Exec("CREATE DATABASE " + name)
		treetest.Must(t, err)
		t.Cleanup(func() {
			admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
			rows, err := admin.Query(`SELECT datname FROM pg_database WHERE datname LIKE 'snapback\_%' AND obj_description(oid, 'pg_database') LIKE '%' || $1 || '%'`, name)
			if err == nil {
				var drop []string
				for rows.Next() {
					var d string
					rows.Scan(&d)
					drop = append(drop, d)
				}
				rows.Close()
				for _, d := range drop {
					admin.Exec("DROP DATABASE IF EXISTS " + d + " WITH (FORCE)")
				}
			}
		})
		u, err := url.Parse(server)
		treetest.Must(t, err)
		u.Path = "/" + name
		dsn := u.String()
		db, err := sql.Open("pgx", dsn)
		treetest.Must(t, err)
		t.Cleanup(func() { db.Close() })
		_, err = db.Exec(`CREATE TABLE t(v text); INSERT INTO t VALUES ('before')`)
		treetest.Must(t, err)
		db.Close()
		psql, err := exec.LookPath("psql")
		treetest.Must(t, err)
		return fmt.Sprintf("backend = \"postgres\"\ndsn = %q\n", dsn),
			fmt.Sprintf("%s -q %s -c \"UPDATE t SET v = 'after'; CREATE TABLE later(x int)\"", psql, shellQuote(dsn)),
			func() string {
				db, err := sql.Open("pgx", dsn)
				treetest.Must(t, err)
				defer db.Close()
				var v string
				var later bool
				treetest.Must(t, db.QueryRow(`SELECT string_agg(v, ','), to_regclass('later') IS NOT NULL FROM t`).Scan(&v, &later))
				return fmt.Sprintf("v=%s later=%v", v, later)
			}
	}},
	"mysql": {capability: "mysql", setup: func(t *testing.T, root string) (string, string, func() string) {
		server := os.Getenv("SNAPBACK_TEST_MYSQL")
		if !treetest.Require(t, "mysql", server != "", "SNAPBACK_TEST_MYSQL is not set") {
			t.Skip("SNAPBACK_REQUIRE does not name mysql")
		}
		admin, err := sql.Open("mysql", server)
		treetest.Must(t, err)
		t.Cleanup(func() { admin.Close() })
		name := fmt.Sprintf("sbe2e_%d", os.Getpid())
		admin.Exec("DROP DATABASE IF EXISTS " + name)
		_, err = admin.Exec("CREATE DATABASE " + name)
		treetest.Must(t, err)
		t.Cleanup(func() {
			for _, d := range []string{name, name + "_snapback_new", name + "_snapback_old"} {
				admin.Exec("DROP DATABASE IF EXISTS " + d)
			}
		})
		dsn := strings.TrimSuffix(server, "/") + "/" + name
		db, err := sql.Open("mysql", dsn+"?multiStatements=true")
		treetest.Must(t, err)
		defer db.Close()
		_, err = db.Exec(`CREATE TABLE t(v varchar(20)) ENGINE=InnoDB; INSERT INTO t VALUES ('before')`)
		treetest.Must(t, err)
		// The mariadb client: user, password and address from the DSN.
		user, rest, _ := strings.Cut(server, ":")
		pass, _, _ := strings.Cut(rest, "@")
		return fmt.Sprintf("backend = \"mysql\"\ndsn = %q\n", dsn),
			fmt.Sprintf("mariadb -h 127.0.0.1 -u %s -p%s %s -e \"UPDATE t SET v = 'after'; CREATE TABLE later(x int) ENGINE=InnoDB\"", user, pass, name),
			func() string {
				db, err := sql.Open("mysql", dsn)
				treetest.Must(t, err)
				defer db.Close()
				var v string
				var later int
				treetest.Must(t, db.QueryRow(`SELECT group_concat(v), (SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'later') FROM t`).Scan(&v, &later))
				return fmt.Sprintf("v=%s later=%d", v, later)
			}
	}},
	"docker-volume": {capability: "docker", setup: func(t *testing.T, root string) (string, string, func() string) {
		_, err := exec.LookPath("docker")
		ok := err == nil && exec.Command("docker", "info").Run() == nil
		if !treetest.Require(t, "docker", ok, "no Docker daemon answers") {
			t.Skip("SNAPBACK_REQUIRE does not name docker")
		}
		name := fmt.Sprintf("sbe2e-%d", os.Getpid())
		treetest.Must(t, exec.Command("docker", "volume", "create", name).Run())
		t.Cleanup(func() { exec.Command("docker", "volume", "rm", "-f", name).Run() })
		out, err := exec.Command("docker", "volume", "inspect", "-f", "{{.Mountpoint}}", name).Output()
		treetest.Must(t, err)
		mnt := strings.TrimSpace(string(out))
		treetest.Write(t, mnt, "data.txt", "before\n", 0o644)
		return fmt.Sprintf("backend = \"docker-volume\"\nvolume = %q\n", name),
			fmt.Sprintf("echo after > %s/data.txt && echo new > %s/later.txt", mnt, mnt),
			func() string {
				b, _ := os.ReadFile(filepath.Join(mnt, "data.txt"))
				_, err := os.Stat(filepath.Join(mnt, "later.txt"))
				return fmt.Sprintf("data=%q later=%v", b, err == nil)
			}
	}},
	"btrfs": {capability: "btrfs", setup: func(t *testing.T, root string) (string, string, func() string) {
		sub := filepath.Join(treetest.Btrfs(t, 256), "data")
		if out, err := exec.Command("btrfs", "subvolume", "create", sub).CombinedOutput(); err != nil {
			t.Fatalf("btrfs subvolume create: %v\n%s", err, out)
		}
		treetest.Write(t, sub, "data.txt", "before\n", 0o644)
		return fmt.Sprintf("backend = \"btrfs\"\npath = %q\n", sub),
			fmt.Sprintf("echo after > %s/data.txt && echo new > %s/later.txt", sub, sub),
			func() string {
				b, _ := os.ReadFile(filepath.Join(sub, "data.txt"))
				_, err := os.Stat(filepath.Join(sub, "later.txt"))
				return fmt.Sprintf("data=%q later=%v", b, err == nil)
			}
	}},
	"zfs": {capability: "zfs", setup: func(t *testing.T, root string) (string, string, func() string) {
		ds := treetest.ZFS(t)
		out, err := exec.Command("zfs", "get", "-H", "-o", "value", "mountpoint", ds).Output()
		treetest.Must(t, err)
		mnt := strings.TrimSpace(string(out))
		treetest.Write(t, mnt, "data.txt", "before\n", 0o644)
		return fmt.Sprintf("backend = \"zfs\"\ndataset = %q\n", ds),
			fmt.Sprintf("echo after > %s/data.txt && echo new > %s/later.txt", mnt, mnt),
			func() string {
				b, _ := os.ReadFile(filepath.Join(mnt, "data.txt"))
				_, err := os.Stat(filepath.Join(mnt, "later.txt"))
				return fmt.Sprintf("data=%q later=%v", b, err == nil)
			}
	}},
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestTargetsEndToEnd drives each backend through the real binary: a run
// that changes the target (copy mode), undo, redo, and an overlay run
// discarded; the target follows each step exactly.
func TestTargetsEndToEnd(t *testing.T) {
	bin := snapbackBinary(t)
	for name, tc := range targetCases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			entry, change, state := tc.setup(t, root)
			treetest.Write(t, root, "snapback.toml", "[[target]]\nname = \"it\"\n"+entry, 0o644)
			treetest.Write(t, root, "code.txt", "v1\n", 0o644)
			before := state()
			sb(t, bin, root, "run", "--mode", "copy", "--", "sh", "-c", change+" && echo v2 > "+shellQuote(filepath.Join(root, "code.txt")))
			after := state()
			if after == before {
				t.Fatalf("the command did not change the target: %s", after)
			}
			if b, _ := os.ReadFile(filepath.Join(root, "code.txt")); string(b) != "v2\n" {
				t.Fatalf("after the run code.txt = %q", b)
			}
			list := sb(t, bin, root, "--json", "list")
			if !strings.Contains(list, `"backend": "`+name+`"`) {
				t.Fatalf("list --json does not show the target:\n%s", list)
			}
			sb(t, bin, root, "undo")
			if got := state(); got != before {
				t.Fatalf("after undo: %s, want %s", got, before)
			}
			if b, _ := os.ReadFile(filepath.Join(root, "code.txt")); string(b) != "v1\n" {
				t.Fatalf("after undo code.txt = %q", b)
			}
			sb(t, bin, root, "redo")
			if got := state(); got != after {
				t.Fatalf("after redo: %s, want %s", got, after)
			}
			sb(t, bin, root, "undo")
			// An overlay run thrown away: its targets come back too.
			if os.Geteuid() == 0 {
				sb(t, bin, root, "run", "--mode", "overlayfs", "--then", "discard", "--", "sh", "-c", change)
				if got := state(); got != before {
					t.Fatalf("after an overlay run discarded: %s, want %s", got, before)
				}
			}
			// gc frees what the collected snapshots held: what is left is
			// what the kept records (the redo chain, whole) refer to.
			sb(t, bin, root, "gc", "--keep", "0")
			kept := strings.Count(sb(t, bin, root, "--json", "list", "-a"), `"payload": "targets/`)
			if ents, _ := os.ReadDir(filepath.Join(root, ".snapback", "targets")); len(ents) > kept {
				t.Fatalf("gc --keep 0 left %d payload directories for %d kept target states", len(ents), kept)
			}
		})
	}
}
