#!/usr/bin/env bash
# redis.sh - a redis-server under the allocator preloaded into this script (LD_PRELOAD),
# driven over a unix socket by redis-benchmark, which runs on the C library's allocator.
# Prints one RESULT line: the geometric mean of the tests' requests per second, and the
# server's peak RSS (VmHWM). Used by bench/real.py.
#   bench/real/redis.sh [REQUESTS]        (default 300000 per test)
set -euo pipefail
# shellcheck source=redis_wait.sh
. "$(dirname "${BASH_SOURCE[0]}")/redis_wait.sh"
n=${1:-300000}
dir=$(mktemp -d "${TMPDIR:-/tmp}/rill-redis.XXXXXX")
sock=$dir/redis.sock
redis-server --port 0 --unixsocket "$sock" --save "" --appendonly no --daemonize no \
  --dir "$dir" >"$dir/log" 2>&1 &
pid=$!
unset LD_PRELOAD # the client and the tools below run on the C library's allocator
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
redis_wait "$sock" "$dir/log"
out=$(redis-benchmark -s "$sock" -q --csv -n "$n" -P 16 -r 100000 -d 64 \
  -t set,get,lpush,lpop,sadd,hset,zadd)
hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")
redis-cli -s "$sock" shutdown nosave >/dev/null 2>&1 || kill "$pid"
wait "$pid" || true
rps=$(echo "$out" | awk -F, 'NR > 1 { gsub(/"/, "", $2); if ($2 > 0) { s += log($2); k++ } }
  END { if (k) printf "%.0f", exp(s / k) }')
[ -n "$rps" ] || { echo "no results from redis-benchmark: $out" >&2; exit 1; }
echo "RESULT benchmark=redis metric=requests_per_s value=$rps unit=req/s server_rss_kib=$hwm"
