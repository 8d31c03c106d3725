#!/usr/bin/env bash
# ripgrep.sh - proves ripgrep, a Rust program that searches with one thread per core and
# more, runs under rill with the same output. Rust's standard allocator calls malloc,
# posix_memalign and realloc; each search thread grows its own buffers and regex caches, and
# the results cross to the printing thread. The corpus is generated, so the matches are
# known: each count is checked against its file's, not only against the run without rill.
# usage: ripgrep.sh /path/to/librill.so [files]
# Exits 77 (skipped) where rg is not installed (test/run.sh installs it when root).
set -u
. "$(dirname "$0")/common.sh"
setup_real "$@"
FILES=${2:-400}
skip_without rg -- "rg (apt-get install ripgrep)"
CORPUS="$WORK/corpus"
mkdir -p "$CORPUS"
# file i: i lines that match, then filler; lines of 10-2000 bytes
for ((i = 1; i <= FILES; i++)); do
  {
    for ((k = 0; k < i % 37; k++)); do printf 'needle %d %*s\n' "$k" $(((i * 131 + k * 17) % 2000)) x; done
    for ((k = 0; k < 50; k++)); do printf 'hay %*s\n' $(((i * 7 + k * 29) % 1990 + 10)) y; done
  } >"$CORPUS/f$i.txt"
done
expected="$WORK/expected"
for ((i = 1; i <= FILES; i++)); do
  [ $((i % 37)) = 0 ] || echo "$CORPUS/f$i.txt:$((i % 37))"
done | sort >"$expected"
for j in 2 8; do
  both "rg_count_j$j" bash -c "rg -j $j -c '^needle [0-9]+ +x\$' '$CORPUS' | sort"
  if [ -f "$WORK/rg_count_j$j.rill.out" ] && ! cmp -s "$expected" "$WORK/rg_count_j$j.rill.out"; then
    fail "rg -j $j: counts differ from the corpus's"
    diff "$expected" "$WORK/rg_count_j$j.rill.out" | head -5 >&2
  fi
done
# the search threads' blocks reach the printing thread: rg's own statistics line counts them
if [ -f "$WORK/rg_count_j8.rill.err" ] && ! grep -q 'remote_frees=[1-9]' "$WORK/rg_count_j8.rill.err"; then
  fail "rg -j 8: no statistics line with remote frees (rill served no threaded rg)"
fi
# matches printed with their lines: every byte of a long line crosses threads
both rg_lines_j4 bash -c "rg -j 4 -n --no-heading 'needle' '$CORPUS' | sort | md5sum"
finish_real
