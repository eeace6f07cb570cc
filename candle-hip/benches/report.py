#!/usr/bin/env python3
"""Joins the candle-hip and PyTorch benchmark results into one table.

Reads DIR/bench_ours.csv (+ .json) from `examples/bench` and
DIR/bench_torch.csv (+ .json) from `torch_bench.py`, joins them on
(op, shape, dtype) and writes:

- DIR/bench_report.md: the table (device name and copy bandwidth in the
  header), also printed;
- DIR/bench_report.csv: the joined rows;
- DIR/bench_ratios.png: a bar chart of the ratios (matplotlib).

ratio = PyTorch time / our time: above 1 we are faster. "% copy" is the
achieved GB/s over the measured device-to-device copy bandwidth (ours,
hipMemcpy; PyTorch's copy_ when ours is missing). A case missing on one
side shows "-"; a case that failed shows ERROR and the message.

    report.py [--out DIR]      (DIR defaults to $HIP_ON_CUDA_OUT, else ./bench-out)
"""

import argparse
import csv
import json
import os
import sys

JOINED_FIELDS = ["family", "op", "shape", "dtype", "metric", "ours_us", "torch_us", "ratio",
                 "ours_rate", "torch_rate", "ours_pct_copy", "torch_pct_copy", "ours_error", "torch_error"]


def read_csv(path):
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def number(text):
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def key(r):
    return (r["op"], r["shape"], r["dtype"])


def join(ours, torch, copy_gbps):
    """Rows in our order, then rows only PyTorch has.

    Each side's error is "" (measured), the failure message, or None when
    that side has no such row.
    """
    mine, theirs = {key(r): r for r in ours}, {key(r): r for r in torch}
    keys = list(mine) + [k for k in theirs if k not in mine]
    rows = []
    for k in keys:
        o, t = mine.get(k), theirs.get(k)
        base = o or t
        ours_us = number(o["ours_us"]) if o else None
        torch_us = number(t["torch_us"]) if t else None
        ours_rate = number(o["gbps_or_tflops"]) if o else None
        torch_rate = number(t["gbps_or_tflops"]) if t else None
        memory = base["metric"] == "GB/s"

        def pct(rate):
            return 100.0 * rate / copy_gbps if memory and rate is not None and copy_gbps else None
        rows.append({
            "family": base["family"], "op": k[0], "shape": k[1], "dtype": k[2], "metric": base["metric"],
            "ours_us": ours_us, "torch_us": torch_us,
            "ratio": torch_us / ours_us if ours_us and torch_us else None,
            "ours_rate": ours_rate, "torch_rate": torch_rate,
            "ours_pct_copy": pct(ours_rate), "torch_pct_copy": pct(torch_rate),
            "ours_error": o["error"] if o else None,
            "torch_error": t["error"] if t else None,
        })
    return rows


def copy_bandwidth(ours_meta, torch_rows):
    if ours_meta.get("copy_gbps"):
        return float(ours_meta["copy_gbps"]), "hipMemcpy device to device"
    for r in torch_rows:
        if r["op"] == "memcpy_dtod" and number(r.get("gbps_or_tflops")):
            return float(r["gbps_or_tflops"]), "PyTorch copy_"
    return None, "not measured"


def fmt_time(us, metric):
    if us is None:
        return "-"
    if metric == "ms":
        return f"{us / 1000:.1f} ms"
    if us >= 10000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.2f} us" if us < 100 else f"{us:.1f} us"


def fmt(value, spec, suffix=""):
    return "-" if value is None else f"{value:{spec}}{suffix}"


def outcome(r, side):
    """A side's time, ERROR, or - when that side has no such case."""
    error = r[f"{side}_error"]
    if error is None:
        return "-"
    return "ERROR" if error else fmt_time(r[f"{side}_us"], r["metric"])


def cell(text):
    return text.replace("|", "\\|")


def table(rows, header):
    cols = ["op", "shape", "dtype", "ours", "PyTorch", "ratio", "ours rate", "PyTorch rate",
            "ours % copy", "PyTorch % copy", "note"]
    lines = [header, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        unit = r["metric"] if r["metric"] in ("GB/s", "TFLOP/s") else ""
        notes = [f"{side}: {r[f'{name}_error']}" for side, name in (("ours", "ours"), ("PyTorch", "torch"))
                 if r[f"{name}_error"]]
        if r["metric"] == "us/op":
            notes.append("host time per op")
        cells = [r["op"], r["shape"], r["dtype"], outcome(r, "ours"), outcome(r, "torch"), fmt(r["ratio"], ".2f"),
                 fmt(r["ours_rate"], ".1f", " " + unit) if unit else "-",
                 fmt(r["torch_rate"], ".1f", " " + unit) if unit else "-",
                 fmt(r["ours_pct_copy"], ".0f", "%"), fmt(r["torch_pct_copy"], ".0f", "%"), "; ".join(notes)]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    errors = sum(1 for r in rows if r["ours_error"])
    faster = sum(1 for x in ratios if x >= 1.0)
    lines += ["", f"{len(rows)} rows: {len(ratios)} compared, {faster} at least as fast as PyTorch, "
                  f"{len(ratios) - faster} slower, {errors} errors on our side."]
    return "\n".join(lines)


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=JOINED_FIELDS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: f"{v:.4f}" if isinstance(v, float) else ("" if v is None else v)
                             for k, v in r.items()})


def chart(rows, title, path):
    """Horizontal bars of the ratios (log scale), green where we are at least as fast."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, NullFormatter
    except ImportError as e:
        print(f"report: no chart ({e})", file=sys.stderr)
        return False
    shown = [r for r in rows if r["ratio"] is not None]
    if not shown:
        print("report: no chart (no case has both times)", file=sys.stderr)
        return False
    labels = [f"{r['op']} {r['shape']} {r['dtype']}" for r in shown]
    ratios = [r["ratio"] for r in shown]
    fig, ax = plt.subplots(figsize=(11, 1.5 + 0.24 * len(shown)))
    y = list(range(len(shown)))[::-1]
    colors = ["tab:green" if x >= 1.0 else "tab:red" for x in ratios]
    ax.barh(y, ratios, color=colors)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_ylim(-0.7, len(shown) - 0.3)
    ax.set_xlabel("PyTorch time / candle-hip time  (> 1: candle-hip faster)")
    ax.set_title(title, fontsize=10)
    for yi, x in zip(y, ratios):
        ax.text(x, yi, f" {x:.2f}", va="center", fontsize=6)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("HIP_ON_CUDA_OUT", "bench-out"))
    args = parser.parse_args()

    ours = read_csv(os.path.join(args.out, "bench_ours.csv"))
    torch = read_csv(os.path.join(args.out, "bench_torch.csv"))
    if ours is None and torch is None:
        print(f"report: neither bench_ours.csv nor bench_torch.csv in {args.out}", file=sys.stderr)
        return 1
    ours_meta = read_json(os.path.join(args.out, "bench_ours.json"))
    torch_meta = read_json(os.path.join(args.out, "bench_torch.json"))
    copy_gbps, copy_source = copy_bandwidth(ours_meta, torch or [])
    rows = join(ours or [], torch or [], copy_gbps)

    device = ours_meta.get("device") or torch_meta.get("device") or "unknown device"
    title = f"candle-hip vs PyTorch {torch_meta.get('torch', '?')} eager on {device}"
    copy_text = f"{copy_gbps:.0f} GB/s ({copy_source})" if copy_gbps else copy_source
    header = "\n".join([
        f"# {title}",
        "",
        f"Device copy bandwidth: {copy_text}. ratio = PyTorch time / our time (> 1: we are faster). "
        "Rates count bytes read + written (GB/s) or FLOPs (TFLOP/s).",
        "Ours runs through the hip-on-cuda test shim (HIP on CUDA, NVRTC, cuBLAS, cuDNN): it measures our "
        "code and kernels at warp size 32, not AMD code generation or rocBLAS/MIOpen.",
    ])
    if ours is None:
        header += "\n\nNo bench_ours.csv: our side did not run."
    if torch is None:
        header += "\n\nNo bench_torch.csv: PyTorch's side did not run."
    text = table(rows, header)
    print(text)
    with open(os.path.join(args.out, "bench_report.md"), "w") as f:
        f.write(text + "\n")
    write_csv(rows, os.path.join(args.out, "bench_report.csv"))
    png = os.path.join(args.out, "bench_ratios.png")
    if chart(rows, title, png):
        print(f"chart: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
