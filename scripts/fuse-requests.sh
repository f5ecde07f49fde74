#!/usr/bin/env bash
# scripts/fuse-requests.sh CMD [ARG...]: runs CMD and prints how many
# requests of each kind the kernel sent to the FUSE file system of the
# current directory meanwhile, from the fuse:fuse_request_send
# tracepoint (Linux 6.14+, as root). Inside a view:
#
#   snapback run --mode fuse --then discard -- scripts/fuse-requests.sh git status
#
# counts what a `git status` costs the view's server. The counts are of
# every process's requests to that file system, not only CMD's. Tracing
# is the kernel's, one for the machine: the script puts back what it
# changed, and fails (exit 1) rather than print a count that lost events.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: fuse-requests.sh CMD [ARG...]" >&2; exit 2; }
T=/sys/kernel/tracing
mounted=
if [ ! -d "$T/events" ] && mount -t tracefs nodev "$T" 2>/dev/null; then
	mounted=1
fi
ev=$T/events/fuse/fuse_request_send
unmount() { [ -z "$mounted" ] || umount "$T"; }
if [ ! -e "$ev/enable" ]; then
	echo "fuse-requests: no fuse:fuse_request_send tracepoint under $T (Linux 6.14+, root)" >&2
	unmount
	exit 2
fi
if [ "$(stat -f -c %T .)" != fuseblk ] && ! grep -q " $(stat -c %m .) fuse" /proc/self/mounts; then
	echo "fuse-requests: $(pwd) is not on a FUSE file system" >&2
	unmount
	exit 2
fi
# The tracepoint names a connection by its kernel dev_t (major << 20 | minor).
conn=$(( ($(stat -c %Hd .) << 20) | $(stat -c %Ld .) ))
was_on=$(cat "$T/tracing_on")
was_kb=$(awk '{print $1; exit}' "$T/buffer_size_kb") # "7 (expanded: 1408)" before first use
restore() {
	echo 0 >"$ev/enable"
	echo 0 >"$ev/filter"
	echo "$was_kb" >"$T/buffer_size_kb"
	echo "$was_on" >"$T/tracing_on"
	unmount
}
trap restore EXIT
echo 0 >"$T/tracing_on"
echo 65536 >"$T/buffer_size_kb" # per CPU: room for about 600,000 requests
echo >"$T/trace"                # also zeroes the overrun counts
echo "connection == $conn" >"$ev/filter"
echo 1 >"$ev/enable"
echo 1 >"$T/tracing_on"
rc=0
"$@" || rc=$?
echo 0 >"$T/tracing_on"
lost=$(cat "$T"/per_cpu/cpu*/stats | awk '/^overrun:/ {n += $2} END {print n + 0}')
if [ "$lost" -gt 0 ]; then
	echo "fuse-requests: the trace buffer lost $lost events; no count printed" >&2
	exit 1
fi
grep -o '(FUSE_[A-Z_0-9]*)' "$T/trace" | tr -d '()' | sort | uniq -c | sort -rn |
	awk '{print; n += $1} END {printf "%7d requests\n", n}'
exit "$rc"
