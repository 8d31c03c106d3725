#!/usr/bin/env bash
# memory_long_run.sh - rill over time (LKmalloc §4 stability): a 20-second
# server soak keeps its RSS steady, endless thread churn runs in constant
# memory, malformed RILL_* options warn once and fall back to defaults, and
# misspelt option names say which option was meant.
# usage: memory_long_run.sh LIBRILL SOAK_EXE MLEAK_EXE PROBE_EXE [SOAK_SECONDS]
set -u
lib=$1 soak=$2 mleak=$3 probe=$4 secs=${5:-20}
fail=0
field() { sed -n "s/.* $1=\([-0-9.e+]*\).*/\1/p" <<<"$2"; }

# 1. Soak: steady-state RSS in the last tenth against the first tenth after
#    warm-up. Generous bound here; the long run's figure is in the benchmarks.
out=$(LD_PRELOAD=$lib "$soak" -t 4 -d "$secs" 2>&1 | grep '^RESULT')
drift=$(field rss_drift_pct "$out")
ops=$(field value "$out")
echo "soak: ${secs}s, ops/s=$ops, rss drift=${drift}%"
if [ -z "$drift" ] || ! awk -v d="$drift" 'BEGIN { exit !(d <= 25 && d >= -50) }'; then
  echo "FAIL: soak RSS drift ${drift:-missing}% is outside [-50%, 25%]"
  fail=1
fi

# 2. Thread churn: 80,000 threads come and go, objects freed by others after
#    their owners exit; RSS in the second half may not grow by more than 1.5x.
out=$(LD_PRELOAD=$lib "$mleak" -t 4 -r 20000 -L 1.5 2>&1)
rc=$?
echo "mleak: $(grep -o 'rss_first_kib=[0-9]* rss_mid_kib=[0-9]* rss_last_kib=[0-9]*' <<<"$out") rc=$rc"
if [ $rc -ne 0 ]; then
  echo "FAIL: thread churn grew RSS past the limit (exit $rc)"
  echo "$out" | tail -3
  fail=1
fi

# 3. Malformed options: one line each naming the variable and the accepted
#    values, the program still runs normally.
err=$(RILL_PURGE_DELAY_MS=soon RILL_PURGE=later RILL_HUGEPAGES=2 RILL_SHOW_STATS=maybe RILL_PURGE_THREAD=sometimes \
  RILL_DEEPBIND=drop LD_PRELOAD=$lib "$probe" --mode random --threads 1 --ops 1000 2>&1 >/dev/null)
rc=$?
for v in "RILL_PURGE_DELAY_MS: unrecognised value, accepted: a whole number from 0 to 3600000" \
  "RILL_PURGE: unrecognised value, accepted: dontneed, free" \
  "RILL_HUGEPAGES: unrecognised value, accepted: 1/0" \
  "RILL_SHOW_STATS: unrecognised value, accepted: 1/0" \
  "RILL_PURGE_THREAD: unrecognised value, accepted: auto, 1/0" \
  "RILL_DEEPBIND: unrecognised value, accepted: strip, keep"; do
  if [ "$(grep -c "^rill: $v" <<<"$err")" != 1 ]; then
    echo "FAIL: expected exactly one warning line 'rill: $v...'; stderr was:"
    echo "$err"
    fail=1
  fi
done
if [ $rc -ne 0 ]; then
  echo "FAIL: the program did not run normally with malformed options (exit $rc)"
  fail=1
fi
err=$(RILL_PURGE_DELAY_MS=250 RILL_PURGE=free RILL_HUGEPAGES=on RILL_PURGE_THREAD=AUTO RILL_SHOW_STATS=0 \
  RILL_COMMIT=auto RILL_DEEPBIND=keep LD_PRELOAD=$lib "$probe" --mode random --threads 1 --ops 1000 2>&1 >/dev/null)
if grep -q '^rill:' <<<"$err"; then
  echo "FAIL: valid options drew a warning: $err"
  fail=1
fi
# 4. Misspelt option names: a RILL_* name within two edits of an option, or
#    the start of one, draws one line naming the option meant; a program's
#    own RILL_* variables, far from every option, draw nothing.
err=$(RILL_PURGE_DELAY=250 RILL_HUGE_PAGES=1 RILL_COMIT=demand RILL_DEEP_BIND=keep RILL_MY_APP_MODE=fast RILL_BUILD_DIR=x \
  LD_PRELOAD=$lib "$probe" --mode random --threads 1 --ops 1000 2>&1 >/dev/null)
rc=$?
for v in "RILL_PURGE_DELAY: not an option, ignored; did you mean RILL_PURGE_DELAY_MS?" \
  "RILL_HUGE_PAGES: not an option, ignored; did you mean RILL_HUGEPAGES?" \
  "RILL_COMIT: not an option, ignored; did you mean RILL_COMMIT?" \
  "RILL_DEEP_BIND: not an option, ignored; did you mean RILL_DEEPBIND?"; do
  if [ "$(grep -cxF "rill: $v" <<<"$err")" != 1 ]; then
    echo "FAIL: expected exactly one line 'rill: $v'; stderr was:"
    echo "$err"
    fail=1
  fi
done
if [ "$(grep -c '^rill:' <<<"$err")" != 4 ] || [ $rc -ne 0 ]; then
  echo "FAIL: expected four warning lines and a normal run (exit $rc); stderr was:"
  echo "$err"
  fail=1
fi
echo "options: malformed values warned once each, valid ones silently accepted, misspelt names named"
exit $fail
