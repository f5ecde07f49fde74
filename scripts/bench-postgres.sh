#!/usr/bin/env bash
# scripts/bench-postgres.sh: times the postgres backend on a ~1 GiB
# database (pgbench -i -s $SCALE, 70 by default) next to pg_dump -Fc and
# pg_restore into a fresh database, and prints a table of seconds and
# ratios. It needs SNAPBACK_TEST_POSTGRES, a postgres:// URL of a role
# with CREATEDB, and pgbench, pg_dump, pg_restore and psql; it drops what
# it creates. The snapback side runs BenchmarkPostgres (backends), each
# method RUNS times (3 by default), and reports the mean.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh" # now, timed, timed_to
cd "$(dirname "$0")/.."
: "${SNAPBACK_TEST_POSTGRES:?set SNAPBACK_TEST_POSTGRES to a postgres:// URL of a role with CREATEDB}"
scale=${SCALE:-70}
runs=${RUNS:-3}
db=sbbench_$$
copy=${db}_restored
tmp=$(mktemp -d)

# url DB: the server's URL naming database DB.
url() { sed -E "s#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\1/$1#" <<<"$SNAPBACK_TEST_POSTGRES"; }
sql() { psql -X -q -v ON_ERROR_STOP=1 -d "$(url postgres)" -Atc "$1"; }
cleanup() {
	sql "DROP DATABASE IF EXISTS $db WITH (FORCE)" 2>/dev/null || true
	sql "DROP DATABASE IF EXISTS $copy WITH (FORCE)" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
since() { echo "$(now) - $1" | bc; }

echo "== building $db: pgbench -i -s $scale"
sql "CREATE DATABASE $db"
pgbench -i -q -s "$scale" "$(url "$db")" 2>&1 | tail -1
size=$(sql "SELECT pg_size_pretty(pg_database_size('$db'))")

echo "== pg_dump -Fc, pg_restore into a fresh database"
t=$(now)
pg_dump -Fc -f "$tmp/db.dump" "$(url "$db")"
dump_s=$(since "$t")
t=$(now)
sql "CREATE DATABASE $copy TEMPLATE template0"
pg_restore --exit-on-error -d "$(url "$copy")" "$tmp/db.dump"
restore_s=$(since "$t")
dump_size=$(du -h "$tmp/db.dump" | cut -f1)
sql "DROP DATABASE $copy"

echo "== snapback: BenchmarkPostgres, $runs runs per method"
out=$(SNAPBACK_BENCH_POSTGRES_DB=$db go test -count=1 -run '^$' -bench 'BenchmarkPostgres' -benchtime="${runs}x" ./backends/)
metric() { # METHOD UNIT
	awk -v m="BenchmarkPostgres/$1-" -v u="$2" 'index($1, m) == 1 { for (i = 2; i < NF; i++) if ($(i+1) == u) print $i }' <<<"$out"
}
ts=$(metric template snapshot-s) tr=$(metric template restore-s)
ds=$(metric dump snapshot-s) dr=$(metric dump restore-s)

echo
echo "database $db: $size (pgbench scale $scale), dump $dump_size; PostgreSQL $(sql 'SHOW server_version'), $(nproc) CPUs, load$(uptime | sed 's/.*load average//')"
printf '%-44s %9s %9s %9s %12s\n' "" snapshot restore total "vs dump+restore"
row() { # NAME SNAP RESTORE
	printf '%-44s %9.2f %9.2f %9.2f %11.2fx\n' "$1" "$2" "$3" "$(echo "$2 + $3" | bc)" \
		"$(echo "($dump_s + $restore_s) / ($2 + $3)" | bc -l)"
}
row "pg_dump -Fc / pg_restore (fresh database)" "$dump_s" "$restore_s"
row "snapback template copy / copy + swap" "$ts" "$tr"
row "snapback fallback pg_dump / pg_restore + swap" "$ds" "$dr"
echo "(seconds; snapback: mean of $runs runs; ratio: how many times faster than pg_dump + pg_restore)"
