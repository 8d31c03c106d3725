#!/usr/bin/env bash
# expect_stats.sh - runs a test program with RILL_SHOW_STATS=1 (optionally with a library
# preloaded) and passes only if it exits 0 and rill printed its statistics line ("rill:"),
# proving rill, not the C library, served the program's allocations.
# usage: expect_stats.sh [--classes] [--preload LIB [--bindings]] PROGRAM [ARGS...]
#   --classes   RILL_SHOW_STATS=classes: a line per size class must follow the totals
#   --bindings  for libraries that print no statistics: instead, the dynamic linker must
#               report that the program's malloc and free were bound to LIB
set -u
LIB=""
BINDINGS=0
SHOW=1
if [ "${1:-}" = "--classes" ]; then
  SHOW=classes
  shift
fi
if [ "${1:-}" = "--preload" ]; then
  LIB=$2
  shift 2
  if [ "${1:-}" = "--bindings" ]; then
    BINDINGS=1
    shift
  fi
fi
[ $# -ge 1 ] || { echo "usage: $0 [--classes] [--preload LIB [--bindings]] PROGRAM [ARGS...]" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rill-stats.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ -n "$LIB" ]; then
  export LD_PRELOAD="$LIB"
fi
if [ $BINDINGS = 1 ]; then
  export LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/ld"
fi
RILL_SHOW_STATS=$SHOW "$@" 2>"$tmp/err"
rc=$?
unset LD_DEBUG LD_DEBUG_OUTPUT
cat "$tmp/err" >&2
if [ $rc -ne 0 ]; then
  echo "FAIL: $* exited with status $rc" >&2
  exit 1
fi
if [ $BINDINGS = 1 ]; then
  base=$(basename "$LIB")
  for sym in malloc free; do
    if ! cat "$tmp"/ld.* 2>/dev/null | grep -q "to [^ ]*$base \\[0\\]: normal symbol \`$sym'"; then
      echo "FAIL: $sym was not bound to $base: the library was not in use" >&2
      exit 1
    fi
  done
  echo "ok: exit 0 and malloc/free bound to $base"
  exit 0
fi
if ! grep -q 'rill:' "$tmp/err"; then
  echo "FAIL: $* printed no 'rill:' statistics with RILL_SHOW_STATS=$SHOW (rill not in use?)" >&2
  exit 1
fi
if [ $SHOW = classes ]; then
  # the totals, then rows whose block sizes rise; every row's resident bytes within its span bytes
  if ! awk '/^rill: stats: in_use=/ { totals = 1 }
      /^rill: class [0-9]+: spans=[0-9]+ blocks_in_use=[0-9]+ blocks_free=[0-9]+ in_use=/ {
        if (!totals || $3 + 0 < last) bad = 1
        last = $3 + 0; rows++
        for (i = 4; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] + 0 }
        if (f["resident"] > f["committed"] || f["in_use"] > f["committed"]) bad = 1
      }
      END { exit !(totals && rows > 0 && !bad) }' "$tmp/err"; then
    echo "FAIL: RILL_SHOW_STATS=classes printed no well-formed class rows after the totals" >&2
    exit 1
  fi
  echo "ok: exit 0 and rill statistics printed, class by class"
  exit 0
fi
echo "ok: exit 0 and rill statistics printed"
