#!/usr/bin/env bash
# ruby.sh - proves a Ruby program whose threads take turns under the interpreter's lock runs
# under rill with the same output: its collector frees every thread's blocks from whichever
# thread runs, and with the purger at a short delay the waiting threads' listed and hot
# spans are lent and adopted while they sleep (heap_lend). bench/real/server.rb's output is
# the bytes of JSON it rendered, the same under any allocator.
# usage: ruby.sh /path/to/librill.so [requests per thread]
# Exits 77 (skipped) where ruby is not installed (test/run.sh installs it when root).
set -u
. "$(dirname "$0")/common.sh"
setup_real "$@"
REQ=${2:-1500}
skip_without ruby -- "ruby (apt-get install ruby)"
SRV="$(cd "$(dirname "$0")/../../bench/real" && pwd)/server.rb"
both ruby_threads_8 env RILL_PURGE_THREAD=1 RILL_PURGE_DELAY_MS=8 ruby "$SRV" 8 "$REQ"
both ruby_threads_32 env RILL_PURGE_THREAD=1 RILL_PURGE_DELAY_MS=8 ruby "$SRV" 32 $((REQ / 4))
grep -o 'lent=[0-9]*' "$WORK/ruby_threads_32.rill.err" | sed 's/^/  spans /'
finish_real
