#!/usr/bin/env python3
"""Runs the rill benchmark suite against several allocators and summarises it.

Every benchmark is a plain program; the allocator under test is swapped in with
LD_PRELOAD. Each run is started through bench_launch, which reports the run's
wait4 resource usage (wall, user and sys time, peak RSS, faults; see launch.c
for why not os.wait4 here), and the program's own RESULT line supplies its
metric. Results go to bench/results/<timestamp>/: results.json, summary.md,
charts, and a copy in bench/results/latest/.

Exit status: 0 if the suite ran (peers may have failed), 1 if rill or the C
library's allocator failed a run (the latter means a benchmark is broken),
2 on a harness error, 3 if --require-rill was given and a rill library is missing.
"""

from __future__ import annotations

import argparse
import datetime as dt
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
ALL_ALLOCATORS = [n for n, _ in RILL_LIBS] + ["glibc"] + [n for n, _, _ in PEERS]
QUICK_ALLOCATORS = ["rill", "glibc"] + [n for n, _, _ in PEERS]


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
    found["glibc"] = Allocator("glibc", "system")
    dirs = library_dirs()
    for name, fname, pkg in PEERS:
        lib = next((d / fname for d in dirs if (d / fname).exists()), None)
        a = Allocator(name, "peer", lib=lib, package=pkg)
        if lib is None:
            a.note = f"{fname} not found; apt-get install {pkg}"
        found[name] = a
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


def suite(mode: str, sweep_threads: int) -> list[Spec]:
    """The benchmarks and their parameters per mode. Full runs take from a tenth
    of a second to about a second each on one thread; quick ones, tens of
    milliseconds (enough to show that every combination works)."""
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
        Spec("knary", "knary", ["-d", pick("8", "9"), "-k", "5", "-w", "20", "-r", pick("4", "30")],
             "Streamflow sec. 4.2.2"),
        Spec("lifo", "lifo", ["-n", pick("5000000", "50000000")], "fast-path cost (Hoard sec. 5)",
             threads=[1]),
        Spec("sizes", "sizes", ["-c", pick("10", "100"), "-b", pick("4M", "16M")],
             "scalloc sec. 7.5", kind="sweep", threads=[sweep_threads],
             points=size_points(range(4, 21, 4) if q else range(4, 21, 2)),
             xlabel="object size interval"),
        Spec("locality", "locality", ["-n", pick("300000", "2000000"), "-p", "5"],
             "scalloc sec. 7.6", kind="sweep", threads=[1],
             points=[(f"{p}%", ["-l", str(p)])
                     for p in ((0, 50, 100) if q else (0, 20, 40, 60, 80, 100))],
             xlabel="share of nodes in lists (allocation order)"),
    ]


HIGHER_IS_BETTER = {"ops_per_s"}

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


def run_measured(launcher: Path, cmd: list[str], alloc: Allocator, timeout: float) -> Outcome:
    """Runs cmd through the launcher (which forks it, preloads the allocator
    into it alone and reports its wait4 resource usage), in a process group of
    its own that is killed after timeout seconds."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    with tempfile.TemporaryDirectory(prefix="rill-bench-") as tmp:
        report = Path(tmp) / "rusage"
        full = [str(launcher), "-o", str(report)]
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
    if usage:
        return Outcome(st, result or {}, float(usage["wall_s"]), float(usage["user_s"]),
                       float(usage["sys_s"]), int(usage["maxrss_kib"]), int(usage["minflt"]),
                       int(usage["majflt"]), stdout, stderr, error,
                       int(usage["nvcsw"]), int(usage["nivcsw"]))
    # killed, or the launcher itself failed: only the wall time is known
    return Outcome(st, result or {}, wall, None, None, None, None, None, stdout, stderr, error)


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
              bench_dir: Path) -> None:
    a = h.args
    plan = []  # (rep, spec, threads, label, args)
    for rep in range(a.reps):
        for spec in specs:
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
            o = run_measured(h.launcher, cmd, alloc, a.timeout)
            rec = make_record(spec, t, label, pargs, alloc, rep, o)
            h.records.append(rec)
            where = f"{spec.name}" + (f" [{label}]" if label else "")
            if o.status == "ok":
                msg = (f"{fmt_value(rec['value'], rec['unit']):>12}  "
                       f"rss {fmt_mib(o.peak_rss_kib):>7} MiB  {o.wall_s:6.2f} s")
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
    }


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
            "params": {"n1": info["n1"], "n2": info["n2"]}, "x": None, "threads": 1,
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
                elif r["ops"] and r["value"] > 0:
                    thr.append(r["ops"] / r["value"])
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
        higher = next(iter(cells.values()))["metric"] in HIGHER_IS_BETTER
        vals = {n: c["value"] for n, c in cells.items() if c["value"] > 0}
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
            "commit": commit or "none", "loadavg_start": os.getloadavg()[0]}


def write_summary(path: Path, h: Harness, specs, allocs, skipped, thread_counts, info, cg,
                  charts: list[str], chart_note: str) -> str:
    a = h.args
    L = [f"# rill benchmark summary ({a.mode} mode)", ""]
    L.append(f"Run {info['started']} on {info['cpus']} CPUs ({info['cpu'] or info['machine']}), "
             f"Linux {info['kernel']}, commit {info['commit']}; {a.reps} repetition(s), "
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
    for spec in specs:
        keys = column_keys(spec, thread_counts)
        med = medians(h.records, spec, allocs, keys)
        if not any("value" in c for c in med.values()):
            continue
        rl = relative(med, allocs, keys)
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
        L.append(f"`bench_{spec.program} {' '.join(spec.args)}`{at} - {first['metric']} "
                 f"({better} is better); after {spec.paper}.")
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
                rows.append([al.name, str(r["ir_n1"]), str(r["ir_n2"]), f"{r['per_pair']:.1f}"])
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
          "mimalloc": "#9467bd", "tbbmalloc": "#8c564b"}


def make_charts(outdir: Path, h: Harness, specs, allocs, thread_counts) -> tuple[list[str], str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
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

    def draw_threads(ax_s, ax_m, spec):
        keys = column_keys(spec, thread_counts)
        for name, pts in speedups(spec, keys).items():
            ax_s.plot([k for k, _ in pts], [v for _, v in pts], **style(ax_s, name))
        for name, pts in series(spec, keys, "rss_kib").items():
            ax_m.plot([k for k, _ in pts], [v / 1024 for _, v in pts], **style(ax_m, name))
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
        for name, pts in series(spec, keys, "rss_kib").items():
            ax_m.plot([keys.index(k) for k, _ in pts], [v / 1024 for _, v in pts],
                      **style(ax_m, name))
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
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
        (draw_sweep if spec.kind == "sweep" else draw_threads)(ax1, ax2, spec)
        ax1.legend(fontsize=8)
        fig.tight_layout()
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
                ax.set_xscale("log", base=2)
                ax.set_xticks(keys)
                ax.set_xticklabels([str(k) for k in keys])
                ax.set_title(spec.name, fontsize=10)
                ax.grid(True, alpha=0.3)
                if i % cols == 0:
                    ax.set_ylabel("speedup" if what == "speedup" else "peak RSS (MiB)")
            for j in range(n, rows_ * cols):
                axes[j // cols][j % cols].axis("off")
            handles, labels = axes[0][0].get_legend_handles_labels()
            fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
            fig.tight_layout(rect=(0, 0.05, 1, 1))
            fig.savefig(outdir / fname, dpi=100)
            plt.close(fig)
            files.append(fname)
    return files, ""


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
    p.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    p.add_argument("--no-rill", metavar="REASON", help="leave out the rill libraries, "
                   "giving the reason (run.sh uses it when the project did not build, so "
                   "that a stale library is not measured)")
    p.add_argument("--require-rill", action="store_true",
                   help="fail (exit 3) if a requested rill library is missing")
    p.add_argument("--list", action="store_true", help="list benchmarks and allocators, then exit")
    a = p.parse_args(argv)
    full = a.mode == "full"
    a.thread_counts = ([int(x) for x in a.threads.split(",")] if a.threads
                       else [1, 2, 4, 8, 16] if full else [1, 2])
    if any(t < 1 or t > 256 for t in a.thread_counts):
        p.error("thread counts must be 1..256")
    a.thread_counts = sorted(set(a.thread_counts))
    a.reps = a.reps if a.reps is not None else (5 if full else 1)
    if a.reps < 1:
        p.error("--reps must be at least 1")
    a.timeout = a.timeout if a.timeout is not None else (120.0 if full else 30.0)
    a.callgrind_pairs = (100000, 1100000) if full else (20000, 220000)
    a.bench_dir = a.bench_dir or (a.build_dir / "bench")
    return a


def main(argv=None) -> int:
    a = parse_args(argv if argv is not None else sys.argv[1:])
    h = Harness(a, a.bench_dir / "bench_launch")
    sweep_threads = max(1, min(os.cpu_count() or 1, max(a.thread_counts)))
    specs = suite(a.mode, sweep_threads)
    found = discover_allocators(a.build_dir)
    if a.no_rill:
        for name, _ in RILL_LIBS:
            found[name].note = f"left out: {a.no_rill}"

    if a.list:
        print("benchmarks:")
        for s in specs:
            print(f"  {s.name:<14} bench_{s.program:<14} {s.paper}")
        print("allocators:")
        for name in ALL_ALLOCATORS:
            al = found[name]
            print(f"  {name:<16} " + (al.note if al.note else
                                      (rel(al.lib) if al.kind == "rill" else
                                       al.lib.name if al.lib else "no preload")))
        return 0

    if a.only:
        wanted = [w.strip() for w in a.only.split(",") if w.strip()]
        known = {s.name for s in specs} | {s.program for s in specs}
        bad = [w for w in wanted if w not in known]
        if bad:
            print(f"error: unknown benchmark(s) {', '.join(bad)}; known: "
                  f"{', '.join(s.name for s in specs)}", file=sys.stderr)
            return 2
        specs = [s for s in specs if s.name in wanted or s.program in wanted]

    names = ([w.strip() for w in a.allocators.split(",") if w.strip()] if a.allocators
             else (ALL_ALLOCATORS if a.mode == "full" else QUICK_ALLOCATORS))
    bad = [n for n in names if n not in found]
    if bad:
        print(f"error: unknown allocator(s) {', '.join(bad)}; known: {', '.join(ALL_ALLOCATORS)}",
              file=sys.stderr)
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

    want_callgrind = not a.only or any(s.program == "lifo" for s in specs)
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
    print(f"rill benchmarks, {a.mode} mode: {len(specs)} benchmarks, allocators "
          f"{', '.join(al.name for al in allocs)}, threads "
          f"{','.join(map(str, a.thread_counts))}, {a.reps} repetition(s)", flush=True)
    t_start = time.monotonic()

    try:
        run_suite(h, specs, allocs, a.thread_counts, a.bench_dir)
        cg = run_callgrind(h, allocs, a.bench_dir) if want_callgrind else {
            "note": "skipped (lifo not selected with --only)", "rows": {}, "n1": 0, "n2": 0}
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
    text = write_summary(outdir / "summary.md", h, specs, allocs, skipped, a.thread_counts, info,
                         cg, charts, chart_note)
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
