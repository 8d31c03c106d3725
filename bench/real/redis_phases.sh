#!/usr/bin/env bash
# redis_phases.sh - a redis server's RSS through redis-benchmark's phases, one test at a
# time, under the allocator given as a library path (LD_PRELOAD; "" for Debian's linked one).
# Prints, per phase, the RSS (MiB) at its end and the highest sampled in it (every 50 ms).
#   bench/real/redis_phases.sh LIB [REQUESTS]        (default 300000 per test)
# Used for docs/benchmarks.md, "The growth purge"; bench/real.py runs redis.sh instead.
set -euo pipefail
# shellcheck source=redis_wait.sh
. "$(dirname "${BASH_SOURCE[0]}")/redis_wait.sh"
lib=${1:?usage: redis_phases.sh LIB [REQUESTS]} n=${2:-300000}
dir=$(mktemp -d "${TMPDIR:-/tmp}/rill-redis.XXXXXX")
sock=$dir/redis.sock
LD_PRELOAD="$lib" redis-server --port 0 --unixsocket "$sock" --save "" --appendonly no \
  --daemonize no --dir "$dir" >"$dir/log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
redis_wait "$sock" "$dir/log"
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; }
printf '%-6s %8s %8s\n' phase end_MiB max_MiB
for t in set get lpush lpop sadd hset zadd; do
  redis-benchmark -s "$sock" -q --csv -n "$n" -P 16 -r 100000 -d 64 -t "$t" >/dev/null &
  bp=$! max=0
  while kill -0 "$bp" 2>/dev/null; do
    r=$(rss)
    [ "$r" -gt "$max" ] && max=$r
    sleep 0.05
  done
  wait "$bp"
  r=$(rss)
  [ "$r" -gt "$max" ] && max=$r
  printf '%-6s %8d %8d\n' "$t" $((r / 1024)) $((max / 1024))
done
echo "VmHWM $(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status") KiB"
redis-cli -s "$sock" shutdown nosave >/dev/null 2>&1 || kill "$pid"
wait "$pid" || true
