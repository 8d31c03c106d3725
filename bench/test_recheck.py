#!/usr/bin/env python3
"""Checks bench/recheck.py's choice of cells and its report on made-up
records (no program runs): which cells missed a target, against which
peer, and how the side-by-side pairs are judged. .ci/run runs it."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recheck  # noqa: E402


def rec(bench, alloc, value, threads=1, metric="time_s", unit="s", x=None, status="ok"):
    return {"benchmark": bench, "program": f"bench_{bench}", "params": {"args": "-n 10"},
            "x": x, "threads": threads, "allocator": alloc, "metric": metric, "unit": unit,
            "value": value, "status": status, "wall_s": 0.5}


def cells_of(records):
    return {(c.benchmark, c.threads, c.x): c for c in recheck.flagged(records)}


class Flagged(unittest.TestCase):
    def test_time_target_at_one_and_two_threads(self):
        rs = [rec("shbench", "rill", 1.02), rec("shbench", "mimalloc", 1.00),
              rec("shbench", "glibc", 3.0),
              rec("shbench", "rill", 1.20, threads=4), rec("shbench", "mimalloc", 1.0, threads=4)]
        got = cells_of(rs)
        self.assertEqual(list(got), [("shbench", 1, None)])  # 1.20x at 4 threads is no target
        c = got[("shbench", 1, None)]
        self.assertEqual((c.peer, c.bound), ("mimalloc", 1.0))
        self.assertAlmostEqual(c.factor, 1.02)

    def test_any_cell_over_the_bound_and_medians(self):
        rs = [rec("sizes", "rill", v, x="16 KiB") for v in (1.3, 1.4, 9.0)]  # median 1.4
        rs += [rec("sizes", "tcmalloc", v, x="16 KiB") for v in (1.0, 1.0, 0.1)]  # median 1.0
        rs += [rec("sizes", "rill", 1.2, x="32 KiB"), rec("sizes", "tcmalloc", 1.0, x="32 KiB")]
        got = cells_of(rs)
        self.assertEqual(list(got), [("sizes", 1, "16 KiB")])
        self.assertAlmostEqual(got[("sizes", 1, "16 KiB")].factor, 1.4)

    def test_throughput_is_inverted(self):
        rs = [rec("larson", "rill", 70.0, metric="ops_per_s", unit="ops/s"),
              rec("larson", "tcmalloc", 100.0, metric="ops_per_s", unit="ops/s"),
              rec("larson", "rill", 130.0, threads=2, metric="ops_per_s", unit="ops/s"),
              rec("larson", "tcmalloc", 100.0, threads=2, metric="ops_per_s", unit="ops/s")]
        got = cells_of(rs)
        self.assertEqual(list(got), [("larson", 1, None)])
        self.assertAlmostEqual(got[("larson", 1, None)].factor, 100 / 70)

    def test_rill_variants_failures_and_callgrind_are_not_peers(self):
        rs = [rec("threadtest", "rill", 2.0), rec("threadtest", "rill-hashed", 1.0),
              rec("threadtest", "jemalloc", 0.5, status="crashed"),
              rec("threadtest", "glibc", 1.9),
              rec("lifo-callgrind", "rill", 90.0, metric="instructions_per_pair"),
              rec("lifo-callgrind", "mimalloc", 60.0, metric="instructions_per_pair")]
        got = cells_of(rs)
        self.assertEqual(list(got), [("threadtest", 1, None)])
        self.assertEqual(got[("threadtest", 1, None)].peer, "glibc")

    def test_growth_ratios_rank_from_one(self):
        # under 1.00 counts as 1.00 (run.rank_value), so 0.90 is no better than 1.00
        rs = [rec("mstress", "rill", 1.00, metric="rss_growth", unit="x"),
              rec("mstress", "glibc", 0.60, metric="rss_growth", unit="x")]
        self.assertEqual(cells_of(rs), {})


class Section(unittest.TestCase):
    def cell(self, pairs, bound=1.25):
        c = recheck.Cell("randalloc", "bench_randalloc", [], 1, None, "time_s", "s", "tcmalloc",
                         1.4, bound, 0.5)
        c.pairs = pairs
        return c

    def test_verdicts(self):
        still = self.cell([(1.5, 1.0, 1.5), (1.4, 1.0, 1.4), (1.1, 1.0, 1.1)])
        gone = self.cell([(1.0, 1.0, 1.0), (1.3, 1.0, 1.3), (0.9, 1.0, 0.9)])
        skipped = self.cell([])
        skipped.failed = "tcmalloc unavailable"
        text = "\n".join(recheck.section([still, gone, skipped], 3))
        self.assertIn("1.40x (1.10-1.50) | missed (> 1.25x)", text)
        self.assertIn("1.00x (0.90-1.30) | met (<= 1.25x)", text)
        self.assertIn("tcmalloc unavailable", text)
        self.assertIn("Still missed side by side: 1 of 2 cell(s)", text)

    def test_nothing_missed(self):
        self.assertIn("No cell missed a target", "\n".join(recheck.section([], 5)))


class Stamp(unittest.TestCase):
    def test_library_of_the_run_or_newer(self):
        import datetime as dt
        import json
        import os
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            d, b = Path(tmp) / "run", Path(tmp) / "build"
            d.mkdir()
            b.mkdir()
            (d / "machine.json").write_text(json.dumps({"started": "2026-12-01 10:10",
                                                        "commit": "abc1234"}))
            lib = b / "librill.so"
            lib.write_text("")
            at = dt.datetime(2026, 12, 1, 10, 9, 50).timestamp()
            os.utime(lib, (at, at))
            now = dt.datetime(2026, 12, 1, 11, 29)
            self.assertEqual(recheck.stamp(d, b, now),
                             "2026-12-01 11:29, the run's library, commit abc1234")
            at = dt.datetime(2026, 12, 1, 10, 40).timestamp()  # rebuilt during the run
            os.utime(lib, (at, at))
            self.assertIn("rill built since the run", recheck.stamp(d, b, now))


class RunPath(unittest.TestCase):
    """run.py's own call into this module, as a full run makes it (a full run
    once crashed here after stamp() took new arguments; quick mode never calls it)."""

    def test_recheck_cells_writes_the_section(self):
        import tempfile
        from types import SimpleNamespace as NS
        import run
        with tempfile.TemporaryDirectory() as tmp:
            out, build = Path(tmp) / "run", Path(tmp) / "build"
            out.mkdir()
            build.mkdir()
            args = NS(recheck=3, recheck_budget=0.1, bench_dir=build / "bench", build_dir=build)
            h = NS(args=args, launcher=build / "bench" / "bench_launch",
                   records=[rec("shbench", "rill", 1.2), rec("shbench", "jemalloc", 1.0)])
            allocs = [NS(name="rill", available=True), NS(name="jemalloc", available=True)]
            text = run.recheck_cells(h, allocs, out)  # the budget skips the pairs
            self.assertEqual(text, (out / "recheck.md").read_text())
            self.assertIn("| shbench", text)
            self.assertIn("exceed the budget", text)
            self.assertIn("rill built since the run", text)  # no machine.json, no library


class ChartRates(unittest.TestCase):
    """The speedup charts divide rates: a time with no count of operations
    (fork's us a fork) counts as its inverse. Its chart was empty before."""

    def test_time_without_ops_gives_a_rate(self):
        from types import SimpleNamespace as NS
        import run
        spec = NS(kind="threads", name="fork")
        rs = [dict(rec("fork", a, v, metric="us_per_fork", unit="us"), ops=None,
                   fragmentation=None, live_peak_bytes=None, peak_rss_kib=2000)
              for a, v in (("rill", 400.0), ("glibc", 200.0))]
        med = run.medians(rs, spec, [NS(name="rill"), NS(name="glibc")], [1])
        self.assertAlmostEqual(med[("glibc", 1)]["throughput"] / med[("rill", 1)]["throughput"], 2.0)
        ops = dict(rec("shbench", "rill", 2.0), ops=1000, fragmentation=None,
                   live_peak_bytes=None, peak_rss_kib=2000)
        med = run.medians([ops], NS(kind="threads", name="shbench"), [NS(name="rill")], [1])
        self.assertAlmostEqual(med[("rill", 1)]["throughput"], 500.0)


class ForkSection(unittest.TestCase):
    """The report's fork table: bench_fork's own readings, medians per
    allocator and thread count; none when the runs had no such fields."""

    def test_medians_of_the_fields(self):
        from types import SimpleNamespace as NS
        import run

        def fork(alloc, us, parent, child, threads=1):
            r = rec("fork", alloc, us, threads=threads, metric="us_per_fork", unit="us")
            r["params"].update(parent_faults=str(parent), child_faults=str(child),
                               rss_anon_kib="800", vm_pte_kib="88", mappings="45")
            return r
        recs = [fork("rill", 400.0, 9.0, 52.0), fork("rill", 500.0, 14.0, 50.0),
                fork("rill", 450.0, 10.0, 54.0), fork("glibc", 300.0, 2.0, 30.0),
                fork("glibc", 900.0, 2.0, 30.0, threads=4)]
        h = NS(records=recs)
        text = "\n".join(run.fork_section(h, [NS(name="rill"), NS(name="glibc")]))
        self.assertIn("| rill | 1 | 450 us | 10.0 | 52.0 | 800 | 88 | 45 |", text)
        self.assertIn("| glibc | 4 | 900 us | 2.0 | 30.0 |", text)
        self.assertLess(text.index("| glibc | 1 |"), text.index("| glibc | 4 |"))
        for r in recs:
            for k in ("parent_faults", "child_faults"):
                del r["params"][k]
        self.assertEqual(run.fork_section(h, [NS(name="rill")]), [])


if __name__ == "__main__":
    unittest.main()
