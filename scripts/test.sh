#!/usr/bin/env bash
# scripts/test.sh: the project's one test command, for developers and CI
# (.ci/run) alike. On a fresh Debian machine with only Go, gcc and apt, as
# root, it installs what the tests need, starts the services they use,
# then runs formatting, vet, the tests and brief fuzzing, and prints one
# summary line. Every step runs even when an earlier one failed, so one
# run shows every problem.
set -euo pipefail
cd "$(dirname "$0")/.."

t0=$SECONDS
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	sudo=(sudo)
fi

# --- Debian packages ---------------------------------------------------
missing=()
# need_pkg PACKAGE...: queue the packages not yet installed.
need_pkg() {
	local p
	for p in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
			missing+=("$p")
		fi
	done
}
need_pkg fuse3 # the fuse isolation mode
need_pkg attr  # setfattr/getfattr: xattr fixtures
need_pkg btrfs-progs # loop-mounted btrfs: reflink copies (later: the btrfs backend)
need_pkg sqlite3 git # the POSIX table and the agent scenario run them under snapback
need_pkg postgresql mariadb-server docker.io # database and volume targets
need_pkg restic # archive push/pull
need_pkg python3 # TestAgentbox runs agentbox, a Python program
need_pkg bash-completion # completion_bash.txtar: a real bash completes snapback after completion --install
need_pkg zfs-fuse # the zfs target: ZFS in user space (no kernel module here), a pool on a file
if [ ${#missing[@]} -gt 0 ]; then
	echo "== installing ${missing[*]}"
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Ordinary users may mount FUSE, as on most distributions (these machines
# ship /dev/fuse as 0600): the fuse mode's test as an ordinary user needs it.
if [ -c /dev/fuse ] && [ "$(stat -c %a /dev/fuse)" != 666 ]; then
	"${sudo[@]}" chmod 0666 /dev/fuse
fi

# FUSE over io_uring (Linux 6.14+): root's switch, off by default. The
# tests run with it on, so that every fuse view is served through the
# ring, and once more with it off for the fuse tests and the POSIX table
# (the step "fuse over /dev/fuse reads"); stop_services puts it back.
uring_param=/sys/module/fuse/parameters/enable_uring
uring_was=
set_uring() { echo "$1" | "${sudo[@]}" tee "$uring_param" >/dev/null; }
if [ -e "$uring_param" ]; then
	uring_was=$(cat "$uring_param")
	set_uring Y
fi

# rest-server, for archive push/pull over HTTP: from the Go module proxy,
# built once into a cache. Through a throwaway module rather than `go
# install ...@version`, whose deprecation lookup needs the module's
# version list, which a proxy may not serve.
rest_server_version=v0.14.0
rest_server_bin="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/snapback-test/rest-server-$rest_server_version"
if [ ! -x "$rest_server_bin" ]; then
	echo "== building rest-server $rest_server_version"
	build_dir=$(mktemp -d)
	if ! (cd "$build_dir" && go mod init rest-server-build && go get "github.com/restic/rest-server/cmd/rest-server@$rest_server_version" &&
		mkdir -p "$(dirname "$rest_server_bin")" && go build -o "$rest_server_bin" github.com/restic/rest-server/cmd/rest-server) >"$build_dir.log" 2>&1; then
		echo "warning: could not build rest-server (the rest-server tests will fail):" >&2
		tail -3 "$build_dir.log" >&2
	fi
	rm -rf "$build_dir" "$build_dir.log"
fi

# An unprivileged user, for tests of what a non-root caller may do.
if ! id -u snapback-test >/dev/null 2>&1; then
	"${sudo[@]}" useradd -m snapback-test
fi

# --- services ----------------------------------------------------------
started=()
# start_service NAME: start a system service unless it already runs; it
# is stopped on exit only if this script started it.
start_service() {
	if ! "${sudo[@]}" service "$1" status >/dev/null 2>&1; then
		echo "== starting $1"
		"${sudo[@]}" service "$1" start >/dev/null
		started+=("$1")
	fi
}
dockerd_pid=
rest_server_pid=
rest_server_dir=
zfs_pid=
zfs_watch_pid=
zfs_dir=
zfs_pool=
stop_services() {
	local i
	if [ -n "$zfs_watch_pid" ]; then
		kill "$zfs_watch_pid" 2>/dev/null || true
		wait "$zfs_watch_pid" 2>/dev/null || true
	fi
	if [ -n "$zfs_dir" ] && [ -s "$zfs_dir/stall" ]; then
		cat "$zfs_dir/stall"
	fi
	if [ -n "$zfs_pool" ]; then
		# zfs-fuse answers "pool is busy" for a moment after the tests'
		# last unmount. Each call is bounded: a zfs-fuse that stopped
		# answering would hold zpool, and this script, for ever.
		for i in $(seq 20); do
			"${sudo[@]}" timeout -s KILL 20 zpool destroy -f "$zfs_pool" 2>/dev/null && break
			sleep 0.5
		done
		if ! "${sudo[@]}" timeout -s KILL 20 zpool list -H -o name "$zfs_pool" 2>&1 | grep -q 'no such pool'; then
			echo "warning: could not destroy the zfs pool $zfs_pool" >&2
		fi
	fi
	if [ -n "$zfs_pid" ]; then
		"${sudo[@]}" kill "$zfs_pid" 2>/dev/null || true
		for i in $(seq 20); do
			"${sudo[@]}" kill -0 "$zfs_pid" 2>/dev/null || break
			sleep 0.5
		done
		"${sudo[@]}" kill -KILL "$zfs_pid" 2>/dev/null || true
		wait "$zfs_pid" 2>/dev/null || true
		# What a killed zfs-fuse left mounted (its connections answer
		# ENOTCONN now) is unmounted, lazily: nothing waits on it.
		awk '$3 == "fuse.zfs" || $3 == "fuse" && $2 == "/zfs-kstat" {print $2}' /proc/self/mounts | sort -r | while read -r m; do
			"${sudo[@]}" umount -l "$(printf '%b' "$m")" 2>/dev/null || true
		done
	fi
	if [ -n "$zfs_dir" ]; then
		rm -rf "$zfs_dir"
	fi
	if [ -n "$rest_server_pid" ]; then
		kill "$rest_server_pid" 2>/dev/null || true
		wait "$rest_server_pid" 2>/dev/null || true
	fi
	if [ -n "$rest_server_dir" ]; then
		rm -rf "$rest_server_dir"
	fi
	if [ -n "$dockerd_pid" ]; then
		"${sudo[@]}" kill "$dockerd_pid" 2>/dev/null || true
		wait "$dockerd_pid" 2>/dev/null || true
	fi
	if [ -n "$uring_was" ]; then
		set_uring "$uring_was" || echo "warning: could not put $uring_param back to $uring_was" >&2
	fi
	for ((i = ${#started[@]} - 1; i >= 0; i--)); do
		"${sudo[@]}" service "${started[i]}" stop >/dev/null 2>&1 || echo "warning: could not stop ${started[i]}" >&2
	done
}
trap stop_services EXIT

start_service postgresql
start_service mariadb
# The Docker engine: started by hand when no daemon answers (these
# machines run no init system to ask), and stopped again on exit.
if ! "${sudo[@]}" docker info >/dev/null 2>&1; then
	echo "== starting dockerd"
	"${sudo[@]}" dockerd >"${TMPDIR:-/tmp}/snapback-dockerd.log" 2>&1 &
	dockerd_pid=$!
	for _ in $(seq 60); do
		"${sudo[@]}" docker info >/dev/null 2>&1 && break
		sleep 0.5
	done
fi

# ZFS: zfs-fuse's daemon, started by hand when zfs does not answer (as
# dockerd is) and stopped on exit; then a pool on a sparse file in a temp
# directory (unless SNAPBACK_TEST_ZFS names one), kept out of the pool
# cache and destroyed on exit. The tests make their datasets in it.
if ! "${sudo[@]}" zfs list >/dev/null 2>&1 && command -v zfs-fuse >/dev/null; then
	echo "== starting zfs-fuse"
	"${sudo[@]}" zfs-fuse --no-daemon >"${TMPDIR:-/tmp}/snapback-zfs-fuse.log" 2>&1 &
	zfs_pid=$!
	for _ in $(seq 40); do
		"${sudo[@]}" zfs list >/dev/null 2>&1 && break
		sleep 0.25
	done
fi
# zfs_watch: every 15 s, whether zfs-fuse answers (zfs list, and a statfs
# of each of its mounts, 10 s each). The first time it does not, three
# times running, where its threads and the processes waiting on it are
# is written down, and printed at the end: a stall is otherwise seen only
# as tests timing out, with no clue to its cause.
zfs_watch() {
	local misses=0 m bad t
	while sleep 15; do
		bad=
		"${sudo[@]}" timeout -s KILL 10 zfs list -H -o name >/dev/null 2>&1
		[ $? -eq 137 ] && bad="zfs list"
		while read -r m; do
			timeout -s KILL 10 stat -f -c %i "$(printf '%b' "$m")" >/dev/null 2>&1
			[ $? -eq 137 ] && bad+=" statfs:$m"
		done < <(awk '$3 == "fuse.zfs" {print $2}' /proc/self/mounts)
		if [ -z "$bad" ]; then
			misses=0
			continue
		fi
		misses=$((misses + 1))
		[ $misses -lt 3 ] && continue
		{
			echo "zfs-fuse stopped answering at $(date +%T):$bad"
			for t in /proc/"$(pgrep -x zfs-fuse | head -1)"/task/*; do
				echo "thread $(basename "$t") $(cat "$t/wchan") syscall: $(cat "$t/syscall")"
			done | sort -k3 | uniq -c -f2 | sort -rn | head -20
			for c in /sys/fs/fuse/connections/*/waiting; do echo "$c: $(cat "$c")"; done
			ps -eo pid,stat,wchan:24,args | awk '$2 ~ /D/' | cut -c1-200 | head -20
		} >"$zfs_dir/stall" 2>&1
		return
	done
}
if [ -z "${SNAPBACK_TEST_ZFS:-}" ] && "${sudo[@]}" zfs list >/dev/null 2>&1; then
	zfs_dir=$(mktemp -d)
	truncate -s 2G "$zfs_dir/pool.img"
	if "${sudo[@]}" zpool create -o cachefile=none -m "$zfs_dir/mnt" "snapback-test-$$" "$zfs_dir/pool.img" >/dev/null 2>&1; then
		zfs_pool=snapback-test-$$
		echo "== zfs pool $zfs_pool"
		export SNAPBACK_TEST_ZFS=$zfs_pool
		if [ -n "$zfs_pid" ]; then
			zfs_watch &
			zfs_watch_pid=$!
		fi
	else
		echo "warning: zpool create failed (the zfs tests will fail)" >&2
	fi
fi

# A rest-server on loopback for the restic tests (unless one is named),
# its repositories in a temp directory; it picks a free port, says which,
# and is stopped on exit.
addr=
if [ -z "${SNAPBACK_TEST_REST_SERVER:-}" ] && [ -x "$rest_server_bin" ]; then
	rest_server_dir=$(mktemp -d)
	"$rest_server_bin" --path "$rest_server_dir/data" --listen 127.0.0.1:0 --no-auth >"$rest_server_dir/log" 2>&1 &
	rest_server_pid=$!
	for _ in $(seq 40); do
		addr=$(sed -n 's/^start server on \(127\.0\.0\.1:[0-9]*\)$/\1/p' "$rest_server_dir/log")
		[ -n "$addr" ] && break
		sleep 0.25
	done
	if [ -n "$addr" ]; then
		echo "== rest-server on $addr"
		export SNAPBACK_TEST_REST_SERVER="rest:http://$addr/"
	else
		echo "warning: rest-server did not start:" >&2
		cat "$rest_server_dir/log" >&2
	fi
fi

# The accounts the tests use (idempotent): a PostgreSQL role that may
# create databases and a MariaDB user with every privilege, both with a
# password and reached over loopback TCP, as an application would.
"${sudo[@]}" su postgres -c "psql -qtA -v ON_ERROR_STOP=1" >/dev/null <<'SQL'
SELECT 'CREATE ROLE snapback LOGIN CREATEDB PASSWORD ''snapback''' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'snapback') \gexec
SQL
"${sudo[@]}" mariadb -u root <<'SQL'
CREATE USER IF NOT EXISTS 'snapback'@'127.0.0.1' IDENTIFIED BY 'snapback';
CREATE USER IF NOT EXISTS 'snapback'@'localhost' IDENTIFIED BY 'snapback';
GRANT ALL PRIVILEGES ON *.* TO 'snapback'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'snapback'@'localhost';
SQL
# Where the database tests find their servers.
export SNAPBACK_TEST_POSTGRES="${SNAPBACK_TEST_POSTGRES:-postgres://snapback:snapback@127.0.0.1:5432/postgres?sslmode=disable}"
export SNAPBACK_TEST_MYSQL="${SNAPBACK_TEST_MYSQL:-snapback:snapback@tcp(127.0.0.1:3306)/}"

# Tests that need a capability skip without it, unless it is listed here:
# then its absence fails them.
export SNAPBACK_REQUIRE=xattr,btrfs,root,overlayfs,userns,fuse,docker,postgres,mysql,restic,rest-server,python3,bash-completion,zfs,fanotify
if [ -n "$uring_was" ]; then
	SNAPBACK_REQUIRE+=,fuse-uring
fi

# --- checks ------------------------------------------------------------
failed=()
passed=0
# step NAME COMMAND...: run a check and record its outcome and time.
step() {
	local name=$1 t=$SECONDS
	shift
	echo "== $name"
	if "$@"; then
		passed=$((passed + 1))
		echo "-- ok: $name ($((SECONDS - t))s)"
	else
		failed+=("$name")
		echo "-- FAILED: $name ($((SECONDS - t))s)"
	fi
}

gofmt_clean() {
	local out
	out=$(gofmt -l .)
	[ -z "$out" ] || { echo "gofmt would change:"; echo "$out"; return 1; }
}
step "gofmt" gofmt_clean
step "go vet" go vet ./...
step "go vet (darwin)" env GOOS=darwin go vet ./...
# The small packages under the race detector; every package is tested
# once. (The backends' suites ran under -race too until the whole script
# had to fit 15 minutes on a fresh machine: their time is spent waiting
# on the servers, and their race build alone took minutes.)
# The fuse view's packages too: over io_uring each CPU's queue serves its
# requests at once (TestConcurrentRequests).
raced=(./fsutil/ ./config/ ./runner/ ./overlay/fuse/ ./overlay/fuse/uring/)
step "go test -race (${raced[*]})" go test -race -count=1 -timeout 10m "${raced[@]}"
mapfile -t rest < <(go list ./... | grep -v -e '/fsutil$' -e '/config$' -e '/runner$' -e '/overlay/fuse$' -e '/overlay/fuse/uring$')
# Through testlog.py: the results, every failing test's output, and the
# slowest tests (where the suite's time goes). pipefail: either failing
# fails the step.
go_test_logged() {
	go test -count=1 -timeout 30m -json "$@" | python3 scripts/testlog.py
}
step "go test (the other packages)" go_test_logged "${rest[@]}"
# The fuse view without the ring, as wherever root has not switched it on.
fuse_device() {
	local rc=0
	set_uring N
	SNAPBACK_REQUIRE=${SNAPBACK_REQUIRE//,fuse-uring/} go_test_logged -run 'Test' ./overlay/fuse/ && SNAPBACK_REQUIRE=${SNAPBACK_REQUIRE//,fuse-uring/} go_test_logged -run '^TestPOSIX(AsUser)?$/^(fuse|fuse-kept|auto)$' ./cmd/snapback/ || rc=1
	set_uring Y
	return $rc
}
if [ -n "$uring_was" ]; then
	step "fuse over /dev/fuse reads" fuse_device
fi

# Each fuzz target, found in the test files, briefly: its checked-in seeds
# (testdata/fuzz/FuzzX/), then a fixed number of new inputs. A failure
# leaves its input in the package's testdata/fuzz/ to commit as a seed.
# Long fuzzing is scripts/fuzz.sh's.
while read -r file; do
	dir=$(dirname "$file")
	for fn in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		# A count, not a duration: Go 1.26's fuzz coordinator can report a
		# spurious "context deadline exceeded" when a -fuzztime duration
		# ends (golang/go#75804, fixed in 1.27). No minimising: with an
		# empty fuzz cache (a fresh machine) most early inputs are new,
		# and minimising each took FuzzArchive ~10 minutes; a failing
		# input is written all the same, and nothing else is kept. No vet:
		# the go vet step did it.
		step "fuzz $fn" go test -run '^$' -fuzz "^$fn\$" -fuzztime 20000x -fuzzminimizetime 0 -vet=off -timeout 5m "./$dir/"
	done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sed 's|^\./||' | sort)

total=$((passed + ${#failed[@]}))
if [ ${#failed[@]} -gt 0 ]; then
	list=$(printf '%s, ' "${failed[@]}")
	echo "FAIL: ${#failed[@]} of $total steps failed in $((SECONDS - t0))s: ${list%, }"
	echo "steps: $passed passed, ${#failed[@]} failed"
	exit 1
fi
echo "PASS: all $total steps in $((SECONDS - t0))s"
echo "steps: $passed passed, 0 failed"
