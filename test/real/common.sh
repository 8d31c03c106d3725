# common.sh - sourced by the real-program tests: runs a command without rill and with rill
# preloaded (RILL_SHOW_STATS=1) and fails unless both succeed, stdout is byte-for-byte
# identical and rill reported statistics (so it really served the process).

FAILURES=0
CHECKS=0

note() { printf '%s\n' "$*"; }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  FAILURES=$((FAILURES + 1))
}

setup_real() {
  if [ $# -lt 1 ] || [ ! -f "$1" ]; then
    echo "usage: $0 /path/to/librill.so [args]" >&2
    exit 2
  fi
  LIB=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/rill-real.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  export LC_ALL=C TZ=UTC
}

# both NAME CMD...: run CMD plain and with rill, compare stdout.
# Leaves the outputs in $WORK/NAME.{base,rill}.{out,err}.
both() {
  local name=$1
  shift
  CHECKS=$((CHECKS + 1))
  local b="$WORK/$name.base" r="$WORK/$name.rill"
  "$@" >"$b.out" 2>"$b.err"
  local brc=$?
  LD_PRELOAD="$LIB" RILL_SHOW_STATS=1 "$@" >"$r.out" 2>"$r.err"
  local rrc=$?
  if [ $brc -ne 0 ]; then
    fail "$name: the command fails even without rill (exit $brc): $*"
    head -c 2000 "$b.err" >&2
    return 1
  fi
  if [ $rrc -ne 0 ]; then
    fail "$name: exit status $rrc with rill (0 without): $*"
    grep -v '^rill:' "$r.err" | head -c 3000 >&2
    return 1
  fi
  if ! cmp -s "$b.out" "$r.out"; then
    fail "$name: stdout differs with rill: $*"
    diff "$b.out" "$r.out" | head -20 >&2
    return 1
  fi
  local proof="rill statistics printed"
  if ! grep -q 'rill:' "$r.err"; then
    # Programs that close stderr at exit (coreutils' close_stdout) lose the statistics
    # line. Where a script allows it, the dynamic linker's own record that the program's
    # malloc and free were bound to rill is taken as proof instead.
    if [ "${ALLOW_BINDING_PROOF:-0}" = 1 ] && bound_to_rill "$name" "$@"; then
      proof="no statistics (stderr closed at exit); malloc/free bound to rill per LD_DEBUG"
    else
      fail "$name: no 'rill:' statistics on stderr with RILL_SHOW_STATS=1: rill did not run"
      head -c 1000 "$r.err" >&2
      return 1
    fi
  fi
  note "  ok   $name ($(wc -c <"$b.out") bytes of identical output; $proof)"
  return 0
}

# bound_to_rill NAME CMD...: true when, run with rill preloaded, the dynamic linker binds the
# command's malloc and free to the rill library.
bound_to_rill() {
  local name=$1
  shift
  rm -f "$WORK/$name.ld".*
  LD_PRELOAD="$LIB" LD_DEBUG=bindings LD_DEBUG_OUTPUT="$WORK/$name.ld" "$@" >/dev/null 2>&1
  local base
  base=$(basename "$LIB")
  cat "$WORK/$name.ld".* 2>/dev/null | grep -q "to [^ ]*$base \[0\]: normal symbol \`malloc'" &&
    cat "$WORK/$name.ld".* 2>/dev/null | grep -q "to [^ ]*$base \[0\]: normal symbol \`free'"
}

# same NAME FILE1 FILE2: two produced files must be identical.
same() {
  CHECKS=$((CHECKS + 1))
  if cmp -s "$2" "$3"; then
    note "  ok   $1"
  else
    fail "$1: $2 and $3 differ"
    cmp "$2" "$3" | head -5 >&2
  fi
}

# skip_without CMD... -- WHAT: exits 77 (ctest: skipped) unless every CMD is on PATH, saying
# WHAT (the program and how to install it).
skip_without() {
  local c
  while [ "$1" != "--" ]; do
    c=$1
    shift
    command -v "$c" >/dev/null || {
      shift $(($# - 1))
      echo "no $1: not run"
      exit 77
    }
  done
}

finish_real() {
  if [ "$FAILURES" -ne 0 ]; then
    echo "$(basename "$0"): $FAILURES of $CHECKS checks FAILED"
    exit 1
  fi
  echo "$(basename "$0"): all $CHECKS checks passed"
  exit 0
}
