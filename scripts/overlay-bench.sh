#!/usr/bin/env bash
# scripts/overlay-bench.sh [TREE]: everyday work natively, inside `snapback
# run` in each overlay mode, and on fuse-overlayfs (the C FUSE overlay
# rootless Podman uses), in one run, as ratios to native.
#
# TREE defaults to a git repository made from a copy of Go's own src/,
# placed as the src/ of a GOROOT of its own (the rest of the GOROOT links
# to the real one), so that `go build` and `go vet` work in it. Workloads:
#   find    find . -type f | wc -l
#   tar     tar cf /dev/zero . (tar cf - . >/dev/null lets GNU tar skip the reads)
#   git     git status --porcelain
#   build   go build ./...  (warm build cache: hashes every source file)
#   gobuild go build of a small program (snapbench/: net/http and
#           encoding/json) in the tree; the build cache (GOCACHE, outside
#           the tree, so not in the view) is warm from building it
#           natively first, so it hashes the sources of its ~200 packages
#   vet     go vet ./go/... (warm cache)
#   untar   untar 10,000 small files of the tree into a new directory, then rm -rf it
# Each is timed in a fresh view (one run of it in a view just mounted: the
# cost a user pays per `snapback run`; median of FRESH_REPS views, default
# 3) and in a warm view (after one warm-up, median of WARM_REPS runs,
# default 5, in the same view), and in a second run (a view of a new
# `snapback run` right after a run that did the same work: what every run
# of a project after its first pays; median of FRESH_REPS such pairs;
# for fuse-overlayfs, a second mount). Native runs are all warm (the kernel's
# caches are), and are the baseline of both views; on a shared machine
# the load changes, so native is measured again right before each mode's
# column and that column's ratios are to it. The time is measured
# inside the view: mounting and committing are not included
# (scripts/bench.sh measures `run -- true`).
#
# As root, with snapback on PATH or SNAPBACK=path. MODES (default
# "overlayfs fuse fuse+uring fuse-overlayfs") picks the columns; fuse and
# fuse+uring are fresh fuse views (SNAPBACK_FUSE_KEEP=0); fuse+uring is
# the fuse view served through FUSE over io_uring: the script switches
# the kernel's enable_uring on for that column and off for the others,
# and puts it back as it was (a kernel without it leaves the column out).
# fuse-warm is the fuse mode with its view kept warm across runs (the
# default), over /dev/fuse reads, as the fuse column; fuse-warm+uring the
# same over io_uring. Each kept column starts with a new server (the
# transport is chosen when the server mounts the view).
# fuse-overlayfs is Debian's fuse-overlayfs package; when it is missing
# the script says so and leaves its column out. WORKLOADS picks the rows.
set -euo pipefail
snapback=${SNAPBACK:-snapback}
tree=${1:-}
FRESH_REPS=${FRESH_REPS:-3}
WARM_REPS=${WARM_REPS:-5}
MODES=${MODES:-overlayfs fuse fuse+uring fuse-overlayfs}
WORKLOADS=${WORKLOADS:-find tar git build vet untar}
tmp=$(mktemp -d)
uring=/sys/module/fuse/parameters/enable_uring
uring_was=$(cat "$uring" 2>/dev/null || true)
trap 'rm -rf "$tmp"; [ -z "$uring_was" ] || echo "$uring_was" >"$uring"' EXIT
if [ -z "$tree" ]; then
	goroot=$(go env GOROOT)
	mkdir "$tmp/goroot"
	for f in "$goroot"/*; do
		[ "$(basename "$f")" = src ] || ln -s "$f" "$tmp/goroot/"
	done
	tree=$tmp/goroot/src
	cp -a "$goroot/src" "$tree"
	mkdir "$tree/snapbench"
	printf 'module snapbench\n\ngo 1.21\n' >"$tree/snapbench/go.mod"
	cat >"$tree/snapbench/main.go" <<'EOF'
package main

import (
	"encoding/json"
	"net/http"
	"os"
)

func main() {
	json.NewEncoder(os.Stdout).Encode(http.StatusText(http.StatusOK))
}
EOF
	git -C "$tree" init -q
	git -C "$tree" add -A
	git -C "$tree" -c user.email=bench@localhost -c user.name=bench commit -qm tree
	echo /.snapback >>"$tree/.git/info/exclude" # the store made natively by snapback run
	export GOROOT=$tmp/goroot
	# Fill the build cache for the workloads that build.
	case " $WORKLOADS " in *" build "* | *" vet "*) (cd "$tree" && go build ./... && go vet ./go/...) ;; esac
	case " $WORKLOADS " in *" gobuild "*) (cd "$tree/snapbench" && go build -o /dev/null .) ;; esac
fi
tree=$(cd "$tree" && pwd)
cd "$tree"
git status --porcelain >/dev/null # settle the index's stat data
# 10,000 small files of the tree, for the write-heavy row.
find . -path ./.git -prune -o -path ./.snapback -prune -o -type f -size -8k -print | head -n 10000 >"$tmp/small.list"
tar cf "$tmp/small.tar" -T "$tmp/small.list"

# The workload runner, run natively and as the command inside each view:
# "fresh W" times W once; "warm" warms up, then prints each workload's
# median.
work=$tmp/work.sh
cat >"$work" <<EOF
small=$tmp/small.tar
reps=$WARM_REPS
workloads="$WORKLOADS"
EOF
cat >>"$work" <<'EOF'
w() {
	case $1 in
	find) find . -type f | wc -l ;;
	tar) tar cf /dev/zero --exclude=./.snapback . ;;
	git) git status --porcelain ;;
	build) go build ./... ;;
	gobuild) (cd snapbench && go build -o /dev/null .) ;;
	vet) go vet ./go/... ;;
	untar) mkdir w.bench && tar xf "$small" -C w.bench && rm -rf w.bench ;;
	esac
}
t() { local s=$(date +%s%N); w "$1" >/dev/null 2>&1 || echo "bench: $1 failed" >&2; echo $((($(date +%s%N) - s) / 1000000)); }
if [ "$1" = fresh ]; then
	echo "$2 $(t "$2")"
	exit
fi
for x in $workloads; do t "$x" >/dev/null; done # warm-up
for x in $workloads; do
	echo "$x $(for i in $(seq "$reps"); do t "$x"; done | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)], a[1] "-" a[NR]}')"
done
EOF

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

# inview MODE ARGS...: runs work.sh ARGS in a view of the tree.
inview() {
	local m=$1
	shift
	if [ "$m" = fuse-overlayfs ]; then
		# Mounted on the tree's own path in a private mount namespace, as
		# snapback does (paths, and so the build cache's keys, stay the same).
		rm -rf "$tmp/fo"
		mkdir -p "$tmp/fo/upper" "$tmp/fo/work"
		unshare -m --propagation private bash -c '
			fuse-overlayfs -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$1" || exit 125
			cd "$1" && bash "${@:3}"; rc=$?
			cd / && fusermount3 -u "$1"
			exit $rc' _ "$tree" "$tmp/fo" "$work" "$@"
	elif [ "${m%+uring}" = fuse-warm ]; then
		SNAPBACK_FUSE_KEEP=1 "$snapback" run --mode fuse --then discard -- bash "$work" "$@"
	else
		# fuse+uring: the fuse view with FUSE over io_uring switched on.
		SNAPBACK_FUSE_KEEP=0 "$snapback" run --mode "${m%+uring}" --then discard -- bash "$work" "$@"
	fi
}

# endkept ends the project's kept view server, if one runs.
endkept() {
	local pid
	pid=$("$snapback" --json doctor | sed -n 's/.*"kept_view": *\([0-9]*\).*/\1/p')
	if [ -n "$pid" ] && [ "$pid" != 0 ]; then
		kill "$pid"
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	fi
}
trap 'endkept 2>/dev/null || true; rm -rf "$tmp"; [ -z "$uring_was" ] || echo "$uring_was" >"$uring"' EXIT

# The machine may be shared: native is measured again right before each
# mode, and each mode's ratios are to that native run.
declare -A ms rng
native() {
	while read -r x v r; do ms[native, $1, $x]=$v rng[native, $1, $x]=$r; done < <(bash "$work" warm)
}
cols=()
for m in $MODES; do
	if [ "$m" = fuse-overlayfs ] && ! command -v fuse-overlayfs >/dev/null; then
		echo "(fuse-overlayfs: not installed; apt-get install fuse-overlayfs to compare with it)" >&2
		continue
	fi
	if [ "$m" != "${m%+uring}" ] && [ -z "$uring_was" ]; then
		echo "($m: this kernel has no FUSE over io_uring, $uring)" >&2
		continue
	fi
	# The ring for the +uring columns only (a kept view's server picks
	# its transport when it mounts: a new one for each kept column).
	if [ -n "$uring_was" ]; then echo "$([ "$m" != "${m%+uring}" ] && echo Y || echo N)" >"$uring"; fi
	endkept
	native "$m"
	if ! inview "$m" warm >"$tmp/out" 2>"$tmp/err"; then
		echo "($m: not available here: $(tail -1 "$tmp/err"))" >&2
		continue
	fi
	cols+=("$m")
	while read -r x v r; do ms[$m, warm, $x]=$v rng[$m, warm, $x]=$r; done <"$tmp/out"
	for x in $WORKLOADS; do
		ms[$m, fresh, $x]=$(for i in $(seq "$FRESH_REPS"); do inview "$m" fresh "$x" 2>/dev/null | awk '{print $2}'; done | median)
		ms[$m, second, $x]=$(for i in $(seq "$FRESH_REPS"); do
			inview "$m" fresh "$x" >/dev/null 2>&1
			inview "$m" fresh "$x" 2>/dev/null | awk '{print $2}'
		done | median)
	done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f×", a / (b > 0 ? b : 1) }'; }
echo "tree: $(find . -path ./.snapback -prune -o -type f -print | wc -l) files, $(find . -path ./.snapback -prune -o -type d -print | wc -l) directories; $(nproc) CPUs, $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ratios to native measured right before each column (the native column: before the first)"
hdr="| view | workload | native |"
sep="|---|---|---:|"
for m in "${cols[@]}"; do
	hdr+=" $m |"
	sep+="---:|"
done
echo "$hdr"
echo "$sep"
for v in fresh second warm; do
	for x in $WORKLOADS; do
		line="| $v | $x | ${ms[native, ${cols[0]:-}, $x]:-?} ms |"
		for m in "${cols[@]}"; do
			line+=" $(ratio "${ms[$m, $v, $x]}" "${ms[native, $m, $x]}") |"
		done
		echo "$line"
	done
done
echo
echo "milliseconds (warm: median, min-max of $WARM_REPS; fresh, second: median of $FRESH_REPS views):"
for x in $WORKLOADS; do
	line="$x:"
	for m in "${cols[@]}"; do
		line+=" native before $m ${ms[native, $m, $x]} (${rng[native, $m, $x]}); $m fresh ${ms[$m, fresh, $x]}, second ${ms[$m, second, $x]}, warm ${ms[$m, warm, $x]} (${rng[$m, warm, $x]});"
	done
	echo "$line"
done
