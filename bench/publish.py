#!/usr/bin/env python3
"""Publishes a full run of the suite in docs/: the results directory's
summary, charts and machine facts go to docs/benchmarks/, its records
gzipped, and the summary replaces the section "## The run" at the end of
docs/benchmarks.md (its headings one level down, its images under
benchmarks/). The hand-written sections above it are left alone.

    python3 bench/publish.py [RESULTS_DIR]   (default: the newest under bench/results)
"""
import gzip
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
OUT = DOCS / "benchmarks"
SECTION = "## The run"


def is_full(summary):
    with open(summary) as f:
        return "(full mode)" in f.readline()


def newest_results():
    """The newest full run: the timestamped directories only (`latest` is a
    copy of the last run of any mode, `real-*` the real programs')."""
    runs = sorted(p for p in (REPO / "bench" / "results").glob("*")
                  if re.fullmatch(r"\d{8}-\d{6}", p.name) and (p / "summary.md").is_file()
                  and is_full(p / "summary.md"))
    if not runs:
        sys.exit("publish: no full run under bench/results; run bench/run.sh --full")
    return runs[-1]


def section_text(summary):
    """The summary as a section of benchmarks.md: its title becomes SECTION,
    every heading goes one level down, and images point into benchmarks/."""
    lines = summary.splitlines()
    if not lines or not lines[0].startswith("# "):
        sys.exit("publish: summary.md does not open with a level-one heading")
    out = [SECTION]
    for line in lines[1:]:
        if line.startswith("#"):
            line = "#" + line
        line = re.sub(r"!\[([^\]]*)\]\((?!benchmarks/)([^)]+\.png)\)", r"![\1](benchmarks/\2)", line)
        out.append(line)
    return "\n".join(out).rstrip("\n") + "\n"


def main():
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else newest_results()
    summary = src / "summary.md"
    if not summary.is_file():
        sys.exit(f"publish: {summary} is missing; did the run finish?")
    if not is_full(summary):
        sys.exit("publish: this is not a full-mode run; benchmarks.md shows full runs only")
    text = summary.read_text()
    doc = (DOCS / "benchmarks.md").read_text()
    at = doc.find("\n" + SECTION + "\n")
    if at < 0:
        sys.exit(f"publish: docs/benchmarks.md has no section '{SECTION}'")
    OUT.mkdir(exist_ok=True)
    charts = sorted(src.glob("*.png"))
    for png in charts:
        shutil.copy2(png, OUT / png.name)
    for name in ("summary.md", "machine.json", "recheck.md"):
        if (src / name).is_file():
            shutil.copy2(src / name, OUT / name)
    records = src / "results.json"
    if records.is_file():
        # no time stamp in the gzip header: the file changes only with the records
        with open(records, "rb") as f, open(OUT / "results.json.gz", "wb") as raw, \
                gzip.GzipFile("", "wb", 9, raw, mtime=0) as g:
            shutil.copyfileobj(f, g)
    (DOCS / "benchmarks.md").write_text(doc[: at + 1] + section_text(text))
    print(f"publish: {src.name}: {len(charts)} charts, summary and records in docs/benchmarks/;")
    print("publish: refresh 'How this was measured' and 'Where rill stands' by hand")


if __name__ == "__main__":
    main()
