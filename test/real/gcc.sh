#!/usr/bin/env bash
# gcc.sh - proves gcc and g++ (cc1, as, ld all running under rill) produce byte-identical
# objects and executables, and that the executables behave the same.
# usage: gcc.sh /path/to/librill.so
set -u
. "$(dirname "$0")/common.sh"
setup_real "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
command -v gcc >/dev/null || { echo "gcc not found"; exit 1; }
cd "$WORK" || exit 1

# A generated C file: many functions, switches, tables and structs keep cc1 busy.
awk 'BEGIN {
  print "#include <stdio.h>\n#include <string.h>\n#include <stdlib.h>";
  print "struct rec { int a; double b; char name[24]; struct rec *next; };";
  for (i = 0; i < 400; i++) {
    printf "static int f%d(int x, struct rec *r) {\n  int acc = %d;\n", i, i;
    print "  switch ((x + acc) & 15) {";
    for (j = 0; j < 16; j++) printf "  case %d: acc += x * %d + (r ? r->a : 0); break;\n", j, (i * 31 + j) % 97;
    print "  }";
    printf "  for (int k = 0; k < (x & 7); k++) acc ^= (acc << 3) + k * %d;\n", i % 13 + 1;
    print "  return acc;\n}";
  }
  print "static int (*const table[])(int, struct rec *) = {";
  for (i = 0; i < 400; i++) printf "  f%d,\n", i;
  print "};";
  print "int main(void) {\n  struct rec r = {3, 1.5, \"x\", 0};\n  unsigned long sum = 0;";
  print "  for (int i = 0; i < 400000; i++) sum = sum * 31 + (unsigned)table[i % 400](i, &r);";
  print "  char *buf = malloc(100000); memset(buf, 7, 100000); sum += buf[99999]; free(buf);";
  print "  printf(\"%lu\\n\", sum);\n  return 0;\n}";
}' >gen.c

# Each compile writes to a name of its own; the run with rill goes second.
compile_both() { # NAME OUTPUT_SUFFIX COMPILER ARGS... (the last output name is supplied)
  local name=$1 suf=$2
  shift 2
  CHECKS=$((CHECKS + 1))
  "$@" -o "base$suf" 2>"$name.base.err" || { fail "$name: fails without rill: $(head -3 "$name.base.err")"; return 1; }
  if ! LD_PRELOAD="$LIB" RILL_SHOW_STATS=1 "$@" -o "rill$suf" 2>"$name.rill.err"; then
    fail "$name: fails under rill: $(grep -v '^rill:' "$name.rill.err" | head -5)"
    return 1
  fi
  if ! grep -q 'rill:' "$name.rill.err"; then
    fail "$name: no rill statistics on stderr: rill did not run"
    return 1
  fi
  note "  ok   $name compiled under rill"
  same "$name output identical" "base$suf" "rill$suf"
}

compile_both gcc_O2_object .o gcc -O2 -g -c gen.c
compile_both gcc_O0_object _O0.o gcc -O0 -c gen.c
# the link alone (collect2, ld) of the object both runs made the same; cc1 at O2 is above
compile_both gcc_link_exe .exe gcc base.o
compile_both gpp_O2_object _cxx.o g++ -std=c++17 -O2 -c "$HERE/cxx_prog.cc"
compile_both gpp_link_exe _cxx.exe g++ -std=c++17 -O1 -pthread "$HERE/cxx_prog.cc"
[ -x base.exe ] && both run_generated_exe ./base.exe
[ -x rill.exe ] && both run_exe_built_under_rill ./rill.exe
[ -x rill_cxx.exe ] && both run_cxx_built_under_rill ./rill_cxx.exe
finish_real
