#!/usr/bin/env bash
# node.sh - proves Node.js runs under rill with the same output: worker threads (each its own
# V8 isolate on its own thread) allocate Buffers, zlib streams and hashes from malloc, and
# libuv's thread pool compresses for the main thread (test/real/node_work.js).
# usage: node.sh /path/to/librill.so [rounds per worker]
# Exits 77 (skipped) where node is not installed.
set -u
. "$(dirname "$0")/common.sh"
setup_real "$@"
ROUNDS=${2:-4000}
skip_without node -- "node (Node.js)"
JS="$(cd "$(dirname "$0")" && pwd)/node_work.js"
both node_workers_4 node "$JS" 4 "$ROUNDS"
both node_workers_16 node "$JS" 16 $((ROUNDS / 4))
finish_real
