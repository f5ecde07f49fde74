#!/usr/bin/env bash
# bench-mysql.sh: time the mysql backend's snapshot and restore against
# `mariadb-dump --single-transaction` and a reload with the `mariadb`
# client, on a generated database of about BENCH_MYSQL_MB MiB; prints
# seconds, ratios and sizes. Needs a MariaDB server (the generator uses its
# sequence engine) and the mariadb client tools.
#
# Environment:
#   BENCH_MYSQL_MB    approximate size of the data (default 1024)
#   BENCH_MYSQL_HOST  server host (default 127.0.0.1)
#   BENCH_MYSQL_PORT  server port (default 3306)
#   BENCH_MYSQL_USER  account (default snapback)
#   BENCH_MYSQL_PASS  password (default snapback)
#
# The database (snapback_bench) and the work directory are dropped at the
# end. Two tables: 80 % of the bytes in ~1 KB text rows, 20 % in narrow
# rows of numbers and dates with a secondary index.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh" # now, timed, timed_to

MB=${BENCH_MYSQL_MB:-1024}
HOST=${BENCH_MYSQL_HOST:-127.0.0.1}
PORT=${BENCH_MYSQL_PORT:-3306}
USER_=${BENCH_MYSQL_USER:-snapback}
PASS=${BENCH_MYSQL_PASS:-snapback}
DB=snapback_bench
cd "$(dirname "$0")/.."

client=(-h"$HOST" -P"$PORT" -u"$USER_" -p"$PASS")
work=$(mktemp -d)
cleanup() {
	mariadb "${client[@]}" -e "DROP DATABASE IF EXISTS $DB; DROP DATABASE IF EXISTS ${DB}_snapback_new; DROP DATABASE IF EXISTS ${DB}_snapback_old" || true
	rm -rf "$work"
}
trap cleanup EXIT

secs() { echo "$2 - $1" | bc; }

docs=$((MB * 1024 * 1024 * 8 / 10 / 1000))
facts=$((MB * 1024 * 1024 * 2 / 10 / 60))
echo "building $DB: $docs text rows, $facts narrow rows (~$MB MiB)" >&2
mariadb "${client[@]}" <<SQL
DROP DATABASE IF EXISTS $DB;
CREATE DATABASE $DB;
USE $DB;
CREATE TABLE docs (id INT PRIMARY KEY, title VARCHAR(100), body TEXT, created DATETIME(6)) ENGINE=InnoDB;
CREATE TABLE facts (id BIGINT PRIMARY KEY, user INT, amount DECIMAL(12,2), score DOUBLE, at DATETIME, flag TINYINT, KEY (user)) ENGINE=InnoDB;
INSERT INTO docs SELECT seq, CONCAT('title ', seq), REPEAT(MD5(seq), 28), '2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_$docs;
INSERT INTO facts SELECT seq, seq % 10007, (seq % 100000) / 100, seq / 7, '2024-01-01' + INTERVAL seq MINUTE, seq % 2 FROM seq_1_to_$facts;
SQL
mariadb "${client[@]}" -N -e "ANALYZE TABLE $DB.docs, $DB.facts" >/dev/null
size=$(mariadb "${client[@]}" -N -e "SELECT ROUND(SUM(DATA_LENGTH + INDEX_LENGTH) / 1048576) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '$DB'")
echo "on disk: $size MiB" >&2

sync
t0=$(now)
mariadb-dump "${client[@]}" --single-transaction "$DB" >"$work/dump.sql"
t1=$(now)
sync
t2=$(now)
mariadb "${client[@]}" "$DB" <"$work/dump.sql"
t3=$(now)
dump_s=$(secs "$t0" "$t1")
reload_s=$(secs "$t2" "$t3")
dump_mb=$(($(stat -c %s "$work/dump.sql") / 1048576))
rm -f "$work/dump.sql"

sync
dsn="$USER_:$PASS@tcp($HOST:$PORT)/"
out=$(SNAPBACK_TEST_MYSQL="$dsn" SNAPBACK_BENCH_MYSQL_DB=$DB TMPDIR="$work" \
	go test -count=1 -run '^$' -bench '^BenchmarkMySQL$' -benchtime=1x ./backends/)
snap_s=$(echo "$out" | awk '/^BenchmarkMySQL/ { for (i = 1; i < NF; i++) if ($(i+1) == "snapshot-s") print $i }')
rest_s=$(echo "$out" | awk '/^BenchmarkMySQL/ { for (i = 1; i < NF; i++) if ($(i+1) == "restore-s") print $i }')
pay_mb=$(echo "$out" | awk '/^BenchmarkMySQL/ { for (i = 1; i < NF; i++) if ($(i+1) == "payload-MiB") print $i }')
if [ -z "$snap_s" ] || [ -z "$rest_s" ]; then
	echo "$out" >&2
	exit 1
fi

printf '%-34s %9s %7s\n' "operation ($size MiB on disk)" seconds ratio
printf '%-34s %9.2f %7s\n' "mariadb-dump --single-transaction" "$dump_s" 1.00
printf '%-34s %9.2f %7.2f\n' "snapback snapshot" "$snap_s" "$(echo "$snap_s / $dump_s" | bc -l)"
printf '%-34s %9.2f %7s\n' "mariadb < dump.sql" "$reload_s" 1.00
printf '%-34s %9.2f %7.2f\n' "snapback restore (side schema+swap)" "$rest_s" "$(echo "$rest_s / $reload_s" | bc -l)"
echo "dump.sql: $dump_mb MiB; snapback payload: $pay_mb MiB"
