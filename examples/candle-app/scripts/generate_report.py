#!/usr/bin/env python3
"""Joins the generation benchmarks of candle-hip (`generate bench --json`) and PyTorch
(`torch_generate.py bench --json`) into one table and a chart.

    generate_report.py OURS.jsonl TORCH.jsonl OUT_PREFIX [LABEL]

Rows are joined on (batch, prompt length). Prefill is one forward of the prompt; decode is
ms per step (every sequence of the batch gets one token per step) after a prompt of that
length. "bound" is the weight-streaming limit of decode: every step reads all weights once,
so at best a step takes weight_bytes / copy bandwidth (our measured device-to-device copy,
bytes read + written); "% bound" is that time over our step time. Writes OUT_PREFIX.md
(also printed) and OUT_PREFIX.png (matplotlib, when installed).
"""

import json
import sys


def rows(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    out[(r["batch"], r["prompt_len"])] = r
    except OSError:
        pass
    return out


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def main():
    ours_path, torch_path, prefix = sys.argv[1:4]
    label = sys.argv[4] if len(sys.argv) > 4 else ""
    ours, torch = rows(ours_path), rows(torch_path)
    keys = sorted(set(ours) | set(torch))
    any_row = next(iter(ours.values()), None) or next(iter(torch.values()), {})
    lines = [
        f"### {label}",
        "",
        f"ours: {any_row.get('device', '?')}; weights {any_row.get('weight_bytes', 0) / 1e9:.2f} GB; "
        f"copy bandwidth {fmt(any_row.get('copy_gb_per_s'), '.0f')} GB/s",
        "",
        "| batch | prompt | prefill ms ours | prefill ms torch | prefill x | decode ms/step ours "
        "| decode ms/step torch | decode x | ours tok/s | torch tok/s | bound ms/step | ours % bound "
        "| host ms/step ours |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    chart = []
    for key in keys:
        o, t = ours.get(key, {}), torch.get(key, {})
        po, pt = o.get("prefill_ms"), t.get("prefill_ms")
        do, dt = o.get("decode_ms_per_token"), t.get("decode_ms_per_token")
        bound = None
        if o.get("copy_gb_per_s") and o.get("weight_bytes"):
            bound = o["weight_bytes"] / (o["copy_gb_per_s"] * 1e9) * 1e3
        lines.append(
            f"| {key[0]} | {key[1]} | {fmt(po)} | {fmt(pt)} | "
            f"{fmt(pt / po if po and pt else None)} | {fmt(do)} | {fmt(dt)} | "
            f"{fmt(dt / do if do and dt else None)} | {fmt(o.get('decode_tokens_per_s'), '.1f')} | "
            f"{fmt(t.get('decode_tokens_per_s'), '.1f')} | {fmt(bound)} | "
            f"{fmt(100 * bound / do if bound and do else None, '.0f')} | "
            f"{fmt(o.get('host_ms_per_token'), '.3f')} |")
        chart.append((f"b{key[0]} p{key[1]}", pt / po if po and pt else 0,
                      dt / do if do and dt else 0))
    lines.append("")
    lines.append("x = PyTorch time / our time (above 1: we are faster).")
    text = "\n".join(lines)
    print(text)
    with open(prefix + ".md", "w") as f:
        f.write(text + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 3.5))
    xs = range(len(chart))
    ax.bar([x - 0.2 for x in xs], [c[1] for c in chart], 0.4, label="prefill")
    ax.bar([x + 0.2 for x in xs], [c[2] for c in chart], 0.4, label="decode")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(xs), [c[0] for c in chart])
    ax.set_ylabel("PyTorch time / ours")
    ax.set_title(label)
    ax.legend()
    fig.tight_layout()
    fig.savefig(prefix + ".png", dpi=100)


if __name__ == "__main__":
    main()
