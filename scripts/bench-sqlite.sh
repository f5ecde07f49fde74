#!/usr/bin/env bash
# bench-sqlite.sh: snapshot and restore of a SQLite database through
# snapback (a project whose only target is the database) next to the
# sqlite3 shell's .backup and .restore of the same file, one run, as
# ratios. Prints a Markdown table. scripts/bench.sh calls it.
#
# Environment:
#   BENCH_SQLITE_MB  size of the database in MiB (default 1024)
#   SNAPBACK         snapback binary (default: build it)
#   BENCH_DIR        where to work (default: beside the repository)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh" # now, timed, timed_to
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MB=${BENCH_SQLITE_MB:-1024}
command -v sqlite3 >/dev/null || { echo "bench-sqlite: sqlite3 is not installed" >&2; exit 1; }
WORK=$(mktemp -d "${BENCH_DIR:-$(dirname "$REPO")}/snapback-bench-sqlite.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SB=${SNAPBACK:-}
if [[ -z $SB ]]; then
	SB=$WORK/snapback
	(cd "$REPO" && CGO_ENABLED=0 go build -o "$SB" ./cmd/snapback)
fi
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f×", a / b}'; }

P=$WORK/project
mkdir -p "$P"
DB=$P/app.db
rows=$((MB * 1024 / 4))
echo "bench-sqlite: making a $MB MiB database ($rows rows of 4 KiB)" >&2
sqlite3 "$DB" "PRAGMA journal_mode=WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $rows)
INSERT INTO t(v) SELECT randomblob(4000) FROM n;" >/dev/null
printf '[[target]]\nname = "app"\nbackend = "sqlite"\npath = "app.db"\n' >"$P/snapback.toml"
size=$(du -m "$DB" | cut -f1)

timed_to t_backup sqlite3 "$DB" ".backup '$WORK/copy.db'"
timed_to t_restore sqlite3 "$DB" ".restore '$WORK/copy.db'"
rm -f "$WORK/copy.db"
timed_to t_snap "$SB" -C "$P" snap -m bench
sqlite3 "$DB" "DELETE FROM t WHERE id % 10 = 0" >/dev/null
# undo = save the present state (a snapshot) + restore the snapshot's.
timed_to t_undo "$SB" -C "$P" undo
n=$(sqlite3 "$DB" "SELECT count(*) FROM t")
[[ $n == "$rows" ]] || { echo "bench-sqlite: after undo $n rows, want $rows" >&2; exit 1; }

echo "SQLite database of $size MiB:"
echo
echo "| operation | snapback | sqlite3 shell | ratio |"
echo "|---|---:|---:|---:|"
echo "| snapshot (snap; .backup) | ${t_snap} s | ${t_backup} s | $(ratio "$t_snap" "$t_backup") |"
echo "| undo = snapshot + restore (.backup + .restore) | ${t_undo} s | $(awk -v a="$t_backup" -v b="$t_restore" 'BEGIN {printf "%.3f", a + b}') s | $(ratio "$t_undo" "$(awk -v a="$t_backup" -v b="$t_restore" 'BEGIN {print a + b}')") |"
