#!/usr/bin/env bash
# ab.sh - compares two rill builds side by side: each benchmark line runs
# alternately under OLD and NEW (LD_PRELOAD), N times each, and prints the
# medians of the metric and of peak RSS, with NEW/OLD, and the median of the
# per-pair ratios NEW/OLD ("pairs": each pair runs back to back, in swapped
# order every other time), which a host whose speed drifts between runs
# moves less than the ratio of the medians.
#
#   bench/ab.sh OLD.so NEW.so [N] < lines      (N defaults to 3)
#
# AB_OLD_ENV and AB_NEW_ENV add VAR=value words to one side's environment, so
# one build can be compared with itself under two options, e.g.
#   AB_NEW_ENV="RILL_COMMIT=demand" bench/ab.sh build/librill.so build/librill.so 5
#
# Each input line is: NAME PROGRAM ARGS..., e.g.
#   xmalloc4 xmalloc -t 4 -n 1000000 -m 16 -M 512 -q 64
# PROGRAM is a bench_* binary in $RILL_BUILD_DIR/bench (default: build/bench).
# For throughput metrics (ops/s) higher is better, for times lower.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
old=$1 new=$2 n=${3:-3}
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RILL_BUILD_DIR:-$repo/build}/bench"
one() { # lib extra-env program args... -> "value rss_kib"
  local lib=$1 extra=$2 prog=$3
  shift 3
  # shellcheck disable=SC2086
  /usr/bin/time -f "RSS %M" env LD_PRELOAD="$lib" $extra "$bin/bench_$prog" "$@" 2>&1 |
    awk '/^RESULT/ { for (i = 1; i <= NF; i++) if ($i ~ /^value=/) v = substr($i, 7) }
         /^RSS / { r = $2 } END { print v, r }'
}
while read -r name prog args; do
  [ -z "${name:-}" ] && continue
  results=()
  for i in $(seq "$n"); do
    # each pair back to back, the order swapped every other pair, so a host
    # that slows down or speeds up mid-set weighs on both sides alike
    # shellcheck disable=SC2086
    if [ $((i % 2)) = 1 ]; then
      o="$(one "$old" "${AB_OLD_ENV:-}" "$prog" $args)"
      w="$(one "$new" "${AB_NEW_ENV:-}" "$prog" $args)"
    else
      w="$(one "$new" "${AB_NEW_ENV:-}" "$prog" $args)"
      o="$(one "$old" "${AB_OLD_ENV:-}" "$prog" $args)"
    fi
    results+=("old $o" "new $w")
  done
  printf '%s\n' "${results[@]}" | python3 -c '
import statistics as st, sys
v = {"old": [], "new": []}; r = {"old": [], "new": []}
for line in sys.stdin:
    k, val, rss = line.split()
    v[k].append(float(val)); r[k].append(int(rss))
o, n = st.median(v["old"]), st.median(v["new"])
ro, rn = st.median(r["old"]) / 1024, st.median(r["new"]) / 1024
pairs = st.median(b / a for a, b in zip(v["old"], v["new"]))
print(f"{sys.argv[1]:24s} old {o:.4g} new {n:.4g} new/old {n / o:.3f} pairs {pairs:.3f}  "
      f"peak RSS old {ro:.1f} new {rn:.1f} MiB")
' "$name"
done
