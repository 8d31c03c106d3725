#!/usr/bin/env bash
# sort.sh - proves GNU sort (in-memory, multi-threaded and external merge) gives identical
# output under rill on a few hundred thousand generated lines.
# usage: sort.sh /path/to/librill.so [lines]
set -u
. "$(dirname "$0")/common.sh"
setup_real "$@"
N=${2:-300000}
# sort closes stderr at exit, before rill can print its statistics there.
ALLOW_BINDING_PROOF=1
cd "$WORK" || exit 1
awk -v n="$N" 'BEGIN {
  x = 42;
  for (i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    y = (x * 69069 + 1) % 2147483648;
    printf "%08x,%d,%s,%s\n", x, y % 100000, substr("alpha beta gamma delta epsilon zeta eta theta", 1 + x % 40, 1 + y % 20), (i % 97 == 0 ? "" : "tail" (x % 1000));
  }
}' >input.txt
note "input: $(wc -l <input.txt) lines"
both sort_plain sort input.txt
both sort_numeric_key sort -t, -k2,2n -k1,1 input.txt
both sort_unique_reverse sort -u -r -t, -k3,3 input.txt
both sort_parallel sort --parallel=2 -S 64M -t, -k4,4 -k1,1 input.txt
both sort_external sort -S 1M -T "$WORK" -t, -k2,2n -s input.txt
both sort_pipe sh -c 'sort -t, -k1,1 input.txt | uniq -c -w 3 | sort -rn | head -1000'
finish_real
