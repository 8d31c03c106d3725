#!/usr/bin/env bash
# install.sh - installs a rill build into a scratch prefix (cmake --install) and builds
# programs against it as a user would: with pkg-config (shared, and fully static), and
# with find_package(rill) both shared (rill::rill) and static (rill::rill_static). Each
# must run on rill's malloc.
# usage: bash test/install.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: install.sh BUILD_DIR}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CC=${CC:-cc}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
P=$T/prefix
die() {
  echo "install.sh: $*" >&2
  exit 1
}

cmake --install "$BUILD" --prefix "$P" >"$T/install.log" || {
  cat "$T/install.log" >&2
  die "cmake --install failed"
}
pc=$(find "$P" -name rill.pc)
[ -n "$pc" ] || die "no rill.pc installed"
LIB=$(cd "$(dirname "$pc")/.." && pwd)
for f in "$P/include/rill.h" "$LIB/librill.a" "$LIB/librill.so" "$LIB/cmake/rill/rillConfig.cmake"; do
  [ -e "$f" ] || die "not installed: ${f#"$P"/}"
done
export PKG_CONFIG_PATH=$LIB/pkgconfig
ver=$(pkg-config --modversion rill)
major=${ver%%.*}
soname=$(readelf -d "$LIB/librill.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "librill.so.$major" ] || die "soname is '$soname', expected librill.so.$major"
echo "installed rill $ver into a scratch prefix; soname $soname"

# 1. pkg-config, shared: the program needs librill.so.MAJOR and runs on it.
# shellcheck disable=SC2046
"$CC" -O2 "$HERE/install/prog.c" -o "$T/prog_pc" $(pkg-config --cflags --libs rill)
readelf -d "$T/prog_pc" | grep -q "NEEDED.*\[$soname\]" || die "prog_pc does not need $soname"
LD_LIBRARY_PATH=$LIB "$T/prog_pc" "$ver"

# 1b. pkg-config --static into a fully static program (libc.a too): rill's malloc
# replaces the C library's at link time, threads and all.
# shellcheck disable=SC2046
"$CC" -O2 -static "$HERE/install/prog.c" -o "$T/prog_pc_static" $(pkg-config --static --cflags --libs rill)
if readelf -d "$T/prog_pc_static" 2>/dev/null | grep -q NEEDED; then
  die "prog_pc_static is not static"
fi
"$T/prog_pc_static" "$ver"

# 2. find_package(rill VERSION): rill::rill and rill::rill_static.
cmake -S "$HERE/install" -B "$T/consumer" -DCMAKE_PREFIX_PATH="$P" -DRILL_WANT_VERSION="$ver" \
  -DCMAKE_C_COMPILER="$CC" >"$T/consumer.log" 2>&1 || {
  cat "$T/consumer.log" >&2
  die "find_package(rill $ver) failed"
}
cmake --build "$T/consumer" >>"$T/consumer.log" 2>&1 || {
  cat "$T/consumer.log" >&2
  die "building against rill::rill / rill::rill_static failed"
}
LD_LIBRARY_PATH=$LIB "$T/consumer/prog_shared" "$ver"
if readelf -d "$T/consumer/prog_static" | grep -q "NEEDED.*librill"; then
  die "prog_static needs librill.so"
fi
"$T/consumer/prog_static" "$ver"

# 3. A version the package does not offer is refused.
if cmake -S "$HERE/install" -B "$T/consumer-next" -DCMAKE_PREFIX_PATH="$P" \
  -DRILL_WANT_VERSION="$((major + 1)).0" >"$T/next.log" 2>&1; then
  die "find_package(rill $((major + 1)).0) accepted rill $ver"
fi
echo "install.sh: all passed"
