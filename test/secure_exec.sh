#!/usr/bin/env bash
# secure_exec.sh - proves a setuid program linked with rill takes no RILL_* options from its
# environment and prints nothing about them (AT_SECURE), while the same program run plainly
# by the same user does: RILL_SHOW_STATS=1, a bad RILL_PURGE and a misspelt name each draw a
# line there. Needs root (to make the setuid copy), setpriv, a user "nobody" and a build
# directory that user can reach on a filesystem without nosuid; otherwise reported skipped.
# usage: secure_exec.sh PROGRAM   (a program linked with librill that exits 0)
set -u
PROG=$1
skip() { echo "  $*: not run"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root"
command -v setpriv >/dev/null || skip "no setpriv"
NOBODY=$(id -u nobody 2>/dev/null) || skip "no user nobody"
dir=$(mktemp -d "$(dirname "$PROG")/secure.XXXXXX")
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
if findmnt -n -o OPTIONS -T "$dir" 2>/dev/null | tr ',' '\n' | grep -qx nosuid; then
  skip "the build directory is on a nosuid filesystem"
fi
cp "$PROG" "$dir/plain"
cp "$PROG" "$dir/setuid"
chown root:root "$dir/setuid"
chmod 4755 "$dir/setuid"
as_nobody() {
  (cd "$dir" && env -i PATH=/usr/bin:/bin RILL_SHOW_STATS=1 RILL_PURGE=bogus RILL_PURGE_DELAY=5 \
    setpriv --reuid="$NOBODY" --regid="$NOBODY" --clear-groups "$@")
}
as_nobody "$dir/plain" >/dev/null 2>"$dir/plain.err"
rc=$?
if [ $rc -ne 0 ]; then
  cat "$dir/plain.err"
  skip "user nobody cannot run the program from the build directory (status $rc)"
fi
fail=0
for want in "rill: stats:" "RILL_PURGE: unrecognised value" "RILL_PURGE_DELAY: not an option"; do
  if ! grep -q "$want" "$dir/plain.err"; then
    echo "FAIL: the plain run printed no \"$want\" line: the test cannot tell the cases apart"
    fail=1
  fi
done
as_nobody "$dir/setuid" >/dev/null 2>"$dir/setuid.err"
rc=$?
if [ $rc -ne 0 ]; then
  echo "FAIL: the setuid run exited with status $rc"
  fail=1
fi
if grep -q "rill" "$dir/setuid.err"; then
  echo "FAIL: the setuid run read its RILL_* options:"
  cat "$dir/setuid.err"
  fail=1
fi
echo "  plain run: $(grep -c rill "$dir/plain.err") rill lines; setuid run: $(grep -c rill "$dir/setuid.err")"
[ $fail = 0 ] && echo "secure_exec: all checks passed"
exit $fail
