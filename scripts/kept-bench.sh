#!/usr/bin/env bash
# scripts/kept-bench.sh: later runs of the kept fuse view, over /dev/fuse
# reads and over FUSE over io_uring, interleaved with native runs, an
# overlayfs run and a fuse-overlayfs mount, so that a shared machine's
# changing load touches every column alike (scripts/overlay-bench.sh
# measures one column after another). Each round runs each workload
# natively, then in a run of the kept view of tree A (its server started
# with the kernel's enable_uring N: /dev/fuse reads), in a run of the
# kept view of B, a copy of A (its server started with Y: the ring; the
# transport is fixed when a server mounts), in an overlayfs run of A and
# on a fuse-overlayfs mount of A. Prints each column's median over ROUNDS
# (default 5) and its ratio to native's.
#
# The trees are Go's src/ as a git repository, as the src/ of a GOROOT of
# their own, with a small program in snapbench/ (net/http, encoding/json).
# Workloads (WL, default all): find, tar, git (status), gobuild (go build
# of snapbench with the build cache warm: GOCACHE is outside the tree, so
# not in the view; a native build of each tree fills it), untar (10,000
# small files of the tree into a new directory, then rm -rf). Every kept
# run is a later run: a warm-up run of each view comes first.
#
# As root, with snapback on PATH or SNAPBACK=path; needs enable_uring
# (Linux 6.14+) and fuse-overlayfs (else that column is left out). Puts
# enable_uring back as it was, and ends both servers.
set -euo pipefail
sb=${SNAPBACK:-snapback}
ROUNDS=${ROUNDS:-5}
WL=${WL:-find tar git gobuild untar}
uring=/sys/module/fuse/parameters/enable_uring
if [ ! -e "$uring" ]; then
	echo "kept-bench.sh: no FUSE over io_uring here ($uring)" >&2
	exit 2
fi
was=$(cat "$uring")
base=$(mktemp -d)
endkept() {
	local t pid
	for t in A B; do
		[ -d "$base/$t/goroot/src" ] || continue
		pid=$(cd "$base/$t/goroot/src" && "$sb" --json doctor | sed -n 's/.*"kept_view": *\([0-9]*\).*/\1/p')
		if [ -n "$pid" ] && [ "$pid" != 0 ]; then kill "$pid" 2>/dev/null || true; fi
	done
}
trap 'endkept; echo "$was" >"$uring"; rm -rf "$base"' EXIT
goroot=$(go env GOROOT)
for t in A B; do
	mkdir -p "$base/$t/goroot"
	for f in "$goroot"/*; do [ "$(basename "$f")" = src ] || ln -s "$f" "$base/$t/goroot/"; done
	tree=$base/$t/goroot/src
	cp -a "$goroot/src" "$tree"
	mkdir "$tree/snapbench"
	printf 'module snapbench\n\ngo 1.21\n' >"$tree/snapbench/go.mod"
	printf 'package main\n\nimport (\n\t"encoding/json"\n\t"net/http"\n\t"os"\n)\n\nfunc main() {\n\tjson.NewEncoder(os.Stdout).Encode(http.StatusText(http.StatusOK))\n}\n' >"$tree/snapbench/main.go"
	git -C "$tree" init -q
	git -C "$tree" add -A
	git -C "$tree" -c user.email=bench@localhost -c user.name=bench commit -qm tree
	echo /.snapback >>"$tree/.git/info/exclude"
	(cd "$tree/snapbench" && GOROOT=$base/$t/goroot go build -o /dev/null .)
	(cd "$tree" && git status --porcelain >/dev/null)
done
A=$base/A/goroot/src B=$base/B/goroot/src
(cd "$A" && find . -path ./.git -prune -o -type f -size -8k -print | head -n 10000 >"$base/small.list" && tar cf "$base/small.tar" -T "$base/small.list")
cat >"$base/work.sh" <<WORK
small=$base/small.tar
WORK
cat >>"$base/work.sh" <<'WORK'
w() {
	case $1 in
	find) find . -type f | wc -l ;;
	tar) tar cf /dev/zero --exclude=./.snapback . ;;
	git) git status --porcelain ;;
	gobuild) (cd snapbench && go build -o /dev/null .) ;;
	untar) mkdir w.bench && tar xf "$small" -C w.bench && rm -rf w.bench ;;
	esac
}
if [ "$1" = warm ]; then
	shift
	for x in "$@"; do w "$x" >/dev/null 2>&1; done
	exit
fi
s=$(date +%s%N)
w "$1" >/dev/null 2>&1 || echo "bench: $1 failed" >&2
echo "$1 $((($(date +%s%N) - s) / 1000000))"
WORK
inA() { (cd "$A" && GOROOT=$base/A/goroot "$@"); }
inB() { (cd "$B" && GOROOT=$base/B/goroot "$@"); }
# A's kept server without the ring, B's with it; each view's first run
# warms it.
echo N >"$uring"
inA "$sb" run --mode fuse --then discard -- bash "$base/work.sh" warm $WL
echo Y >"$uring"
inB "$sb" run --mode fuse --then discard -- bash "$base/work.sh" warm $WL
cols="native kept-dev kept-ring overlayfs"
fo=
if command -v fuse-overlayfs >/dev/null; then
	cols+=" fuse-overlayfs"
	fo=1
else
	echo "(fuse-overlayfs: not installed; its column is left out)" >&2
fi
fuseoverlay() {
	rm -rf "$base/fo"
	mkdir -p "$base/fo/upper" "$base/fo/work"
	unshare -m --propagation private bash -c '
		fuse-overlayfs -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$1" || exit 125
		cd "$1" && GOROOT=$3 bash "$4" "$5"; rc=$?
		cd / && fusermount3 -u "$1"
		exit $rc' _ "$A" "$base/fo" "$base/A/goroot" "$base/work.sh" "$1" 2>/dev/null
}
out=$base/times
for r in $(seq "$ROUNDS"); do
	for x in $WL; do
		echo "native $(inA bash "$base/work.sh" "$x")" >>"$out"
		echo "kept-dev $(inA "$sb" run --mode fuse --then discard -- bash "$base/work.sh" "$x")" >>"$out"
		echo "kept-ring $(inB "$sb" run --mode fuse --then discard -- bash "$base/work.sh" "$x")" >>"$out"
		echo "overlayfs $(inA "$sb" run --mode overlayfs --then discard -- bash "$base/work.sh" "$x")" >>"$out"
		if [ -n "$fo" ]; then echo "fuse-overlayfs $(fuseoverlay "$x")" >>"$out"; fi
	done
done
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
echo "$(nproc) CPUs, $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg); medians of $ROUNDS interleaved rounds"
hdr="| workload |"
sep="|---|"
for c in $cols; do
	hdr+=" $c |"
	sep+="---:|"
done
echo "$hdr"
echo "$sep"
for x in $WL; do
	n=$(awk -v c=native -v w="$x" '$1 == c && $2 == w {print $3}' "$out" | median)
	line="| $x | $n ms |"
	for c in ${cols#native }; do
		v=$(awk -v c="$c" -v w="$x" '$1 == c && $2 == w {print $3}' "$out" | median)
		line+=" $v ms, $(awk -v a="$v" -v b="$n" 'BEGIN { printf "%.1f×", a / (b > 0 ? b : 1) }') |"
	done
	echo "$line"
done
