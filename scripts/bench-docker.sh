#!/usr/bin/env bash
# bench-docker.sh: the docker-volume backend against the plain ways of
# copying a volume. It makes a volume of ~BENCH_BYTES (90 % in 16 large
# files, 10 % in files of 20 KiB), then times, each after a `sync`:
#   - snapback's snapshot and restore (BenchmarkDockerVolume in
#     backends/, built static so that the test binary is its own helper),
#     with the archive through a bind mount of the payload directory and
#     through the Engine API's stream;
#   - `docker cp` of the volume out of a never-started container;
#   - `tar -c` of the volume's mount point, and `cp -a` of it, each + sync;
#   - `tar -x` into an empty directory + sync (what a restore must do).
# It prints seconds and the ratio to `cp -a` (out) or `tar -x` (in), and
# removes everything it made. It needs root (the mount point lives under
# /var/lib/docker) and a Docker daemon on this machine.
#
# Environment: BENCH_BYTES (default 1073741824), BENCH_DIR (where the
# copies go; default $TMPDIR or /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."

BYTES=${BENCH_BYTES:-1073741824}
vol=snapback-bench-$$
work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/snapback-bench-docker.XXXXXX")
ctr=
img=
cleanup() {
	[ -z "$ctr" ] || docker rm -f "$ctr" >/dev/null 2>&1 || true
	docker volume rm -f "$vol" >/dev/null 2>&1 || true
	[ -z "$img" ] || docker rmi -f "$img" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "== building the static test binary"
CGO_ENABLED=0 GOFLAGS= go test -c -o "$work/backends.test" ./backends/
# Random bytes after the ELF: an image tag (the binary's digest) of this
# run's own, which no test run removes meanwhile.
head -c 16 /dev/urandom >>"$work/backends.test"
img=snapback-helper:$(sha256sum "$work/backends.test" | cut -c1-12)
export SNAPBACK_HELPER_BINARY=$work/backends.test

echo "== filling volume $vol with $BYTES bytes"
docker volume create "$vol" >/dev/null
mp=$(docker volume inspect -f '{{.Mountpoint}}' "$vol")
big=$((BYTES * 9 / 10 / 16))
for i in $(seq 1 16); do
	head -c "$big" /dev/urandom >"$mp/big-$i"
done
mkdir -p "$mp/small/a" "$mp/small/b"
head -c $((BYTES / 20)) /dev/urandom | split -b 20k - "$mp/small/a/f-"
head -c $((BYTES / 20)) /dev/urandom | split -b 20k - "$mp/small/b/f-"
echo "   $(du -sh "$mp" | cut -f1) in $(find "$mp" -type f | wc -l) files"
sync

declare -A secs
# timed NAME CMD...: seconds of CMD (run after a sync) into secs[NAME].
timed() {
	local name=$1 t0 t1
	shift
	sync
	t0=$(date +%s.%N)
	"$@"
	t1=$(date +%s.%N)
	secs[$name]=$(echo "$t1 - $t0" | bc)
}

echo "== snapback (BenchmarkDockerVolume)"
SNAPBACK_BENCH_VOLUME=$vol "$work/backends.test" -test.run '^$' -test.bench '^BenchmarkDockerVolume$' -test.benchtime 1x >"$work/bench.out"
while read -r name s; do
	secs[$name]=$s
done < <(grep -E '^(snapshot|restore)-' "$work/bench.out")

echo "== docker cp, tar, cp -a"
ctr=$(docker create --pull never -v "$vol:/v:ro" "$img")
timed docker-cp sh -c "docker cp '$ctr:/v' - >'$work/cp.tar' && sync"
timed tar-c sh -c "tar -C '$mp' -cf '$work/t.tar' . && sync"
timed cp-a sh -c "cp -a '$mp' '$work/copy' && sync"
mkdir "$work/x"
timed tar-x sh -c "tar -C '$work/x' -xf '$work/t.tar' && sync"

printf '\n| operation | seconds | ratio |\n| --- | ---: | ---: |\n'
row() { printf '| %s | %.2f | %.2f |\n' "$1" "${secs[$2]}" "$(echo "${secs[$2]} / ${secs[$3]}" | bc -l)"; }
row "cp -a of the mount point + sync" cp-a cp-a
row "tar -c of the mount point + sync" tar-c cp-a
row "docker cp out + sync" docker-cp cp-a
row "snapback snapshot (bind mount)" snapshot-bind cp-a
row "snapback snapshot (API stream)" snapshot-stream cp-a
row "tar -x into an empty directory + sync" tar-x tar-x
row "snapback restore (bind mount)" restore-bind tar-x
row "snapback restore (API stream)" restore-stream tar-x
