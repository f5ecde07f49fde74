#!/usr/bin/env bash
# bench-checkpoint.sh: what an agent turn's checkpoint costs. On a git
# repository of 10,000, 100,000 and 1,000,000 small files (a source tree:
# files of 1-4 KiB, 40 to a directory, all committed), one turn is
# `checkpoint begin`, an edit of 10 files, `checkpoint end` (checked: 10
# paths changed); it is timed as begin + end (the edit is not timed),
# with the tree's watcher (the end reads only what it names; checked: the
# end says it was watched) and without it (SNAPBACK_WATCH=off: the end
# reads the whole tree, as before the watcher), next to `git stash
# create` + `git stash apply` of the same kind of change (git recording
# it, then bringing it back onto the tree after a `git checkout` of the
# files, which is not timed). The goal: at most 30 ms at every size.
# Medians of BENCH_REPS turns, after turns that are not timed (the first
# begin reads every file, as a first snap does, and starts the watcher,
# which is waited for: how long it takes to watch every directory is a
# row of its own). Prints a Markdown table.
#
# Then, up to 100,000 files, the same turn, and `snapback run -- true`
# (the default mode), in a linked worktree of the same repository (`git
# worktree add`: HEAD, the index and the refs outside the root, which
# each step saves and checks) next to the repository's own work tree:
# the goal is at most 1.10× (a second table).
#
# Environment: BENCH_CHECKPOINT_SIZES (default "10000 100000 1000000"),
# BENCH_REPS (default 5), SNAPBACK (a binary; default: built from this
# repository), BENCH_DIR (where the work directory goes; default: the
# repository's parent directory), BENCH_REPOS (a directory where the
# repositories are made once and kept for the next runs, which use them
# as they find them: a 1,000,000-file one takes minutes to make; default:
# made in the work directory and removed with it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh" # now, timed, timed_to
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIZES=${BENCH_CHECKPOINT_SIZES:-10000 100000 1000000}
REPS=${BENCH_REPS:-5}
WORK=$(mktemp -d "${BENCH_DIR:-$(dirname "$REPO")}/snapback-bench-checkpoint.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SB=${SNAPBACK:-}
if [[ -z $SB ]]; then
	SB=$WORK/snapback
	(cd "$REPO" && CGO_ENABLED=0 go build -o "$SB" ./cmd/snapback)
fi
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.4f", b - a}'; }
between() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.4f", b - a}'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
ms() { awk -v t="$1" 'BEGIN {printf "%.0f ms", t*1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f×", a / b}'; }
# checkpoint begin makes a project's store in the state directory: the
# work directory's, removed with it.
export XDG_STATE_HOME=$WORK/state
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.com GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.com

# make_repo DIR N: N files of 1-4 KiB, 40 to a directory, committed, and
# packed as a clone is. The commit is made by git fast-import, straight
# into a pack: `git add` and `git gc` would write N loose objects and
# delete them, and ext4 makes every file created for minutes after next
# to N recently deleted inodes slow (it skips them one by one:
# recently_deleted(), 0.3-0.9 ms a create here), which timed the
# deletion instead of the turns.
make_repo() {
	local dir=$1 n=$2 head
	mkdir -p "$dir"
	awk -v n="$n" 'BEGIN {for (d = 0; d < (n + 39) / 40; d++) printf "src/p%02d/d%04d\n", d % 50, d}' | (cd "$dir" && xargs mkdir -p)
	git -C "$dir" init -q
	git -C "$dir" config gc.auto 0 # no packing in the background while a turn is timed
	head=$(git -C "$dir" symbolic-ref HEAD)
	(cd "$dir" && awk -v n="$n" -v head="$head" 'BEGIN {
		srand(1)
		printf "commit %s\ncommitter bench <bench@example.com> 1700000000 +0000\ndata 7\ninitial\n", head
		for (i = 0; i < n; i++) {
			d = int(i / 40)
			f = sprintf("src/p%02d/d%04d/f%06d.go", d % 50, d, i)
			size = 1024 + int(rand() * 3072)
			line = sprintf("// file %d: the quick brown fox jumps over the lazy dog %d\n", i, i)
			k = int((size + length(line) - 1) / length(line))
			printf "M 100644 inline %s\ndata %d\n", f, k * length(line)
			for (w = 0; w < k; w++) {
				printf "%s", line > f
				printf "%s", line
			}
			close(f)
		}
	}' | git fast-import --quiet)
	git -C "$dir" reset -q # the index, from the commit, with the files' stat data
	[[ -z $(git -C "$dir" status --porcelain) ]] || {
		echo "bench-checkpoint: the repository in $dir does not match its commit" >&2
		exit 1
	}
	git -C "$dir" status --porcelain >/dev/null # refresh the index, as an editor would
}

# files DIR N REP: 10 files spread over the tree, different each rep.
files() {
	local n=$2 rep=$3
	for k in $(seq 0 9); do
		local i=$(((k * n / 10 + rep * 7) % n)) d
		d=$((i / 40))
		printf 'src/p%02d/d%04d/f%06d.go\n' $((d % 50)) "$d" "$i"
	done
}

edit() { # edit DIR TAG <list
	local dir=$1 tag=$2 f
	while read -r f; do echo "// edited: $tag" >>"$dir/$f"; done
}

# turns DIR N [off]: untimed turns (the first starts the watcher, and
# turns go on until one is watched), then REPS timed ones; sets mb, me,
# mt (medians of begin, end, begin + end). With off, the watcher is off
# (SNAPBACK_WATCH=off: every end reads the whole tree).
turns() {
	local dir=$1 n=$2 off=${3:-} r t0 t1 b e out tb=() te=() tt=() want='"watched": true' w
	if [[ -n $off ]]; then
		export SNAPBACK_WATCH=off
		want='"watched": false'
	fi
	for w in $(seq 1 100); do
		"$SB" -C "$dir" checkpoint begin -m warm >/dev/null # the first reads every file once
		files "$dir" "$n" 0 | edit "$dir" warm
		out=$("$SB" -C "$dir" checkpoint end --json 2>/dev/null)
		grep -q "$want" <<<"$out" && break
		((w < 100)) || {
			echo "bench-checkpoint: no watched end in $dir after 100 turns: $out" >&2
			exit 1
		}
		sleep 0.2
	done
	for r in $(seq 1 "$REPS"); do
		sync
		stamp t0
		"$SB" -C "$dir" checkpoint begin -m "turn $r" >/dev/null
		stamp t1
		b=$(between "$t0" "$t1")
		files "$dir" "$n" "$r" | edit "$dir" "turn $r"
		stamp t0
		out=$("$SB" -C "$dir" checkpoint end --json)
		stamp t1
		e=$(between "$t0" "$t1")
		grep -q '"changes": 10,' <<<"$out" && grep -q "$want" <<<"$out" || {
			echo "bench-checkpoint: end of turn $r in $dir did not record 10 changes ($want): $out" >&2
			exit 1
		}
		tb+=("$b") te+=("$e") tt+=("$(awk -v a="$b" -v b="$e" 'BEGIN {print a + b}')")
	done
	mb=$(median "${tb[@]}") me=$(median "${te[@]}") mt=$(median "${tt[@]}")
	unset SNAPBACK_WATCH
}

# watch_start DIR: sets ws, the time a watcher takes from its start to
# its first token (every directory watched), and nd, the directories.
watch_start() {
	local dir=$1 store pid t0
	store=$(echo "$XDG_STATE_HOME"/snapback/projects/"$(basename "$dir")"-*)
	pid=$(sed -n 's/^pid //p' "$store/watch/lock" 2>/dev/null || true)
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && sleep 0.5
	t0=$(now)
	"$SB" __watch-tree --start "$dir" "$store" # as a begin starts it (the lock and socket made, then passed)
	python3 - "$store/watch/sock" <<-'EOF'
		import socket, sys, time
		while True:
		    try:
		        s = socket.socket(socket.AF_UNIX)
		        s.connect(sys.argv[1])
		        s.send(b"mark\n")
		        if s.recv(100).startswith(b"ok "):
		            break
		    except OSError:
		        pass
		    time.sleep(0.005)
	EOF
	ws=$(since "$t0")
	nd=$(find "$dir" -path "$dir/.git" -prune -o -type d -print | wc -l)
}

# run_true DIR: sets mr, the median of REPS `snapback run -- true` there,
# and mode, the mode it ran in.
run_true() {
	local dir=$1 r t0 t1 tr=()
	mode=$(cd "$dir" && "$SB" run --json -- true 2>&1 >/dev/null | sed -n 's/.*"mode": *"\([a-z]*\)".*/\1/p' | head -1)
	for r in $(seq 1 "$REPS"); do
		sync
		stamp t0
		(cd "$dir" && "$SB" run -- true 2>/dev/null)
		stamp t1
		tr+=("$(between "$t0" "$t1")")
	done
	mr=$(median "${tr[@]}")
}

rows=() srows=() wrows=()
for n in $SIZES; do
	dir=$WORK/repo$n
	if [[ -n ${BENCH_REPOS:-} ]]; then
		dir=$BENCH_REPOS/repo$n
		git -C "$dir" worktree prune 2>/dev/null || true # an earlier run's, removed with its work directory
	fi
	if [[ ! -d $dir/.git ]]; then
		echo "bench-checkpoint: making a git repository of $n files" >&2
		make_repo "$dir" "$n"
	fi
	echo "bench-checkpoint: turns in $n files" >&2
	turns "$dir" "$n"
	wmt=$mt wmb=$mb wme=$me
	turns "$dir" "$n" off
	fmt=$mt fmb=$mb fme=$me
	watch_start "$dir"
	srows+=("| $n files, $nd directories | $(ms "$ws") |")
	git -C "$dir" add -A && git -C "$dir" commit -qm turns # what the turns did, so the stash holds only its own change
	git -C "$dir" status --porcelain >/dev/null
	tg=()
	for r in $(seq 1 "$REPS"); do
		files "$dir" "$n" "$((r + REPS))" >"$WORK/list"
		edit "$dir" "stash $r" <"$WORK/list"
		sync
		stamp t0
		sha=$(git -C "$dir" stash create "turn $r")
		stamp t1
		c=$(between "$t0" "$t1")
		xargs -d '\n' git -C "$dir" checkout -q -- <"$WORK/list"
		stamp t0
		git -C "$dir" stash apply -q "$sha" >/dev/null
		stamp t1
		a=$(between "$t0" "$t1")
		[[ $(git -C "$dir" status --porcelain | wc -l) == 10 ]] || {
			echo "bench-checkpoint: git stash apply did not bring back 10 changed files" >&2
			exit 1
		}
		git -C "$dir" checkout -q -- .
		tg+=("$(awk -v a="$c" -v b="$a" 'BEGIN {print a + b}')")
	done
	mg=$(median "${tg[@]}")
	rows+=("| $n files | $(ms "$wmt") (begin $(ms "$wmb"), end $(ms "$wme")) | $(ms "$fmt") (begin $(ms "$fmb"), end $(ms "$fme")) | $(ms "$mg") | $(ratio "$wmt" "$fmt") | $(ratio "$wmt" "$mg") |")

	((n > 100000)) && continue
	# The same in a linked worktree, next to the repository's own tree
	# (measured again here, in turn, so that both see the same load).
	echo "bench-checkpoint: adding a linked worktree of $n files" >&2
	git -C "$dir" worktree add -q -b "wt-${WORK##*.}" "$WORK/wt$n" # a branch of its own: BENCH_REPOS keeps the repository
	git -C "$WORK/wt$n" status --porcelain >/dev/null
	turns "$dir" "$n"
	pt=$mt
	turns "$WORK/wt$n" "$n"
	wt=$mt
	run_true "$dir"
	pr=$mr
	run_true "$WORK/wt$n"
	wrows+=("| \`run -- true\` ($mode), $n files | $(ms "$pr") | $(ms "$mr") | $(ratio "$mr" "$pr") |")
	wrows+=("| checkpoint begin + end, 10 files changed, $n files | $(ms "$pt") | $(ms "$wt") | $(ratio "$wt" "$pt") |")
done
echo "A turn's checkpoint: begin + end, 10 files changed (medians of $REPS; load average $(cut -d' ' -f1-3 /proc/loadavg); goal: at most 30 ms):"
echo
echo "| git repository of | watched | whole tree read (SNAPBACK_WATCH=off) | git stash create + apply | watched / whole | watched / git |"
echo "|---|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "The watcher's start, until it gives its first token (every directory watched; once per watcher):"
echo
echo "| tree | time |"
echo "|---|---:|"
printf '%s\n' "${srows[@]}"
echo
echo "In a linked worktree of the same repository (medians of $REPS; goal: at most 1.10×):"
echo
echo "| operation | the repository's own tree | a linked worktree | ratio |"
echo "|---|---:|---:|---:|"
printf '%s\n' "${wrows[@]}"
