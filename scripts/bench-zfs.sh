#!/usr/bin/env bash
# bench-zfs.sh: time the zfs target's snapshot and restore of a dataset
# holding BENCH_ZFS_MB MiB next to `zfs send | zfs receive` of the same
# snapshot (a full copy, what a backup of it costs), one run, on a pool on
# a sparse file the script makes and destroys. Uses the zfs there is: the
# kernel's, or zfs-fuse's daemon, started here when zfs does not answer
# and stopped again. Needs root and Go. Prints a Markdown table:
# operation | seconds | ratio to send | receive. scripts/bench.sh calls it.
#
# Environment:
#   BENCH_ZFS_MB  data in the dataset, MiB (default 1024), in files of 16 MiB
#   BENCH_DIR     where to make the work directory (default: $TMPDIR or /tmp)
#
# The target's times come from BenchmarkZFS (backends/zfs_test.go), one
# iteration: a snapshot; its restore while it is the newest (zfs
# rollback); its restore once a newer snapshot exists (the promoted-clone
# swap); the release of both.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh" # now, timed, timed_to

MB=${BENCH_ZFS_MB:-1024}
repo=$(cd "$(dirname "$0")/.." && pwd)

[ "$(id -u)" = 0 ] || { echo "bench-zfs.sh: needs root (zpool create)" >&2; exit 1; }
command -v zpool >/dev/null || { echo "bench-zfs.sh: zfs is not installed (Debian: zfs-fuse)" >&2; exit 1; }

work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/bench-zfs.XXXXXX")
pool=snapback-bench-$$
daemon=
made_pool=
cleanup() {
	if [ -n "$made_pool" ]; then
		# zfs-fuse answers "pool is busy" for a moment after an unmount.
		for _ in $(seq 20); do
			zpool destroy -f "$pool" 2>/dev/null && break
			sleep 0.5
		done
	fi
	if [ -n "$daemon" ]; then
		kill "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

if ! zfs list >/dev/null 2>&1; then
	command -v zfs-fuse >/dev/null || { echo "bench-zfs.sh: zfs does not answer and zfs-fuse is not installed" >&2; exit 1; }
	zfs-fuse --no-daemon >"$work/zfs-fuse.log" 2>&1 &
	daemon=$!
	for _ in $(seq 40); do
		zfs list >/dev/null 2>&1 && break
		sleep 0.25
	done
fi
# Room for the data three times over (the dataset, the received copy,
# slack).
truncate -s $((MB * 3 + 512))M "$work/pool.img"
zpool create -o cachefile=none -m "$work/mnt" "$pool" "$work/pool.img" >/dev/null
made_pool=1
zfs create "$pool/data"
mnt=$(zfs get -H -o value mountpoint "$pool/data")
for ((i = 0; i < (MB + 15) / 16; i++)); do
	head -c 16M /dev/urandom >"$mnt/f$i"
done
sync
echo "dataset: $(find "$mnt" -type f | wc -l) files, $(du -sh "$mnt" | cut -f1)" >&2

(cd "$repo" && go test -c -o "$work/backends.test" ./backends/)

out=$(SNAPBACK_BENCH_ZFS=$pool/data "$work/backends.test" -test.run '^$' \
	-test.bench '^BenchmarkZFS$' -test.benchtime 1x)
metric() { awk -v m="$1" '/^BenchmarkZFS/ { for (i = 2; i < NF; i++) if ($(i + 1) == m) print $i }' <<<"$out"; }
snap=$(metric snapshot-s)
rollback=$(metric rollback-s)
swap=$(metric swap-s)
release=$(metric release-s)
[ -n "$snap" ] && [ -n "$swap" ] || { echo "$out" >&2; exit 1; }

zfs snapshot "$pool/data@send"
send=$(timed sh -c "zfs send '$pool/data@send' | zfs receive '$pool/copy'")

ratio() { awk -v a="$1" -v b="$send" 'BEGIN { printf "%.2g", a / b }'; }
echo "| operation ($MB MiB dataset) | seconds | ratio to send \\| receive |"
echo "|---|---|---|"
echo "| zfs send \\| zfs receive | $send | 1 |"
echo "| zfs target snapshot | $snap | $(ratio "$snap") |"
echo "| zfs target restore, newest (rollback) | $rollback | $(ratio "$rollback") |"
echo "| zfs target restore, newer ones kept (clone swap) | $swap | $(ratio "$swap") |"
echo "| zfs target release of both | $release | $(ratio "$release") |"
