"""Where PyTorch's MiniLM time goes: torch_minilm.py's embedding (transformers' BertModel,
f32, TF32 off) profiled per workload and attention path, to explain why a padded batch costs
more than one sentence.

usage: profile_torch.py <model-dir> <sentences.txt> <out-prefix> [--iters N] [--cpu]

Workloads: sentence 0 alone (7 tokens), sentence 6 alone (23 tokens, the longest of the
first 8), the first 8 sentences (padded to 23), sentence 6 eight times (8x23, no padding),
and the first 64 sentences. Paths: transformers' attention implementations "sdpa" (its
default) and "eager", each with the padding mask passed (as the demo does) and without it
(`attention_mask=None` to the model; the pooling still uses the mask). Per workload and path:

- gpu ms: the median of N runs between CUDA events (as torch_minilm.py times);
- host ms: the median time until the embedding call returns on the host (no final sync);
- per phase (hooks on the model): host and GPU ms from the start to the end of the
  embeddings, the attention-mask preparation (from the embeddings to the encoder's start),
  the six layers and the pooling;
- from torch.profiler over 5 runs, per run: kernels launched, their summed GPU time, host
  synchronisations (cudaStreamSynchronize, cudaDeviceSynchronize, cudaMemcpy* to the host,
  aten::item / aten::is_nonzero), and the kernels and the host operators taking the most time.

Writes <out-prefix>.txt (the tables) and <out-prefix>.json (every figure). `--cpu` is a dry
run on a machine without a GPU (no CUDA events or kernels; host clocks only).
"""

import argparse
import json
import statistics
import time

import torch

from torch_minilm import Mark, embed, load, read_sentences, tensors

LAYERS = 6


def workloads(tokenizer, sentences):
    """(name, encodings) of the profiled workloads."""
    return [
        ("1: sentence 0", tokenizer.encode_batch(sentences[:1])),
        ("1: sentence 6", tokenizer.encode_batch(sentences[6:7])),
        ("8: first 8", tokenizer.encode_batch(sentences[:8])),
        ("8: sentence 6 x8", tokenizer.encode_batch([sentences[6]] * 8)),
        ("64: first 64", tokenizer.encode_batch(sentences[:64])),
    ]


def run_once(model, ids, mask, masked):
    """One embedding as torch_minilm.py computes it, with the padding mask given to the
    model or not (the pooling always uses it)."""
    if masked:
        return embed(model, ids, mask)
    hidden = model(input_ids=ids, token_type_ids=torch.zeros_like(ids)).last_hidden_state
    m = mask.unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(mean, p=2, dim=1)


class Phases:
    """Forward hooks that mark the end of each part of the model on the host and the GPU."""

    def __init__(self, model, device):
        self.device = device
        self.marks = []
        self.handles = [
            model.embeddings.register_forward_hook(lambda *_: self.mark("embeddings")),
            model.encoder.register_forward_pre_hook(lambda *_: self.mark("mask")),
        ]
        for i, layer in enumerate(model.encoder.layer):
            self.handles.append(
                layer.register_forward_hook(lambda *_, i=i: self.mark(f"layer {i}"))
            )

    def mark(self, name):
        """Marks the end of part `name`."""
        self.marks.append((name, Mark(self.device).record()))

    def start(self):
        """Forgets earlier marks and marks the start."""
        self.marks = [("start", Mark(self.device).record())]

    def durations(self):
        """(name, host ms, GPU ms) of every part since `start`."""
        out = []
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            out.append((name, (b.host - a.host) * 1e3, b.ms_since(a)))
        return out

    def remove(self):
        """Removes the hooks."""
        for h in self.handles:
            h.remove()


def is_gpu_event(e):
    """Whether a profiler event ran on the GPU."""
    return str(getattr(e, "device_type", "")).endswith("CUDA")


def gpu_us(e):
    """A profiler event's GPU time in microseconds."""
    return getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0) or 0


SYNC_NAMES = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "aten::item",
    "aten::is_nonzero",
    "aten::_local_scalar_dense",
)


def profiled(model, ids, mask, masked, runs=5):
    """Kernel and host-operator figures per run from torch.profiler."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if ids.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(runs):
            run_once(model, ids, mask, masked)
        if ids.device.type == "cuda":
            torch.cuda.synchronize()
    averages = prof.key_averages()
    kernels = [e for e in averages if is_gpu_event(e)]
    host = [e for e in averages if not is_gpu_event(e)]
    launches = sum(e.count for e in host if e.key in ("cudaLaunchKernel", "cuLaunchKernel",
                                                       "cudaLaunchKernelExC", "cuLaunchKernelEx"))
    syncs = {e.key: e.count / runs for e in host
             if e.key in SYNC_NAMES or (e.key.startswith("cudaMemcpy") and "Async" in e.key)}
    return {
        "kernels_per_run": sum(e.count for e in kernels) / runs,
        "launch_calls_per_run": launches / runs,
        "kernel_gpu_ms_per_run": sum(gpu_us(e) for e in kernels) / runs / 1e3,
        "syncs_per_run": syncs,
        "top_kernels": [
            (e.key[:90], e.count / runs, gpu_us(e) / runs)
            for e in sorted(kernels, key=gpu_us, reverse=True)[:8]
        ],
        "top_host_ops": [
            (e.key[:60], e.count / runs, e.self_cpu_time_total / runs)
            for e in sorted(host, key=lambda e: e.self_cpu_time_total, reverse=True)[:8]
        ],
    }


def measure(model, ids, mask, masked, iters):
    """Every figure of one workload on one path."""
    device = ids.device
    with torch.inference_mode():
        for _ in range(3):
            run_once(model, ids, mask, masked)
        gpu, host = [], []
        for _ in range(iters):
            start = Mark(device).record()
            run_once(model, ids, mask, masked)
            host.append((time.perf_counter() - start.host) * 1e3)
            gpu.append(Mark(device).record().ms_since(start))
        phases = Phases(model, device)
        per_phase = []
        for _ in range(iters):
            phases.start()
            run_once(model, ids, mask, masked)
            phases.mark("pooling")
            per_phase.append(phases.durations())
        phases.remove()
        names = [name for name, _, _ in per_phase[0]]
        phase = {
            name: (
                statistics.median(run[k][1] for run in per_phase),
                statistics.median(run[k][2] for run in per_phase),
            )
            for k, name in enumerate(names)
        }
        prof = profiled(model, ids, mask, masked)
    return {
        "gpu_ms": statistics.median(gpu),
        "host_ms": statistics.median(host),
        "phases": phase,
        **prof,
    }


def table(results):
    """The report as text."""
    lines = [
        "gpu ms: CUDA events around the embedding; host ms: until the call returns;"
        " kernels, kernel ms and syncs per run (torch.profiler, 5 runs)",
        f"{'attention':<9} {'mask':<4} {'workload':<17} {'shape':>6} {'gpu ms':>7} {'host ms':>8}"
        f" {'kernels':>8} {'kernel ms':>9} {'syncs':>6}  phases host/gpu ms: embed, mask,"
        " layers 0-5, pooling",
    ]
    for r in results:
        syncs = sum(v for k, v in r["syncs_per_run"].items() if not k.startswith("aten::"))
        ph = r["phases"]
        layers = sum(ph[f"layer {i}"][0] for i in range(LAYERS)), sum(
            ph[f"layer {i}"][1] for i in range(LAYERS)
        )
        phases = " ".join(
            f"{h:.2f}/{g:.2f}"
            for h, g in (ph["embeddings"], ph["mask"], layers, ph["pooling"])
        )
        lines.append(
            f"{r['attention']:<9} {'on' if r['masked'] else 'off':<4} {r['workload']:<17}"
            f" {r['shape']:>6} {r['gpu_ms']:>7.2f} {r['host_ms']:>8.2f}"
            f" {r['kernels_per_run']:>8.0f} {r['kernel_gpu_ms_per_run']:>9.3f} {syncs:>6.1f}  {phases}"
        )
    lines.append("")
    for r in results:
        lines.append(
            f"== {r['attention']}, mask {'on' if r['masked'] else 'off'}, {r['workload']}"
            f" ({r['shape']}): syncs per run {r['syncs_per_run']}"
        )
        lines.append("  kernels (per run: count, GPU us):")
        lines += [f"    {c:5.1f} {us:9.1f}  {k}" for k, c, us in r["top_kernels"]]
        lines.append("  host operators (per run: count, self CPU us):")
        lines += [f"    {c:5.1f} {us:9.1f}  {k}" for k, c, us in r["top_host_ops"]]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("sentences")
    parser.add_argument("out_prefix")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--cpu", action="store_true", help="dry run without a GPU")
    args = parser.parse_args()
    if not args.cpu and not torch.cuda.is_available():
        parser.error("no CUDA device (--cpu runs the script on the CPU)")
    device = "cpu" if args.cpu else "cuda"
    sentences = read_sentences(args.sentences)
    if len(sentences) < 64:
        parser.error("the workloads need 64 sentences")

    results = []
    for attn in ("sdpa", "eager"):
        tokenizer, model = load(args.model_dir, attn, device)
        for name, encodings in workloads(tokenizer, sentences):
            ids, mask = tensors(encodings, device)
            for masked in (True, False):
                r = measure(model, ids, mask, masked, args.iters)
                r.update(attention=attn, masked=masked, workload=name,
                         shape=f"{ids.shape[0]}x{ids.shape[1]}")
                results.append(r)
                print(f"{attn} mask {'on ' if masked else 'off'} {name:<17} {r['shape']:>6}:"
                      f" gpu {r['gpu_ms']:.2f} ms, host {r['host_ms']:.2f} ms,"
                      f" {r['kernels_per_run']:.0f} kernels", flush=True)
        del model
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    header = f"{name}, torch {torch.__version__}, f32, TF32 off, medians of {args.iters} runs\n"
    with open(f"{args.out_prefix}.txt", "w", encoding="utf-8") as f:
        f.write(header + table(results))
    with open(f"{args.out_prefix}.json", "w", encoding="utf-8") as f:
        json.dump({"device": header.strip(), "results": results}, f, indent=1)
    print(header + table(results))


if __name__ == "__main__":
    main()
