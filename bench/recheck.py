#!/usr/bin/env python3
"""Measures again, side by side, the cells of a run where rill misses a
target: the time cells at 1 and 2 threads where rill's median is above the
best peer's, and every cell over 1.25x the best peer. Each such cell runs
rill and that peer alternately, in pairs whose order swaps every other
pair, and reports the median of the per-pair ratios: a host whose speed
drifts over a 90-minute run (another job, a neighbour on the host) moves a
cell's medians apart, while a pair run back to back sees the same host.

    python3 bench/recheck.py [RESULTS_DIR] [--pairs N] [--budget SECONDS]

RESULTS_DIR defaults to the newest full run under bench/results. The
section is printed and written to RESULTS_DIR/recheck.md; a full run of
run.py does the same at its end and appends the section to its summary.
"""
import argparse
import datetime as dt
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import publish  # noqa: E402  (which run is the newest full one)
import run  # noqa: E402  (the suite's own allocators, launcher and measurement)

TARGET_THREADS = (1, 2)
OVER = 1.25  # the suite issue's bound on any cell against the best peer


@dataclass
class Cell:
    benchmark: str
    program: str
    args: list
    threads: int
    x: Optional[str]
    metric: str
    unit: str
    peer: str
    factor: float  # rill against the peer in the run: over 1 means rill is behind
    bound: float  # the target the cell missed: 1.00 or OVER
    wall_s: float  # median wall time of one run of the two, for the budget
    pairs: list = field(default_factory=list)  # (rill value, peer value, factor)
    failed: str = ""

    @property
    def label(self) -> str:
        return f"{self.benchmark} {self.x}" if self.x else f"{self.benchmark} {self.threads} thr"


def factor(metric: str, mine: float, theirs: float) -> float:
    """rill against a peer, over 1 when rill is behind, as the summary's tables."""
    a, b = run.rank_value(metric, mine), run.rank_value(metric, theirs)
    return b / a if metric in run.HIGHER_IS_BETTER else a / b


def flagged(records: list[dict]) -> list[Cell]:
    """The cells where rill's median misses a target against the best peer."""
    groups: dict = {}
    for r in records:
        if (r["status"] != "ok" or r["value"] is None or r["value"] <= 0
                or "callgrind" in r["benchmark"] or r["benchmark"].endswith("-syscalls")):
            continue
        key = (r["benchmark"], r["threads"], r["x"])
        groups.setdefault(key, {}).setdefault(r["allocator"], []).append(r)
    cells = []
    for (bench, threads, x), by in groups.items():
        if "rill" not in by:
            continue
        med = {n: statistics.median(q["value"] for q in rs) for n, rs in by.items()}
        some = by["rill"][0]
        metric = some["metric"]
        peers = {n: v for n, v in med.items() if not n.startswith("rill")}
        if not peers:
            continue
        higher = metric in run.HIGHER_IS_BETTER
        ranked = {n: run.rank_value(metric, v) for n, v in peers.items()}
        best = max(ranked, key=ranked.get) if higher else min(ranked, key=ranked.get)
        f = factor(metric, med["rill"], peers[best])
        target = bench in run.TIME_TARGETS and x is None and threads in TARGET_THREADS
        bound = 1.0 if target else OVER
        if f <= bound:
            continue
        walls = [q["wall_s"] for q in by["rill"] + by[best] if q.get("wall_s")]
        cells.append(Cell(bench, some["program"], some["params"]["args"].split(), threads, x,
                          metric, some["unit"], best, f, bound,
                          statistics.median(walls) if walls else 1.0))
    return sorted(cells, key=lambda c: (c.benchmark, c.threads, c.x or ""))


def measure(cells: list[Cell], launcher: Path, bench_dir: Path, found: dict, pairs: int,
            budget: float, log=print) -> None:
    """Runs each cell's pairs; a cell whose pairs would take longer than the
    budget, or whose allocator is missing now, is left with a reason."""
    for c in cells:
        rill, peer = found.get("rill"), found.get(c.peer)
        if rill is None or not rill.available or peer is None or not peer.available:
            c.failed = f"{'rill' if rill is None or not rill.available else c.peer} unavailable"
            continue
        if c.wall_s * 2 * pairs > budget:
            c.failed = f"skipped: {2 * pairs} runs of {c.wall_s:.1f} s exceed the budget"
            continue
        cmd = [str(bench_dir / c.program), "-t", str(c.threads)] + c.args
        timeout = max(60.0, 10 * c.wall_s)
        for i in range(pairs):
            order = (rill, peer) if i % 2 == 0 else (peer, rill)
            got = {}
            for a in order:
                o = run.run_measured(launcher, cmd, a, timeout)
                if o.status != "ok":
                    c.failed = f"{a.name}: {o.status} ({o.error})"
                    break
                got[a.name] = run.num(o.result.get("value"))
            if c.failed:
                break
            f = factor(c.metric, got["rill"], got[c.peer])
            c.pairs.append((got["rill"], got[c.peer], f))
            log(f"recheck {c.label:<28} pair {i + 1}/{pairs}: rill "
                f"{run.fmt_value(got['rill'], c.unit)}, {c.peer} "
                f"{run.fmt_value(got[c.peer], c.unit)} ({f:.2f}x)")


def section(cells: list[Cell], pairs: int, when: str = "") -> list[str]:
    """The report; `when` says when and at which commit the pairs ran."""
    L = ["## Rechecked side by side", ""]
    if not cells:
        return L + ["No cell missed a target, so none was measured again.", ""]
    L += [f"Each cell that missed a target (time at 1 and 2 threads over the best peer's, "
          f"or any cell over {OVER:.2f}x) run again: rill and that peer alternately, "
          f"{pairs} pairs, the order swapped every other pair"
          + (f" ({when})" if when else "") + ". \"pairs\" is the median of "
          "the per-pair ratios, over 1.00x when rill is behind; a cell is still missed when "
          "it is over the target.", ""]
    rows, still = [], 0
    for c in cells:
        if not c.pairs:
            rows.append([c.label, c.peer, f"{c.factor:.2f}x", "-", "-", "-", c.failed or "-"])
            continue
        fs = [p[2] for p in c.pairs]
        med = statistics.median(fs)
        missed = med > c.bound
        still += missed
        verdict = (f"missed (> {c.bound:.2f}x)" if missed else f"met (<= {c.bound:.2f}x)")
        if c.failed:
            verdict += f"; stopped: {c.failed}"
        rows.append([c.label, c.peer, f"{c.factor:.2f}x",
                     run.fmt_value(statistics.median(p[0] for p in c.pairs), c.unit),
                     run.fmt_value(statistics.median(p[1] for p in c.pairs), c.unit),
                     f"{med:.2f}x ({min(fs):.2f}-{max(fs):.2f})", verdict])
    L += run.md_table(["cell", "best peer", "in the run", "rill", "peer", "pairs", "side by side"],
                      rows)
    measured = sum(1 for c in cells if c.pairs)
    L += ["", f"Still missed side by side: {still} of {measured} cell(s) measured again.", ""]
    return L


def stamp(run_dir: Path, build_dir: Path, now: Optional[dt.datetime] = None) -> str:
    """When the pairs ran, and with which rill: the host's speed may differ
    from the run's, and rill's build may be newer. A library last built
    before the run began is the run's, whatever the checkout holds now (the
    commit checked out named a library it was not, after a session went on
    committing while its full run ran)."""
    when = (now or dt.datetime.now()).strftime('%Y-%m-%d %H:%M')
    try:
        info = json.loads((run_dir / "machine.json").read_text())
        began = dt.datetime.strptime(info["started"], "%Y-%m-%d %H:%M")
        built = dt.datetime.fromtimestamp((build_dir / "librill.so").stat().st_mtime)
        if built < began + dt.timedelta(minutes=1):  # "started" is to the minute
            return f"{when}, the run's library, commit {info['commit']}"
    except (OSError, KeyError, ValueError):
        pass
    return f"{when}, rill built since the run, commit {run.machine_info()['commit']} checked out"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", type=Path, help="a results directory (default: newest full)")
    p.add_argument("--pairs", type=int, default=5, help="pairs per cell (5)")
    p.add_argument("--budget", type=float, default=180.0,
                   help="seconds a cell's pairs may take, from the run's wall times (180)")
    p.add_argument("--build-dir", type=Path, default=run.REPO_DIR / "build")
    p.add_argument("--bench-dir", type=Path, help="the bench_* programs (BUILD_DIR/bench)")
    a = p.parse_args(argv)
    if a.pairs < 1:
        p.error("--pairs must be at least 1")
    d = a.dir or publish.newest_results()
    records = json.loads((d / "results.json").read_text())
    bench_dir = a.bench_dir or a.build_dir / "bench"
    launcher = bench_dir / "bench_launch"
    if not launcher.is_file():
        sys.exit(f"recheck: {run.rel(launcher)} is missing; build the benchmarks first")
    cells = flagged(records)
    print(f"recheck: {d.name}: {len(cells)} cell(s) missed a target", flush=True)
    measure(cells, launcher, bench_dir, run.discover_allocators(a.build_dir), a.pairs, a.budget)
    text = "\n".join(section(cells, a.pairs, stamp(d, a.build_dir))) + "\n"
    (d / "recheck.md").write_text(text)
    print()
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
