#!/usr/bin/env bash
# Builds rill and the benchmarks, then runs the comparison driver (run.py).
#
#   bench/run.sh [--quick|--full] [--only name,...] [--allocators a,b] [run.py options]
#   bench/run.sh --bench-only ...   build just the benchmarks (peers and glibc only)
#   bench/run.sh --soak SECONDS     only the soak benchmark, SECONDS per allocator, 4 threads
#   bench/run.sh --hugepages        sizes, locality and idle, huge-page options off and on
#   bench/run.sh --syscalls         bench_churn under strace: mmap/munmap/madvise counts
#   bench/run.sh --real [--reps N]  real programs (RocksDB, redis, sqlite3, Lua, python3, Java;
#                                   bench/real.py), installed with apt-get when root
#
# Environment: RILL_BUILD_DIR (default: build), RILL_BUILD_JOBS (default: 2).
# Exit status: run.py's (0 = the suite ran; see run.py), or 4 if the project
# did not build (the benchmarks are then built and run on their own anyway).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
build="${RILL_BUILD_DIR:-$repo/build}"
jobs="${RILL_BUILD_JOBS:-2}"
venv="$here/.venv"

bench_only=0
syscalls=0
real=0
args=()
for arg in "$@"; do
  case "$arg" in
    --bench-only) bench_only=1 ;;
    --real) real=1 ;;
    --syscalls) syscalls=1; args+=("$arg") ;;
    -h|--help)
      sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      echo
      exec python3 "$here/run.py" --help ;;
    *) args+=("$arg") ;;
  esac
done

# 1. Python with matplotlib for the charts, in bench/.venv. Without it the
#    suite still runs; run.py then skips the charts.
python="python3"
if [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >/dev/null 2>&1; then
  python="$venv/bin/python"
  if ! "$python" -c 'import matplotlib' >/dev/null 2>&1; then
    echo "== installing matplotlib into bench/.venv"
    "$python" -m pip install --quiet --disable-pip-version-check matplotlib ||
      echo "warning: could not install matplotlib; charts will be skipped" >&2
  fi
else
  echo "warning: could not create bench/.venv; charts will be skipped" >&2
fi

# The peers Debian ships, valgrind for the instruction counts, and strace for
# --syscalls: installed when missing and we may (root with apt-get). Without
# them the suite still runs; run.py names each allocator it skips and the
# package that provides it.
need=()
have_lib() { [ -n "$(ls /usr/lib/*-linux-gnu/"$1" /usr/lib/"$1" 2>/dev/null | head -1)" ]; }
have_lib libjemalloc.so.2 || need+=(libjemalloc2)
have_lib libtcmalloc_minimal.so.4 || need+=(libtcmalloc-minimal4)
have_lib libmimalloc.so.2 || need+=(libmimalloc2.0)
have_lib libtbbmalloc.so.2 || need+=(libtbbmalloc2)
command -v valgrind >/dev/null || need+=(valgrind)
if [ "$syscalls" = 1 ] && ! command -v strace >/dev/null; then need+=(strace); fi
if [ "$real" = 1 ]; then # the real programs' packages (bench/real.py)
  command -v cache_bench >/dev/null || need+=(rocksdb-tools)
  command -v redis-server >/dev/null || need+=(redis-server)
  command -v redis-benchmark >/dev/null || need+=(redis-tools)
  command -v sqlite3 >/dev/null || need+=(sqlite3)
  command -v lua5.4 >/dev/null || need+=(lua5.4)
  command -v ruby >/dev/null || need+=(ruby)
  command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)
fi
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ${need[*]}"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
          apt-get install -y -qq --no-install-recommends "${need[@]}"; }; } >/dev/null 2>&1 ||
      echo "warning: could not install ${need[*]}; the suite skips what is missing" >&2
  else
    echo "note: not installed: ${need[*]} (apt-get install ${need[*]}); the suite skips them" >&2
  fi
fi

# 2. Build. The top-level project builds librill*.so and, through
#    add_subdirectory(bench), the bench_* programs into build/bench.
build_failed=0
bench_dir="$build/bench"
if [ "$bench_only" = 0 ]; then
  echo "== building the project in ${build#"$repo"/}"
  # The three libraries and the benchmarks only: the test programs are half the build's
  # time, and the README's test command builds its own (the directory's options stay as
  # they were, so a later `cmake --build build` still builds the tests).
  if ! { cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release &&
         cmake --build "$build" -j"$jobs" --target rill rill_globallock rill_hashed benchmarks; }; then
    echo "error: the project did not build; measuring the other allocators only" >&2
    build_failed=1
  fi
fi
if [ "$bench_only" = 1 ] || [ "$build_failed" = 1 ]; then
  bench_dir="$build/bench-only"
  echo "== building the benchmarks alone in ${bench_dir#"$repo"/}"
  cmake -S "$here" -B "$bench_dir" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$bench_dir" -j"$jobs"
fi

# 3. Run.
if [ "$real" = 1 ]; then
  [ "$build_failed" = 0 ] || { echo "error: --real needs the project built" >&2; exit 4; }
  exec "$python" "$here/real.py" --build-dir "$build" ${args[@]+"${args[@]}"}
fi
if [ "$build_failed" = 1 ]; then
  args+=(--no-rill "the project did not build")
fi
status=0
"$python" "$here/run.py" --build-dir "$build" --bench-dir "$bench_dir" ${args[@]+"${args[@]}"} ||
  status=$?
if [ "$status" = 0 ] && [ "$build_failed" = 1 ]; then
  echo "error: the suite ran, but the project failed to build" >&2
  status=4
fi
exit "$status"
