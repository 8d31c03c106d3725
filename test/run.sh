#!/usr/bin/env bash
# run.sh - the whole rill test suite in one command: gcc build with -Werror plus CTest, a
# warning-free clang build, ThreadSanitizer stress, libFuzzer, and CTest again under UBSan.
# Ends with "N passed, N failed" over everything it ran; exits non-zero on any failure.
#
# usage: bash test/run.sh [--long]
#   --long   long variants: more iterations, threads, forks and fuzzing runs, a 15-minute hunt
# environment: RILL_JOBS (parallel build jobs, default: number of CPUs),
#              RILL_CTEST_JOBS (tests CTest runs at once, default: RILL_JOBS, 4 at most),
#              RILL_BUILD_ROOT (build directories, default: build/test-suite in the repo)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LONG=0
for a in "$@"; do
  case "$a" in
  --long) LONG=1 ;;
  -h | --help)
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "run.sh: unknown argument $a (try --help)" >&2
    exit 2
    ;;
  esac
done

JOBS=${RILL_JOBS:-$(nproc 2>/dev/null || echo 2)}
# CTest runs this many tests at once: most tests wait on purge delays and a child's exit, so
# two at a time took this script's gcc CTest from 379 to 251-275 s on 2 cores (three CI runs,
# and three of a full build's 142 tests, none failed); tests that weigh the whole machine
# (strict_overcommit, thp_always) run alone.
CTEST_JOBS=${RILL_CTEST_JOBS:-$((JOBS < 4 ? JOBS : 4))}
B=${RILL_BUILD_ROOT:-$ROOT/build/test-suite}
LOGS=$B/logs
mkdir -p "$LOGS"
PASSED=0
FAILED=0
FAILED_NAMES=()

START=$SECONDS
say() { printf '\n=== %s  (%d s in)\n' "$*" $((SECONDS - START)); }
pass() {
  PASSED=$((PASSED + 1))
  printf '  PASS  %s\n' "$1"
}
failed() {
  FAILED=$((FAILED + 1))
  FAILED_NAMES+=("$1")
  printf '  FAIL  %s\n' "$1"
}

# counted NAME LOGFILE STATUS: one test in the count, passed if STATUS is 0; a failure shows
# the log's last lines. Returns STATUS.
counted() {
  if [ "$3" = 0 ]; then
    pass "$1"
    return 0
  fi
  failed "$1"
  echo "  ---- last lines of $2" >&2
  tail -40 "$2" | sed 's/^/  | /' >&2
  return 1
}

# step NAME LOGFILE CMD...: runs CMD, output to LOGFILE; one test in the count.
step() {
  local name=$1 log=$2 rc=0
  shift 2
  "$@" >"$log" 2>&1 || rc=$?
  counted "$name" "$log" $rc
}

# bg LOGFILE CMD...: starts CMD in the background, output to LOGFILE; bg_step NAME LOGFILE
# then waits for it and counts it as step does. The TSan section's eight builds (8 s of one
# core each) start together, so the second core builds while the first runs; the UBSan
# build runs beside the fuzzer and qemu.
declare -A BG_PID
bg() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  BG_PID[$log]=$!
}
bg_step() {
  local rc=0
  wait "${BG_PID[$2]}" || rc=$?
  counted "$1" "$2" $rc
}

# ---- tools ------------------------------------------------------------------------------

APT_UPDATED=0
apt_install() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "run.sh: missing $*; not root or no apt-get, so not installing" >&2
    return 1
  fi
  if [ $APT_UPDATED = 0 ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
    >"$LOGS/apt.log" 2>&1 || {
    echo "run.sh: apt-get install $* failed (see $LOGS/apt.log)" >&2
    return 1
  }
}

need() { # need COMMAND PACKAGE...
  local cmd=$1
  shift
  command -v "$cmd" >/dev/null 2>&1 || apt_install "$@" || true
}

say "tools"
need gcc gcc
need g++ g++
need make make
need cmake cmake
need clang clang
need valgrind valgrind
need python3 python3
need git git
need clang-format clang-format
need awk gawk
need pkg-config pkg-config
need sort coreutils
need javac openjdk-17-jdk-headless # test/real/java.sh (a JVM under rill)
need ruby ruby                      # test/real/ruby.sh (Ruby threads under rill)
need php php-cli                    # test/real/php.sh (extensions opened with RTLD_DEEPBIND)
need rg ripgrep                     # test/real/ripgrep.sh (a threaded Rust program)
if command -v php >/dev/null && ! php -m 2>/dev/null | grep -qx zip; then
  apt_install php-curl php-zip php-mysql || true
fi
# clang's sanitizer and libFuzzer runtimes live in a versioned package.
CLANG_RT=""
if command -v clang >/dev/null; then
  CLANG_RT=$(clang -print-runtime-dir 2>/dev/null || true)
  if [ ! -e "$CLANG_RT/libclang_rt.tsan-x86_64.a" ] && [ ! -e "$CLANG_RT/libclang_rt.tsan.a" ]; then
    major=$(clang -dumpversion 2>/dev/null | cut -d. -f1)
    apt_install "libclang-rt-$major-dev" || apt_install "libclang-common-$major-dev" || true
  fi
fi
for t in gcc g++ cmake clang valgrind python3 git; do
  printf '  %-9s %s\n' "$t" "$(command -v "$t" || echo MISSING)"
done

LONG_FLAG=OFF
[ $LONG = 1 ] && LONG_FLAG=ON

# ---- formatting: the checked-in .clang-format ----------------------------------------------

say "clang-format (.clang-format)"
if command -v clang-format >/dev/null; then
  fmt_check() {
    local bad=0 f
    for f in "$ROOT"/src/*.[ch] "$ROOT"/include/*.h "$ROOT"/test/*.[ch] "$ROOT"/test/*.cc \
      "$ROOT"/test/fuzz/*.[ch] "$ROOT"/test/install/*.c "$ROOT"/bench/*.[ch]; do
      [ -e "$f" ] || continue
      if ! clang-format --style=file "$f" | cmp -s - "$f"; then
        echo "not formatted: ${f#"$ROOT"/} (clang-format -i ${f#"$ROOT"/})"
        bad=1
      fi
    done
    return $bad
  }
  step "clang-format" "$LOGS/clang-format.log" fmt_check
else
  failed "clang-format (not installed)"
fi

# ---- gcc build and CTest ------------------------------------------------------------------

# ctest_counted NAME BUILD_DIR: runs ctest, adds its pass/fail counts to the totals.
ctest_counted() {
  local name=$1 dir=$2 log="$LOGS/$1.log"
  ctest --test-dir "$dir" --output-on-failure -j "$CTEST_JOBS" 2>&1 | tee "$log"
  local line
  line=$(grep -Eo '[0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  if [ -z "$line" ]; then
    failed "$name (ctest produced no summary)"
    return
  fi
  local f t
  f=$(echo "$line" | awk '{print $1}')
  t=$(echo "$line" | awk '{print $NF}')
  PASSED=$((PASSED + t - f))
  FAILED=$((FAILED + f))
  if [ "$f" -gt 0 ]; then
    while read -r tname; do FAILED_NAMES+=("$name: $tname"); done < <(
      sed -n '/The following tests FAILED/,$p' "$log" | grep -Eo '^[[:space:]]+[0-9]+ - [^ ]+' |
        awk '{print $3}'
    )
  fi
  echo "  $name: $((t - f)) of $t passed"
}

say "gcc build (-DRILL_WERROR=ON)"
GCC_OK=0
if step "configure (gcc)" "$LOGS/gcc-configure.log" \
  env CC=gcc CXX=g++ cmake -S "$ROOT" -B "$B/gcc" -DCMAKE_BUILD_TYPE=Release -DRILL_WERROR=ON \
  -DRILL_BENCH=OFF -DRILL_TEST_LONG=$LONG_FLAG &&
  step "build (gcc, warnings are errors)" "$LOGS/gcc-build.log" \
    cmake --build "$B/gcc" -j "$JOBS"; then
  GCC_OK=1
fi

say "clang build of the library (-DRILL_WERROR=ON)"
if command -v clang >/dev/null; then
  step "configure (clang)" "$LOGS/clang-configure.log" \
    env CC=clang CXX=clang++ cmake -S "$ROOT" -B "$B/clang" -DCMAKE_BUILD_TYPE=Release \
    -DRILL_WERROR=ON -DRILL_TESTS=OFF -DRILL_BENCH=OFF &&
    step "build (clang, warnings are errors)" "$LOGS/clang-build.log" \
      cmake --build "$B/clang" -j "$JOBS"
else
  failed "clang build (clang not available)"
fi

say "CTest (gcc build)"
if [ $GCC_OK = 1 ]; then
  ctest_counted ctest-gcc "$B/gcc"
else
  failed "ctest (gcc build did not build)"
fi

# ---- ThreadSanitizer ----------------------------------------------------------------------

# rill's sources, without the standard-name overrides, instrumented together with a stress
# driver that calls rill_* only. Every race report fails the run.
say "ThreadSanitizer"
SRCS=("$ROOT"/src/*.c)
if [ $LONG = 1 ]; then
  TS_OPS=1000000 TS_ITEMS=200000 TS_CHURN=10000 TS_FORKS=16 TS_THREADS=1,2,4,8,16,32
  HUNT_S=900
else
  TS_OPS=150000 TS_ITEMS=40000 TS_CHURN=2000 TS_FORKS=4 TS_THREADS=1,4,16
  HUNT_S=30
fi
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 die_after_fork=0 history_size=4"
TSAN_BUILT=()
TSAN_TLS_ROUNDS=$(($(getconf PTHREAD_DESTRUCTOR_ITERATIONS 2>/dev/null || echo 4) - 1))
[ "$TSAN_TLS_ROUNDS" -ge 1 ] 2>/dev/null || TSAN_TLS_ROUNDS=3
TSAN_CC=(clang -std=gnu11 -O1 -g -fsanitize=thread -fno-omit-frame-pointer -fno-builtin)
mkdir -p "$B/tsan"
# variant 0w: the default build with RILL_RACE_WINDOWS (yields where another thread may change
# a span in hand), for the purger's and commit's runs below
for variant in 0 1 2 0w; do
  windows=()
  [ $variant = 0w ] && windows=(-DRILL_RACE_WINDOWS)
  bg "$LOGS/tsan-build-v$variant.log" "${TSAN_CC[@]}" -DRILL_NO_OVERRIDE \
    -DRILL_VARIANT=${variant%w} -DUSE_RILL_API "${windows[@]}" -I"$ROOT/include" \
    -I"$ROOT/test" "${SRCS[@]}" "$ROOT/test/stress.c" -o "$B/tsan/stress_tsan_v$variant" -lpthread
done
bg "$LOGS/tsan-build-young.log" "${TSAN_CC[@]}" -DRILL_NO_OVERRIDE -DRILL_VARIANT=0 \
  -DUSE_RILL_API -DYOUNG_THREADS=2 -DRILL_RACE_WINDOWS -I"$ROOT/include" -I"$ROOT/test" \
  "${SRCS[@]}" "$ROOT/test/stress.c" -o "$B/tsan/stress_tsan_vyoung" -lpthread
bg "$LOGS/tsan-build-threads.log" "${TSAN_CC[@]}" -DRILL_NO_OVERRIDE -DUSE_RILL_API \
  -DRILL_RACE_WINDOWS -I"$ROOT/include" -I"$ROOT/test" "${SRCS[@]}" "$ROOT/test/test_threads.c" \
  -o "$B/tsan/threads_tsan" -lpthread
bg "$LOGS/tsan-build-eager.log" "${TSAN_CC[@]}" -DRILL_NO_OVERRIDE -I"$ROOT/include" \
  "${SRCS[@]}" "$ROOT/test/test_eager.c" -o "$B/tsan/eager_tsan" -lpthread
bg "$LOGS/tsan-build-lend.log" "${TSAN_CC[@]}" -DRILL_NO_OVERRIDE -DUSE_RILL_API \
  -DRILL_RACE_WINDOWS -I"$ROOT/include" -I"$ROOT/test" "${SRCS[@]}" "$ROOT/test/test_lend.c" \
  -o "$B/tsan/lend_tsan" -lpthread
bg "$LOGS/tsan-build-lock.log" "${TSAN_CC[@]}" -DRILL_NO_OVERRIDE -I"$ROOT/include" -I"$ROOT/src" \
  -I"$ROOT/test" "${SRCS[@]}" "$ROOT/test/test_lock.c" -o "$B/tsan/lock_tsan" -lpthread
for variant in 0 1 2 0w; do
  if bg_step "TSan build (variant $variant)" "$LOGS/tsan-build-v$variant.log"; then
    TSAN_BUILT+=("$variant")
  fi
done
tsan_run() { # NAME VARIANT ARGS...
  local name=$1 v=$2
  shift 2
  local log="$LOGS/$name.log"
  if "$B/tsan/stress_tsan_v$v" "$@" >"$log" 2>&1 && ! grep -q 'ThreadSanitizer' "$log"; then
    pass "$name"
  else
    failed "$name"
    grep -m1 -A30 'WARNING: ThreadSanitizer' "$log" | sed 's/^/  | /' >&2 || true
    tail -15 "$log" | sed 's/^/  | /' >&2
  fi
}
for v in "${TSAN_BUILT[@]}"; do
  if [ "$v" = 0 ]; then
    tsan_run tsan_random 0 --mode random --threads $TS_THREADS --ops $TS_OPS
    tsan_run tsan_prodcons 0 --mode prodcons --items $TS_ITEMS
    tsan_run tsan_churn 0 --mode churn --churn $TS_CHURN --churn-par 16
    tsan_run tsan_relay 0 --mode relay --relay-ms 2000
    # TSan tears its own per-thread state down in the last destructor round, so instrumented
    # destructors may only use the rounds before it.
    tsan_run tsan_tls 0 --mode tls --tls-threads 64 --tls-rounds $((TSAN_TLS_ROUNDS))
    tsan_run tsan_fork 0 --mode fork --forks $TS_FORKS --fork-threads 2
    # a thread reads the statistics (rill_stats_get, rill_class_stats_get; this build calls
    # the rill_ names, so not malloc_info) while the others allocate: the walks' reads of
    # span entries must be race-free
    tsan_run tsan_stats_poll 0 --mode random,prodcons --threads 4 --ops $TS_OPS \
      --items $TS_ITEMS --stats-poll 1
  elif [ "$v" = 0w ]; then
    # the background purger's passes race with every pool operation and with fork. These
    # two found spans pooled with a block out (docs/testing.md, "Two races the windows
    # found"): about 1 run in 6 before the fixes
    RILL_PURGE_THREAD=1 RILL_PURGE_DELAY_MS=5 tsan_run tsan_purger 0w \
      --mode random,prodcons,churn,fork --threads 1,4 --ops $TS_OPS --items $TS_ITEMS \
      --churn $TS_CHURN --forks $TS_FORKS --fork-threads 2
    # remote frees in batches (RILL_REMOTE_BATCH=1): kept by the freer, pushed when full, at
    # exit and by the purger for a thread that waits (heap_lend), racing with its owner's wake
    RILL_REMOTE_BATCH=1 RILL_PURGE_THREAD=1 RILL_PURGE_DELAY_MS=5 tsan_run tsan_batch 0w \
      --mode random,prodcons,churn,relay --threads 1,4 --ops $TS_OPS --items $TS_ITEMS \
      --churn $TS_CHURN
    # commit on demand: covers, chunk and wilderness commits and heap records committed as
    # threads arrive, and pooled spans decommitted by the purger's passes and committed again
    # as they are taken, racing with every span change and with fork
    RILL_COMMIT=demand RILL_PURGE_THREAD=1 RILL_PURGE_DELAY_MS=5 \
      tsan_run tsan_commit 0w --mode random,prodcons,churn,fork \
      --threads 1,4,16 --ops $TS_OPS --items $TS_ITEMS --churn $TS_CHURN --forks $TS_FORKS \
      --fork-threads 2
  else
    tsan_run "tsan_variant${v}_random_prodcons" "$v" --mode random,prodcons \
      --threads 1,8 --ops $TS_OPS --items $TS_ITEMS
    # their sub-heap locks, held from fork's prepare handler to its parent and child ones
    tsan_run "tsan_variant${v}_fork" "$v" --mode fork --forks $TS_FORKS --fork-threads 2
  fi
done
# young blocks (src/heap.c) from the third live thread on, not the 32nd: the shared heaps'
# locks, remote frees into their spans from every thread, and young threads' exits, racing.
# RILL_RACE_WINDOWS yields where a span in hand may be claimed and pooled by another thread:
# the orphan adoption race of span_attach (fixed after a CI report) fails every churn run so.
if bg_step "TSan build (young blocks, race windows)" "$LOGS/tsan-build-young.log"; then
  tsan_run tsan_young young --mode random,prodcons,churn,fork --threads 4,16 --ops $TS_OPS \
    --items $TS_ITEMS --churn $TS_CHURN --churn-par 16 --forks $TS_FORKS --fork-threads 4
fi
# a crowd of 1,000 threads, its young blocks, and the shared heaps' spans it leaves, adopted
# by the next thread's span changes (src/heap.c, shared_adopt), with the race windows open
if bg_step "TSan build (test_threads)" "$LOGS/tsan-build-threads.log"; then
  log="$LOGS/tsan_threads.log"
  if "$B/tsan/threads_tsan" 1000 >"$log" 2>&1 && ! grep -q 'ThreadSanitizer' "$log"; then
    pass tsan_threads
  else
    failed tsan_threads
    grep -m1 -A30 'WARNING: ThreadSanitizer' "$log" | sed 's/^/  | /' >&2 || true
    tail -5 "$log" | sed 's/^/  | /' >&2
  fi
fi
# the eager-return protocol (owner and remote frees racing to claim reusable spans)
if bg_step "TSan build (test_eager)" "$LOGS/tsan-build-eager.log"; then
  log="$LOGS/tsan_eager.log"
  if "$B/tsan/eager_tsan" >"$log" 2>&1 && ! grep -q 'ThreadSanitizer' "$log"; then
    pass tsan_eager
  else
    failed tsan_eager
    grep -m1 -A30 'WARNING: ThreadSanitizer' "$log" | sed 's/^/  | /' >&2 || true
  fi
fi

# lending an idle owner's spans (heap_lend_idle) racing with the owners' own frees; race-big
# with the purger draining the owners' block caches as they nap
if bg_step "TSan build (test_lend)" "$LOGS/tsan-build-lend.log"; then
  for mode in reuse when race race-big hot; do
    log="$LOGS/tsan_lend_$mode.log"
    arg=--$mode
    [ $mode = reuse ] && arg=
    # shellcheck disable=SC2086
    if RILL_PURGE_THREAD=1 RILL_PURGE_DELAY_MS=8 "$B/tsan/lend_tsan" $arg >"$log" 2>&1 &&
      ! grep -q 'ThreadSanitizer' "$log"; then
      pass "tsan_lend_$mode"
    else
      failed "tsan_lend_$mode"
      grep -m1 -A30 'WARNING: ThreadSanitizer' "$log" | sed 's/^/  | /' >&2 || tail -5 "$log" >&2
    fi
  done
fi

# rill's lock: sleepers, their wakes at unlock and at a fork's marks, and the lender leaving a
# thread asleep on a lock alone
if bg_step "TSan build (test_lock)" "$LOGS/tsan-build-lock.log"; then
  log="$LOGS/tsan_lock.log"
  if RILL_PURGE_THREAD=0 "$B/tsan/lock_tsan" >"$log" 2>&1 && ! grep -q 'ThreadSanitizer' "$log"; then
    pass tsan_lock
  else
    failed tsan_lock
    grep -m1 -A30 'WARNING: ThreadSanitizer' "$log" | sed 's/^/  | /' >&2 || tail -5 "$log" >&2
  fi
fi

# ---- RILL_DEBUG: a shadow byte per block, checked at every hand-out ------------------------

# The stress modes against a -DRILL_DEBUG=1 build: a block handed out twice, a span pooled or
# formatted with a block still out, or a heap used by a thread that does not own it aborts
# at once with the span's recent state changes (src/debug.h). Optimised, so that races keep
# their timing.
say "RILL_DEBUG stress"
# shellcheck source=test/debug_cc.sh
. "$ROOT/test/debug_cc.sh"
DBG="$B/debug"
mkdir -p "$DBG"
# The five builds (one compiler each) start together, as TSan's do, so the second core
# builds while the first runs.
bg "$LOGS/debug-build.log" debug_cc "$ROOT" "$DBG/stress_debug" "$ROOT/test/stress.c"
bg "$LOGS/debug-build-windows.log" \
  debug_cc "$ROOT" "$DBG/stress_debug_windows" "$ROOT/test/stress.c" -DRILL_RACE_WINDOWS
bg "$LOGS/debug-build-young.log" \
  debug_cc "$ROOT" "$DBG/stress_debug_young" "$ROOT/test/stress.c" -DYOUNG_THREADS=2
bg "$LOGS/debug-build-lend.log" debug_cc "$ROOT" "$DBG/lend_debug" "$ROOT/test/test_lend.c"
bg "$LOGS/debug-build-aslimit.log" \
  debug_cc "$ROOT" "$DBG/aslimit_debug" "$ROOT/test/test_aslimit.c"
if bg_step "RILL_DEBUG build" "$LOGS/debug-build.log"; then
  step "RILL_DEBUG stress: random, prodcons, churn, tls, fork" "$LOGS/debug-stress.log" \
    "$DBG/stress_debug" --mode random,prodcons,churn,tls,fork --threads 1,4,16 --ops $TS_OPS \
    --items $TS_ITEMS --churn $TS_CHURN --forks $TS_FORKS
  step "RILL_DEBUG stress: relay" "$LOGS/debug-relay.log" \
    "$DBG/stress_debug" --mode relay --relay-ms 5000
fi
# with race windows and the purger at 5 ms: the build that found two ways to pool a span with
# a block out (docs/testing.md, "Two races the windows found")
if bg_step "RILL_DEBUG build (race windows)" "$LOGS/debug-build-windows.log"; then
  for k in 1 2 3; do
    step "RILL_DEBUG stress, race windows, purger ($k of 3)" "$LOGS/debug-windows-$k.log" \
      env RILL_PURGE_THREAD=1 RILL_PURGE_DELAY_MS=5 "$DBG/stress_debug_windows" \
      --mode random,prodcons,churn,fork --threads 1,4,16 --ops $TS_OPS --items $TS_ITEMS \
      --churn $TS_CHURN --forks $TS_FORKS --fork-threads 2
  done
fi
# young blocks from the third live thread on (src/heap.c): the shadow bytes and span checks
# over the shared heaps' spans
if bg_step "RILL_DEBUG build (young blocks)" "$LOGS/debug-build-young.log"; then
  step "RILL_DEBUG stress, young blocks" "$LOGS/debug-stress-young.log" \
    "$DBG/stress_debug_young" --mode random,prodcons,churn,fork --threads 4,16 \
    --ops $TS_OPS --items $TS_ITEMS --churn $TS_CHURN --churn-par 16 --forks $TS_FORKS
fi
if bg_step "RILL_DEBUG build (test_lend)" "$LOGS/debug-build-lend.log"; then
  step "RILL_DEBUG lend race" "$LOGS/debug-lend.log" \
    env RILL_PURGE_THREAD=1 RILL_PURGE_DELAY_MS=8 "$DBG/lend_debug" --race
  step "RILL_DEBUG lend race, big blocks (block caches drained)" "$LOGS/debug-lend-big.log" \
    env RILL_PURGE_THREAD=1 RILL_PURGE_DELAY_MS=8 "$DBG/lend_debug" --race-big
fi
# the arena spent under an address-space limit: free runs, wildernesses and pooled spans cut
# for the other kind of block, with the shadow bytes checked (test_aslimit's fill rounds with
# the purge at once, and eight threads racing to their first NULL)
if bg_step "RILL_DEBUG build (test_aslimit)" "$LOGS/debug-build-aslimit.log"; then
  step "RILL_DEBUG address-space limit" "$LOGS/debug-aslimit.log" \
    bash -c "ulimit -v 786432 && RILL_PURGE_DELAY_MS=0 '$DBG/aslimit_debug' most 805306368 &&
      '$DBG/aslimit_debug' race 805306368"
fi
# the same driver again and again with a random mode, seed and mix of RILL_* options
# (test/hunt.sh, also a tool of its own for hours-long hunts)
step "RILL_DEBUG hunt: random options for $HUNT_S s" "$LOGS/debug-hunt.log" \
  bash "$ROOT/test/hunt.sh" "$HUNT_S" "$DBG"

# ---- libFuzzer ----------------------------------------------------------------------------

say "fuzzing (fuzz_ops)"
# The UBSan build (below) compiles in the background from here, one job at a time: the
# fuzzer and then the aarch64 runs under qemu each keep one core busy, and the build took
# 51 s of CI's critical path when it ran alone. With two jobs it slowed the fuzzer's fixed
# number of runs from 94 to 151 s.
bg "$LOGS/ubsan-build.log" bash -c '
  env CC=gcc CXX=g++ cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DRILL_UBSAN=ON \
    -DRILL_WERROR=ON -DRILL_BENCH=OFF -DRILL_TEST_LONG="$3" && cmake --build "$2" -j 1' \
  _ "$ROOT" "$B/ubsan" "$LONG_FLAG"
FZ="$B/fuzz"
mkdir -p "$FZ"
# 120,000 runs took 308 s on a 2-core machine (the rate falls from 1,000 to 400 a second as
# the corpus grows) and CI ran 26 minutes; coverage levels off by 40,000 (1,157 edges at 32,768
# runs, 1,160 at 65,536). --long runs 1M
if [ $LONG = 1 ]; then FUZZ_RUNS=1000000; else FUZZ_RUNS=40000; fi
FUZZ_FLAGS=(-std=gnu11 -O1 -g -fno-omit-frame-pointer -DRILL_NO_OVERRIDE -DRILL_VARIANT=0
  -I"$ROOT/include" "${SRCS[@]}" "$ROOT/test/fuzz/fuzz_ops.c")
if echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n){(void)d;(void)n;return 0;}' |
  clang -x c -fsanitize=fuzzer - -o "$FZ/probe" >/dev/null 2>&1; then
  if step "libFuzzer build (ASan+UBSan)" "$LOGS/fuzz-build.log" \
    clang -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    "${FUZZ_FLAGS[@]}" -o "$FZ/fuzz_ops"; then
    rm -rf "$FZ/corpus" && mkdir -p "$FZ/corpus"
    step "libFuzzer: $FUZZ_RUNS runs" "$LOGS/fuzz-run.log" \
      env ASAN_OPTIONS=detect_leaks=0 "$FZ/fuzz_ops" -runs=$FUZZ_RUNS -seed=1 -max_len=4096 \
      -rss_limit_mb=4096 -artifact_prefix="$FZ/" "$FZ/corpus" "$ROOT/test/fuzz/corpus"
  fi
else
  echo "  libFuzzer runtime not available: using the standalone driver"
  if step "fuzz driver build (ASan+UBSan)" "$LOGS/fuzz-build.log" \
    clang -fsanitize=address,undefined -fno-sanitize-recover=undefined "${FUZZ_FLAGS[@]}" \
    "$ROOT/test/fuzz/fuzz_main.c" -o "$FZ/fuzz_main"; then
    step "fuzz driver: corpus + random inputs" "$LOGS/fuzz-run.log" \
      env ASAN_OPTIONS=detect_leaks=0 "$FZ/fuzz_main" "$ROOT/test/fuzz/corpus" \
      --random $((FUZZ_RUNS / 20)) --seed 1
  fi
fi

# ---- aarch64: cross build, and a run under qemu with 4, 16 and 64 KiB pages -------------

say "aarch64 cross build and qemu runs"
need aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu libc6-dev-arm64-cross
# The cross compiler only recommends its C library headers, and --no-install-recommends
# leaves them out: install them even when the compiler is already there.
if command -v aarch64-linux-gnu-gcc >/dev/null && [ ! -e /usr/aarch64-linux-gnu/include/stdio.h ]; then
  apt_install libc6-dev-arm64-cross || true
fi
need qemu-aarch64 qemu-user
if command -v aarch64-linux-gnu-gcc >/dev/null; then
  A64="$B/aarch64"
  mkdir -p "$A64"
  if step "aarch64 build (-Werror)" "$LOGS/aarch64-build.log" bash -c '
      set -e
      for f in "$1"/src/*.c; do
        aarch64-linux-gnu-gcc -std=gnu11 -O2 -fPIC -Wall -Wextra -Wshadow -Werror \
          -fvisibility=hidden -ftls-model=initial-exec -DRILL_SHARED=1 -I"$1/include" -c "$f" \
          -o "$2/$(basename "$f" .c).o"
      done
      aarch64-linux-gnu-gcc -shared -o "$2/librill.so" "$2"/*.o -lpthread
      aarch64-linux-gnu-gcc -O2 -pthread "$1/test/test_pagesize.c" -o "$2/test_pagesize" \
        -L"$2" -lrill -Wl,-rpath,"$2"' _ "$ROOT" "$A64"; then
    if command -v qemu-aarch64 >/dev/null; then
      # the three at once: each spends half its 15-22 s waiting (user time 8-9 s)
      for pg in 4096 16384 65536; do
        bg "$LOGS/aarch64-qemu-$pg.log" \
          timeout 300 qemu-aarch64 -p "$pg" -L /usr/aarch64-linux-gnu "$A64/test_pagesize"
      done
      for pg in 4096 16384 65536; do
        bg_step "aarch64 qemu run, ${pg}-byte pages" "$LOGS/aarch64-qemu-$pg.log"
      done
    else
      failed "aarch64 qemu runs (qemu-user not available)"
    fi
  fi
else
  failed "aarch64 cross build (gcc-aarch64-linux-gnu not available)"
fi

# ---- UndefinedBehaviorSanitizer ----------------------------------------------------------

say "UBSan build (-DRILL_UBSAN=ON) and CTest"
export UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1"
if bg_step "configure and build (UBSan)" "$LOGS/ubsan-build.log"; then
  ctest_counted ctest-ubsan "$B/ubsan"
else
  failed "ctest (UBSan build did not build)"
fi

# ---- summary ------------------------------------------------------------------------------

say "summary"
if [ $FAILED -gt 0 ]; then
  echo "failed:"
  for n in "${FAILED_NAMES[@]}"; do echo "  - $n"; done
fi
echo "logs: $LOGS"
echo "$PASSED passed, $FAILED failed"
[ $FAILED -eq 0 ]
