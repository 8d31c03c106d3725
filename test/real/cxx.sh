#!/usr/bin/env bash
# cxx.sh - proves a C++ program using std::thread, containers and aligned new, built without
# rill, prints identical output when rill is preloaded (operator new/delete replaced at load).
# usage: cxx.sh /path/to/librill.so /path/to/cxx_prog
set -u
. "$(dirname "$0")/common.sh"
setup_real "$1"
PROG=${2:?usage: cxx.sh librill.so cxx_prog}
both cxx_prog_default "$PROG"
both cxx_prog_many_threads "$PROG" 16
finish_real
