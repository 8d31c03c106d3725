#!/usr/bin/env bash
# strict_overcommit.sh BIN - rill under the kernel's strict overcommit (vm.overcommit_memory
# = 2), where every writable private mapping is charged in full when it is made. It sets the
# mode for its own run and puts the old value back on exit, so it needs root and a writable
# /proc/sys/vm/overcommit_memory; without them it says so and exits 77 (ctest: skipped).
# 1. RILL_COMMIT=auto (the default) must see the mode and commit on demand: test_commit's
#    checks pass with no variable set.
# 2. Four rill processes alive at once, each holding 16 MiB, raise the system's committed
#    memory (Committed_AS) by under 512 MiB; reserving the arena writable charged over 8 GiB
#    to the first of them, and the next could hardly start.
# 3. Memory freed and trimmed leaves the charge: 512 MiB of small blocks, then of large ones,
#    raise Committed_AS by under 128 MiB once freed and trimmed.
# 4. Taking memory until the kernel refuses: malloc fails with ENOMEM, and works again
#    after frees.
set -u
bin=$1
f=/proc/sys/vm/overcommit_memory
old=$(cat "$f" 2>/dev/null) || old=
if [ "$(id -u)" != 0 ] || [ -z "$old" ] || ! (echo "$old" > "$f") 2>/dev/null; then
  echo "strict_overcommit: not run: needs root and a writable $f"
  exit 77
fi
trap 'echo "$old" > "$f"' EXIT
echo 2 > "$f"
fail=0
committed() { awk '/^Committed_AS:/ {print $2}' /proc/meminfo; }

echo "--- RILL_COMMIT unset under vm.overcommit_memory=2"
env -u RILL_COMMIT "$bin" || fail=1

echo "--- four processes holding 16 MiB each"
tmp=$(mktemp -d)
before=$(committed)
pids=()
for i in 1 2 3 4; do
  env -u RILL_COMMIT "$bin" --hold 16 > "$tmp/out$i" 2>&1 &
  pids+=($!)
done
for _ in $(seq 100); do
  n=$(cat "$tmp"/out* 2>/dev/null | grep -c '^ready' || true)
  [ "$n" = 4 ] && break
  sleep 0.1
done
during=$(committed)
for p in "${pids[@]}"; do wait "$p" || fail=1; done
n=$(cat "$tmp"/out* | grep -c '^ready' || true)
delta=$(( (during - before) / 1024 ))
echo "ready: $n of 4; Committed_AS $before -> $during KiB (+$delta MiB)"
if [ "$n" != 4 ]; then echo "FAIL: a holding process did not start"; cat "$tmp"/out*; fail=1; fi
if [ "$delta" -ge 512 ]; then echo "FAIL: four small processes charged $delta MiB"; fail=1; fi
rm -rf "$tmp"

echo "--- purged memory leaves the charge"
env -u RILL_COMMIT "$bin" --give-back || fail=1

echo "--- until the kernel refuses"
env -u RILL_COMMIT "$bin" --exhaust || fail=1

exit $fail
