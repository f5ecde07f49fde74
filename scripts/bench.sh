#!/usr/bin/env bash
# bench.sh: measure snapback against a plain copy on a generated tree.
# One run prints a Markdown table: operation | time | ratio to `cp -a` |
# runs.
#
# Environment:
#   BENCH_FILES   number of files in the tree        (default 100000)
#   BENCH_BYTES   approximate total size in bytes    (default 1073741824)
#   BENCH_REPS    repetitions per measurement (median is reported; default 3)
#   BENCH_FIRST_REPS  repetitions of the first snap  (default BENCH_REPS)
#   BENCH_BUDGET  seconds: an expensive measurement (first snap, undo/redo)
#                 is not repeated once its runs so far took this long
#                 (default 40), so that a slow build stays within ~10 min
#   BENCH_DIR     where to make the work directory (default: $TMPDIR or /tmp
#                 if it is on the same filesystem as this repository, else the
#                 repository's parent directory). A fresh subdirectory is made
#                 there and removed at the end.
#   BENCH_KEEP=1  keep the work directory
#   SNAPBACK      snapback binary to use (default: build it from this repo)
#   BENCH_CHECKPOINT=0  skip the checkpoint rows (scripts/bench-checkpoint.sh)
#   BENCH_ZFS=0   skip `run -- true` in the zfs mode (as root where zfs answers:
#                 the tree copied into a dataset of a pool on a sparse file)
#   BENCH_TARGETS=0  skip the targets' and the archive's scripts
#                 (scripts/bench-{sqlite,postgres,mysql,docker,btrfs,zfs,archive}.sh);
#                 one whose service is missing (no postgres, mysql or docker
#                 answering) is a failed check
#   BENCH_BASELINE  a git revision: undo/redo of the 10-file and 10,000-file
#                 edits are also measured with snapback built from it, in the same run
#                 (what a change of the restore path costs; e.g. the hash
#                 check of every content written back)
#
# Smoke test (under a minute):
#   BENCH_FILES=2000 BENCH_BYTES=50000000 scripts/bench.sh
#
# The tree: ~90 % small files (a few KB) and ~10 % medium ones (tens of KB)
# spread over nested directories of ~40 files, plus one large file (tens of
# MB) per 5,000 files; ~30 % / 30 % / 40 % of the bytes. Contents are
# deterministic pseudo-random bytes (unique per file, so nothing dedups).
# Edits for the undo/redo measurements append a line to small files picked
# evenly across the tree.
#
# Caches are warm throughout (nothing is dropped). Every measurement starts
# after a `sync`, so that one step never pays for another's writeback; note
# that `cp -a` itself does not sync while snapback's writes end with a
# syncfs, hence the extra "cp -a + sync" row.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh" # now, timed, timed_to

FILES=${BENCH_FILES:-100000}
BYTES=${BENCH_BYTES:-1073741824}
REPS=${BENCH_REPS:-3}
FIRST_REPS=${BENCH_FIRST_REPS:-$REPS}
BUDGET=${BENCH_BUDGET:-40}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "bench: $*" >&2; exit 1; }
[[ $FILES =~ ^[0-9]+$ && $FILES -ge 100 ]] || die "BENCH_FILES must be a number >= 100"
[[ $BYTES =~ ^[0-9]+$ && $BYTES -ge 100000 ]] || die "BENCH_BYTES must be a number >= 100000"
[[ $REPS =~ ^[1-9][0-9]*$ && $FIRST_REPS =~ ^[1-9][0-9]*$ ]] || die "BENCH_REPS / BENCH_FIRST_REPS must be >= 1"
[[ $BUDGET =~ ^[0-9]+$ ]] || die "BENCH_BUDGET must be a number of seconds"

# ---- work directory -------------------------------------------------------
made_parent=""
if [[ -n ${BENCH_DIR:-} ]]; then
	if [[ ! -d $BENCH_DIR ]]; then
		mkdir -p "$BENCH_DIR"
		made_parent=$BENCH_DIR
	fi
	parent=$BENCH_DIR
else
	parent=${TMPDIR:-/tmp}
	if [[ $(stat -c %d "$parent") != $(stat -c %d "$REPO") ]]; then
		parent=$(dirname "$REPO")
	fi
fi
WORK=$(mktemp -d "$parent/snapback-bench.XXXXXX")
TREE=$WORK/tree

cleanup() {
	local rc=$?
	if [[ ${BENCH_KEEP:-} == 1 ]]; then
		echo "bench: kept $WORK" >&2
	else
		rm -rf "$WORK" 2>/dev/null || { chmod -R u+w "$WORK"; rm -rf "$WORK"; }
		[[ -n $made_parent ]] && rmdir "$made_parent" 2>/dev/null
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

calc() { awk "BEGIN {printf \"%.6f\", $*}"; }
log() { printf '[%5.0fs] %s\n' "$(calc "$(now) - $T0")" "$*" >&2; }
T0=$(now)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- snapback binary -------------------------------------------------------
if [[ -n ${SNAPBACK:-} ]]; then
	SB=$SNAPBACK
else
	SB=$WORK/snapback
	log "building snapback"
	(cd "$REPO" && CGO_ENABLED=0 go build -o "$SB" ./cmd/snapback)
fi
SBX=$SB # the binary sb runs: the baseline's for its rows
sb() { "$SBX" -C "$TREE" "$@"; }
SB_BASE=
if [[ -n ${BENCH_BASELINE:-} ]]; then
	log "building snapback at $BENCH_BASELINE (baseline)"
	mkdir -p "$WORK/base-src"
	git -C "$REPO" archive "$BENCH_BASELINE" | tar -x -C "$WORK/base-src"
	SB_BASE=$WORK/snapback-base
	(cd "$WORK/base-src" && CGO_ENABLED=0 go build -o "$SB_BASE" ./cmd/snapback)
fi

# ---- generator -------------------------------------------------------------
mkdir -p "$WORK/gen"
cat >"$WORK/gen/main.go" <<'EOF'
// Generates a deterministic tree: see scripts/bench.sh.
package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

func main() {
	root := os.Args[1]
	nFiles, _ := strconv.Atoi(os.Args[2])
	total, _ := strconv.ParseInt(os.Args[3], 10, 64)
	listPath := os.Args[4]

	nLarge := int(math.Round(float64(nFiles) / 5000))
	if nLarge == 0 && nFiles >= 1000 {
		nLarge = 1
	}
	rest := nFiles - nLarge
	nMed := rest / 10
	nSmall := rest - nMed
	shareS, shareM, shareL := 0.3, 0.3, 0.4
	if nLarge == 0 {
		shareS, shareM, shareL = 0.5, 0.5, 0
	}
	avgS := shareS * float64(total) / float64(nSmall)
	avgM := shareM * float64(total) / float64(max(nMed, 1))
	avgL := shareL * float64(total) / float64(max(nLarge, 1))

	leaves := max(1, (rest+39)/40)
	k := int(math.Ceil(math.Cbrt(float64(leaves))))
	list, err := os.Create(listPath)
	check(err)
	lw := bufio.NewWriter(list)

	buf := make([]byte, 1<<20)
	var written int64
	var dirs = map[string]bool{}
	write := func(rel string, size int64, seed uint64) {
		p := filepath.Join(root, rel)
		if d := filepath.Dir(p); !dirs[d] {
			check(os.MkdirAll(d, 0o755))
			dirs[d] = true
		}
		f, err := os.Create(p)
		check(err)
		r := rand.NewPCG(0x5eed, seed)
		for left := size; left > 0; {
			n := int64(len(buf))
			if left < n {
				n = left
			}
			b := buf[:(n+7)&^7]
			for i := 0; i < len(b); i += 8 {
				binary.LittleEndian.PutUint64(b[i:], r.Uint64())
			}
			_, err := f.Write(b[:n])
			check(err)
			left -= n
		}
		check(f.Close())
		written += size
	}
	vary := func(avg float64, seed uint64) int64 {
		r := rand.New(rand.NewPCG(seed, 0xa11ce))
		return int64(avg * (0.5 + r.Float64()))
	}
	var sizeS, sizeM, sizeL int64
	for i := 0; i < rest; i++ {
		leaf := i * leaves / rest
		dir := fmt.Sprintf("a%02d/b%02d/c%02d", leaf/(k*k), (leaf/k)%k, leaf%k)
		if i%10 == 9 {
			s := vary(avgM, uint64(i))
			write(fmt.Sprintf("%s/m%06d.dat", dir, i), s, uint64(i))
			sizeM += s
		} else {
			s := vary(avgS, uint64(i))
			rel := fmt.Sprintf("%s/f%06d.txt", dir, i)
			write(rel, s, uint64(i))
			fmt.Fprintln(lw, rel)
			sizeS += s
		}
	}
	for j := 0; j < nLarge; j++ {
		s := vary(avgL, uint64(rest+j))
		write(fmt.Sprintf("big/large%03d.bin", j), s, uint64(rest+j))
		sizeL += s
	}
	check(lw.Flush())
	check(list.Close())
	mb := func(n int64, c int) string {
		if c == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f KiB", float64(n)/float64(c)/1024)
	}
	fmt.Printf("%d files in %d directories, %d bytes (%.2f GiB): %d small (avg %s), %d medium (avg %s), %d large (avg %s)\n",
		nFiles, len(dirs), written, float64(written)/(1<<30), nSmall, mb(sizeS, nSmall), nMed, mb(sizeM, nMed), nLarge, mb(sizeL, nLarge))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
EOF
log "building the generator"
(cd "$WORK/gen" && GOWORK=off GOFLAGS= go build -o gen main.go)
log "generating $FILES files, ~$BYTES bytes in $TREE"
GEN_INFO=$("$WORK/gen/gen" "$TREE" "$FILES" "$BYTES" "$WORK/small.list")
sync
log "$GEN_INFO"
NSMALL=$(wc -l <"$WORK/small.list")

# ---- timing helpers ---------------------------------------------------------
declare -A T_MED T_RANGE T_N
ROWS=()
FAILS=()
LAST_OUT=$WORK/last.out

# run_timed CMD...: runs CMD (stdout+stderr to $LAST_OUT), sets ELAPSED.
run_timed() {
	local t0 t1
	t0=$(now)
	if ! "$@" >"$LAST_OUT" 2>&1; then
		echo "bench: command failed: $*" >&2
		cat "$LAST_OUT" >&2
		exit 1
	fi
	t1=$(now)
	ELAPSED=$(calc "$t1 - $t0")
}

# record NAME T1 T2 ...: stores the median and range of the times.
record() {
	local name=$1
	shift
	local sorted n med
	sorted=$(printf '%s\n' "$@" | sort -g)
	n=$#
	med=$(echo "$sorted" | awk -v n="$n" '{a[NR]=$1} END {if (n%2) print a[(n+1)/2]; else print (a[n/2]+a[n/2+1])/2}')
	T_MED[$name]=$med
	T_N[$name]=$n
	T_RANGE[$name]="$(echo "$sorted" | head -1)–$(echo "$sorted" | tail -1)"
	ROWS+=("$name")
	log "$(printf '%-40s %s s (runs: %s)' "$name" "$med" "$*")"
}

expect() { # expect REGEX WHAT: checks $LAST_OUT
	if ! grep -Eq -- "$1" "$LAST_OUT"; then
		FAILS+=("$2: expected /$1/, got: $(tr '\n' ' ' <"$LAST_OUT")")
		echo "bench: FAIL: ${FAILS[-1]}" >&2
	fi
}

# pick N: N small files spread evenly over the tree (relative paths).
pick() {
	awk -v n="$1" -v total="$NSMALL" 'BEGIN {step = total / n} {if (NR - 1 >= next_i && c < n) {print; c++; next_i = int(c * step)}}' "$WORK/small.list"
}

# edit LIST TAG: appends a line to each file of LIST.
edit() {
	awk -v root="$TREE" -v tag="$2" '{p = root "/" $0; print "edited by bench.sh: " tag >> p; close(p)}' "$1"
}

# within_budget T1 T2 ...: whether runs that took this long leave room for
# another one.
within_budget() {
	(($# == 0)) && return 0
	awk -v b="$BUDGET" 'BEGIN {s = 0; for (i = 1; i < ARGC; i++) s += ARGV[i]; exit !(s < b)}' "$@"
}

sums() { (cd "$TREE" && xargs -d '\n' md5sum <"$1" | md5sum | cut -c1-32); }

# ---- baseline: cp -a, find ----------------------------------------------------
log "cp -a x$REPS"
ts=()
ts2=()
for i in $(seq "$REPS"); do
	run_timed cp -a "$TREE" "$WORK/copy$i"
	ts+=("$ELAPSED")
	t0=$(now)
	sync
	ts2+=("$(calc "$ELAPSED + $(now) - $t0")")
done
record "cp -a (plain copy)" "${ts[@]}"
record "cp -a + sync" "${ts2[@]}"
# The copies stay until the end: deleting 1 GiB here (ext4 with discard)
# makes the following syncs slow and noisy.

ts=()
for i in $(seq "$REPS"); do
	t0=$(now)
	n=$(cd "$TREE" && find . -type f | wc -l)
	ts+=("$(calc "$(now) - $t0")")
done
[[ $n == "$FILES" ]] || FAILS+=("find counted $n files, expected $FILES")
record "find . -type f \\| wc -l (native)" "${ts[@]}"

# ---- snap ------------------------------------------------------------------------
log "first snap x$FIRST_REPS"
ts=()
for i in $(seq "$FIRST_REPS"); do
	within_budget "${ts[@]}" || break
	if [[ -d $TREE/.snapback ]]; then
		mv "$TREE/.snapback" "$WORK/old-store-$i" # a rename: the next rep starts cold
		sync
	fi
	run_timed sb snap -m "first $i"
	expect "^snapshot of $FILES files, .*\\(read $FILES files, " "first snap"
	ts+=("$ELAPSED")
done
FIRST_OUT=$(cat "$LAST_OUT")
record "snap, first" "${ts[@]}"

log "second snap (unchanged tree) x$REPS"
ts=()
for i in $(seq "$REPS"); do
	sync
	run_timed sb snap -m "unchanged $i"
	expect "^snapshot of $FILES files, .*\\(read 0 files, " "unchanged snap"
	ts+=("$ELAPSED")
done
SECOND_OUT=$(cat "$LAST_OUT")
record "snap, unchanged tree" "${ts[@]}"

# ---- undo / redo ----------------------------------------------------------------
# One cycle: snap (untimed), edit N files, undo (timed, checked: the files are
# back), redo (timed, checked: the edits are back).
undo_cycles() {
	local n=$1 label=$2 list=$WORK/pick.$1 before edited
	pick "$n" >"$list"
	[[ $(wc -l <"$list") == "$n" ]] || die "could not pick $n small files (have $NSMALL)"
	local tu=() tr=() ts=()
	for i in $(seq "$REPS"); do
		within_budget "${tu[@]}" || break
		sync
		run_timed sb snap -m "before edit $label #$i"
		ts+=("$ELAPSED")
		before=$(sums "$list")
		edit "$list" "$label #$i"
		edited=$(sums "$list")
		sync
		run_timed sb undo
		expect "^undid snap" "undo $label"
		tu+=("$ELAPSED")
		[[ $(sums "$list") == "$before" ]] || FAILS+=("undo $label #$i: files not restored")
		sync
		run_timed sb redo
		tr+=("$ELAPSED")
		[[ $(sums "$list") == "$edited" ]] || FAILS+=("redo $label #$i: edits not restored")
	done
	record "undo after editing $label" "${tu[@]}"
	record "redo of $label" "${tr[@]}"
	# The cycle's snap after the previous cycle's redo: it reads the n files
	# the redo rewrote.
	((${#ts[@]} > 1)) && record "snap after a redo of $label" "${ts[@]:1}"
	return 0
}
N10=10
N10K=$((FILES / 10))
((N10K > NSMALL)) && N10K=$NSMALL
log "undo/redo of $N10 files x$REPS"
undo_cycles "$N10" "$N10 files"
log "undo/redo of $N10K files x$REPS"
undo_cycles "$N10K" "$N10K files"
if [[ -n $SB_BASE ]]; then
	# Undo of a few files is what a user waits for most: its fixed costs
	# (root detection, the conflict check, the pending-run check) show there.
	log "undo/redo of $N10 files x$REPS, baseline $BENCH_BASELINE"
	SBX=$SB_BASE
	undo_cycles "$N10" "$N10 files (baseline $BENCH_BASELINE)"
	log "undo/redo of $N10K files x$REPS, baseline $BENCH_BASELINE"
	undo_cycles "$N10K" "$N10K files (baseline $BENCH_BASELINE)"
	SBX=$SB
fi

# ---- run -- true --------------------------------------------------------------------
log "run -- true x$REPS"
ts=()
for i in $(seq "$REPS"); do
	sync
	run_timed bash -c 'cd "$1" && "$2" run --mode copy -- true' _ "$TREE" "$SB"
	ts+=("$ELAPSED")
done
record "snapback run -- true (copy mode)" "${ts[@]}"
# After the runs, the tree must be unchanged since the last snap.
run_timed sb snap -m "after runs"
expect "read 0 files" "snap after run -- true"

# ---- overlay modes ------------------------------------------------------------------
# Each workload natively and inside `snapback run --mode M --then discard`
# (the in-mode time includes starting and ending the run); ratios to native.
# BENCH_MODES overrides the list (default: the overlay modes doctor offers).
MODES=${BENCH_MODES:-$("$SB" doctor --json | awk '/"name"/ {gsub(/[",]/, "", $2); n = $2} /"available": true/ && n != "copy" {print n}' | tr '\n' ' ')}
declare -A W
W[find]='find . -type f | wc -l'
W[tar]='tar cf /dev/zero --exclude=./.snapback .'
# 10,000 small files out of a tarball, then removed: write-heavy.
head -n 10000 "$WORK/small.list" >"$WORK/untar.list"
(cd "$TREE" && tar cf "$WORK/small.tar" -T "$WORK/untar.list")
W[untar+rm]="mkdir -p w.bench && tar xf '$WORK/small.tar' -C w.bench && rm -rf w.bench"
WORKLOADS=(find tar untar+rm)
declare -A OV_MED
for w in "${WORKLOADS[@]}"; do
	ts=()
	for i in $(seq "$REPS"); do
		sync
		run_timed bash -c "cd '$TREE' && ${W[$w]}"
		ts+=("$ELAPSED")
	done
	record "$w (native)" "${ts[@]}"
done
for mode in $MODES; do
	log "mode $mode"
	ts=()
	for i in $(seq "$REPS"); do
		sync
		run_timed bash -c 'cd "$1" && "$2" run --mode "$3" -- true' _ "$TREE" "$SB" "$mode"
		ts+=("$ELAPSED")
	done
	record "snapback run -- true ($mode)" "${ts[@]}"
	for w in "${WORKLOADS[@]}"; do
		ts=()
		for i in $(seq "$REPS"); do
			sync
			run_timed bash -c 'cd "$1" && "$2" run --mode "$3" --then discard -- bash -c "$4"' _ "$TREE" "$SB" "$mode" "${W[$w]}"
			ts+=("$ELAPSED")
		done
		record "$w ($mode)" "${ts[@]}"
	done
	for n in 1 1000; do
		pick "$n" >"$WORK/commit.list"
		ts=()
		for i in $(seq "$REPS"); do
			run_timed bash -c 'cd "$1" && "$2" run --mode "$3" --then review -- sh -c "xargs -d \"\\n\" -I{} sh -c \"echo edited >> {}\" < \"$4\""' _ "$TREE" "$SB" "$mode" "$WORK/commit.list"
			sync
			run_timed sb commit
			ts+=("$ELAPSED")
			run_timed sb undo
		done
		record "commit of $n changed files ($mode)" "${ts[@]}"
	done
done

# ---- zfs mode ------------------------------------------------------------------------
# The same tree (and a first snap of it) in a dataset of a pool on a sparse
# file in the work directory, then `run --mode zfs -- true`: two clones
# made, bind-mounted, compared by stat, destroyed. As root where zfs
# answers (zfs-fuse's daemon is started here when it does not, and
# stopped); BENCH_ZFS=0 skips it.
ZFS_POOL= ZFS_DAEMON=
zfs_cleanup() {
	if [[ -n $ZFS_POOL ]]; then
		for _ in $(seq 20); do # zfs-fuse: "pool is busy" for a moment after an unmount
			zpool destroy -f "$ZFS_POOL" 2>/dev/null && break
			sleep 0.5
		done
	fi
	if [[ -n $ZFS_DAEMON ]]; then
		kill "$ZFS_DAEMON" 2>/dev/null || true
	fi
}
if [[ ${BENCH_ZFS:-1} == 1 && $(id -u) == 0 ]] && command -v zpool >/dev/null; then
	trap 'zfs_cleanup; cleanup' EXIT
	if ! zfs list >/dev/null 2>&1 && command -v zfs-fuse >/dev/null; then
		zfs-fuse --no-daemon >"$WORK/zfs-fuse.log" 2>&1 &
		ZFS_DAEMON=$!
		for _ in $(seq 40); do
			zfs list >/dev/null 2>&1 && break
			sleep 0.25
		done
	fi
	truncate -s $((BYTES * 3 + (1 << 30))) "$WORK/zfs.img"
	if zpool create -o cachefile=none -m "$WORK/zfs" "snapback-bench-$$" "$WORK/zfs.img" >/dev/null 2>&1; then
		ZFS_POOL=snapback-bench-$$
		ZTREE=$WORK/zfs/tree
		log "zfs mode: copying the tree into $ZFS_POOL/tree"
		zfs create "$ZFS_POOL/tree"
		(cd "$TREE" && tar cf - --exclude=./.snapback .) | (cd "$ZTREE" && tar xf -)
		run_timed "$SB" -C "$ZTREE" snap -m base
		expect "read $FILES files" "first snap in the dataset"
		ts=()
		for i in $(seq "$REPS"); do
			sync
			run_timed bash -c 'cd "$1" && "$2" run --mode zfs -- true' _ "$ZTREE" "$SB"
			ts+=("$ELAPSED")
		done
		record "snapback run -- true (zfs)" "${ts[@]}"
		run_timed "$SB" -C "$ZTREE" snap -m "after runs"
		expect "read 0 files" "snap after run --mode zfs -- true"
		zfs_cleanup
		ZFS_POOL= ZFS_DAEMON=
	else
		FAILS+=("zpool create failed: the zfs mode was not measured")
	fi
fi

STORE_SIZE=$(du -sh "$TREE/.snapback" | cut -f1)
NSNAPS=$(sb list --json | grep -c '"id"' || true)

# ---- report -----------------------------------------------------------------------------
fmt_t() {
	awk -v t="$1" 'BEGIN {if (t < 1) printf "%.0f ms", t*1000; else printf "%.2f s", t}'
}
base=${T_MED["cp -a (plain copy)"]}
echo
echo "## snapback bench: $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "- tree: $GEN_INFO"
dev=$(basename "$(findmnt -no SOURCE -T "$TREE" 2>/dev/null || echo '?')")
journal="journal: $(compgen -G "/proc/fs/jbd2/$dev-*" >/dev/null && echo yes || echo 'none found (ext4 without a journal skips recently deleted inodes on every create: creates get slow after mass deletes)')"
echo "- machine: $(nproc) CPUs, $(uname -sr), $(findmnt -no FSTYPE,OPTIONS -T "$TREE" 2>/dev/null || echo '?'), $journal; work dir $WORK"
echo "- snapback: $(git -C "$REPO" describe --always --dirty 2>/dev/null || echo '?'); medians of up to $REPS runs (expensive steps stop repeating after ${BUDGET} s; see the runs column); warm cache, sync before each step"
echo "- first snap said: $FIRST_OUT"
echo "- unchanged snap said: $SECOND_OUT"
echo "- load average at start: $LOAD0; at end: $(cut -d' ' -f1-3 /proc/loadavg) (other processes compete for the CPUs if these are high)"
echo "- store after the run: $STORE_SIZE, $NSNAPS snapshots"
echo
echo "| operation | time | ratio to \`cp -a\` | runs (min–max) |"
echo "|---|---:|---:|---|"
for r in "${ROWS[@]}"; do
	t=${T_MED[$r]}
	ratio=$(awk -v t="$t" -v b="$base" 'BEGIN {r = t/b; if (r < 0.1) printf "%.3f×", r; else printf "%.2f×", r}')
	lo=${T_RANGE[$r]%–*}
	hi=${T_RANGE[$r]#*–}
	echo "| $r | $(fmt_t "$t") | $ratio | ${T_N[$r]} ($(fmt_t "$lo")–$(fmt_t "$hi")) |"
done
if [[ -n $MODES ]]; then
	echo
	echo "Inside the isolation modes (ratio to the same workload run natively):"
	echo
	hdr="| workload | native |"
	sep="|---|---:|"
	for mode in $MODES; do
		hdr+=" $mode | ratio |"
		sep+="---:|---:|"
	done
	echo "$hdr"
	echo "$sep"
	for w in "${WORKLOADS[@]}"; do
		nat=${T_MED["$w (native)"]}
		line="| $w | $(fmt_t "$nat") |"
		for mode in $MODES; do
			t=${T_MED["$w ($mode)"]}
			line+=" $(fmt_t "$t") | $(awk -v t="$t" -v b="$nat" 'BEGIN {printf "%.2f×", t/b}') |"
		done
		echo "$line"
	done
	for r in "snapback run -- true" "commit of 1 changed files" "commit of 1000 changed files"; do
		line="| $r | |"
		for mode in $MODES; do
			line+=" $(fmt_t "${T_MED["$r ($mode)"]}") | |"
		done
		echo "$line"
	done
fi
echo
# ---- checkpoints ------------------------------------------------------------
# An agent turn's checkpoint (begin + end, 10 files changed) on git
# repositories of 10,000 and 100,000 files, next to git stash create +
# apply (scripts/bench-checkpoint.sh). BENCH_CHECKPOINT=0 skips it.
if [[ ${BENCH_CHECKPOINT:-1} == 1 ]]; then
	log "bench-checkpoint.sh"
	if ! SNAPBACK=$SB BENCH_DIR=$WORK BENCH_REPS=$REPS "$REPO/scripts/bench-checkpoint.sh"; then
		FAILS+=("scripts/bench-checkpoint.sh failed")
	fi
fi
# ---- targets and archives --------------------------------------------------
# Each backend's own script (one run each, ratios to the native tool),
# then the archive catalog's throughput. BENCH_TARGETS=0 skips them;
# a script whose service is missing reports it and the run goes on.
if [[ ${BENCH_TARGETS:-1} == 1 ]]; then
	export SNAPBACK_TEST_POSTGRES=${SNAPBACK_TEST_POSTGRES:-postgres://snapback:snapback@127.0.0.1:5432/postgres?sslmode=disable}
	for b in sqlite postgres mysql docker btrfs zfs archive; do
		echo
		log "bench-$b.sh"
		if ! SNAPBACK=$SB BENCH_DIR=$WORK "$REPO/scripts/bench-$b.sh"; then
			FAILS+=("scripts/bench-$b.sh failed")
		fi
	done
fi
echo
if ((${#FAILS[@]})); then
	echo "FAILED checks:"
	printf -- '- %s\n' "${FAILS[@]}"
	exit 1
fi
echo "All checks passed (first snap read every file, unchanged snaps read 0 files, undo/redo restored exactly the edited files)."
log "done"
