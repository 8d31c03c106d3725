#!/usr/bin/env bash
# thp_always.sh BIN - rill under the kernel's transparent huge pages in mode "always",
# where any anonymous mapping not marked otherwise is backed by 2 MiB pages at its first
# touch: a thread's first 16 KiB span would take 2 MiB. It sets the mode for its own run and
# puts the old value back on exit, so it needs root and a writable sysfs file; without them
# it says so and exits 77 (ctest: skipped). BIN is test_thp (test_thp.c).
# 1. No huge page backs rill's memory, and the kernel may not use any there (THPeligible),
#    for eight threads' small program and for 160 MiB of blocks.
# 2. With RILL_HUGEPAGES=1 the small program takes none either, and its mappings' RSS is
#    within 1 MiB of the same run in mode "madvise".
# 3. With RILL_HUGEPAGES=1, 160 MiB of blocks are in huge pages (16 MiB at least).
set -u
bin=$1
f=/sys/kernel/mm/transparent_hugepage/enabled
old=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "$f" 2>/dev/null) || old=
if [ "$(id -u)" != 0 ] || [ -z "$old" ] || ! (echo "$old" > "$f") 2>/dev/null; then
  echo "thp_always: not run: needs root and a writable $f"
  exit 77
fi
trap 'echo "$old" > "$f"' EXIT
fail=0
rss() { sed -n 's/.*rill_rss_kib=\([0-9]*\).*/\1/p' <<< "$1"; }

echo madvise > "$f"
out=$(RILL_HUGEPAGES=1 "$bin" --small) || fail=1
echo "$out"
base=$(rss "$out")

echo always > "$f"
echo "--- mode always"
env -u RILL_HUGEPAGES "$bin" --small || fail=1
env -u RILL_HUGEPAGES "$bin" --big || fail=1
out=$(RILL_HUGEPAGES=1 "$bin" --small) || fail=1
echo "$out"
now=$(rss "$out")
if [ -z "$base" ] || [ -z "$now" ] || [ "$now" -gt $((base + 1024)) ]; then
  echo "FAIL: RILL_HUGEPAGES=1 small program: ${now:-?} KiB under always, ${base:-?} KiB under madvise"
  fail=1
fi
RILL_HUGEPAGES=1 "$bin" --big || fail=1
exit $fail
