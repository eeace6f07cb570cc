#!/usr/bin/env python3
"""Compares two builds' op benchmarks run on the same GPU in the same session.

    bench_compare.py --before DIR [DIR ...] --after DIR [DIR ...] [--limit PCT]

Each DIR holds a `bench_ours.csv` written by candle-hip's `bench` example.
Runs of one build are combined by taking each case's fastest time (the
least disturbed sample of the same work); alternating the builds' runs
(before, after, before, after) spreads clock and thermal drift over both.
Prints a Markdown table of every case with a time on both sides, the change
in percent (positive: the after build is slower) and a closing line with the
cases slower by more than --limit percent (default 3). Exits 0 either way:
the table is the result.
"""

import argparse
import csv
import math
import sys
from pathlib import Path


def load(directory):
    """Maps (family, op, shape, dtype) to the time in microseconds."""
    path = Path(directory) / "bench_ours.csv"
    times = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            value = row.get("ours_us") or ""
            if not value or row.get("error"):
                continue
            key = (row["family"], row["op"], row["shape"], row["dtype"])
            times[key] = (float(value), row["metric"])
    return times


def fastest(runs):
    """Per case, the fastest time over the runs that measured it."""
    best = {}
    for run in runs:
        for key, (us, metric) in run.items():
            if key not in best or us < best[key][0]:
                best[key] = (us, metric)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", nargs="+", required=True)
    parser.add_argument("--after", nargs="+", required=True)
    parser.add_argument("--limit", type=float, default=3.0)
    args = parser.parse_args()
    before = fastest(load(d) for d in args.before)
    after = fastest(load(d) for d in args.after)
    keys = [k for k in after if k in before]
    print("| family | op | shape | dtype | before | after | change |")
    print("|---|---|---|---|---:|---:|---:|")
    slower = []
    changes = []
    for key in keys:
        (b, metric), (a, _) = before[key], after[key]
        unit = "ms" if metric == "ms" else "µs"
        scale = 1e-3 if metric == "ms" else 1.0
        change = (a / b - 1.0) * 100.0 if b > 0 else math.nan
        changes.append(change)
        if change > args.limit:
            slower.append((key, change))
        family, op, shape, dtype = key
        print(
            f"| {family} | {op} | {shape} | {dtype} | {b * scale:.2f} {unit} "
            f"| {a * scale:.2f} {unit} | {change:+.1f} % |"
        )
    missing = sorted(set(before) ^ set(after))
    print()
    finite = sorted(c for c in changes if math.isfinite(c))
    if finite:
        median = finite[len(finite) // 2]
        print(f"{len(keys)} cases compared, median change {median:+.1f} %, "
              f"{len(slower)} slower by more than {args.limit:g} %")
    for (family, op, shape, dtype), change in slower:
        print(f"  slower: {family} {op} {shape} {dtype}: {change:+.1f} %")
    if missing:
        print(f"{len(missing)} cases measured on one side only: "
              + ", ".join(" ".join(k) for k in missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
