#!/usr/bin/env bash
# cmake.sh - proves cmake runs under rill: it configures and builds a small C/C++ project
# with cmake (and the compilers and make it starts) preloaded, and the program it builds
# prints what the one built without rill prints.
# usage: cmake.sh /path/to/librill.so
set -u
. "$(dirname "$0")/common.sh"
setup_real "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
command -v cmake >/dev/null || { echo "cmake not found"; exit 1; }
cd "$WORK" || exit 1

mkdir -p proj
cp "$HERE/cxx_prog.cc" proj/
cat >proj/CMakeLists.txt <<'CMK'
cmake_minimum_required(VERSION 3.13)
project(rill_real_cmake C CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(Threads REQUIRED)
file(GLOB_RECURSE SOURCES_SEEN "${CMAKE_SOURCE_DIR}/*.cc")
list(LENGTH SOURCES_SEEN N)
message(STATUS "sources: ${N}")
add_executable(prog cxx_prog.cc)
target_link_libraries(prog Threads::Threads)
CMK

# configure_build NAME PRELOAD: configure and build into build-NAME; stderr kept
configure_build() {
  local name=$1 pre=$2
  CHECKS=$((CHECKS + 1))
  if ! LD_PRELOAD="$pre" RILL_SHOW_STATS=1 cmake -S proj -B "build-$name" >"$name.cfg.out" \
    2>"$name.cfg.err"; then
    fail "cmake configure ($name) failed: $(grep -v '^rill:' "$name.cfg.err" | head -5)"
    return 1
  fi
  if ! LD_PRELOAD="$pre" RILL_SHOW_STATS=1 cmake --build "build-$name" >"$name.build.out" \
    2>"$name.build.err"; then
    fail "cmake build ($name) failed: $(grep -v '^rill:' "$name.build.err" | head -5)"
    return 1
  fi
  note "  ok   cmake configure and build ($name)"
}

configure_build base ""
configure_build rill "$LIB"
CHECKS=$((CHECKS + 1))
if grep -q 'rill:' rill.cfg.err; then
  note "  ok   cmake printed rill statistics: rill served it"
else
  fail "no 'rill:' statistics from cmake: rill did not run"
fi
[ -x build-base/prog ] && [ -x build-rill/prog ] && same "built program identical" build-base/prog build-rill/prog
[ -x build-rill/prog ] && both run_prog_built_under_rill ./build-rill/prog
finish_real
