#!/usr/bin/env bash
# bench-btrfs.sh: time the btrfs backend's snapshot and restore of a
# subvolume of many small files against `cp -a` of the same subvolume, on a
# loop-mounted btrfs the script makes and removes. Needs root, btrfs-progs
# and Go. Prints a Markdown table: operation | seconds | ratio to cp -a.
#
# Environment:
#   BENCH_FILES  number of files (default 100000), in directories of 1000
#   BENCH_SIZE   bytes per file (default 4096)
#   BENCH_REPS   snapshot/restore repetitions, averaged (default 5)
#   BENCH_DIR    where to make the work directory (default: $TMPDIR or /tmp)
#
# The backend's times come from BenchmarkBtrfs (backends/btrfs_test.go),
# which snapshots, restores and releases the subvolume named by
# SNAPBACK_BENCH_BTRFS. Caches are warm; every measurement starts after a
# sync. coreutils' cp -a clones file data on btrfs (--reflink=auto, the
# default since coreutils 9), so a full copy (--reflink=never) is timed
# too.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh" # now, timed, timed_to

FILES=${BENCH_FILES:-100000}
SIZE=${BENCH_SIZE:-4096}
REPS=${BENCH_REPS:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)

[ "$(id -u)" = 0 ] || { echo "bench-btrfs.sh: needs root (loop mount)" >&2; exit 1; }
command -v mkfs.btrfs >/dev/null || { echo "bench-btrfs.sh: mkfs.btrfs is not installed (btrfs-progs)" >&2; exit 1; }

work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/bench-btrfs.XXXXXX")
mnt=$work/mnt
cleanup() {
	mountpoint -q "$mnt" && umount "$mnt"
	rm -rf "$work"
}
trap cleanup EXIT

# Room for the data three times over (the subvolume, a full copy, slack).
img_mb=$((FILES * (SIZE + 2048) * 3 / 1048576 + 512))
truncate -s "${img_mb}M" "$work/btrfs.img"
mkfs.btrfs -q -f "$work/btrfs.img" >/dev/null 2>&1
mkdir "$mnt"
mount -o loop "$work/btrfs.img" "$mnt"
btrfs subvolume create "$mnt/data" >/dev/null

dirs=$(((FILES + 999) / 1000))
for ((d = 0; d < dirs; d++)); do
	n=$((FILES - d * 1000))
	((n > 1000)) && n=1000
	mkdir "$mnt/data/d$d"
	head -c $((n * SIZE)) /dev/urandom | split -b "$SIZE" -a 3 -d - "$mnt/data/d$d/f"
done
sync
echo "subvolume: $(find "$mnt/data" -type f | wc -l) files, $(du -sh "$mnt/data" | cut -f1)" >&2

(cd "$repo" && go test -c -o "$work/backends.test" ./backends/)

out=$(SNAPBACK_BENCH_BTRFS=$mnt/data "$work/backends.test" -test.run '^$' \
	-test.bench '^BenchmarkBtrfs$' -test.benchtime "${REPS}x")
metric() { awk -v m="$1" '/^BenchmarkBtrfs/ { for (i = 2; i < NF; i++) if ($(i + 1) == m) print $i }' <<<"$out"; }
snap=$(metric snapshot-s)
restore=$(metric restore-s)
release=$(metric release-s)
[ -n "$snap" ] && [ -n "$restore" ] || { echo "$out" >&2; exit 1; }

cp_reflink=$(timed cp -a "$mnt/data" "$mnt/copy")
rm -rf "$mnt/copy"
cp_sync=$(timed sh -c "cp -a '$mnt/data' '$mnt/copy' && sync")
rm -rf "$mnt/copy"
cp_full=$(timed cp -a --reflink=never "$mnt/data" "$mnt/copy")
rm -rf "$mnt/copy"

ratio() { awk -v a="$1" -v b="$cp_reflink" 'BEGIN { printf "%.2g", a / b }'; }
echo "| operation ($FILES files of $SIZE bytes) | seconds | ratio to cp -a |"
echo "|---|---|---|"
echo "| cp -a (reflink) | $cp_reflink | 1 |"
echo "| cp -a + sync | $cp_sync | $(ratio "$cp_sync") |"
echo "| cp -a --reflink=never | $cp_full | $(ratio "$cp_full") |"
echo "| btrfs snapshot (mean of $REPS) | $snap | $(ratio "$snap") |"
echo "| btrfs restore (mean of $REPS) | $restore | $(ratio "$restore") |"
echo "| btrfs release (mean of $REPS) | $release | $(ratio "$release") |"
