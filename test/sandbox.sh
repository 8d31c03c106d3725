#!/usr/bin/env bash
# sandbox.sh DENY LIBRILL STRESS_PLAIN TEST_API FUZZ CORPUS - rill under a sandbox's system
# call filter (deny_syscalls.c: seccomp, as container runtimes, browsers' renderers and
# microVM monitors install), where the kernel refuses what rill asks of it on the side:
# 1. madvise refused (EPERM, then ENOSYS), with purging at once and the purger thread: the
#    API checks (calloc must still read zero: a purge that failed must not count as
#    zeroed) and the stress modes pass, nothing is counted as purged, and rill_collect
#    returns.
# 2. MADV_FREE refused with EINVAL, as by kernels before 4.5, under RILL_PURGE=free: pages
#    still go back (MADV_DONTNEED).
# 3. mremap and mincore refused: realloc of huge blocks and the statistics, read all
#    through the stress run, still work; RILL_SHOW_STATS=classes reports no class's
#    resident bytes under its bytes in use (a refused mincore counts as resident).
# 4. Thread creation refused, with RILL_PURGE_THREAD=1: one line says the purger could not
#    start and the program runs on.
set -u
deny=$1 lib=$2 stress=$3 api=$4 fuzz=$5 corpus=$6
fail=0
probe=$("$deny" madvise true 2>&1)
if [ $? = 77 ]; then
  echo "$probe"
  exit 77
fi
run() { # what, expected output pattern, command...
  local what=$1 want=$2
  shift 2
  local out
  out=$("$@" 2>&1)
  local rc=$?
  if [ "$rc" != 0 ] || ! grep -q -- "$want" <<< "$out"; then
    echo "FAIL: $what (exit $rc)"
    tail -n 20 <<< "$out"
    fail=1
  else
    echo "ok: $what"
  fi
}
modes=(--mode random,prodcons,churn,relay --threads 1,4 --ops 50000 --items 20000 --relay-ms 300)

run "madvise refused: API checks, purging at once" "all checks passed" \
  "$deny" madvise env RILL_PURGE_DELAY_MS=0 "$api" --quick
for err in 1 38; do
  run "madvise refused ($err): stress, purger thread" "all checks passed" \
    "$deny" "madvise=$err" env LD_PRELOAD="$lib" RILL_PURGE_DELAY_MS=0 RILL_PURGE_THREAD=1 \
    "$stress" "${modes[@]}"
done
# nothing counted as purged when nothing could be (stats line at exit)
out=$("$deny" madvise env LD_PRELOAD="$lib" RILL_PURGE_DELAY_MS=0 RILL_SHOW_STATS=1 \
  "$stress" --mode random,churn --threads 4 --ops 100000 --items 50000 2>&1)
purged=$(sed -n 's/.*rill: stats:.* purged=\([0-9]*\).*/\1/p' <<< "$out" | tail -n 1)
if [ "${purged:-x}" != 0 ]; then
  echo "FAIL: madvise refused, yet purged=${purged:-missing} at exit"
  fail=1
else
  echo "ok: madvise refused: purged=0 at exit"
fi

run "MADV_FREE refused (EINVAL), RILL_PURGE=free: API checks" "all checks passed" \
  "$deny" "madvise:8=22" env RILL_PURGE=free RILL_PURGE_DELAY_MS=0 "$api" --quick
out=$("$deny" "madvise:8=22" env LD_PRELOAD="$lib" RILL_PURGE=free RILL_PURGE_DELAY_MS=0 \
  RILL_SHOW_STATS=1 "$stress" --mode random,churn --threads 4 --ops 100000 --items 50000 2>&1)
purged=$(sed -n 's/.*rill: stats:.* purged=\([0-9]*\).*/\1/p' <<< "$out" | tail -n 1)
if [ "${purged:-0}" = 0 ]; then
  echo "FAIL: MADV_FREE refused: nothing purged (purged=${purged:-missing}); MADV_DONTNEED should serve"
  fail=1
else
  echo "ok: MADV_FREE refused: purged=$purged with MADV_DONTNEED"
fi

run "mremap and mincore refused: stress with statistics read throughout" "all checks passed" \
  "$deny" mremap,mincore env LD_PRELOAD="$lib" RILL_PURGE_DELAY_MS=0 "$stress" "${modes[@]}" \
  --stats-poll 1
out=$("$deny" mremap,mincore env RILL_PURGE_DELAY_MS=0 RILL_SHOW_STATS=classes "$api" --quick 2>&1)
if ! grep -q "all checks passed" <<< "$out"; then
  echo "FAIL: mremap and mincore refused: API checks"
  grep FAIL <<< "$out" | head -n 20
  fail=1
else
  echo "ok: mremap and mincore refused: API checks"
fi
bad=$(awk '/^rill: class / { iu = ""; rs = "";
             for (i = 1; i <= NF; i++) { if ($i ~ /^in_use=/) iu = substr($i, 8) + 0;
                                          if ($i ~ /^resident=/) rs = substr($i, 10) + 0 }
             n++; if (rs < iu) b++ }
           END { print (n ? b + 0 : "none") }' <<< "$out")
if [ "$bad" != 0 ]; then
  echo "FAIL: mincore refused: class rows with resident under in use: $bad"
  grep '^rill: class ' <<< "$out" | head -n 5
  fail=1
else
  echo "ok: mincore refused: every class row's resident bytes cover its bytes in use"
fi

run "threads refused: the purger cannot start, the program runs on" \
  "cannot start the purger thread" \
  "$deny" clone3=38,clone env RILL_PURGE_THREAD=1 "$fuzz" "$corpus" --random 50 --seed 3
exit $fail
