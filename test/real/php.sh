#!/usr/bin/env bash
# php.sh - proves PHP runs under rill with its extensions: PHP 8.2-8.4 open curl, zip and
# mysqli with RTLD_DEEPBIND, which binds their malloc and free to the C library's while PHP's
# are rill's, and every preloaded allocator (rill before src/deepbind.c, jemalloc, tcmalloc,
# mimalloc, tbbmalloc) aborted at start-up with "munmap_chunk(): invalid pointer". Runs
# test/real/php_work.php with PHP's own allocator and with USE_ZEND_ALLOC=0 (every request
# block from malloc), and `php -m`, the same output with rill as without.
# usage: php.sh /path/to/librill.so [curl reads]
# Exits 77 (skipped) where php is not installed (test/run.sh installs it when root).
set -u
. "$(dirname "$0")/common.sh"
setup_real "$@"
ROUNDS=${2:-200}
skip_without php -- "php (apt-get install php-cli php-curl php-zip php-mysql)"
for ext in curl zip mysqli; do
  php -m | grep -qx "$ext" || {
    echo "php has no $ext extension (apt-get install php-curl php-zip php-mysql): not run"
    exit 77
  }
done
PROG="$(cd "$(dirname "$0")" && pwd)/php_work.php"
mkdir -p "$WORK/a" "$WORK/b"
both php_modules php -m
both php_extensions php "$PROG" "$WORK/a" "$ROUNDS"
both php_extensions_malloc env USE_ZEND_ALLOC=0 php "$PROG" "$WORK/b" "$ROUNDS"
finish_real
