#!/usr/bin/env bash
# fuzz.sh: long fuzzing, for a developer's machine or a nightly job; the
# test command (test.sh) only replays the seed corpora and fuzzes briefly.
#
#   scripts/fuzz.sh [DURATION] [TARGET-REGEXP]
#   scripts/fuzz.sh model [DURATION]
#
# DURATION is per target, a Go duration (default 10m); TARGET-REGEXP picks
# the fuzz functions by name (default: all of them, found in the test
# files). Each target's new inputs are minimised (up to 10 s each) and
# kept in the Go cache ($(go env GOCACHE)/fuzz), so that a second run goes
# on where the first stopped. A failure leaves its input in the package's
# testdata/fuzz/FuzzX/: commit it with the fix, as a seed. To refresh the
# checked-in seeds from what a long run found, copy a few of the cache's
# files into testdata/fuzz/FuzzX/ (keep the corpora small: under 1 MB in
# all).
#
# "model" runs the model test instead (cmd/snapback TestModel: random
# sequences of snapback verbs and a person's edits against a model of
# what each verb promises) for DURATION (default 10m) in all, with up to
# RAPID_SHRINKTIME (default 5m) to shrink a failing sequence. A failure
# prints the sequence as a shell script and leaves it in
# cmd/snapback/testdata/rapid/TestModel/, which every later `go test`
# replays first until the fix (after it the file may no longer replay: pin
# what it found as a script in testdata/script/, and remove the file;
# docs/testing.md). As root it also drives the overlayfs and fuse modes.
#
#   scripts/fuzz.sh watch [TURNS]
#
# "watch" runs the watched checkpoint's exactness test (snapshot
# TestWatchedCheckpointExact: every end compared with a scan of the whole
# tree, over random changes while the watcher is started, stopped and
# killed) for TURNS turns (default 20000), each time with a new seed; a
# failure prints its seed, which SNAPBACK_WATCH_SEED replays.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = watch ]; then
	export SNAPBACK_WATCH_TURNS=${2:-20000}
	echo "== watched checkpoints ($SNAPBACK_WATCH_TURNS turns)"
	exec go test -count=1 -v -timeout 0 -run '^TestWatchedCheckpointExact$' ./snapshot/
fi

if [ "${1:-}" = model ]; then
	export SNAPBACK_MODEL_TIME=${2:-10m}
	export SNAPBACK_MODEL_RANDOM=1 # a new search each time (go test replays seed 1's first 36 sequences)
	export RAPID_SHRINKTIME=${RAPID_SHRINKTIME:-5m}
	echo "== model test ($SNAPBACK_MODEL_TIME)"
	exec go test -count=1 -v -timeout 0 -run '^TestModel$' ./cmd/snapback/
fi

duration=${1:-10m}
pick=${2:-.}

failed=()
ran=0
while read -r file; do
	dir=$(dirname "$file")
	for fn in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		[[ $fn =~ $pick ]] || continue
		ran=$((ran + 1))
		echo "== fuzz $fn ($dir, $duration)"
		log=$(mktemp)
		status=0
		go test -run '^$' -fuzz "^$fn\$" -fuzztime "$duration" -fuzzminimizetime 10s -timeout 0 "./$dir/" 2>&1 | tee "$log" || status=$?
		# Go 1.26's fuzz coordinator can fail a run with "context deadline
		# exceeded" as its -fuzztime ends, having found nothing
		# (golang/go#75804, fixed in 1.27): a real failure always writes
		# its input first.
		if [ "$status" -ne 0 ] && grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written to' "$log"; then
			echo "-- $fn: the run ended with Go's spurious deadline error and no failing input: counted as passed"
			status=0
		fi
		rm -f "$log"
		if [ "$status" -ne 0 ]; then
			failed+=("$fn")
		fi
	done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sed 's|^\./||' | sort)

if [ "$ran" -eq 0 ]; then
	echo "no fuzz target matches $pick" >&2
	exit 2
fi
if [ ${#failed[@]} -gt 0 ]; then
	echo "FAIL: ${failed[*]}"
	exit 1
fi
echo "PASS: $ran fuzz targets, $duration each"
