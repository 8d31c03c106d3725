#!/usr/bin/env python3
"""Runs real programs under each allocator: what the papers' synthetic benchmarks
(run.py) cannot show. Each workload is a program Debian ships, run with the allocator
preloaded (the C library's own is preloaded too, as "glibc", so a program linked with
another allocator, such as Debian's redis with jemalloc, really runs on it); missing
programs are skipped with the package to install. Measured per run, through run.py's
launcher: wall, user and sys time, peak RSS; workloads that report a rate (requests or
operations per second) give it as their metric. The median of --reps runs is reported,
with each allocator's ratio to the best. Results go to
bench/results/real-<timestamp>/results.json and summary.md.

  python3 bench/real.py [--reps N] [--only a,b] [--allocators a,b] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as suite  # noqa: E402  (the comparison driver: allocators, launcher, tables)

REAL_DIR = suite.BENCH_DIR / "real"
DEFAULT_ALLOCATORS = ["rill", "glibc", "jemalloc", "tcmalloc", "mimalloc", "tbbmalloc"]


@dataclass
class Workload:
    name: str
    what: str
    program: str  # looked up on PATH
    package: str  # Debian package providing it
    argv: Callable[[Path], list[str]]  # given a scratch directory
    env: dict = field(default_factory=dict)
    rate: Optional[str] = None  # regex whose group 1 is the rate, from stdout; else time
    unit: str = "s"
    # run once, unmeasured, before the runs (on the C library's malloc): the command, or
    # None when there is nothing to do
    setup: Optional[Callable[[], Optional[list[str]]]] = None


def cache_bench(name: str, what: str, threads: int, ops: int, value: int) -> Workload:
    """RocksDB's cache_bench on a 64 MiB LRU cache: `threads` workers, `ops` operations each."""
    return Workload(name, what, "cache_bench", "rocksdb-tools",
                    lambda d: ["cache_bench", f"-threads={threads}", f"-ops_per_thread={ops}",
                               "-cache_size=67108864", f"-value_bytes={value}"],
                    rate=r"Rough parallel ops/sec = ([0-9.]+)", unit="ops/s")


WORKLOADS = [
    cache_bench("cache_bench", "RocksDB's sharded LRU cache, 4 threads, 1 KiB values in 64 MiB; "
                "the main thread fills it, then waits while the workers evict and insert",
                4, 500000, 1024),
    cache_bench("cache_bench-1", "the same with one worker and 256-byte values", 1, 1000000, 256),
    cache_bench("cache_bench-long", "the four-worker run six times longer (3 million operations "
                "per worker): memory that creeps up as the workers evict each other's entries",
                4, 3000000, 1024),
    Workload("db_bench", "RocksDB: 4 threads fill 100,000 random keys (100-byte values, no "
             "WAL, no compression), then read them at random; the database in a scratch "
             "directory", "db_bench", "rocksdb-tools",
             lambda d: ["db_bench", "--benchmarks=fillrandom,readrandom", "--num=100000",
                        "--threads=4", "--value_size=100", "--compression_type=none",
                        "--disable_wal=1", f"--db={d}/db"]),
    Workload("redis", "a redis server over a unix socket: SET, GET, LPUSH, LPOP, SADD, HSET, "
             "ZADD, 300,000 each, 16 pipelined, 64-byte values over 100,000 keys "
             "(bench/real/redis.sh; the client runs on glibc; peak RSS is the server's)",
             "redis-server", "redis-server redis-tools",
             lambda d: ["bash", str(REAL_DIR / "redis.sh"), "300000"], unit="req/s"),
    Workload("sqlite", "sqlite3, an in-memory database: 300,000 rows inserted, indexed, "
             "grouped, updated, half deleted, copied and vacuumed (bench/real/sqlite.sql)",
             "sqlite3", "sqlite3",
             lambda d: ["sh", "-c", f'exec sqlite3 :memory: < "{REAL_DIR / "sqlite.sql"}"']),
    Workload("lua", "Lua 5.4: tables and strings built and collected "
             "(bench/real/tables.lua)", "lua5.4", "lua5.4",
             lambda d: ["lua5.4", str(REAL_DIR / "tables.lua")]),
    Workload("java", "OpenJDK 17, 8 pool threads: zlib streams (Deflater, Inflater) and "
             "direct ByteBuffers, native memory the JVM takes with malloc; 256 MiB Java heap "
             "at most (bench/real/Native.java, compiled once beforehand)", "java",
             "openjdk-17-jdk-headless",
             lambda d: ["java", "-Xmx256m", "-cp", str(JAVA_CLASSES), "Native", "8", "1500"],
             setup=lambda: java_compile()),
    Workload("ruby", "Ruby 3 (its interpreter lock: one thread runs at a time), 8 threads "
             "serving 12,000 requests each: a JSON body parsed, a response of hashes, arrays "
             "and strings rendered as JSON, one in four kept in a shared cache of 20,000 "
             "(bench/real/server.rb)", "ruby", "ruby",
             lambda d: ["ruby", str(REAL_DIR / "server.rb"), "8", "12000"]),
    Workload("ruby-32", "the same with 32 threads, 3,000 requests each: a thread per "
             "connection, most of them waiting at any moment", "ruby", "ruby",
             lambda d: ["ruby", str(REAL_DIR / "server.rb"), "32", "3000"]),
    Workload("php", "PHP 8 with USE_ZEND_ALLOC=0 (every block from malloc): libcurl reads a "
             "600 KB file 2,000 times, libzip writes and reads a 300-entry archive, arrays "
             "and JSON (test/real/php_work.php). PHP 8.2-8.4 opens the curl, zip and mysqli "
             "extensions with RTLD_DEEPBIND, which binds their malloc to the C library's "
             "unless the allocator drops the flag (src/deepbind.c)", "php",
             "php-cli php-curl php-zip php-mysql",
             lambda d: ["php", str(suite.REPO_DIR / "test" / "real" / "php_work.php"), str(d),
                        "2000"],
             env={"USE_ZEND_ALLOC": "0"}),
    Workload("node", "Node.js, 4 worker threads (a V8 isolate each): objects, Buffers and "
             "JSON built and dropped, deflated, inflated and hashed, 20,000 rounds each, while "
             "libuv's pool gzips for the main thread (test/real/node_work.js)", "node",
             "nodejs",
             lambda d: ["node", str(suite.REPO_DIR / "test" / "real" / "node_work.js"), "4",
                        "20000"]),
    Workload("python", "python3 with PYTHONMALLOC=malloc: dicts and lists to JSON and "
             "back, sorted (bench/real/objects.py)", "python3", "python3",
             lambda d: ["python3", str(REAL_DIR / "objects.py")],
             env={"PYTHONMALLOC": "malloc"}),
]


JAVA_CLASSES = suite.REPO_DIR / "build" / "bench" / "java"  # under --build-dir (main)


def java_compile() -> Optional[list[str]]:
    """javac for the java workload, unless its class is newer than the source."""
    src, cls = REAL_DIR / "Native.java", JAVA_CLASSES / "Native.class"
    if cls.exists() and cls.stat().st_mtime >= src.stat().st_mtime:
        return None
    JAVA_CLASSES.mkdir(parents=True, exist_ok=True)
    return ["javac", "-d", str(JAVA_CLASSES), str(src)]


def libc_path() -> Optional[Path]:
    for d in suite.library_dirs():
        p = d / "libc.so.6"
        if p.exists():
            return p
    return None


def parse_args(argv):
    p = argparse.ArgumentParser(description="Run real programs under each allocator.")
    p.add_argument("--reps", type=int, default=3, help="runs per allocator (default 3)")
    p.add_argument("--only", help="comma-separated workloads")
    p.add_argument("--allocators", help="comma-separated allocators (default: "
                   + ",".join(DEFAULT_ALLOCATORS) + ")")
    p.add_argument("--build-dir", type=Path, default=suite.REPO_DIR / "build")
    p.add_argument("--out", type=Path, help="results directory "
                   "(default bench/results/real-<timestamp>)")
    p.add_argument("--timeout", type=float, default=300, help="seconds per run")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    return p.parse_args(argv)


def fmt(v: Optional[float], unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v:.2f} s"
    return f"{v / 1e6:.2f} M" if v >= 1e6 else f"{v / 1e3:.1f} k"


def main(argv=None) -> int:
    global JAVA_CLASSES
    a = parse_args(argv if argv is not None else sys.argv[1:])
    JAVA_CLASSES = a.build_dir / "bench" / "java"
    if a.list:
        for w in WORKLOADS:
            print(f"{w.name:14} {w.what}")
        return 0
    launcher = a.build_dir / "bench" / "bench_launch"
    if not launcher.exists():
        print(f"error: {suite.rel(launcher)} not built (bash bench/run.sh --bench-only)",
              file=sys.stderr)
        return 2
    found = suite.discover_allocators(a.build_dir)
    names = a.allocators.split(",") if a.allocators else DEFAULT_ALLOCATORS
    allocs = []
    for n in names:
        if n not in found:
            print(f"error: unknown allocator {n}", file=sys.stderr)
            return 2
        al = found[n]
        if not al.available:
            print(f"note: {n} skipped: {al.note}")
            continue
        if n == "glibc":  # first in the lookup order, ahead of a malloc the program links
            libc = libc_path()
            if libc is not None:
                al = suite.Allocator("glibc", "system", lib=libc)
        allocs.append(al)
    works = WORKLOADS
    if a.only:
        want = a.only.split(",")
        works = [w for w in WORKLOADS if w.name in want]
        if len(works) != len(want):
            print(f"error: unknown workload in {a.only} (--list)", file=sys.stderr)
            return 2
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = a.out or suite.BENCH_DIR / "results" / f"real-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    info = suite.machine_info()
    records, skipped = [], []
    scratch_root = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    for w in works:
        if shutil.which(w.program) is None:
            skipped.append(f"{w.name}: {w.program} not found (apt-get install {w.package})")
            print(f"note: {skipped[-1]}")
            continue
        cmd = w.setup() if w.setup else None
        if cmd is not None:
            if shutil.which(cmd[0]) is None or subprocess.run(cmd).returncode != 0:
                skipped.append(f"{w.name}: `{' '.join(cmd)}` failed "
                               f"(apt-get install {w.package})")
                print(f"note: {skipped[-1]}")
                continue
        for rep in range(a.reps):
            for al in allocs:  # interleaved, so drift in the machine hits all alike
                run_al = suite.Allocator(al.name, al.kind, lib=al.lib, env={**al.env, **w.env})
                with tempfile.TemporaryDirectory(prefix="rill-real-", dir=scratch_root) as d:
                    cmd = w.argv(Path(d))
                    cmd[0] = shutil.which(cmd[0]) or cmd[0]  # the launcher execs a path
                    o = suite.run_measured(launcher, cmd, run_al, a.timeout)
                ok = o.status == "ok" or (o.status == "no-result" and not o.error.startswith(
                    "exit") and o.peak_rss_kib is not None)
                value, rss = None, o.peak_rss_kib
                if ok and w.rate:
                    m = re.search(w.rate, o.stdout)
                    value = float(m.group(1)) if m else None
                elif ok and o.result:
                    value = suite.num(o.result.get("value"))
                    rss = int(o.result.get("server_rss_kib", rss or 0)) or rss
                elif ok:
                    value = o.wall_s
                status = "ok" if ok and value is not None else (o.status if not ok else
                                                                "no-rate")
                records.append({"benchmark": w.name, "allocator": al.name, "repetition": rep,
                                "metric": "time" if w.unit == "s" else "rate", "unit": w.unit,
                                "value": value, "peak_rss_kib": rss, "user_s": o.user_s,
                                "sys_s": o.sys_s, "wall_s": o.wall_s, "status": status,
                                "error": o.error})
                print(f"{w.name:14} {al.name:10} rep {rep + 1}: {fmt(value, w.unit):>10}  "
                      f"{(rss or 0) / 1024:7.1f} MiB  {status}", flush=True)
    (out / "results.json").write_text(json.dumps({"machine": info, "records": records},
                                                 indent=1))
    lines = summary(works, allocs, records, info, skipped, a.reps)
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nresults: {suite.rel(out)}")
    bad = [r for r in records if r["status"] != "ok" and r["allocator"] in ("rill", "glibc")]
    return 1 if bad else 0


def summary(works, allocs, records, info, skipped, reps) -> list[str]:
    lines = ["# rill on real programs", "",
             f"Machine: {info['cpus']} CPUs, {info['cpu']}, kernel {info['kernel']}; commit "
             f"{info['commit']}; load {info['loadavg_start']:.2f} at the start. Median of "
             f"{reps} runs each, allocators interleaved; in parentheses the ratio to the best "
             "(time and peak RSS: lower is better; rates: higher is better).", ""]
    for w in works:
        recs = [r for r in records if r["benchmark"] == w.name]
        if not recs:
            continue
        med = {}
        for al in allocs:
            rs = [r for r in recs if r["allocator"] == al.name and r["status"] == "ok"]
            med[al.name] = (statistics.median([r["value"] for r in rs]) if rs else None,
                            statistics.median([r["peak_rss_kib"] for r in rs]) if rs else None,
                            len([r for r in recs if r["allocator"] == al.name]) - len(rs))
        vals = [v for v, _, _ in med.values() if v]
        rsss = [m for _, m, _ in med.values() if m]
        best = (max(vals) if w.unit != "s" else min(vals)) if vals else None
        best_rss = min(rsss) if rsss else None
        rows = []
        for al in allocs:
            v, m, failed = med[al.name]
            rel = (best / v if w.unit != "s" else v / best) if v and best else None
            rows.append([al.name, fmt(v, w.unit) + (f" ({rel:.2f}x)" if rel else ""),
                         (f"{m / 1024:.1f} ({m / best_rss:.2f}x)" if m and best_rss else "-"),
                         str(failed) if failed else ""])
        lines += [f"## {w.name}", "", w.what + ".", ""]
        head = "time" if w.unit == "s" else w.unit
        lines += suite.md_table(["allocator", head, "peak RSS (MiB)", "failed runs"], rows)
        lines.append("")
    if skipped:
        lines += ["Skipped: " + "; ".join(skipped) + "."]
    return lines


if __name__ == "__main__":
    sys.exit(main())
