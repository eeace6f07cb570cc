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

Options (anywhere after the script's name):
    --candle-cuda FILE   rows of Candle's own CUDA backend (tests/candle-cuda,
                         `candle-cuda-bench --json`): adds the Candle-CUDA columns and
                         their ratios (Candle-CUDA time / ours) when FILE has rows
    --match TEXT         keeps only the rows whose "model" contains TEXT (one model of a
                         file that holds several, e.g. one GGUF scheme)
A file that is missing or empty (TORCH may be /dev/null) leaves its columns out, except
PyTorch's, which are always shown when no Candle-CUDA rows are given.
"""

import json
import sys


def rows(path, match=None):
    out = {}
    if not path:
        return out
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    if match is not None and match not in str(r.get("model", "")):
                        continue
                    out[(r["batch"], r["prompt_len"])] = r
    except OSError:
        pass
    return out


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def ratio(theirs, ours):
    return theirs / ours if theirs and ours else None


def parse_args(argv):
    """Positional arguments and the --candle-cuda / --match options."""
    options = {"--candle-cuda": None, "--match": None}
    positional = []
    i = 0
    while i < len(argv):
        if argv[i] in options and i + 1 < len(argv):
            options[argv[i]] = argv[i + 1]
            i += 2
        else:
            positional.append(argv[i])
            i += 1
    if len(positional) < 3:
        sys.exit("usage: generate_report.py OURS.jsonl TORCH.jsonl OUT_PREFIX [LABEL] "
                 "[--candle-cuda FILE] [--match TEXT]")
    return positional, options


def main():
    positional, options = parse_args(sys.argv[1:])
    ours_path, torch_path, prefix = positional[:3]
    label = positional[3] if len(positional) > 3 else ""
    match = options["--match"]
    ours, torch = rows(ours_path, match), rows(torch_path, match)
    cuda = rows(options["--candle-cuda"], match)
    # The frameworks compared with ours: (column name, rows).
    others = []
    if torch or not cuda:
        others.append(("torch", torch))
    if cuda:
        others.append(("candle-cuda", cuda))
    keys = sorted(set(ours) | set(torch) | set(cuda))
    any_row = (next(iter(ours.values()), None) or next(iter(torch.values()), None)
               or next(iter(cuda.values()), {}))
    header = ["batch", "prompt", "prefill ms ours"]
    for name, _ in others:
        header += [f"prefill ms {name}", "prefill x" if name == "torch" else f"prefill x {name}"]
    header.append("decode ms/step ours")
    for name, _ in others:
        header += [f"decode ms/step {name}", "decode x" if name == "torch" else f"decode x {name}"]
    header.append("ours tok/s")
    header += [f"{name} tok/s" for name, _ in others]
    header += ["bound ms/step", "ours % bound", "host ms/step ours"]
    if cuda:
        header.append("host ms/step candle-cuda")
    lines = [
        f"### {label}",
        "",
        f"ours: {any_row.get('device', '?')}; weights {any_row.get('weight_bytes', 0) / 1e9:.2f} GB; "
        f"copy bandwidth {fmt(any_row.get('copy_gb_per_s'), '.0f')} GB/s",
    ]
    if cuda:
        c = next(iter(cuda.values()))
        lines.append(f"candle-cuda: {c.get('device', '?')}; copy bandwidth "
                     f"{fmt(c.get('copy_gb_per_s'), '.0f')} GB/s")
    lines += [
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    chart = []
    for key in keys:
        o = ours.get(key, {})
        po, do = o.get("prefill_ms"), o.get("decode_ms_per_token")
        cells = [str(key[0]), str(key[1]), fmt(po)]
        for _, table in others:
            p = table.get(key, {}).get("prefill_ms")
            cells += [fmt(p), fmt(ratio(p, po))]
        cells.append(fmt(do))
        for _, table in others:
            d = table.get(key, {}).get("decode_ms_per_token")
            cells += [fmt(d), fmt(ratio(d, do))]
        cells.append(fmt(o.get("decode_tokens_per_s"), ".1f"))
        cells += [fmt(table.get(key, {}).get("decode_tokens_per_s"), ".1f") for _, table in others]
        bound = None
        if o.get("copy_gb_per_s") and o.get("weight_bytes"):
            bound = o["weight_bytes"] / (o["copy_gb_per_s"] * 1e9) * 1e3
        cells += [fmt(bound), fmt(100 * bound / do if bound and do else None, ".0f"),
                  fmt(o.get("host_ms_per_token"), ".3f")]
        if cuda:
            cells.append(fmt(cuda.get(key, {}).get("host_ms_per_token"), ".3f"))
        lines.append("| " + " | ".join(cells) + " |")
        bars = []
        for _, table in others:
            t = table.get(key, {})
            bars += [ratio(t.get("prefill_ms"), po) or 0, ratio(t.get("decode_ms_per_token"), do) or 0]
        chart.append((f"b{key[0]} p{key[1]}", bars))
    lines.append("")
    names = " and ".join("PyTorch" if n == "torch" else "Candle-CUDA" for n, _ in others)
    lines.append(f"x = {names} time / our time (above 1: we are faster).")
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
    series = []
    for name, _ in others:
        who = "PyTorch" if name == "torch" else "Candle-CUDA"
        series += [f"prefill vs {who}", f"decode vs {who}"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    xs = range(len(chart))
    width = 0.8 / len(series)
    for j, name in enumerate(series):
        ax.bar([x - 0.4 + width * (j + 0.5) for x in xs], [c[1][j] for c in chart], width,
               label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(xs), [c[0] for c in chart])
    ax.set_ylabel("their time / ours")
    ax.set_title(label)
    ax.legend()
    fig.tight_layout()
    fig.savefig(prefix + ".png", dpi=100)


if __name__ == "__main__":
    main()
