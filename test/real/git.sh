#!/usr/bin/env bash
# git.sh - proves git works unchanged under rill on a real repository of a few hundred
# commits: log/blame/diff/grep output is identical, and gc, repack and fsck succeed, with the
# packs written under rill verified by git running without it.
# usage: git.sh /path/to/librill.so [commits]
set -u
. "$(dirname "$0")/common.sh"
setup_real "$@"
N=${2:-300}
command -v git >/dev/null || { echo "git not found"; exit 1; }
PY=$(command -v python3) || { echo "python3 not found"; exit 1; }
export HOME="$WORK" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_PAGER=cat PAGER=cat
G="git -c core.pager=cat -c gc.auto=0 -c color.ui=false"

R="$WORK/repo"
mkdir -p "$R" && cd "$R" || exit 1
git init -q -b main . 2>/dev/null || git init -q .
"$PY" "$(dirname "$0")/make_history.py" "$N" >"$WORK/stream" || { echo "history generation failed"; exit 1; }
git fast-import --quiet <"$WORK/stream" || { echo "git fast-import failed"; exit 1; }
git symbolic-ref HEAD refs/heads/main
git checkout -q -f main || exit 1
note "repository: $(git rev-list --count HEAD) commits"

cd "$R" || exit 1
both log_stat $G log --stat --format='%H %an %ad %s' --date=iso
both log_patch $G log -p -n 80
both log_graph $G log --graph --oneline --decorate --all
first=$(git rev-list --max-parents=0 HEAD)
both diff_stat $G diff --stat "$first" HEAD
both diff_full $G diff "$first" HEAD~5
both blame sh -c "$G blame -s \$(git ls-files | head -1)"
both grep_n $G grep -n 'commit 1[0-9]:' HEAD
both rev_list sh -c "$G rev-list --objects --all | sort"
both archive sh -c "$G archive --format=tar HEAD | cksum"
both shortlog $G shortlog -sn HEAD

# gc and repack on two copies: one without rill, one with it.
cp -a "$R" "$WORK/base" && cp -a "$R" "$WORK/rill"
(cd "$WORK/base" && $G gc --quiet --prune=now) || fail "git gc without rill failed"
CHECKS=$((CHECKS + 1))
if (cd "$WORK/rill" && LD_PRELOAD="$LIB" RILL_SHOW_STATS=1 $G gc --quiet --prune=now 2>"$WORK/gc.err"); then
  grep -q 'rill:' "$WORK/gc.err" && note "  ok   gc under rill" || fail "gc under rill: no rill statistics"
else
  fail "git gc under rill failed: $(grep -v '^rill:' "$WORK/gc.err" | head -5)"
fi
cd "$WORK/rill" || exit 1
both fsck_after_gc $G fsck --full --strict --no-progress
both log_after_gc $G log --stat -n 100
both count_after_gc sh -c "$G count-objects -v | grep -E '^(count|in-pack|packs)'"
both repack sh -c "$G repack -a -d -f -q --window=20 && $G rev-list --objects --all | sort | cksum"
# The packs rill wrote must satisfy git running on plain libc.
CHECKS=$((CHECKS + 1))
if $G fsck --full --strict --no-progress >/dev/null 2>"$WORK/fsck.err" &&
  $G verify-pack -v .git/objects/pack/*.idx >/dev/null 2>>"$WORK/fsck.err"; then
  note "  ok   packs written under rill verify without rill"
else
  fail "packs written under rill do not verify: $(head -5 "$WORK/fsck.err")"
fi
CHECKS=$((CHECKS + 1))
if [ "$($G rev-list --objects --all | sort | cksum)" = "$(cd "$WORK/base" && $G rev-list --objects --all | sort | cksum)" ]; then
  note "  ok   same objects after gc with and without rill"
else
  fail "object sets differ after gc with and without rill"
fi
finish_real
