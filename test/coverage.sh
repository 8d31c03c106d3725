#!/usr/bin/env bash
# coverage.sh - which lines, functions and branches of src/ the CTest suite runs: a build
# with gcc's --coverage, the suite run in it, and gcovr's summary per file. Not part of CI
# (it adds a build and a suite run); for finding untested code.
#
#   bash test/coverage.sh [DIR]    (DIR holds the build, gcovr's venv and the reports;
#                                   default build/coverage)
#
# What it cannot see: code that runs only in processes ending in _exit or a signal, which
# skip gcov's dump (forked children, an invalid free's abort), so the figures are a lower
# bound. Two tests are left out, since they fail under gcov itself: aslimit's "tiny" child
# (every malloc fails there, and gcov's dump at exit needs memory) and install_and_link
# (the installed static library lacks the gcov runtime).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR=${1:-$ROOT/build/coverage}
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
JOBS=${RILL_JOBS:-$(nproc)}

if [ ! -x "$DIR/venv/bin/gcovr" ]; then
  python3 -m venv "$DIR/venv"
  "$DIR/venv/bin/pip" install -q gcovr
fi

flags="--coverage"
cmake -S "$ROOT" -B "$DIR/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="$flags" >"$DIR/configure.log"
cmake --build "$DIR/build" -j "$JOBS" >"$DIR/build.log"
find "$DIR/build" -name '*.gcda' -delete # counts from this run only

# a failing test is reported, but the report is still written
rc=0
(cd "$DIR/build" && ctest -j "$JOBS" --timeout 900 -E '^(aslimit|install_and_link)$' \
  >"$DIR/ctest.log" 2>&1) || rc=$?
tail -n 3 "$DIR/ctest.log"

mkdir -p "$DIR/html"
# CMake's compiler probes were built with the flags too; their sources are gone
find "$DIR/build/CMakeFiles" -path '*CompilerId*' -name '*.gc*' -delete
cd "$DIR/build"
"$DIR/venv/bin/gcovr" -r "$ROOT" --filter "$ROOT/src/" --object-directory "$DIR/build" \
  --gcov-ignore-parse-errors all --txt "$DIR/lines.txt" --html-details "$DIR/html/index.html" \
  --print-summary 2>"$DIR/gcovr.log" | tee "$DIR/summary.txt"
sed -n '/^File/,$p' "$DIR/lines.txt"
echo "per-line report: $DIR/html/index.html"
exit "$rc"
