#!/usr/bin/env bash
# python.sh - proves a CPython allocation-heavy threaded workload gives byte-identical output
# under rill (PYTHONMALLOC=malloc so every object goes through malloc/realloc/free).
# usage: python.sh /path/to/librill.so
set -u
. "$(dirname "$0")/common.sh"
setup_real "$@"
PY=$(command -v python3) || { echo "python3 not found"; exit 1; }
export PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1
both python_malloc env PYTHONMALLOC=malloc "$PY" "$(dirname "$0")/alloc_heavy.py"
both python_pymalloc "$PY" "$(dirname "$0")/alloc_heavy.py"
both python_json "$PY" -c 'import json; d = {str(i): list(range(i % 100)) for i in range(50000)}; print(len(json.dumps(json.loads(json.dumps(d)))))'
finish_real
