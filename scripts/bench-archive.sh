#!/usr/bin/env bash
# bench-archive.sh: throughput of `archive create` and `archive verify` on
# a snapshot of about 1 GiB, next to what the same work costs with tar and
# sha256sum (create: tar of the tree + sha256sum of every file; verify:
# sha256sum of the tar), one run, as ratios. Prints a Markdown table.
#
# Environment: BENCH_ARCHIVE_MB (default 1024), SNAPBACK, BENCH_DIR.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh" # now, timed, timed_to
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MB=${BENCH_ARCHIVE_MB:-1024}
WORK=$(mktemp -d "${BENCH_DIR:-$(dirname "$REPO")}/snapback-bench-archive.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SB=${SNAPBACK:-}
if [[ -z $SB ]]; then
	SB=$WORK/snapback
	(cd "$REPO" && CGO_ENABLED=0 go build -o "$SB" ./cmd/snapback)
fi
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f×", a / b}'; }
rate() { awk -v mb="$MB" -v t="$1" 'BEGIN {printf "%.0f MB/s", mb * 1.048576 / t}'; }

T=$WORK/tree
mkdir -p "$T"
echo "bench-archive: making $MB MiB in $((MB * 4)) files" >&2
for ((d = 0; d < MB / 64; d++)); do
	mkdir -p "$T/d$d"
	for ((f = 0; f < 256; f++)); do
		head -c 262144 /dev/urandom >"$T/d$d/f$f"
	done
done
"$SB" -C "$T" snap -m bench >/dev/null
mkdir -m 0700 "$WORK/cat"

timed_to t_create "$SB" -C "$T" archive create --catalog "$WORK/cat"
A=$(ls "$WORK/cat")
timed_to t_verify "$SB" -C "$T" archive verify --catalog "$WORK/cat" "$A"
timed_to t_tar sh -c "tar cf '$WORK/t.tar' -C '$T' --exclude=.snapback . && find '$T' -path '$T/.snapback' -prune -o -type f -print0 | xargs -0 sha256sum >/dev/null && sync"
timed_to t_sum sha256sum "$WORK/t.tar"
# The same bytes: verify checks every byte of the archive file, so its
# bar is sha256sum of that very file (at most 0.4× of it).
timed_to t_asum sha256sum "$WORK/cat/$A"

echo "Archive of a snapshot of $MB MiB ($((MB * 4)) files of 256 KiB):"
echo
echo "| operation | snapback | tar + sha256sum | ratio |"
echo "|---|---:|---:|---:|"
echo "| create (read, hash, write, sync) | ${t_create} s ($(rate "$t_create")) | ${t_tar} s | $(ratio "$t_create" "$t_tar") |"
echo "| verify (read and hash every entry) | ${t_verify} s ($(rate "$t_verify")) | ${t_sum} s | $(ratio "$t_verify" "$t_sum") |"
echo "| verify (every byte of the file) vs sha256sum of the archive itself | ${t_verify} s | ${t_asum} s | $(ratio "$t_verify" "$t_asum") |"
if awk -v a="$t_verify" -v b="$t_asum" 'BEGIN {exit !(a > 0.4 * b)}'; then
	echo "bench-archive: archive verify took more than 0.4× sha256sum of the same bytes" >&2
	exit 1
fi
