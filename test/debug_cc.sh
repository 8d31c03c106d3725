# debug_cc.sh - the one gcc line for rill's -DRILL_DEBUG=1 drivers (a shadow byte per block,
# checked at every hand-out: src/debug.h), sourced by test/run.sh and test/hunt.sh.
#   debug_cc ROOT OUT MAIN.c [extra flags...]
# builds MAIN.c with every source of ROOT/src into OUT, optimised so that races keep their
# timing, with the rill_* API and no symbol overrides.
debug_cc() {
  local root=$1 out=$2 main=$3
  shift 3
  gcc -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wno-use-after-free -DRILL_DEBUG=1 \
    -DRILL_NO_OVERRIDE -DRILL_VARIANT=0 -DUSE_RILL_API "$@" -I"$root/include" -I"$root/test" \
    "$root"/src/*.c "$main" -o "$out" -lpthread
}
