#!/usr/bin/env bash
# scripts/overlay-bench.sh [TREE]: metadata-heavy and read-heavy work
# natively and inside `snapback run` in each overlay mode, warm, as
# medians of 5 with ratios to native.
#
# TREE defaults to a git repository made from a copy of Go's own src/
# (~11.5k files, 1.3k directories). Workloads: find . -type f | wc -l;
# tar cf /dev/zero . (tar -cf - . >/dev/null would let GNU tar skip the
# reads); git status --porcelain. As root, with snapback on PATH or
# SNAPBACK=path.
set -euo pipefail
snapback=${SNAPBACK:-snapback}
tree=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$tree" ]; then
	tree=$tmp/tree
	cp -a "$(go env GOROOT)/src" "$tree"
	git -C "$tree" init -q
	git -C "$tree" add -A
	git -C "$tree" -c user.email=bench@localhost -c user.name=bench commit -qm tree
	git -C "$tree" status --porcelain >/dev/null # settle the index's stat data
fi
cd "$tree"

# The workload runner, run natively and as the command inside each view.
work=$tmp/work.sh
cat >"$work" <<'EOF'
t() { local s=$(date +%s%N); "$@" >/dev/null 2>&1; echo $((($(date +%s%N) - s) / 1000000)); }
find . -type f >/dev/null; tar cf /dev/zero .; git status --porcelain >/dev/null # warm-up
for w in find tar git; do
	case $w in
	find) cmd=(sh -c 'find . -type f | wc -l') ;;
	tar) cmd=(tar cf /dev/zero .) ;;
	git) cmd=(git status --porcelain) ;;
	esac
	echo "$w $(for i in 1 2 3 4 5; do t "${cmd[@]}"; done | sort -n | sed -n 3p)"
done
EOF

declare -A ms
while read -r w v; do ms[native,$w]=$v; done < <(bash "$work")
modes=()
for m in overlayfs fuse; do
	if out=$("$snapback" run --mode "$m" --then discard -- bash "$work" 2>/dev/null); then
		modes+=("$m")
		while read -r w v; do ms[$m,$w]=$v; done <<<"$out"
	else
		echo "($m: not available here)" >&2
	fi
done
printf '%-10s %8s %8s %8s\n' mode find tar "git st"
printf '%-10s %6sms %6sms %6sms\n' native "${ms[native,find]}" "${ms[native,tar]}" "${ms[native,git]}"
for m in "${modes[@]}"; do
	printf '%-10s' "$m"
	for w in find tar git; do
		printf ' %7s' "$(awk -v a="${ms[$m,$w]}" -v b="${ms[native,$w]}" 'BEGIN { printf "%.1fx", a / (b > 0 ? b : 1) }')"
	done
	echo
done
