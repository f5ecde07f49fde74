#!/usr/bin/env bash
# scripts/pjdfstest.sh [native|overlayfs|fuse|fuse-kept|all|kept] [TARBALL]:
# hold the native filesystem, and snapback's view of a project in each
# overlay mode, to pjdfstest (github.com/pjd/pjdfstest), the POSIX
# conformance suite FUSE and kernel filesystems are held to. kept is
# native and fuse-kept.
#
# PJDFSTEST_USER=NAME runs each mode as that ordinary user, in projects
# the user owns: most of pjdfstest needs root (it switches users), so
# many of its tests fail natively too; what counts then is what fails in
# a mode but passes natively.
#
# TARBALL is a pjdfstest source tarball (default: the one in
# ../shared/peers/ next to the repository, pjdfstest-*.tar.gz), built here
# (needs autoconf, automake and a C compiler). Each mode runs `prove -r` of
# its tests in a fresh project: natively, or inside `snapback run --mode
# MODE --then discard`. pjdfstest picks some tests by filesystem type; a
# view is held to those of the filesystem it stands in for (the
# PJDFSTEST_FS this script adds to pjdfstest's conf). Prints each mode's
# failures and the tests that pass natively but fail in a mode, and exits
# 1 if there is any of those (or a mode did not run). As root (pjdfstest
# switches users), with snapback on PATH or SNAPBACK=path. Not part of
# scripts/test.sh: about 6-12 minutes per mode on 2 cores.
set -euo pipefail
export LC_ALL=C # one sort order for sort and comm
snapback=${SNAPBACK:-snapback}
which=${1:-all}
case $which in
native | overlayfs | fuse | fuse-kept) modes=("$which") ;;
all) modes=(native overlayfs fuse) ;;
kept) modes=(native fuse-kept) ;;
*)
	echo "usage: scripts/pjdfstest.sh [native|overlayfs|fuse|fuse-kept|all|kept] [TARBALL]" >&2
	exit 2
	;;
esac
repo=$(cd "$(dirname "$0")/.." && pwd)
tarball=${2:-$(ls "$repo"/../shared/peers/pjdfstest-*.tar.gz 2>/dev/null | head -1)}
if [ -z "$tarball" ] || [ ! -f "$tarball" ]; then
	echo "scripts/pjdfstest.sh: no pjdfstest tarball (${2:-../shared/peers/pjdfstest-*.tar.gz}): give its path" >&2
	exit 2
fi
if [ "$(id -u)" != 0 ]; then
	echo "scripts/pjdfstest.sh: run as root (pjdfstest switches users)" >&2
	exit 2
fi
if [ "$which" != native ] && ! command -v "$snapback" >/dev/null; then
	echo "scripts/pjdfstest.sh: $snapback: not found (put snapback on PATH or set SNAPBACK)" >&2
	exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # pjdfstest's other users must reach the projects
mkdir "$tmp/src"
tar -xzf "$tarball" -C "$tmp/src"
src=$(dirname "$(find "$tmp/src" -name configure.ac | head -1)")
echo "building pjdfstest from $tarball"
(cd "$src" && autoreconf -ifs && ./configure && make pjdfstest) >"$tmp/build.log" 2>&1 || {
	cat "$tmp/build.log" >&2
	exit 1
}
# A view stands in for the filesystem below it: the same tests apply.
sed -i 's|^# If we cannot figure out file system type, define it here.|if [ -n "${PJDFSTEST_FS:-}" ]; then fs="${PJDFSTEST_FS}"; fi\n&|' "$src/tests/conf"
fstype=$(df -PT "$tmp" | tail -1 | awk '{print toupper($2)}')

# failures LOG: one line per failed assertion, "dir/NN.t:N" (expected
# failures, marked TODO, are not failures), or "dir/NN.t:aborted" for a
# test file that did not run to its end.
failures() {
	awk -v src="$src/tests/" '
		/\.t \.+/ { f = $1; sub(src, "", f) }
		/^not ok/ && !/# TODO/ { print f ":" $3 }
		/^(\/.*\.t) +\(Wstat: [1-9]/ || /Parse errors/ { print f ":aborted" }
	' "$1" | sort -u
}

# as: how each mode's commands run (as PJDFSTEST_USER, if set).
as=()
if [ -n "${PJDFSTEST_USER:-}" ]; then
	as=(runuser -u "$PJDFSTEST_USER" --)
fi
status=0
for mode in "${modes[@]}"; do
	dir=$tmp/run-$mode
	mkdir "$dir"
	if [ -n "${PJDFSTEST_USER:-}" ]; then
		chown "$PJDFSTEST_USER:" "$dir"
	fi
	log=$tmp/$mode.log
	echo "running pjdfstest: $mode (log: $log while it runs)"
	if [ "$mode" = native ]; then
		(cd "$dir" && "${as[@]}" prove -rv "$src/tests") >"$log" 2>&1 || true
	elif [ "$mode" = fuse-kept ]; then
		# The fuse view kept warm across runs: the suite runs in the
		# view's second run, after a first run of it, discarded.
		(cd "$dir" && export SNAPBACK_FUSE_KEEP=1 SNAPBACK_FUSE_KEEP_IDLE=1m PJDFSTEST_FS=$fstype &&
			"${as[@]}" "$snapback" run --mode fuse --then discard -- prove -r "$src/tests" >/dev/null 2>&1
			"${as[@]}" "$snapback" doctor | grep '^fuse kept view:'
			"${as[@]}" "$snapback" run --mode fuse --then discard -- prove -rv "$src/tests") >"$log" 2>&1 || true
		grep '^fuse kept view:\|no kept view' "$log" || echo "$mode: no kept view server ran" >&2
	else
		# fuse: a fresh view (fuse-kept is the view kept warm across runs).
		(cd "$dir" && PJDFSTEST_FS=$fstype SNAPBACK_FUSE_KEEP=0 "${as[@]}" "$snapback" run --mode "$mode" --then discard -- prove -rv "$src/tests") >"$log" 2>&1 || true
	fi
	if ! grep -q '^Files=' "$log"; then
		echo "$mode: pjdfstest did not run:" >&2
		tail -5 "$log" >&2
		status=1
		continue
	fi
	failures "$log" >"$tmp/$mode.failed"
	echo "$mode: $(grep '^Files=' "$log" | sed 's/ wallclock secs.*/ s/'), $(wc -l <"$tmp/$mode.failed") failed"
	sed 's/^/  failed: /' "$tmp/$mode.failed"
done
if [ -f "$tmp/native.failed" ]; then
	for mode in "${modes[@]}"; do
		[ "$mode" != native ] && [ -f "$tmp/$mode.failed" ] || continue
		worse=$(comm -13 "$tmp/native.failed" "$tmp/$mode.failed")
		if [ -n "$worse" ]; then
			echo "$mode: pass natively, fail in $mode:"
			echo "$worse" | sed 's/^/  /'
			status=1
		else
			echo "$mode: no test that passes natively fails"
		fi
	done
elif [ "$which" != native ]; then
	# One mode alone: every failure counts (natively, this machine's ext4
	# passes all of pjdfstest).
	for mode in "${modes[@]}"; do
		[ -s "$tmp/$mode.failed" ] && status=1
	done
fi
exit $status
