#!/usr/bin/env bash
# bleed.sh - the soak's tail against the share of blocks freed by another thread: runs
# bench_soak at each bleed (per mille of blocks handed to another worker, which frees them)
# under each allocator, alternating, N rounds, and prints a markdown table of the medians:
# throughput, malloc p50 / p99 / p99.9 and free p99 / p99.9.
#
#   bench/bleed.sh [N] [THREADS] [SECONDS] [BLEEDS] [ALLOCATORS]
#
# Defaults: 3 rounds, 2 threads, 3 s per run, bleeds "0 5 10 25 50", allocators "rill
# jemalloc tcmalloc mimalloc" (a peer that is not installed is skipped, with a note). rill is
# $RILL_BUILD_DIR/librill.so (default build/), the benchmark $RILL_BUILD_DIR/bench/bench_soak.
set -euo pipefail
n=${1:-3} threads=${2:-2} secs=${3:-3} bleeds=${4:-"0 5 10 25 50"}
allocs=${5:-"rill jemalloc tcmalloc mimalloc"}
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RILL_BUILD_DIR:-$repo/build}"
soak="$build/bench/bench_soak"
[ -x "$soak" ] || { echo "bleed.sh: $soak not built (cmake --build build)" >&2; exit 2; }
libdir=$(dirname "$(ldconfig -p | awk '/libc\.so\.6 / {print $NF; exit}')")
lib_of() {
  case $1 in
    rill) echo "$build/librill.so" ;;
    glibc) echo "" ;;
    jemalloc) echo "$libdir/libjemalloc.so.2" ;;
    tcmalloc) echo "$libdir/libtcmalloc_minimal.so.4" ;;
    mimalloc) echo "$libdir/libmimalloc.so.2" ;;
    *) echo "bleed.sh: unknown allocator $1" >&2; exit 2 ;;
  esac
}
use=()
for a in $allocs; do
  l=$(lib_of "$a")
  if [ -n "$l" ] && [ ! -e "$l" ]; then
    echo "bleed.sh: $a skipped: $l is not installed (see bench/README.md, Allocators)" >&2
  else
    use+=("$a")
  fi
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$n"); do
  for b in $bleeds; do
    for a in "${use[@]}"; do
      l=$(lib_of "$a")
      env ${l:+LD_PRELOAD=$l} "$soak" -t "$threads" -d "$secs" -b "$b" 2>&1 |
        awk -v a="$a" -v b="$b" '/^RESULT/ { print a, b, $0 }' >> "$out"
    done
  done
done
python3 - "$out" "$bleeds" "${use[*]}" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    a, b, *kv = line.split()
    d = dict(x.split("=", 1) for x in kv if "=" in x)
    rows.setdefault((a, b), []).append(d)
print("| bleed | allocator | M ops/s | malloc p50 / p99 / p99.9 ns | free p99 / p99.9 ns |")
print("|---|---|---:|---:|---:|")
for b in sys.argv[2].split():
    for a in sys.argv[3].split():
        r = rows.get((a, b))
        if not r:
            continue
        m = lambda k: statistics.median(float(x[k]) for x in r)
        print(f"| {int(b) / 10:g}% | {a} | {m('value') / 1e6:.1f} | "
              f"{m('malloc_p50_ns'):.0f} / {m('malloc_p99_ns'):.0f} / {m('malloc_p999_ns'):.0f} | "
              f"{m('free_p99_ns'):.0f} / {m('free_p999_ns'):.0f} |")
EOF
