#!/usr/bin/env python3
"""Runs the rill benchmark suite against several allocators and summarises it.

Every benchmark is a plain program; the allocator under test is swapped in with
LD_PRELOAD. Each run is started through bench_launch, which reports the run's
wait4 resource usage (wall, user and sys time, peak RSS, faults; see launch.c
for why not os.wait4 here), and the program's own RESULT line supplies its
metric. Results go to bench/results/<timestamp>/: results.json, summary.md,
charts, and a copy in bench/results/latest/. Besides the suite (--quick,
--full) there are three single-purpose modes: --soak SECONDS (the soak
benchmark alone, with its RSS-over-time chart), --hugepages (sizes, locality,
idle and idle-buffers, each allocator with its huge-page option off and on) and --syscalls
(bench_churn under strace).

Exit status: 0 if the suite ran (peers may have failed), 1 if rill or the C
library's allocator failed a run (the latter means a benchmark is broken),
2 on a harness error, 3 if --require-rill was given and a rill library is missing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent

# ---------------------------------------------------------------------------
# Allocators


@dataclass
class Allocator:
    name: str
    kind: str  # "rill", "system" or "peer"
    lib: Optional[Path] = None  # library to preload; None for the C library's
    package: str = ""  # Debian package that provides a peer
    note: str = ""  # why it is unavailable, if it is
    env: dict = field(default_factory=dict)  # environment set for the benchmark only

    @property
    def available(self) -> bool:
        return not self.note


RILL_LIBS = [
    ("rill", "librill.so"),
    ("rill-globallock", "librill-globallock.so"),
    ("rill-hashed", "librill-hashed.so"),
]
# name, library file, Debian package
PEERS = [
    ("jemalloc", "libjemalloc.so.2", "libjemalloc2"),
    ("tcmalloc", "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    ("mimalloc", "libmimalloc.so.2", "libmimalloc2.0"),
    ("tbbmalloc", "libtbbmalloc_proxy.so.2", "libtbbmalloc2"),
]
# rill's default library with an option set: name, library file, environment. They are
# not in the default lists; --hugepages and --syscalls use them, --allocators accepts them.
RILL_OPTION_VARIANTS = [
    ("rill-thp", "librill.so", {"RILL_HUGEPAGES": "1"}),
    ("rill-purge0", "librill.so", {"RILL_PURGE_DELAY_MS": "0"}),
    ("rill-purgethread", "librill.so", {"RILL_PURGE_THREAD": "1"}),
]
# Peers (or glibc) with their own huge-page option: name, base allocator, environment.
# --hugepages runs them beside their base. tcmalloc (gperftools) has no such option, and
# TBB_MALLOC_USE_HUGE_PAGES needs reserved hugetlbfs pages, which a default system lacks.
PEER_OPTION_VARIANTS = [
    ("glibc-thp", "glibc", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}),
    ("jemalloc-thp", "jemalloc", {"MALLOC_CONF": "thp:always,metadata_thp:always"}),
    ("mimalloc-thp", "mimalloc", {"MIMALLOC_LARGE_OS_PAGES": "1"}),
]
ALL_ALLOCATORS = [n for n, _ in RILL_LIBS] + ["glibc"] + [n for n, _, _ in PEERS]
QUICK_ALLOCATORS = ["rill", "glibc"] + [n for n, _, _ in PEERS]
KNOWN_ALLOCATORS = (ALL_ALLOCATORS + [n for n, _, _ in RILL_OPTION_VARIANTS] +
                    [n for n, _, _ in PEER_OPTION_VARIANTS])
# --hugepages: every allocator with a huge-page option, off and on, and tcmalloc for reference
HUGEPAGE_ALLOCATORS = ["rill", "rill-thp", "glibc", "glibc-thp", "jemalloc", "jemalloc-thp",
                       "mimalloc", "mimalloc-thp", "tcmalloc"]
# and what a burst leaves resident once idle: huge pages must not keep freed memory
HUGE_IDLE = ("idle", "idle-buffers")


def multiarch() -> str:
    for cmd in (["gcc", "-print-multiarch"], ["cc", "-print-multiarch"],
                ["dpkg-architecture", "-qDEB_HOST_MULTIARCH"]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if out:
            return out
    return f"{platform.machine()}-linux-gnu"


def library_dirs() -> list[Path]:
    ma = multiarch()
    dirs = [f"/usr/lib/{ma}", f"/lib/{ma}", f"/usr/local/lib/{ma}", "/usr/lib64", "/usr/lib",
            "/usr/local/lib"]
    return [Path(d) for d in dirs if Path(d).is_dir()]


def discover_allocators(build_dir: Path) -> dict[str, Allocator]:
    found: dict[str, Allocator] = {}
    for name, fname in RILL_LIBS:
        lib = build_dir / fname
        a = Allocator(name, "rill", lib=lib)
        if not lib.is_file():
            a.note = f"{rel(lib)} not built yet (build the project first)"
        found[name] = a
    for name, fname, env in RILL_OPTION_VARIANTS:
        lib = build_dir / fname
        a = Allocator(name, "rill", lib=lib, env=dict(env))
        if not lib.is_file():
            a.note = f"{rel(lib)} not built yet (build the project first)"
        found[name] = a
    found["glibc"] = Allocator("glibc", "system")
    dirs = library_dirs()
    for name, fname, pkg in PEERS:
        lib = next((d / fname for d in dirs if (d / fname).exists()), None)
        a = Allocator(name, "peer", lib=lib, package=pkg)
        if lib is None:
            a.note = f"{fname} not found; apt-get install {pkg}"
        found[name] = a
    for name, base, env in PEER_OPTION_VARIANTS:
        b = found[base]
        found[name] = Allocator(name, b.kind, lib=b.lib, package=b.package, note=b.note,
                                env=dict(env))
    return found


def rel(p: Path | str) -> str:
    """A path for reports: relative to the repository when inside it, and never
    naming the directories of the machine it ran on otherwise."""
    p = Path(p)
    try:
        return str(p.resolve().relative_to(REPO_DIR))
    except ValueError:
        return p.name


# ---------------------------------------------------------------------------
# Benchmarks


@dataclass
class Spec:
    name: str  # name in the results
    program: str  # binary is bench_<program>
    args: list[str]  # parameters besides -t
    paper: str
    kind: str = "threads"  # "threads": one run per thread count; "sweep": one per point
    threads: Optional[list[int]] = None  # fixed thread counts (None: the mode's)
    points: list[tuple[str, list[str]]] = field(default_factory=list)  # sweep: label, args
    xlabel: str = "threads"
    modes: tuple = ("quick", "full")  # modes that run it; any spec runs when --only names it
    reps: Optional[int] = None  # fixed repetitions (None: the mode's)
    timeout: Optional[float] = None  # seconds before a run is killed (None: the mode's)
    geomean: bool = True  # part of the geometric means (not for memory-growth checks)


def size_label(n: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}B"


def size_points(exponents) -> list[tuple[str, list[str]]]:
    pts = []
    for x in exponents:
        lo, hi = 1 << x, 1 << (x + 2)
        pts.append((f"{size_label(lo)}-{size_label(hi)}", ["-m", str(lo), "-M", str(hi - 1)]))
    return pts


# Seconds per soak run. Full mode: 8 allocators x 5 thread counts x 10 s = about 7 min; with
# mstress and mleak (about 1 min together) the full suite grows by under 10 minutes.
SOAK_SECONDS = {"quick": 2.0, "full": 10.0}


def soak_spec(seconds: float, interval_ms: int, threads: Optional[list[int]],
              modes=("quick", "full")) -> Spec:
    return Spec("soak", "soak", ["-d", f"{seconds:g}", "-i", str(interval_ms)],
                "LKmalloc sec. 3-4, 7", threads=threads, modes=modes, reps=1,
                timeout=seconds * 1.5 + 60)


def suite(mode: str, sweep_threads: int) -> list[Spec]:
    """The benchmarks and their parameters per mode. Full runs take from a tenth
    of a second to about a second each on one thread; quick ones, tens of
    milliseconds (enough to show that every combination works). The soak runs
    for a fixed time (one repetition); mstress and mleak, memory-growth checks,
    run in full mode (or when --only names them) at one thread count; churn only
    when named (--syscalls runs it under strace)."""
    q = mode == "quick"
    pick = (lambda quick, full: quick) if q else (lambda quick, full: full)
    return [
        Spec("threadtest", "threadtest", ["-n", "100000", "-r", pick("30", "300"), "-s", "64"],
             "Hoard sec. 5.2; scalloc sec. 7.2"),
        Spec("shbench", "shbench", ["-n", pick("2000000", "20000000"), "-m", "8", "-M", "100",
                                    "-p", "10000"], "Hoard sec. 5.2"),
        Spec("larson", "larson", ["-d", pick("0.3", "1.5"), "-n", "1000", "-r", "50000",
                                  "-m", "10", "-M", "1000"], "LKmalloc sec. 7; Hoard sec. 5.2"),
        Spec("larson-small", "larson", ["-d", pick("0.3", "1.5"), "-n", "1000", "-r", "10000",
                                        "-m", "7", "-M", "8"], "scalloc sec. 7.2"),
        # threads that live for 2,000 replacements: the exit, take-over and adoption paths
        # under load (this configuration found two heaps taking one orphaned span)
        Spec("larson-bleed", "larson", ["-d", pick("0.3", "1.0"), "-n", "1000", "-r", "2000",
                                        "-m", "10", "-M", "1000"],
             "LKmalloc sec. 7 (short thread lives)"),
        Spec("consume", "consume", ["-i", pick("100", "1000"), "-n", "6000", "-s", "16"],
             "Streamflow sec. 4.2.2"),
        Spec("xmalloc", "xmalloc", ["-n", pick("200000", "1000000"), "-m", "16", "-M", "512",
                                    "-q", "64"],
             "Hoard sec. 2.2 (blowup); scalloc sec. 7.3"),
        Spec("recycle", "recycle", ["-n", pick("2000000", "10000000"), "-r", "1000",
                                    "-m", "8", "-M", "64"], "Streamflow sec. 4.2.2"),
        Spec("active-false", "active_false", ["-n", pick("30000", "300000"), "-w", "1000",
                                              "-s", "8"], "Hoard sec. 5.3"),
        Spec("passive-false", "passive_false", ["-n", pick("30000", "300000"), "-w", "1000",
                                                "-s", "8"], "Hoard sec. 5.3"),
        Spec("randalloc", "randalloc", ["-n", pick("4000000", "40000000"), "-m", "8",
                                        "-M", "1024"], "the ar_malloc note"),
        # the same with buffers of 1-8 KiB: spans of 16-56 such blocks come back with a block
        # or two free, so rill changes span every malloc or two (docs/benchmarks.md)
        Spec("randalloc-big", "randalloc", ["-n", pick("1000000", "10000000"), "-m", "1024",
                                            "-M", "8192", "-k", "4000"],
             "the ar_malloc note, 1-8 KiB blocks"),
        # and with buffers of 16-64 KiB, spans of 2-8 blocks: the block cache's case
        Spec("randalloc-buffers", "randalloc", ["-n", pick("400000", "4000000"), "-m", "16384",
                                                "-M", "65536", "-k", "400"],
             "the ar_malloc note, 16-64 KiB buffers"),
        Spec("knary", "knary", ["-d", pick("8", "9"), "-k", "5", "-w", "20", "-r", pick("4", "30")],
             "Streamflow sec. 4.2.2"),
        Spec("lifo", "lifo", ["-n", pick("5000000", "50000000")], "fast-path cost (Hoard sec. 5)",
             threads=[1]),
        Spec("sizes", "sizes", ["-c", pick("10", "100"), "-b", pick("4M", "16M")],
             "scalloc sec. 7.5", kind="sweep", threads=[sweep_threads],
             points=size_points(range(4, 21, 4) if q else range(4, 21, 2)),
             xlabel="object size interval"),
        # growing buffers (a log, a string builder): one alone, which may grow in place, and
        # four interleaved, which must move or be placed around each other
        Spec("realloc", "realloc", ["-b", "1", "-s", "65536", "-M", "25165824",
                                    "-r", pick("2", "10")], "growing buffers", threads=[1, 2]),
        Spec("realloc-4", "realloc", ["-b", "4", "-s", "65536", "-M", "25165824",
                                      "-r", pick("1", "3")], "growing buffers, interleaved",
             threads=[1, 2]),
        Spec("locality", "locality", ["-n", pick("300000", "2000000"), "-p", "5"],
             "scalloc sec. 7.6", kind="sweep", threads=[1],
             points=[(f"{p}%", ["-l", str(p)])
                     for p in ((0, 50, 100) if q else (0, 20, 40, 60, 80, 100))],
             xlabel="share of nodes in lists (allocation order)"),
        soak_spec(SOAK_SECONDS[mode], 50 if q else 100, [2] if q else None),
        Spec("mstress", "mstress", ["-r", pick("8", "30"), "-n", "50000", "-l", "2000",
                                    "-p", "10"],
             "LKmalloc sec. 4 (thread independence, stability)", threads=[8], modes=("full",),
             reps=1, timeout=60, geomean=False),
        Spec("mleak", "mleak", ["-r", pick("4000", "10000"), "-n", "200", "-p", "5"],
             "LKmalloc sec. 4 (thread independence, stability)", threads=[4], modes=("full",),
             reps=1, timeout=60, geomean=False),
        Spec("idle", "idle", ["-b", pick("64M", "256M"), "-w", pick("1.5", "3")],
             "LKmalloc sec. 4 (stability); memory given back while idle", threads=[2],
             modes=("full",), reps=1, timeout=60, geomean=False),
        # the same with buffers of 16-64 KiB, whose spans are runs: what a program keeps of a
        # burst of big buffers once the threads that freed them are gone
        Spec("idle-buffers", "idle", ["-b", pick("64M", "256M"), "-m", "16384", "-M", "65536",
                                      "-w", pick("1.5", "3")],
             "LKmalloc sec. 4 (stability); big buffers given back while idle", threads=[2],
             modes=("full",), reps=1, timeout=60, geomean=False),
        # the same with the threads alive and blocked through the wait: a thread pool's
        # idle workers, whose heaps hold whatever the allocator keeps per thread
        Spec("idle-pool", "idle", ["-k", "-b", pick("64M", "256M"), "-w", pick("1.5", "3")],
             "LKmalloc sec. 4 (stability); a thread pool's idle workers", threads=[8],
             modes=("full",), reps=1, timeout=60, geomean=False),
        # the same with buffers of 16-64 KiB, which each thread's block cache keeps for its
        # next mallocs: what the pool's blocked workers keep of them
        Spec("idle-pool-buffers", "idle", ["-k", "-b", pick("64M", "256M"), "-m", "16384",
                                           "-M", "65536", "-w", pick("1.5", "3")],
             "LKmalloc sec. 4 (stability); idle workers' big buffers", threads=[8],
             modes=("full",), reps=1, timeout=60, geomean=False),
        # thousands of threads live at once: what each thread's heap keeps per thread; the
        # joins also make the C library free cached stacks' TLS under its stack-cache lock
        # (an allocator that starts a thread from such a free hangs: a timeout here)
        Spec("crowd", "crowd", ["-b", "64"], "LKmalloc sec. 4 (thread independence)",
             threads=[int(pick("500", "2000"))], timeout=60, geomean=False),
        # a small program that forks and waits for children that allocate a little and exit:
        # shells, build tools, pre-forking servers; with 4 threads holding working sets
        Spec("fork", "fork", ["-n", pick("200", "2000"), "-b", "100"],
             "LKmalloc sec. 3 (servers); what a fork costs a small program", threads=[1, 4],
             geomean=False),
        Spec("churn", "churn", ["-n", pick("4000", "100000")], "scalloc sec. 3.3, 7.7",
             threads=[1], modes=(), reps=1, timeout=300),
    ]


HIGHER_IS_BETTER = {"ops_per_s"}
# Memory-growth ratios (late RSS over earlier RSS) whose ideal is 1.00, no growth. A ratio
# under 1.00 means the RSS fell from a higher level earlier in the run, which is not steadier
# than staying flat, so cells are ranked by max(ratio, 1.00); the tables print the ratio itself.
GROWTH_METRICS = {"rss_growth"}


def rank_value(metric: str, v: float) -> float:
    """The value a cell is ranked by against the other allocators."""
    return max(v, 1.0) if metric in GROWTH_METRICS else v

# ---------------------------------------------------------------------------
# Running one program


@dataclass
class Outcome:
    status: str  # ok, crashed, failed, timeout, no-result, preload-failed
    result: dict
    wall_s: float
    user_s: Optional[float]
    sys_s: Optional[float]
    peak_rss_kib: Optional[int]
    minor_faults: Optional[int]
    major_faults: Optional[int]
    stdout: str
    stderr: str
    error: str = ""
    voluntary_switches: Optional[int] = None
    involuntary_switches: Optional[int] = None
    syscalls: Optional[dict] = None  # strace counts, per call


STRACE_CALLS = ["mmap", "munmap", "madvise", "mremap", "brk"]


def run_measured(launcher: Path, cmd: list[str], alloc: Allocator, timeout: float,
                 strace: Optional[str] = None) -> Outcome:
    """Runs cmd through the launcher (which forks it, preloads the allocator
    into it alone and reports its wait4 resource usage), in a process group of
    its own that is killed after timeout seconds. The allocator's options go
    into the environment (the launcher does not use the allocator). With
    strace (its path), the program runs under `strace -f -c` counting
    STRACE_CALLS, with the preload set for the traced program only; the counts
    land in Outcome.syscalls."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(alloc.env)
    with tempfile.TemporaryDirectory(prefix="rill-bench-") as tmp:
        report = Path(tmp) / "rusage"
        counts = Path(tmp) / "strace"
        full = [str(launcher), "-o", str(report)]
        if strace is not None:
            full += ["--", strace, "-f", "-c", "-o", str(counts),
                     "-e", "trace=" + ",".join(STRACE_CALLS)]
            if alloc.lib is not None:
                full += ["-E", f"LD_PRELOAD={alloc.lib}"]
            full += ["--"] + cmd
        else:
            if alloc.lib is not None:
                full += ["-p", str(alloc.lib)]
            full += ["--"] + cmd
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            t0 = time.monotonic()
            proc = subprocess.Popen(full, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
            lock = threading.Lock()
            state = {"exited": False, "killed": False}

            def on_timeout():
                with lock:
                    if not state["exited"]:  # not reaped yet, so the group id is still ours
                        state["killed"] = True
                        try:
                            os.killpg(proc.pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass

            timer = threading.Timer(timeout, on_timeout)
            timer.daemon = True
            timer.start()
            try:
                # wait without reaping, so the timer can never signal a reused id
                os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                with lock:
                    state["exited"] = True
                wall = time.monotonic() - t0
                _, status, _ = os.wait4(proc.pid, 0)
            finally:
                timer.cancel()
            proc.returncode = os.waitstatus_to_exitcode(status)
        stdout = out_path.read_bytes().decode(errors="replace")
        stderr = err_path.read_bytes().decode(errors="replace")
        # name the library and program as the reports do, not by where they are
        for path in ([alloc.lib] if alloc.lib else []) + [Path(cmd[0])]:
            stderr = stderr.replace(str(path), rel(path))
        usage = {}
        if report.exists():
            for tok in report.read_text().split():
                k, _, v = tok.partition("=")
                usage[k] = v
        syscalls = parse_strace_counts(counts.read_text()) if counts.exists() else None

    result = parse_result(stdout)
    error = ""
    if state["killed"]:
        st, error = "timeout", f"killed after {timeout:g} s"
    elif "cannot be preloaded" in stderr:
        st, error = "preload-failed", first_line(stderr)
    elif not usage:
        st, error = "harness", f"launcher failed (status {proc.returncode}): {first_line(stderr)}"
    elif int(usage["signal"]):
        st, error = "crashed", f"killed by {signal_name(int(usage['signal']))}"
        if first_line(stderr):
            error += f": {first_line(stderr)}"
    elif int(usage["exit"]):
        st, error = "failed", f"exit status {usage['exit']}: {first_line(stderr)}"
    elif result is None:
        st, error = "no-result", "no RESULT line in the output"
    else:
        st = "ok"
    if st == "ok" and strace is not None and syscalls is None:
        st, error = "harness", f"no strace summary: {first_line(stderr)}"
    if usage:
        return Outcome(st, result or {}, float(usage["wall_s"]), float(usage["user_s"]),
                       float(usage["sys_s"]), int(usage["maxrss_kib"]), int(usage["minflt"]),
                       int(usage["majflt"]), stdout, stderr, error,
                       int(usage["nvcsw"]), int(usage["nivcsw"]), syscalls)
    # killed, or the launcher itself failed: only the wall time is known
    return Outcome(st, result or {}, wall, None, None, None, None, None, stdout, stderr, error,
                   syscalls=syscalls)


def parse_strace_counts(text: str) -> Optional[dict]:
    """The calls column of `strace -c` per system call; every traced call is
    present (0 if it was not made), or None if there is no summary table."""
    counts = {c: 0 for c in STRACE_CALLS}
    seen = False
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and f[-1] in counts and f[3].isdigit():
            counts[f[-1]] = int(f[3])
            seen = True
        elif len(f) >= 4 and f[-1] == "total":
            seen = True
    return counts if seen else None


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def first_line(text: str) -> str:
    """The most telling line of an error output: valgrind's report of the
    fatal signal if there is one, else the first line that is not valgrind's."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    pick = next((ln for ln in lines if "Process terminating" in ln), None) or \
        next((ln for ln in lines if not re.match(r"==\d+==", ln)), None) or \
        (lines[0] if lines else "")
    return scrub(re.sub(r"^==\d+==\s*", "", pick))[:200]


def scrub(text: str) -> str:
    """Keeps the machine's directory layout out of reports."""
    return text.replace(str(REPO_DIR) + os.sep, "").replace(str(REPO_DIR), ".")


def parse_result(stdout: str) -> Optional[dict]:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        return None
    kv = {}
    for tok in lines[-1].split()[1:]:
        key, sep, val = tok.partition("=")
        if sep:
            kv[key] = val
    for key in ("benchmark", "metric", "value", "unit"):
        if key not in kv:
            return None
    return kv


def num(text: Optional[str]) -> Optional[float]:
    try:
        v = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def as_int(v: Optional[float]):
    return int(v) if v is not None and v == int(v) else v


# ---------------------------------------------------------------------------
# Formatting helpers

def fmt_value(v: Optional[float], unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        if v >= 1:
            return f"{v:.2f} s"
        if v >= 1e-3:
            return f"{v * 1e3:.1f} ms"
        return f"{v * 1e6:.0f} us"
    if unit == "ops/s":
        if v >= 1e6:
            return f"{v / 1e6:.1f} M/s"
        return f"{v / 1e3:.1f} k/s"
    if unit == "ns":
        return f"{v:.1f} ns"
    return f"{v:.4g} {unit}"


def fmt_mib(kib: Optional[float]) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f}"


def fmt_pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def fmt_ns(v: Optional[float]) -> str:
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:.1f}ms"
    if v >= 1e4:
        return f"{v / 1e3:.0f}us"
    return f"{v:.0f}"


def geomean(values: list[float]) -> Optional[float]:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def md_table(header: list[str], rows: list[list[str]], numeric: bool = True) -> list[str]:
    """A markdown table; numeric columns (all but the first) right-aligned."""
    align = "---:" if numeric else "---"
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join(["---"] + [align] * (len(header) - 1)) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


# ---------------------------------------------------------------------------
# The suite


class Harness:
    def __init__(self, args, launcher: Path):
        self.args = args
        self.launcher = launcher
        self.records: list[dict] = []
        self.fatal: list[str] = []  # failures that make the exit status non-zero

    def note_failure(self, alloc: Allocator, status: str, what: str):
        """Failures of rill, of the C library's allocator (then the benchmark
        itself is broken) and of the harness make the exit status non-zero;
        a peer's failure is only reported."""
        if alloc.kind in ("rill", "system") or status == "harness":
            self.fatal.append(f"{alloc.name}: {what}")


def run_suite(h: Harness, specs: list[Spec], allocs: list[Allocator], thread_counts: list[int],
              bench_dir: Path, strace: Optional[str] = None) -> None:
    a = h.args
    plan = []  # (rep, spec, threads, label, args)
    for rep in range(a.reps):
        for spec in specs:
            if spec.reps is not None and not a.reps_explicit and rep >= spec.reps:
                continue
            tcounts = spec.threads if spec.threads is not None else thread_counts
            points = spec.points if spec.kind == "sweep" else [(None, [])]
            for t in tcounts:
                for label, pargs in points:
                    plan.append((rep, spec, t, label, spec.args + pargs))
    total = len(plan) * len(allocs)
    i = 0
    for rep, spec, t, label, pargs in plan:
        # rotate the allocator order between repetitions to spread drift
        order = allocs[rep % len(allocs):] + allocs[:rep % len(allocs)]
        for alloc in order:
            i += 1
            exe = bench_dir / f"bench_{spec.program}"
            cmd = [str(exe), "-t", str(t)] + pargs
            # the spec's own limit, unless --timeout asks for more
            timeout = (a.timeout if spec.timeout is None else
                       max(a.timeout, spec.timeout) if a.timeout_explicit else spec.timeout)
            o = run_measured(h.launcher, cmd, alloc, timeout, strace=strace)
            rec = make_record(spec, t, label, pargs, alloc, rep, o)
            if strace is not None:
                rec["benchmark"] = f"{spec.name}-syscalls"
            h.records.append(rec)
            where = rec["benchmark"] + (f" [{label}]" if label else "")
            if o.status == "ok":
                msg = (f"{fmt_value(rec['value'], rec['unit']):>12}  "
                       f"rss {fmt_mib(o.peak_rss_kib):>7} MiB  {o.wall_s:6.2f} s")
                if spec.program == "soak":
                    msg += (f"  drift {fmt_pct(num(rec['params'].get('rss_drift_pct')))}"
                            f"  malloc p99.9 {rec['params'].get('malloc_p999_ns', '-')} ns")
                if o.syscalls is not None:
                    msg += "  " + " ".join(f"{k} {v}" for k, v in o.syscalls.items())
            else:
                msg = f"{o.status.upper()}: {o.error}"
                h.note_failure(alloc, o.status, f"{where} t={t}: {o.status} ({o.error})")
            print(f"[{i:4d}/{total}] {where:<24} t={t:<3d} {alloc.name:<16} {msg}", flush=True)


def make_record(spec: Spec, t: int, label: Optional[str], pargs: list[str], alloc: Allocator,
                rep: int, o: Outcome) -> dict:
    r = o.result
    skip = {"benchmark", "threads", "metric", "value", "unit", "ops", "check", "live_peak_bytes",
            "elapsed_s", "vm_hwm_kib"}
    params = {"args": " ".join(pargs)}
    if label is not None:
        params["x"] = label
    params.update({k: v for k, v in r.items() if k not in skip})
    live = num(r.get("live_peak_bytes"))
    frag = (o.peak_rss_kib * 1024 / live) if (live and o.peak_rss_kib and o.status == "ok") \
        else None
    return {
        "benchmark": spec.name,
        "program": f"bench_{spec.program}",
        "params": params,
        "x": label,
        "threads": t,
        "allocator": alloc.name,
        "metric": r.get("metric"),
        "value": num(r.get("value")) if o.status == "ok" else None,
        "unit": r.get("unit"),
        "ops": as_int(num(r.get("ops"))),
        "elapsed_s": num(r.get("elapsed_s")),
        "live_peak_bytes": as_int(live),
        "fragmentation": frag,
        "peak_rss_kib": o.peak_rss_kib,
        "minor_faults": o.minor_faults,
        "major_faults": o.major_faults,
        "voluntary_switches": o.voluntary_switches,
        "involuntary_switches": o.involuntary_switches,
        "user_s": o.user_s,
        "sys_s": o.sys_s,
        "wall_s": round(o.wall_s, 6),
        "repetition": rep,
        "status": o.status,
        "error": o.error or None,
        **({"syscalls": o.syscalls} if o.syscalls is not None else {}),
        **({"rss_series": parse_series(o.stdout, "RSS_SAMPLES"),
            "live_series": parse_series(o.stdout, "LIVE_SAMPLES")}
           if spec.program == "soak" and o.status == "ok" else {}),
    }


def parse_series(stdout: str, tag: str) -> list[list[int]]:
    """A `TAG ms:kib,ms:kib,...` line as [[ms, kib], ...] (empty if absent)."""
    for line in stdout.splitlines():
        if line.startswith(tag + " "):
            out = []
            for pair in line[len(tag) + 1:].split(","):
                ms, _, kib = pair.partition(":")
                if ms.isdigit() and kib.isdigit():
                    out.append([int(ms), int(kib)])
            return out
    return []


def run_callgrind(h: Harness, allocs: list[Allocator], bench_dir: Path) -> dict:
    """Instructions per malloc+free pair: (Ir(N2) - Ir(N1)) / (N2 - N1), so
    start-up and shutdown cancel."""
    a = h.args
    info: dict = {"n1": a.callgrind_pairs[0], "n2": a.callgrind_pairs[1], "rows": {}, "note": ""}
    if a.no_callgrind:
        info["note"] = "skipped (--no-callgrind)"
        return info
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        info["note"] = "valgrind is not installed (apt-get install valgrind); no instruction counts"
        return info
    exe = bench_dir / "bench_lifo"
    for alloc in allocs:
        irs, err, status = [], "", "ok"
        for n in (info["n1"], info["n2"]):
            cmd = [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", str(exe),
                   "-n", str(n)]
            o = run_measured(h.launcher, cmd, alloc, a.timeout * 4)
            m = re.search(r"Collected\s*:\s*(\d+)", o.stderr)
            if o.status != "ok" or m is None:
                err = o.error or "no instruction count in the callgrind output"
                status = o.status
                break
            irs.append(int(m.group(1)))
        if err:
            info["rows"][alloc.name] = {"error": err}
            h.note_failure(alloc, status, f"lifo under callgrind: {err}")
            print(f"[callgrind] {alloc.name:<16} FAILED: {err}", flush=True)
            continue
        per = (irs[1] - irs[0]) / (info["n2"] - info["n1"])
        info["rows"][alloc.name] = {"ir_n1": irs[0], "ir_n2": irs[1], "per_pair": per}
        h.records.append({
            "benchmark": "lifo-callgrind", "program": "bench_lifo",
            "params": {"n1": info["n1"], "n2": info["n2"], "ir_n1": irs[0], "ir_n2": irs[1]},
            "x": None, "threads": 1,
            "allocator": alloc.name, "metric": "instructions_per_pair", "value": per,
            "unit": "instructions", "ops": None, "live_peak_bytes": None, "fragmentation": None,
            "peak_rss_kib": None, "minor_faults": None, "major_faults": None, "user_s": None,
            "sys_s": None, "wall_s": None, "repetition": 0, "status": "ok", "error": None})
        print(f"[callgrind] {alloc.name:<16} {per:8.1f} instructions per malloc+free pair",
              flush=True)
    return info


# ---------------------------------------------------------------------------
# Aggregation


def ok_records(records, **match):
    return [r for r in records if r["status"] == "ok" and r["value"] is not None
            and all(r.get(k) == v for k, v in match.items())]


def column_keys(spec: Spec, thread_counts: list[int]) -> list:
    if spec.kind == "sweep":
        return [label for label, _ in spec.points]
    return spec.threads if spec.threads is not None else thread_counts


def cell_match(spec: Spec, key) -> dict:
    if spec.kind == "sweep":
        return {"benchmark": spec.name, "x": key}
    return {"benchmark": spec.name, "threads": key}


def medians(records, spec: Spec, allocs, keys) -> dict:
    """(allocator, key) -> dict with the median value, throughput, RSS, etc."""
    out = {}
    for a in allocs:
        for k in keys:
            rs = ok_records(records, allocator=a.name, **cell_match(spec, k))
            fails = [r for r in records if r["allocator"] == a.name and r["status"] != "ok"
                     and all(r.get(f) == v for f, v in cell_match(spec, k).items())]
            if not rs:
                out[(a.name, k)] = {"failed": fails[0]["status"] if fails else None}
                continue
            vals = [r["value"] for r in rs]
            thr = []
            for r in rs:
                if r["metric"] in HIGHER_IS_BETTER:
                    thr.append(r["value"])
                elif r["value"] > 0 and r["unit"] in ("s", "ms", "us"):
                    # operations a second; a time with no count of operations
                    # (fork's us a fork) as its inverse, whose ratios are
                    # the speedups the charts draw
                    thr.append((r["ops"] or 1) / r["value"])
            frags = [r["fragmentation"] for r in rs if r["fragmentation"]]
            lives = [r["live_peak_bytes"] for r in rs if r["live_peak_bytes"]]
            out[(a.name, k)] = {
                "value": statistics.median(vals),
                "throughput": statistics.median(thr) if thr else None,
                "rss_kib": statistics.median([r["peak_rss_kib"] for r in rs]),
                "frag": statistics.median(frags) if frags else None,
                "live": statistics.median(lives) if lives else None,
                "unit": rs[0]["unit"], "metric": rs[0]["metric"],
                "partial": bool(fails), "failed": None,
            }
    return out


def relative(med: dict, allocs, keys) -> dict:
    """(allocator, key) -> factor against the best allocator in that column;
    1.00 is the best, 1.50 means 1.5 times slower."""
    rel_ = {}
    for k in keys:
        cells = {a.name: med[(a.name, k)] for a in allocs if "value" in med[(a.name, k)]}
        if not cells:
            continue
        metric = next(iter(cells.values()))["metric"]
        higher = metric in HIGHER_IS_BETTER
        vals = {n: rank_value(metric, c["value"]) for n, c in cells.items() if c["value"] > 0}
        if not vals:
            continue
        best = max(vals.values()) if higher else min(vals.values())
        for n, v in vals.items():
            rel_[(n, k)] = best / v if higher else v / best
    return rel_


# ---------------------------------------------------------------------------
# Report


def machine_info() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = ""
    try:
        commit = subprocess.run(["git", "-C", str(REPO_DIR), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release(),
            "machine": platform.machine(), "python": platform.python_version(),
            "commit": commit or "none", "loadavg_start": os.getloadavg()[0],
            "thp_enabled": thp_setting("enabled"), "thp_defrag": thp_setting("defrag")}


def thp_setting(name: str) -> str:
    """The selected word of /sys/kernel/mm/transparent_hugepage/<name>, e.g.
    `madvise` from `always [madvise] never`, or `unknown`."""
    try:
        text = Path(f"/sys/kernel/mm/transparent_hugepage/{name}").read_text()
    except OSError:
        return "unknown"
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else text.strip() or "unknown"


def median_of(records, key) -> Optional[float]:
    """Median of a numeric RESULT field (kept in params) over records."""
    vals = [num(r["params"].get(key)) for r in records]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def median_field(records, key) -> Optional[float]:
    vals = [r.get(key) for r in records if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def soak_section(h: Harness, allocs) -> list[str]:
    recs = ok_records(h.records, benchmark="soak")
    if not recs:
        return []
    p = recs[0]["params"]
    L = ["## soak: throughput, RSS drift and latency", ""]
    L.append(f"`bench_soak {p.get('args', '')}`: a worker pool serving requests of "
             f"{p.get('allocs_per_request', '1000')} allocations (80% of 8-40 B, the rest "
             "41-1000 B); 2.5% of blocks bleed to another worker, which frees them, and 1% "
             "replace a random entry of a per-worker cache of "
             f"{p.get('cache', '16384')} blocks that lives across requests (LKmalloc sec. 3-4, "
             "7). **Drift**: mean RSS over the last tenth of the run against the mean over the "
             "tenth after the warm-up tenth; the workload's own live bytes drift by the "
             "`live drift` column. **Latency**: about one call in 64 is timed with "
             f"clock_gettime (which adds about {p.get('timer_overhead_ns', '?')} ns); "
             "p50 / p99 / p99.9 / max in ns over the timed calls of all threads. The "
             "tail and the maximum include preemption when there are more threads than free "
             "cores.")
    L.append("")
    head = ["allocator", "ops/s", "requests/s", "RSS drift", "live drift", "RSS end (MiB)",
            "peak RSS (MiB)", "malloc p50 / p99 / p99.9 / max", "free p50 / p99 / p99.9 / max"]
    for t in sorted({r["threads"] for r in recs}):
        rows = []
        for al in allocs:
            rs = [r for r in recs if r["allocator"] == al.name and r["threads"] == t]
            if not rs:
                failed = [r for r in h.records if r["benchmark"] == "soak" and
                          r["allocator"] == al.name and r["threads"] == t]
                if failed:
                    rows.append([al.name, failed[0]["status"]] + ["-"] * (len(head) - 2))
                continue

            def lat(op):
                return " / ".join(fmt_ns(median_of(rs, f"{op}_{q}_ns"))
                                  for q in ("p50", "p99", "p999", "max"))
            req = median_of(rs, "req_per_s")
            rows.append([al.name, fmt_value(median_field(rs, "value"), "ops/s"),
                         "-" if req is None else f"{req / 1e3:.1f} k/s",
                         fmt_pct(median_of(rs, "rss_drift_pct")),
                         fmt_pct(median_of(rs, "live_drift_pct")),
                         fmt_mib(median_of(rs, "rss_end_kib")),
                         fmt_mib(median_field(rs, "peak_rss_kib")), lat("malloc"), lat("free")])
        if rows:
            L.append(f"### {t} thread(s), {fmt_secs(median_field(recs, 'elapsed_s'))} per run")
            L.append("")
            L += md_table(head, rows)
            L.append("")
    return L


def fork_section(h: Harness, allocs) -> list[str]:
    """What each allocator leaves the kernel to copy at a fork: bench_fork's
    own readings, taken in the parent before its forks."""
    recs = ok_records(h.records, benchmark="fork")
    if not recs or all(r["params"].get("parent_faults") is None for r in recs):
        return []
    L = ["## fork: what the kernel copies", ""]
    L.append(f"`bench_fork {recs[0]['params'].get('args', '')}`, read by the program: minor "
             "faults a fork in the parent (pages written after the fork, copied on write) and "
             "in each child (getrusage), and before the forks the parent's anonymous resident "
             "memory (RssAnon), its page tables (VmPTE) and its mappings: a fork copies the "
             "page-table entries of every anonymous resident page and the child's exit tears "
             "them down (docs/benchmarks.md, \"Where a fork's time goes\"). Medians.")
    L.append("")
    head = ["allocator", "threads", "us a fork", "faults: parent", "faults: child",
            "RssAnon (KiB)", "VmPTE (KiB)", "mappings"]
    rows = []
    for t in sorted({r["threads"] for r in recs}):
        for al in allocs:
            rs = [r for r in recs if r["allocator"] == al.name and r["threads"] == t]
            if not rs:
                continue

            def med(key, fmt="{:.0f}"):
                v = median_of(rs, key)
                return "-" if v is None else fmt.format(v)
            rows.append([al.name, str(t), fmt_value(median_field(rs, "value"), "us"),
                         med("parent_faults", "{:.1f}"), med("child_faults", "{:.1f}"),
                         med("rss_anon_kib"), med("vm_pte_kib"), med("mappings")])
    L += md_table(head, rows)
    L.append("")
    return L


def fmt_secs(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v / 60:.1f} min" if v >= 120 else f"{v:.0f} s"


def growth_section(h: Harness, specs, allocs) -> list[str]:
    L = []
    for spec in specs:
        if spec.program not in ("mstress", "mleak"):
            continue
        recs = ok_records(h.records, benchmark=spec.name)
        if not recs:
            continue
        if not L:
            L += ["## Thread churn: memory growth (mstress, mleak)", ""]
            L.append("RSS (MiB) after the first round, the middle round and the last, read by "
                     "the program from /proc/self/statm; growth is the program's metric "
                     "(mstress: the largest RSS of the second half of the rounds over the "
                     "largest of the first half; mleak: RSS after the last round over RSS "
                     "after the middle one). 1.00 means no growth.")
            L.append("")
        L.append(f"### {spec.name}")
        L.append("")
        L.append(f"`bench_{spec.program} -t {recs[0]['threads']} {' '.join(spec.args)}`.")
        L.append("")
        rows = []
        for al in allocs:
            rs = [r for r in recs if r["allocator"] == al.name]
            if not rs:
                continue
            g = median_field(rs, "value")
            live = median_field(rs, "live_peak_bytes")
            rows.append([al.name, fmt_mib(median_of(rs, "rss_first_kib")),
                         fmt_mib(median_of(rs, "rss_mid_kib")),
                         fmt_mib(median_of(rs, "rss_last_kib")),
                         "-" if g is None else f"{g:.3f}",
                         fmt_mib(median_field(rs, "peak_rss_kib")),
                         fmt_mib(None if live is None else live / 1024),
                         fmt_value(median_field(rs, "elapsed_s"), "s")])
        L += md_table(["allocator", "first", "middle", "last", "growth", "peak RSS",
                       "peak live", "run time"], rows)
        L.append("")
    return L


def hugepages_section(h: Harness, specs, allocs, info) -> list[str]:
    if not any(al.name == "rill-thp" for al in allocs):
        return []
    L = ["## Huge pages: each allocator with its huge-page option off and on", ""]
    L.append(f"Transparent huge pages on this machine: enabled `{info.get('thp_enabled')}`, "
             f"defrag `{info.get('thp_defrag')}` (from /sys/kernel/mm/transparent_hugepage). "
             "`rill` runs with RILL_HUGEPAGES=0, `rill-thp` with RILL_HUGEPAGES=1, which asks "
             "for huge pages (MADV_HUGEPAGE) on rill's arena beyond its first 32 MiB, so a run "
             "that never uses more than that is the same with both. The peers' switches: " +
             "; ".join(f"`{n}` is {b} with " + " ".join(f"{k}={v}" for k, v in e.items())
                       for n, b, e in PEER_OPTION_VARIANTS) +
             ". tcmalloc (gperftools) has no huge-page option and runs as it is.")
    if info.get("thp_enabled") == "never":
        L.append("")
        L.append("**THP is `never` here: the kernel ignores the request, so the two cannot "
                 "differ.**")
    L.append("")
    L.append("Each cell of sizes and locality: median time / median minor page faults of the "
             "run (wait4). Each cell of " + " and ".join(HUGE_IDLE) + ": RSS left after the "
             "idle wait / peak RSS.")
    L.append("")
    for spec in specs:
        idle = spec.name in HUGE_IDLE
        if spec.program not in ("sizes", "locality") and not idle:
            continue
        keys = column_keys(spec, [])
        rows = []
        for al in allocs:
            row = [al.name]
            for k in keys:
                rs = ok_records(h.records, allocator=al.name, **cell_match(spec, k))
                if not rs:
                    row.append("-")
                    continue
                row.append(f"{fmt_value(median_field(rs, 'value'), rs[0]['unit'])} / " +
                           (f"{median_field(rs, 'peak_rss_kib') / 1024:.1f} MiB" if idle else
                            f"{int(median_field(rs, 'minor_faults') or 0)}"))
            rows.append(row)
        L.append(f"### {spec.name}")
        L.append("")
        L += md_table(["allocator"] + [str(k) for k in keys], rows)
        L.append("")
    return L


def syscalls_section(h: Harness, specs, allocs) -> list[str]:
    recs = [r for r in h.records if r["benchmark"].endswith("-syscalls") and r["status"] == "ok"
            and r.get("syscalls")]
    fails = [r for r in h.records if r["benchmark"].endswith("-syscalls")
             and r["status"] != "ok"]
    if not recs and not fails:
        return []
    spec = next((s for s in specs if s.program == "churn"), None)
    L = ["## System calls under span churn (strace)", ""]
    iters = num(recs[0]["params"].get("iterations")) if recs else None
    L.append(f"`strace -f -c -e trace={','.join(STRACE_CALLS)} bench_churn "
             f"{' '.join(spec.args) if spec else ''}`: each iteration replaces one of 4 held "
             "blocks of 300 KiB-4 MiB and allocates, writes and frees 64 objects of 64 KiB; "
             "every page of every block is written. brk is counted too, since glibc grows and "
             "trims its main heap with it. Run time, minor faults and peak RSS are from a "
             "separate run without strace. rill holds empty spans for RILL_PURGE_DELAY_MS "
             "(1000 ms by default) before it madvises them, in batches; `rill-purge0` is rill "
             "with RILL_PURGE_DELAY_MS=0.")
    L.append("")
    rows = []
    for al in allocs:
        rs = [r for r in recs if r["allocator"] == al.name]
        plain = ok_records(h.records, benchmark="churn", allocator=al.name)
        if not rs:
            f = [r for r in fails if r["allocator"] == al.name]
            if f:
                rows.append([al.name, f[0]["status"]] + ["-"] * (len(STRACE_CALLS) + 4))
            continue
        counts = {c: int(statistics.median([r["syscalls"][c] for r in rs]))
                  for c in STRACE_CALLS}
        total = sum(counts.values())
        per = f"{total * 1000 / iters:.1f}" if iters else "-"
        rows.append([al.name] + [str(counts[c]) for c in STRACE_CALLS] +
                    [str(total), per, fmt_value(median_field(plain, "value"), "s"),
                     str(int(median_field(plain, "minor_faults") or 0)) if plain else "-",
                     fmt_mib(median_field(plain, "peak_rss_kib"))])
    L += md_table(["allocator"] + STRACE_CALLS + ["total", "per 1000 iterations", "run time",
                                                  "minor faults", "peak RSS (MiB)"], rows)
    L.append("")
    for al in allocs:
        if al.kind != "rill" or "RILL_PURGE_DELAY_MS" in al.env:
            continue
        t = median_field(ok_records(h.records, benchmark="churn", allocator=al.name), "value")
        delay = num(os.environ.get("RILL_PURGE_DELAY_MS")) or 1000.0
        if t is not None and t * 1000 < delay:
            L.append(f"Note: {al.name}'s run ({fmt_value(t, 's')}) was shorter than its "
                     f"purge delay ({delay:g} ms), so it could not give memory back during "
                     "the run; its count is start-up only. `--full` runs enough iterations "
                     "for the delay to pass.")
            L.append("")
    return L


# The benchmark-suite issue's "where rill must stand": rill's median time at
# most the best peer's on these benchmarks at 1 and 2 threads, no cell worse
# than 1.25x the best peer, peak RSS within 1.1x of the best peer's.
TIME_TARGETS = ("threadtest", "larson", "consume", "recycle", "shbench", "randalloc")


def targets_section(measured, allocs) -> list[str]:
    """rill against the best peer (every allocator not built from rill's
    sources), cell by cell, for the three targets."""
    if not any(a.name == "rill" for a in allocs):
        return []
    peers = [a.name for a in allocs if not a.name.startswith("rill")]
    if not peers:
        return []
    time_rows, over, rss_met, rss_cells, rss_over = [], [], 0, 0, []
    for spec, keys, med in measured:
        for k in keys:
            r = med.get(("rill", k), {})
            ps = {n: med[(n, k)] for n in peers if "value" in med.get((n, k), {})}
            if "value" not in r or not ps:
                continue
            col = f"{k}" if spec.kind == "sweep" else f"{k} thr"
            higher = r["metric"] in HIGHER_IS_BETTER
            vals = {n: rank_value(r["metric"], c["value"]) for n, c in ps.items() if c["value"] > 0}
            mine = rank_value(r["metric"], r["value"])
            if vals and mine > 0:
                best = max(vals, key=vals.get) if higher else min(vals, key=vals.get)
                f = vals[best] / mine if higher else mine / vals[best]
                if spec.name in TIME_TARGETS and spec.kind == "threads" and k in (1, 2):
                    time_rows.append([spec.name, col, f"{f:.2f}x", best,
                                      "met" if f <= 1.0 else "not met"])
                if f > 1.25:
                    over.append(f"{spec.name} {col}: {f:.2f}x {best}")
            rss = {n: c["rss_kib"] for n, c in ps.items() if c.get("rss_kib")}
            if rss and r.get("rss_kib"):
                best = min(rss, key=rss.get)
                f = r["rss_kib"] / rss[best]
                rss_cells += 1
                if f <= 1.1:
                    rss_met += 1
                else:
                    rss_over.append(f"{spec.name} {col}: {f:.2f}x {best}")
    if not time_rows and not rss_cells:
        return []
    L = ["## Against the targets", "",
         "rill's median against the best peer's (peers: " + ", ".join(peers) + "), "
         "by the benchmark-suite issue's targets. A ratio over 1.00x means rill is behind.", ""]
    if time_rows:
        met = sum(1 for r in time_rows if r[-1] == "met")
        L.append(f"- Time at 1 and 2 threads, at most the best peer's: {met} of "
                 f"{len(time_rows)} cells.")
        L.append("")
        L += md_table(["benchmark", "threads", "rill / best peer", "best peer", "target"],
                      time_rows)
        L.append("")
    L.append(f"- No cell worse than 1.25x the best peer: {len(over)} cell(s) are"
             + (": " + "; ".join(over) + "." if over else "."))
    if rss_cells:
        L.append(f"- Peak RSS within 1.1x of the best peer's: {rss_met} of {rss_cells} cells"
                 + ("; over it: " + "; ".join(rss_over) + "." if rss_over else "."))
    L.append("")
    return L


def write_summary(path: Path, h: Harness, specs, allocs, skipped, thread_counts, info, cg,
                  charts: list[str], chart_note: str, recheck: Optional[str] = None) -> str:
    """recheck: the section bench/recheck.py wrote (the cells that missed a
    target, measured again side by side), placed after the targets."""
    a = h.args
    L = [f"# rill benchmark summary ({a.mode_label} mode)", ""]
    L.append(f"Run {info['started']} on {info['cpus']} CPUs ({info['cpu'] or info['machine']}), "
             f"Linux {info['kernel']}, commit {info['commit']}; {a.reps} repetition(s) "
             f"(soak, mstress, mleak, churn: {a.reps if a.reps_explicit else 1}), "
             f"median reported; thread counts {', '.join(map(str, thread_counts))}. "
             f"Load average {info['loadavg_start']:.2f} at the start, "
             f"{info['loadavg_end']:.2f} at the end"
             + (" - the machine was busy, so expect noise." if
                max(info['loadavg_start'], info['loadavg_end']) > 0.5 * (info['cpus'] or 1)
                else "."))
    L.append("")
    L.append("Allocators: " + ", ".join(
        f"{al.name} ({al.lib.name if al.lib else 'no preload'})" for al in allocs) + ".")
    for al in skipped:
        L.append(f"- skipped {al.name}: {al.note}")
    L.append("")
    L.append("Each cell: median of the benchmark's own metric, and in parentheses the factor "
             "against the best allocator in that column (1.00x = best, 2.00x = half as fast). "
             "`!` marks a cell where some repetitions failed, and `-` one with no successful "
             "run (see Failures).")
    L.append("")

    per_bench_rel = {}  # spec name -> {(alloc, key): factor}
    thread_rel = {}  # (alloc, threads) -> [factors]
    mem_sections = []
    measured = []  # (spec, keys, medians) for the targets
    for spec in specs:
        keys = column_keys(spec, thread_counts)
        med = medians(h.records, spec, allocs, keys)
        if not any("value" in c for c in med.values()):
            continue
        measured.append((spec, keys, med))
        rl = relative(med, allocs, keys)
        if spec.geomean:
            per_bench_rel[spec.name] = rl
            if spec.kind == "threads":
                for (an, k), f in rl.items():
                    thread_rel.setdefault((an, k), []).append(f)
        first = next(c for c in med.values() if "value" in c)
        better = "higher" if first["metric"] in HIGHER_IS_BETTER else "lower"
        L.append(f"## {spec.name}")
        L.append("")
        at = (f" at {spec.threads[0]} thread(s), one run per {spec.xlabel}"
              if spec.kind == "sweep" else "")
        growth = ("; 1.00 = no growth, and the factors in parentheses rank a ratio under 1.00 "
                  "as 1.00" if first["metric"] in GROWTH_METRICS else "")
        L.append(f"`bench_{spec.program} {' '.join(spec.args)}`{at} - {first['metric']} "
                 f"({better} is better{growth}); after {spec.paper}.")
        L.append("")
        head = ["allocator"] + [str(k) if spec.kind == "sweep" else f"{k} thr" for k in keys]
        if len(keys) > 1:
            head.append("geomean")
        rows, mrows = [], []
        for al in allocs:
            row, mrow, facs = [al.name], [al.name], []
            for k in keys:
                c = med[(al.name, k)]
                if "value" not in c:
                    row.append(c["failed"] or "-")
                    mrow.append("-")
                    continue
                f = rl.get((al.name, k))
                if f is not None:
                    facs.append(f)
                mark = "!" if c["partial"] else ""
                row.append(f"{fmt_value(c['value'], c['unit'])} ({f:.2f}x){mark}" if f
                           else fmt_value(c["value"], c["unit"]) + mark)
                fr = f" ({c['frag']:.2f})" if c["frag"] and c["live"] and c["live"] >= 1 << 20 \
                    else ""
                mrow.append(fmt_mib(c["rss_kib"]) + fr)
            if len(keys) > 1:
                g = geomean(facs)
                row.append(f"{g:.2f}x" if g else "-")
            rows.append(row)
            mrows.append(mrow)
        L += md_table(head, rows)
        L.append("")
        mem_sections.append((spec.name, head[:len(keys) + 1], mrows))

    L += targets_section(measured, allocs)
    if recheck:
        L += recheck.rstrip("\n").splitlines() + [""]

    # geometric means across benchmarks
    if per_bench_rel:
        L.append("## Geometric mean across benchmarks")
        L.append("")
        L.append("Factor against the best allocator, averaged geometrically over the "
                 "thread-scaling benchmarks per thread count, and over every benchmark "
                 "column in `all` (lower is better; 1.00x would be best everywhere).")
        L.append("")
        head = ["allocator"] + [f"{t} thr" for t in thread_counts] + ["all"]
        rows = []
        for al in allocs:
            row = [al.name]
            for t in thread_counts:
                g = geomean(thread_rel.get((al.name, t), []))
                row.append(f"{g:.2f}x" if g else "-")
            allf = [f for rl in per_bench_rel.values() for (an, _), f in rl.items()
                    if an == al.name]
            g = geomean(allf)
            nb = sum(1 for rl in per_bench_rel.values() if any(an == al.name for an, _ in rl))
            row.append(f"{g:.2f}x ({nb}/{len(per_bench_rel)})" if g else "-")
            rows.append(row)
        L += md_table(head, rows)
        L.append("")

    # memory
    if mem_sections:
        L.append("## Peak RSS")
        L.append("")
        L.append("Median peak resident set size in MiB (ru_maxrss of the process, including the "
                 "program itself); in parentheses the fragmentation, peak RSS / peak live bytes, "
                 "where the benchmark knows its live bytes and they reach 1 MiB.")
        L.append("")
        for name, head, mrows in mem_sections:
            L.append(f"### {name}")
            L.append("")
            L += md_table(head, mrows)
            L.append("")

    L += soak_section(h, allocs)
    L += fork_section(h, allocs)
    L += growth_section(h, specs, allocs)
    L += hugepages_section(h, specs, allocs, info)
    L += syscalls_section(h, specs, allocs)

    # callgrind
    L.append("## Instructions per malloc+free pair (callgrind)")
    L.append("")
    if cg["note"]:
        L.append(cg["note"] + ".")
    else:
        L.append(f"`bench_lifo` under `valgrind --tool=callgrind`, LIFO pairs over sizes "
                 f"16..512 B; (Ir(N2) - Ir(N1)) / (N2 - N1) with N1 = {cg['n1']}, "
                 f"N2 = {cg['n2']}, so start-up cancels. Includes the loop's own few "
                 f"instructions per pair, the same for every allocator.")
        L.append("")
        rows = []
        for al in allocs:
            r = cg["rows"].get(al.name)
            if r is None:
                continue
            if "error" in r:
                rows.append([al.name, "-", "-", "failed: " + r["error"]])
            else:
                rows.append([al.name, str(r.get("ir_n1", "-")), str(r.get("ir_n2", "-")),
                             f"{r['per_pair']:.1f}"])
        L += md_table(["allocator", "Ir(N1)", "Ir(N2)", "instructions/pair"], rows)
    L.append("")

    # failures
    fails = [r for r in h.records if r["status"] != "ok"]
    L.append("## Failures")
    L.append("")
    if not fails:
        L.append("None.")
    else:
        rows = [[r["benchmark"] + (f" [{r['x']}]" if r["x"] else ""), str(r["threads"]),
                 r["allocator"], str(r["repetition"]), r["status"], (r["error"] or "")
                 .replace("|", "/")] for r in fails]
        L += md_table(["benchmark", "threads", "allocator", "rep", "status", "detail"], rows,
                      numeric=False)
    L.append("")

    L.append("## Charts")
    L.append("")
    if charts:
        L.append("Speedup is throughput (operations per second) relative to glibc's on the "
                 "fewest threads, as in the papers' figures; for benchmarks whose work grows "
                 "with the thread count this is scaled throughput, not run time.")
        L.append("")
        for c in charts:
            L.append(f"![{c}]({c})")
    else:
        L.append(chart_note or "No charts.")
    L.append("")
    text = "\n".join(L)
    path.write_text(text)
    return text


# ---------------------------------------------------------------------------
# Charts

COLORS = {"rill": "#d62728", "rill-globallock": "#ff9896", "rill-hashed": "#e377c2",
          "glibc": "#7f7f7f", "jemalloc": "#1f77b4", "tcmalloc": "#2ca02c",
          "mimalloc": "#9467bd", "tbbmalloc": "#8c564b", "rill-thp": "#ff7f0e",
          "rill-purge0": "#bcbd22"}


def make_charts(outdir: Path, h: Harness, specs, allocs, thread_counts) -> tuple[list[str], str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401 (rss_scale)
    except ImportError:
        return [], ("matplotlib is not installed (bench/run.sh installs it into bench/.venv); "
                    "no charts.")
    files = []
    thread_specs = [s for s in specs if s.kind == "threads" and
                    len(column_keys(s, thread_counts)) > 1]

    def series(spec, keys, field_):
        med = medians(h.records, spec, allocs, keys)
        out = {}
        for al in allocs:
            pts = [(k, med[(al.name, k)].get(field_)) for k in keys]
            pts = [(k, v) for k, v in pts if v is not None]
            if pts:
                out[al.name] = pts
        return out

    def speedups(spec, keys):
        thr = series(spec, keys, "throughput")
        base = None
        if "glibc" in thr and thr["glibc"][0][0] == keys[0]:
            base = thr["glibc"][0][1]
        out = {}
        for name, pts in thr.items():
            b = base if base else pts[0][1]
            out[name] = [(k, v / b) for k, v in pts]
        return out

    def style(ax, name):
        return dict(color=COLORS.get(name), marker="o", linewidth=2.5 if name == "rill" else 1.5,
                    label=name)

    def rss_scale(ax, values):
        """Peak RSS on a log axis once the allocators spread over more than 4x, so
        that one allocator's 300 MiB does not flatten the others' 20-30 into one
        line: equal ratios are then equal distances, which is what the 1.1x
        target compares. Ticks printed as plain MiB, more of them per decade the
        fewer decades the axis spans."""
        vals = [v for v in values if v and v > 0]
        if not vals or max(vals) / min(vals) <= 4:
            ax.set_ylim(bottom=0)
            return
        ax.set_yscale("log")
        decades = math.log10(max(vals) / min(vals))
        subs = ((1, 1.5, 2, 3, 4, 5, 6, 8) if decades < 1.3 else
                (1, 2, 3, 5) if decades < 2.5 else (1, 2, 5))
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=subs))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())

    def shared_legend(fig, axes_):
        """One legend under the panels, taken from the panel with the most
        allocators, so it covers no line (it used to sit inside a panel)."""
        handles, labels = max((ax.get_legend_handles_labels() for ax in axes_),
                              key=lambda hl: len(hl[1]))
        if labels:
            fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9,
                       frameon=False)
        return bool(labels)

    def draw_threads(ax_s, ax_m, spec):
        keys = column_keys(spec, thread_counts)
        for name, pts in speedups(spec, keys).items():
            ax_s.plot([k for k, _ in pts], [v for _, v in pts], **style(ax_s, name))
        rss = series(spec, keys, "rss_kib")
        for name, pts in rss.items():
            ax_m.plot([k for k, _ in pts], [v / 1024 for _, v in pts], **style(ax_m, name))
        rss_scale(ax_m, [v / 1024 for pts in rss.values() for _, v in pts])
        for ax in (ax_s, ax_m):
            ax.set_xscale("log", base=2)
            ax.set_xticks(keys)
            ax.set_xticklabels([str(k) for k in keys])
            ax.set_xlabel("threads")
            ax.grid(True, alpha=0.3)
        ax_s.set_ylabel("speedup vs glibc, fewest threads")
        ax_m.set_ylabel("peak RSS (MiB)")
        ax_s.set_title(f"{spec.name}: speedup")
        ax_m.set_title(f"{spec.name}: peak RSS")

    def draw_sweep(ax_v, ax_m, spec):
        keys = column_keys(spec, thread_counts)
        xs = list(range(len(keys)))
        for name, pts in series(spec, keys, "value").items():
            ax_v.plot([keys.index(k) for k, _ in pts], [v for _, v in pts], **style(ax_v, name))
        rss = series(spec, keys, "rss_kib")
        for name, pts in rss.items():
            ax_m.plot([keys.index(k) for k, _ in pts], [v / 1024 for _, v in pts],
                      **style(ax_m, name))
        rss_scale(ax_m, [v / 1024 for pts in rss.values() for _, v in pts])
        med = medians(h.records, spec, allocs, keys)
        first = next((c for c in med.values() if "value" in c), {"metric": "value"})
        for ax in (ax_v, ax_m):
            ax.set_xticks(xs)
            ax.set_xticklabels(keys, rotation=45 if len(keys) > 5 else 0, ha="right"
                               if len(keys) > 5 else "center")
            ax.set_xlabel(spec.xlabel)
            ax.grid(True, alpha=0.3)
        ax_v.set_yscale("log")
        ax_v.set_ylabel(f"{first['metric']} (lower is better)")
        ax_m.set_ylabel("peak RSS (MiB)")
        t = spec.threads[0] if spec.threads else ""
        ax_v.set_title(f"{spec.name} ({t} thr): {first['metric']}")
        ax_m.set_title(f"{spec.name}: peak RSS")

    for spec in specs:
        keys = column_keys(spec, thread_counts)
        med = medians(h.records, spec, allocs, keys)
        if not any("value" in c for c in med.values()):
            continue
        if spec.kind == "threads" and len(keys) < 2:
            continue
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
        (draw_sweep if spec.kind == "sweep" else draw_threads)(ax1, ax2, spec)
        fig.tight_layout(rect=(0, 0.07, 1, 1) if shared_legend(fig, (ax1, ax2)) else None)
        fname = f"{spec.name}.png"
        fig.savefig(outdir / fname, dpi=110)
        plt.close(fig)
        files.append(fname)

    # one grid of all thread-scaling benchmarks, like the papers' figure pages
    if thread_specs:
        for what, fname in (("speedup", "speedup.png"), ("rss", "rss.png")):
            n = len(thread_specs)
            cols = 4
            rows_ = (n + cols - 1) // cols
            fig, axes = plt.subplots(rows_, cols, figsize=(4 * cols, 3.3 * rows_), squeeze=False)
            for i, spec in enumerate(thread_specs):
                ax = axes[i // cols][i % cols]
                keys = column_keys(spec, thread_counts)
                data = speedups(spec, keys) if what == "speedup" else {
                    k: [(x, v / 1024) for x, v in pts]
                    for k, pts in series(spec, keys, "rss_kib").items()}
                for name, pts in data.items():
                    ax.plot([k for k, _ in pts], [v for _, v in pts], **style(ax, name))
                if what == "rss":
                    rss_scale(ax, [v for pts in data.values() for _, v in pts])
                ax.set_xscale("log", base=2)
                ax.set_xticks(keys)
                ax.set_xticklabels([str(k) for k in keys])
                ax.set_title(spec.name, fontsize=10)
                ax.grid(True, alpha=0.3)
                if i % cols == 0:
                    ax.set_ylabel("speedup" if what == "speedup" else "peak RSS (MiB)")
            for j in range(n, rows_ * cols):
                axes[j // cols][j % cols].axis("off")
            shared_legend(fig, [axes[i // cols][i % cols] for i in range(n)])
            fig.tight_layout(rect=(0, 0.05, 1, 1))
            fig.savefig(outdir / fname, dpi=100)
            plt.close(fig)
            files.append(fname)

    soak = soak_chart(plt, outdir, h, allocs)
    if soak:
        files.append(soak)
    return files, ""


def soak_chart(plt, outdir: Path, h: Harness, allocs) -> Optional[str]:
    """RSS over time of the soak runs at one thread count (4 if there are runs
    at 4, else the most threads), one line per allocator (its first good run),
    and the workload's live bytes from the first of them, dashed."""
    recs = [r for r in ok_records(h.records, benchmark="soak") if r.get("rss_series")]
    if not recs:
        return None
    counts = {r["threads"] for r in recs}
    t = 4 if 4 in counts else max(counts)
    fig, ax = plt.subplots(figsize=(10, 5))
    live_drawn = False
    longest = max(r["rss_series"][-1][0] for r in recs if r["threads"] == t)
    minutes = longest >= 120000
    scale = 60000.0 if minutes else 1000.0
    for al in allocs:
        r = next((r for r in recs if r["allocator"] == al.name and r["threads"] == t), None)
        if r is None:
            continue
        xs = [ms / scale for ms, _ in r["rss_series"]]
        ax.plot(xs, [kib / 1024 for _, kib in r["rss_series"]], color=COLORS.get(al.name),
                linewidth=2.2 if al.name == "rill" else 1.3, label=al.name)
        if not live_drawn and r.get("live_series"):
            ax.plot([ms / scale for ms, _ in r["live_series"]],
                    [kib / 1024 for _, kib in r["live_series"]], color="black",
                    linestyle="--", linewidth=1, label=f"live bytes ({al.name} run)")
            live_drawn = True
    end = longest / scale
    for frac in (0.1, 0.2, 0.9):
        ax.axvline(end * frac, color="gray", linestyle=":", linewidth=0.8)
    ax.set_xlabel("minutes" if minutes else "seconds")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"soak, {t} thread(s): RSS over time (drift windows dotted)")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fname = "soak_rss.png"
    fig.savefig(outdir / fname, dpi=110)
    plt.close(fig)
    return fname


# ---------------------------------------------------------------------------
# Main


def parse_args(argv):
    p = argparse.ArgumentParser(description="Run the rill benchmark suite.")
    m = p.add_mutually_exclusive_group()
    m.add_argument("--quick", dest="mode", action="store_const", const="quick",
                   help="CI smoke run: threads 1,2, one repetition, small inputs (default)")
    m.add_argument("--full", dest="mode", action="store_const", const="full",
                   help="threads 1,2,4,8,16, five repetitions, full inputs")
    p.set_defaults(mode="quick")
    sp = p.add_mutually_exclusive_group()
    sp.add_argument("--soak", type=float, metavar="SECONDS",
                    help="run only the soak benchmark, SECONDS per allocator, at 4 threads "
                    "(--threads to change), every allocator unless --allocators; writes the "
                    "RSS-over-time chart soak_rss.png and the soak table")
    sp.add_argument("--hugepages", action="store_true",
                    help="run only sizes, locality, idle and idle-buffers, each allocator with "
                    "its huge-page option off and on (rill and rill-thp, glibc and glibc-thp, "
                    "...), reporting time and minor faults (idle: RSS left and peak RSS)")
    sp.add_argument("--syscalls", action="store_true",
                    help="run only bench_churn, once plainly and once under strace -f -c, "
                    "for every allocator and rill-purge0; tabulates mmap/munmap/madvise/"
                    "mremap/brk counts")
    p.add_argument("--only", help="comma-separated benchmarks (names or programs) to run")
    p.add_argument("--allocators", help="comma-separated allocators; default: quick: rill, "
                   "glibc and the installed peers; full: all")
    p.add_argument("--threads", help="comma-separated thread counts (overrides the mode)")
    p.add_argument("--reps", type=int, help="repetitions (overrides the mode)")
    p.add_argument("--timeout", type=float, help="seconds before a run is killed "
                   "(default 30 quick, 120 full)")
    p.add_argument("--build-dir", type=Path, default=REPO_DIR / "build",
                   help="top-level build directory holding librill*.so (default: build)")
    p.add_argument("--bench-dir", type=Path, help="directory of the bench_* programs "
                   "(default: <build-dir>/bench)")
    p.add_argument("--out", type=Path, help="results directory "
                   "(default: bench/results/<timestamp>)")
    p.add_argument("--no-callgrind", action="store_true", help="skip the instruction counts")
    p.add_argument("--recheck", type=int, metavar="PAIRS",
                   help="after the suite, run each cell where rill missed a target again, "
                   "alternating with the best peer, PAIRS times (bench/recheck.py); "
                   "default 5 in full mode, 0 (off) otherwise")
    p.add_argument("--recheck-budget", type=float, default=180.0, metavar="SECONDS",
                   help="longest a cell's recheck may take, from the run's wall times (180)")
    p.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    p.add_argument("--no-rill", metavar="REASON", help="leave out the rill libraries, "
                   "giving the reason (run.sh uses it when the project did not build, so "
                   "that a stale library is not measured)")
    p.add_argument("--require-rill", action="store_true",
                   help="fail (exit 3) if a requested rill library is missing")
    p.add_argument("--list", action="store_true", help="list benchmarks and allocators, then exit")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="run nothing: rewrite DIR/summary.md and the charts from DIR/results.json "
                   "(or results.json.gz) "
                   "(give --full for a full run's results)")
    a = p.parse_args(argv)
    full = a.mode == "full"
    if a.soak is not None and not 0 < a.soak <= 30 * 24 * 3600:
        p.error("--soak takes a run time in seconds (up to 30 days)")
    if a.only and (a.soak is not None or a.syscalls):
        p.error("--only does not combine with --soak or --syscalls")
    a.special = ("soak" if a.soak is not None else "hugepages" if a.hugepages
                 else "syscalls" if a.syscalls else None)
    a.mode_label = ("soak" if a.special == "soak" else
                    f"{a.special}, {a.mode}" if a.special else a.mode)
    a.thread_counts = ([int(x) for x in a.threads.split(",")] if a.threads
                       else [4] if a.special == "soak"
                       else [1] if a.special == "syscalls"
                       else [1, 2, 4, 8, 16] if full else [1, 2])
    if any(t < 1 or t > 256 for t in a.thread_counts):
        p.error("thread counts must be 1..256")
    a.thread_counts = sorted(set(a.thread_counts))
    a.reps_explicit = a.reps is not None
    a.reps = a.reps if a.reps is not None else (5 if full and a.special != "soak" else 1)
    if a.reps < 1:
        p.error("--reps must be at least 1")
    a.timeout_explicit = a.timeout is not None
    a.timeout = a.timeout if a.timeout is not None else (120.0 if full else 30.0)
    a.callgrind_pairs = (100000, 1100000) if full else (20000, 220000)
    if a.recheck is None:
        a.recheck = 5 if full and not a.special else 0
    if a.recheck < 0:
        p.error("--recheck takes a number of pairs (0 = off)")
    a.bench_dir = a.bench_dir or (a.build_dir / "bench")
    return a


def recheck_cells(h: Harness, allocs, outdir: Path) -> Optional[str]:
    """The cells where rill missed a target, run again side by side with the
    best peer (bench/recheck.py); the section goes to outdir/recheck.md."""
    import recheck  # bench/recheck.py, beside this file

    a = h.args
    cells = recheck.flagged(h.records)
    print(f"recheck: {len(cells)} cell(s) missed a target; measuring them again side by side, "
          f"{a.recheck} pairs each", flush=True)
    try:
        recheck.measure(cells, h.launcher, a.bench_dir, {al.name: al for al in allocs},
                        a.recheck, a.recheck_budget)
    except KeyboardInterrupt:
        print("interrupted; the recheck reports what it measured", file=sys.stderr)
    stamp = recheck.stamp(outdir, a.build_dir)  # the run's library, or one built since
    text = "\n".join(recheck.section(cells, a.recheck, stamp)) + "\n"
    (outdir / "recheck.md").write_text(text)
    return text


def report_again(a, h: Harness, found: dict) -> int:
    """--report DIR: the summary and charts of an earlier run, from its results.json and
    machine.json, with this version of the report code."""
    d = a.report
    try:
        # docs/benchmarks keeps the documented run's records gzipped
        raw, gz = d / "results.json", d / "results.json.gz"
        if not raw.exists() and gz.exists():
            h.records = json.loads(gzip.decompress(gz.read_bytes()))
        else:
            h.records = json.loads(raw.read_text())
        info = json.loads((d / "machine.json").read_text())
    except (OSError, ValueError) as e:
        print(f"error: --report {d}: {e}", file=sys.stderr)
        return 2
    names = {r["allocator"] for r in h.records}
    allocs = [found[n] for n in KNOWN_ALLOCATORS if n in names]
    for al in allocs:
        if al.lib is None and al.kind != "system":
            al.lib = Path(al.name)  # the report only prints the library's name
    benches = {r["benchmark"] for r in h.records}
    threads = sorted({r["threads"] for r in h.records if r.get("threads")
                      and r["benchmark"] != "lifo-callgrind"})
    sweep_threads = max(1, min(info.get("cpus") or 1, max(threads or [1])))
    specs = [s for s in suite(a.mode, sweep_threads) if s.name in benches]
    reps = [r["repetition"] for r in h.records if r["benchmark"] not in
            ("soak", "mstress", "mleak", "idle", "churn", "lifo-callgrind")]
    a.reps = max(reps) + 1 if reps else 1
    a.thread_counts = [t for t in a.thread_counts if t in threads] or threads
    cg = {"note": "", "rows": {}, "n1": 0, "n2": 0}
    for r in h.records:
        if r["benchmark"] == "lifo-callgrind" and r["status"] == "ok":
            cg["n1"], cg["n2"] = r["params"]["n1"], r["params"]["n2"]
            cg["rows"][r["allocator"]] = {"per_pair": r["value"], **{
                k: r["params"][k] for k in ("ir_n1", "ir_n2") if k in r["params"]}}
    if not cg["rows"]:
        cg["note"] = "no instruction counts in these results"
    if a.no_charts:
        charts, chart_note = [], "Charts skipped (--no-charts)."
    else:
        charts, chart_note = make_charts(d, h, specs, allocs, a.thread_counts)
    again = d / "recheck.md"  # the side-by-side pass of a full run, kept as it was
    text = write_summary(d / "summary.md", h, specs, allocs, [], a.thread_counts, info, cg,
                         charts, chart_note, again.read_text() if again.is_file() else None)
    print(text)
    print(f"rewrote {rel(d / 'summary.md')}")
    return 0


def main(argv=None) -> int:
    a = parse_args(argv if argv is not None else sys.argv[1:])
    h = Harness(a, a.bench_dir / "bench_launch")
    sweep_threads = max(1, min(os.cpu_count() or 1, max(a.thread_counts)))
    specs = all_specs = suite(a.mode, sweep_threads)
    found = discover_allocators(a.build_dir)
    if a.report:
        return report_again(a, h, found)
    if a.no_rill:
        for al in found.values():
            if al.kind == "rill":
                al.note = f"left out: {a.no_rill}"
    strace = None
    if a.special == "soak":
        specs = [soak_spec(a.soak, 100, None)]
    elif a.special == "hugepages":
        specs = [s for s in specs if s.program in ("sizes", "locality") or s.name in HUGE_IDLE]
        # plain rill with the option off explicitly, whatever the caller's environment says
        found["rill"].env = {"RILL_HUGEPAGES": "0"}
    elif a.special == "syscalls":
        specs = [s for s in specs if s.program == "churn"]
        strace = shutil.which("strace")
        if strace is None and not a.list:
            print("error: --syscalls needs strace (apt-get install strace; bench/run.sh "
                  "installs it when run as root)", file=sys.stderr)
            return 2
    elif not a.only:
        specs = [s for s in specs if a.mode in s.modes]

    if a.list:
        print("benchmarks:")
        for s in (specs if a.special else all_specs):
            when = ("" if a.special else
                    " (only with --only; --syscalls)" if not s.modes else
                    " (full mode, or with --only)" if s.modes == ("full",) else "")
            print(f"  {s.name:<14} bench_{s.program:<14} {s.paper}{when}")
        print("allocators:")
        for name in KNOWN_ALLOCATORS:
            al = found[name]
            env = "".join(f" {k}={v}" for k, v in al.env.items())
            print(f"  {name:<16} " + (al.note if al.note else
                                      (rel(al.lib) if al.kind == "rill" else
                                       al.lib.name if al.lib else "no preload") + env))
        return 0

    if a.only:
        wanted = [w.strip() for w in a.only.split(",") if w.strip()]
        known = {s.name for s in specs} | {s.program for s in specs}
        if a.special == "hugepages":
            known = {"sizes", "locality"} | set(HUGE_IDLE)
        bad = [w for w in wanted if w not in known]
        if bad:
            print(f"error: unknown benchmark(s) {', '.join(bad)}; known: "
                  f"{', '.join(s.name for s in specs)}", file=sys.stderr)
            return 2
        specs = [s for s in specs if s.name in wanted or s.program in wanted]

    if a.allocators:
        names = [w.strip() for w in a.allocators.split(",") if w.strip()]
    elif a.special == "soak":
        names = ALL_ALLOCATORS
    elif a.special == "hugepages":
        names = HUGEPAGE_ALLOCATORS
    else:
        names = ALL_ALLOCATORS if a.mode == "full" else QUICK_ALLOCATORS
        if a.special == "syscalls":
            names = names[:1] + ["rill-purge0"] + names[1:]
    bad = [n for n in names if n not in found]
    if bad:
        print(f"error: unknown allocator(s) {', '.join(bad)}; known: "
              f"{', '.join(KNOWN_ALLOCATORS)}", file=sys.stderr)
        return 2
    allocs = [found[n] for n in names if found[n].available]
    skipped = [found[n] for n in names if not found[n].available]
    for al in skipped:
        print(f"note: skipping {al.name}: {al.note}", flush=True)
    if a.require_rill and any(al.kind == "rill" for al in skipped):
        print("error: a requested rill library is missing (--require-rill)", file=sys.stderr)
        return 3
    if not allocs:
        print("error: no allocator to run", file=sys.stderr)
        return 2

    want_callgrind = not a.special and (not a.only or any(s.program == "lifo" for s in specs))
    missing = [s.program for s in specs if not (a.bench_dir / f"bench_{s.program}").is_file()]
    if not h.launcher.is_file():
        missing.append("launch")
    if want_callgrind and not a.no_callgrind and not (a.bench_dir / "bench_lifo").is_file():
        missing.append("lifo")
    if missing:
        print(f"error: benchmark programs not built in {rel(a.bench_dir)}: "
              f"{', '.join(sorted(set(missing)))} (run bench/run.sh, or cmake --build build)",
              file=sys.stderr)
        return 2

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = a.out or (BENCH_DIR / "results" / stamp)
    outdir.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    info["started"] = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    print(f"rill benchmarks, {a.mode_label} mode: {len(specs)} benchmarks, allocators "
          f"{', '.join(al.name for al in allocs)}, threads "
          f"{','.join(map(str, a.thread_counts))}, {a.reps} repetition(s)", flush=True)
    if a.special == "soak":
        runs = len(allocs) * len(a.thread_counts) * a.reps
        print(f"soak: {runs} run(s) of {a.soak:g} s: about {runs * a.soak / 60:.0f} min",
              flush=True)
    if a.special == "hugepages":
        print(f"transparent huge pages: enabled [{info['thp_enabled']}], defrag "
              f"[{info['thp_defrag']}]" + ("; THP is off, so rill-thp cannot differ from rill"
                                          if info["thp_enabled"] == "never" else ""),
              flush=True)
    t_start = time.monotonic()

    try:
        run_suite(h, specs, allocs, a.thread_counts, a.bench_dir)
        if strace is not None:
            run_suite(h, specs, allocs, a.thread_counts, a.bench_dir, strace=strace)
        skip = ("skipped (lifo not selected with --only)" if not a.special
                else f"skipped (--{a.special} mode)")
        cg = run_callgrind(h, allocs, a.bench_dir) if want_callgrind else {
            "note": skip, "rows": {}, "n1": 0, "n2": 0}
    except KeyboardInterrupt:
        print("interrupted; writing what was measured", file=sys.stderr)
        cg = {"note": "interrupted", "rows": {}, "n1": 0, "n2": 0}
        h.fatal.append("interrupted")
    info["loadavg_end"] = os.getloadavg()[0]
    info["elapsed_s"] = round(time.monotonic() - t_start, 1)

    (outdir / "results.json").write_text(json.dumps(h.records, indent=1) + "\n")
    if a.no_charts:
        charts, chart_note = [], "Charts skipped (--no-charts)."
    else:
        try:
            charts, chart_note = make_charts(outdir, h, specs, allocs, a.thread_counts)
        except Exception as e:  # a broken plot must not lose the results
            charts, chart_note = [], f"Chart drawing failed: {e!r}"
    again = recheck_cells(h, allocs, outdir) if a.recheck and not h.fatal else None
    text = write_summary(outdir / "summary.md", h, specs, allocs, skipped, a.thread_counts, info,
                         cg, charts, chart_note, again)
    (outdir / "machine.json").write_text(json.dumps(info, indent=1) + "\n")

    if a.out is None:  # keep a copy that does not move, for the docs
        latest = BENCH_DIR / "results" / "latest"
        shutil.rmtree(latest, ignore_errors=True)
        shutil.copytree(outdir, latest)

    print()
    print(text)
    print(f"results: {rel(outdir)} ({info['elapsed_s']} s)")
    if h.fatal:
        print("FAILED: " + "; ".join(h.fatal[:10]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
