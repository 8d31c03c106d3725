#!/usr/bin/env bash
# expect_stats.sh - runs a test program with RILL_SHOW_STATS=1 (optionally with a library
# preloaded) and passes only if it exits 0 and rill printed its statistics line ("rill:"),
# proving rill, not the C library, served the program's allocations.
# usage: expect_stats.sh [--preload LIB [--bindings]] PROGRAM [ARGS...]
#   --bindings  for libraries that print no statistics: instead, the dynamic linker must
#               report that the program's malloc and free were bound to LIB
set -u
LIB=""
BINDINGS=0
if [ "${1:-}" = "--preload" ]; then
  LIB=$2
  shift 2
  if [ "${1:-}" = "--bindings" ]; then
    BINDINGS=1
    shift
  fi
fi
[ $# -ge 1 ] || { echo "usage: $0 [--preload LIB [--bindings]] PROGRAM [ARGS...]" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rill-stats.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ -n "$LIB" ]; then
  export LD_PRELOAD="$LIB"
fi
if [ $BINDINGS = 1 ]; then
  export LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/ld"
fi
RILL_SHOW_STATS=1 "$@" 2>"$tmp/err"
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
  echo "FAIL: $* printed no 'rill:' statistics with RILL_SHOW_STATS=1 (rill not in use?)" >&2
  exit 1
fi
echo "ok: exit 0 and rill statistics printed"
