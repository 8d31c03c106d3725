#!/usr/bin/env bash
# hunt.sh - a bug hunt for long runs: the stress driver, built with -DRILL_DEBUG=1 (a
# shadow byte per block, checked at every hand-out; src/debug.h), run again and again with
# a random mode, seed and mix of RILL_* options, until the time is up or a run fails. The
# fixed-option runs of test/run.sh cover each option alone; this covers their combinations
# (demand commit with MADV_FREE and a zero purge delay, huge pages without the purger, ...)
# at thread counts past the cores.
#
#   bash test/hunt.sh [SECONDS] [DIR]    (default 600 s; DIR holds the builds and the log)
#
# A failing run stops the hunt: it prints the run's command line, which reproduces it with
# the same seed and options, and exits 1. Needs gcc; run from anywhere.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_LEFT=${1:-600}
DIR=${2:-$ROOT/build/hunt}
mkdir -p "$DIR"
case "$SECONDS_LEFT" in '' | *[!0-9]*)
  echo "usage: bash test/hunt.sh [SECONDS] [DIR]" >&2
  exit 2 ;;
esac

# shellcheck source=test/debug_cc.sh
. "$ROOT/test/debug_cc.sh"
build() { # name, driver, extra flags... (kept if DIR already holds it, newer than every
  # source: test/run.sh passes the directory where it has just built the same drivers)
  local out="$DIR/$1" main="$ROOT/test/$2"
  shift 2
  if [ -x "$out" ] && [ -z "$(find "$ROOT/src" "$ROOT/include" "$main" \
    "$ROOT/test/rill_test.h" "$ROOT/test/debug_cc.sh" -newer "$out" -print -quit)" ]; then
    return 0
  fi
  debug_cc "$ROOT" "$out" "$main" "$@"
}
# the plain debug build, and one with the race windows (a yield at each point where another
# thread's step matters; docs/testing.md, "Two races the windows found")
build stress_debug stress.c || exit 2
build stress_debug_windows stress.c -DRILL_RACE_WINDOWS || exit 2
# and test_aslimit, whose fill rounds and racing threads spend the arena under a limit
build aslimit_debug test_aslimit.c || exit 2

pick() { # one of the arguments, at random
  local a=("$@")
  echo "${a[RANDOM % ${#a[@]}]}"
}
end=$(($(date +%s) + SECONDS_LEFT))
runs=0
log="$DIR/hunt.log"
: >"$log"
while [ "$(date +%s)" -lt "$end" ]; do
  runs=$((runs + 1))
  exe=$(pick stress_debug stress_debug stress_debug_windows)
  mode=$(pick random prodcons churn relay tls fork all)
  opts="RILL_PURGE_DELAY_MS=$(pick 0 1 5 50 1000) RILL_PURGE=$(pick dontneed free)"
  opts+=" RILL_COMMIT=$(pick auto demand) RILL_HUGEPAGES=$(pick 0 1)"
  opts+=" RILL_PURGE_THREAD=$(pick auto 0 1) RILL_REMOTE_BATCH=$(pick 0 1)"
  seed=$((RANDOM * 32768 + RANDOM))
  cmd="env $opts $DIR/$exe --mode $mode --threads $(pick 2,8,33 1,4,16 3,64) --ops 200000"
  cmd+=" --items 100000 --churn 2000 --forks 8 --relay-ms 1000 --seed $seed"
  cmd+=" --stats-poll $(pick 0 0 0 1)" # one run in four: statistics read all through it
  if [ $((RANDOM % 6)) = 0 ]; then # one run in six: the arena spent under a limit
    limit=$(pick 805306368 1073741824 3221225472)
    mode=$(pick most race)
    if [ $((RANDOM % 4)) = 0 ]; then # a sandbox's limit: 16, 32 or 64 MiB
      limit=$(pick 16777216 33554432 67108864)
      mode=small
    fi
    cmd="prlimit --as=$limit env $opts"
    cmd+=" $DIR/aslimit_debug $mode $limit"
  fi
  echo "$runs $cmd" >>"$log"
  # shellcheck disable=SC2086
  if ! out=$(timeout 300 $cmd 2>&1); then
    echo "hunt: run $runs failed:"
    echo "  $cmd"
    echo "$out" | tail -30
    exit 1
  fi
done
echo "hunt: $runs runs in ${SECONDS_LEFT} s, no failure (commands in $log)"
