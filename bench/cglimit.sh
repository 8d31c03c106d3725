#!/usr/bin/env bash
# cglimit.sh MIB LIB PROGRAM ARGS... - runs PROGRAM with LIB preloaded ("" for the C
# library's allocator) in a fresh memory cgroup limited to MIB MiB, as a container's limit
# would, and prints its exit status (137: the kernel killed it at the limit) and the
# group's peak memory use. Needs root and a cgroup v2 hierarchy with the memory controller
# enabled for children, or a v1 memory hierarchy, at /sys/fs/cgroup.
#   bash bench/cglimit.sh 200 build/librill.so build/bench/bench_phases -t 4 -r 3 -b 24M
set -u
[ $# -ge 3 ] || { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
mib=$1 lib=$2
shift 2
bytes=$((mib << 20))
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then # v2
  cg=/sys/fs/cgroup/rill-cglimit-$$
  limit=memory.max peak=memory.peak
else # v1
  cg=/sys/fs/cgroup/memory/rill-cglimit-$$
  limit=memory.limit_in_bytes peak=memory.max_usage_in_bytes
fi
mkdir "$cg" || { echo "cglimit: cannot make $cg (root and a memory cgroup needed)"; exit 2; }
trap 'rmdir "$cg" 2>/dev/null' EXIT
echo "$bytes" > "$cg/$limit" || exit 2
[ -f "$cg/memory.memsw.limit_in_bytes" ] && echo "$bytes" > "$cg/memory.memsw.limit_in_bytes"
[ -f "$cg/memory.swap.max" ] && echo 0 > "$cg/memory.swap.max"
# the outer shell's own "Killed" report goes to /dev/null too
{ bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec env LD_PRELOAD="$@"' _ "$cg" "$lib" "$@" \
  > /dev/null 2>&1; } 2> /dev/null
rc=$?
used=$(cat "$cg/$peak" 2>/dev/null || echo 0)
echo "limit=${mib}MiB exit=$rc peak=$((used >> 20))MiB"
