# scripts/lib/bench-common.sh: the timing helpers the bench scripts had
# each copied; they source it (`source "$(dirname
# "${BASH_SOURCE[0]}")/lib/bench-common.sh"`, before any cd). It defines
# functions only.

# now: the time, in seconds since the epoch (with nanoseconds).
now() { date +%s.%N; }

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
