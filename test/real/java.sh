#!/usr/bin/env bash
# java.sh - proves a JVM runs under rill: pool threads' zlib streams and direct buffers
# (native memory the JVM mallocs, the buffers freed from its cleaner thread), its JIT and
# collector threads, and its signal handling, with the same checksum as without rill.
# usage: java.sh /path/to/librill.so [rounds]
# Exits 77 (skipped) where no JDK is installed (test/run.sh installs one when root).
set -u
. "$(dirname "$0")/common.sh"
setup_real "$@"
ROUNDS=${2:-300}
skip_without javac java -- "javac/java (apt-get install openjdk-17-jdk-headless)"
SRC="$(cd "$(dirname "$0")/../../bench/real" && pwd)/Native.java"
javac -d "$WORK" "$SRC" || {
  echo "javac failed"
  exit 1
}
both java_native java -Xmx128m -cp "$WORK" Native 4 "$ROUNDS"
both java_native_serial java -Xmx64m -XX:+UseSerialGC -cp "$WORK" Native 8 "$ROUNDS"
finish_real
