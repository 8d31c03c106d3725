#!/usr/bin/env bash
# ld_audit.sh - proves rill loads and serves a program run under an rtld auditor (LD_AUDIT),
# which tools such as sotruss and some profilers use: the auditor is loaded first, and what
# static TLS a preloaded library's initial-exec variables find left then is small (an
# allocator with a large TLS block fails to load, and the program never starts). Passes only
# if the program exits 0, the auditor said it was loaded, and rill printed its statistics.
# usage: ld_audit.sh LIBRILL AUDITOR PROGRAM [ARGS...]
set -u
[ $# -ge 3 ] || { echo "usage: $0 LIBRILL AUDITOR PROGRAM [ARGS...]" >&2; exit 2; }
LIB=$1 AUDIT=$2
shift 2
err=$(mktemp -t rill-audit.XXXXXX)
trap 'rm -f "$err"' EXIT
LD_AUDIT="$AUDIT" LD_PRELOAD="$LIB" RILL_SHOW_STATS=1 "$@" 2>"$err" >/dev/null
rc=$?
cat "$err" >&2
fail=0
[ $rc -eq 0 ] || { echo "FAIL: $* exited with status $rc under LD_AUDIT" >&2; fail=1; }
grep -q '^audit_lib: loaded' "$err" || { echo "FAIL: the auditor was not loaded" >&2; fail=1; }
grep -q '^rill:' "$err" || { echo "FAIL: no rill statistics: rill did not serve it" >&2; fail=1; }
[ $fail -eq 0 ] && echo "ok: rill served $(basename "$1") under an rtld auditor"
exit $fail
