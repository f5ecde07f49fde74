# scripts/lib/bench-common.sh: the timing helpers the bench scripts had
# each copied; they source it (`source "$(dirname
# "${BASH_SOURCE[0]}")/lib/bench-common.sh"`, before any cd). It defines
# functions only.

# now: the time, in seconds since the epoch (microseconds or finer).
# bash 5's EPOCHREALTIME needs no fork of date(1), whose start would be
# timed too (its decimal point is the locale's: a comma becomes a dot).
now() {
	if [[ -n ${EPOCHREALTIME:-} ]]; then
		printf '%s\n' "${EPOCHREALTIME/,/.}"
	else
		date +%s.%N
	fi
}

# stamp VAR: stores the time now (as now prints it) in VAR without a
# subshell, whose fork would be timed too: `stamp t0; CMD; stamp t1`.
stamp() {
	if [[ -n ${EPOCHREALTIME:-} ]]; then
		printf -v "$1" '%s' "${EPOCHREALTIME/,/.}"
	else
		printf -v "$1" '%s' "$(date +%s.%N)"
	fi
}

# timed CMD...: prints the seconds CMD takes (3 decimals), after a sync;
# CMD's output goes where the caller's does.
timed() {
	sync
	local start end
	start=$(now)
	"$@"
	end=$(now)
	awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}

# timed_to VAR CMD...: runs CMD after a sync, its output discarded, and
# stores its seconds (3 decimals) in VAR.
timed_to() {
	local var=$1 t0
	shift
	sync
	t0=$(now)
	"$@" >/dev/null
	printf -v "$var" '%.3f' "$(awk -v a="$t0" -v b="$(now)" 'BEGIN {print b - a}')"
}
