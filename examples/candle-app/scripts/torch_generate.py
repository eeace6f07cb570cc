#!/usr/bin/env python3
"""PyTorch's side of the generation checks and benchmarks: Hugging Face transformers
(`AutoModelForCausalLM`, default attention, eager) on CUDA device 0, on the same model folder
that `generate` loads.

    torch_generate.py greedy --model DIR --prompt-ids 1,2,3 --max-tokens N --dtype f32
                             --out FILE
        greedy decoding with the KV cache; writes FILE.json ({"tokens": [...], "device",
        "dtype"}) and FILE (raw little-endian f32 logits of every step, [steps, vocab]), the
        same layout as `generate --logits-out FILE`.
    torch_generate.py compare --ours FILE --reference FILE [--tokens N] [--rtol R]
        compares two such logit files: greedy tokens identical for the first N steps and,
        with --rtol, every step's logits within max|a-b| / max|b| <= R. Prints one line per
        check and exits non-zero on a mismatch.
    torch_generate.py bench --model DIR --dtype bf16 --batch B[,B...] --prompt-len P[,P...]
                            --new-tokens N [--json FILE]
        for every batch size and prompt length: prefill (one forward of P tokens) and
        decode (N greedy steps after the P-token prompt, one host synchronisation per token,
        as a generator does), after a warm-up; one JSON object per case, printed and
        appended to FILE (JSON lines). The model is loaded once for all cases.

TF32 is off, so f32 is computed in f32 as Candle computes it.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def load(model_dir, dtype):
    """The model on CUDA device 0 in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, DTYPES[dtype]))
    return model.to("cuda").eval()


def device_name(dtype):
    import torch
    import transformers

    return (f"{torch.cuda.get_device_name()} (torch {torch.__version__}, transformers "
            f"{transformers.__version__}, {dtype}, default attention, TF32 off)")


def greedy(args):
    import torch

    model = load(args.model, args.dtype)
    ids = torch.tensor([[int(t) for t in args.prompt_ids.split(",")]], device="cuda")
    tokens, rows = [], []
    past = None
    with torch.inference_mode():
        for _ in range(args.max_tokens):
            out = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
            rows.append(logits.cpu().numpy())
            token = int(logits.argmax())
            tokens.append(token)
            ids = torch.tensor([[token]], device="cuda")
    np.stack(rows).astype("<f4").tofile(args.out)
    with open(args.out + ".json", "w") as f:
        json.dump({"tokens": tokens, "device": device_name(args.dtype), "dtype": args.dtype}, f)
    print(f"torch greedy: {len(tokens)} tokens, first {tokens[:8]}")


def read_logits(path):
    """Token ids (from PATH.json) and logits [steps, vocab] of a logits file."""
    with open(path + ".json") as f:
        meta = json.load(f)
    tokens = meta.get("tokens") or meta.get("generated") or meta.get("ids")
    logits = np.fromfile(path, dtype="<f4")
    steps = len(tokens)
    if steps == 0 or logits.size % steps:
        sys.exit(f"{path}: {logits.size} floats do not split into {steps} steps")
    return tokens, logits.reshape(steps, -1)


def compare(args):
    ours_tokens, ours = read_logits(args.ours)
    ref_tokens, ref = read_logits(args.reference)
    if ours.shape[1] != ref.shape[1]:
        sys.exit(f"vocabulary sizes differ: {ours.shape[1]} vs {ref.shape[1]}")
    steps = min(len(ours_tokens), len(ref_tokens))
    want = args.tokens or steps
    same = 0
    while same < min(want, steps) and ours_tokens[same] == ref_tokens[same]:
        same += 1
    ok = same >= want
    print(f"greedy tokens identical for {same} of {want} steps: {'ok' if ok else 'MISMATCH'}")
    # Logits are compared while the two runs saw the same tokens.
    rel = [float(np.abs(ours[i] - ref[i]).max() / max(np.abs(ref[i]).max(), 1e-30))
           for i in range(min(same + 1, steps))]
    # The margin between the reference's two best logits tells whether a
    # differing token was a near tie.
    top2 = np.sort(ref[: len(rel)], axis=1)[:, -2:]
    margin = float((top2[:, 1] - top2[:, 0]).min())
    print(f"logits over {len(rel)} steps: largest relative difference {max(rel):.3e} "
          f"(median {statistics.median(rel):.3e}); smallest top-1 margin {margin:.4g}")
    if args.rtol is not None and max(rel) > args.rtol:
        print(f"relative difference above {args.rtol:g}: MISMATCH")
        ok = False
    sys.exit(0 if ok else 1)


def cuda_time(fn):
    """Wall time of fn() in ms, GPU work included."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def copy_bandwidth():
    """Device-to-device copy bandwidth of 1 GiB in GB/s, bytes read + written."""
    import torch

    buf = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(buf)
    dst.copy_(buf)
    copy_ms = statistics.median(cuda_time(lambda: dst.copy_(buf)) for _ in range(5))
    return 2 * (1 << 30) / copy_ms / 1e6


def bench_case(model, args, batch, prompt_len):
    """One JSON row: prefill and decode of `batch` prompts of `prompt_len` tokens."""
    import torch

    vocab = model.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(0)
    prompt = torch.randint(0, min(vocab, 256), (batch, prompt_len), generator=gen).to("cuda")

    def prefill():
        return model(input_ids=prompt, use_cache=True)

    def decode():
        out = prefill()
        past, ids = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        ids.cpu()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.new_tokens):
            out = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            ids = out.logits[:, -1].argmax(-1, keepdim=True)
            ids.cpu()  # one synchronisation per token, as a generator does
        return (time.perf_counter() - start) * 1e3

    torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        prefill()
        prefill_ms = statistics.median(cuda_time(prefill) for _ in range(args.iters))
        decode()
        decode_ms = statistics.median(decode() for _ in range(max(1, args.iters // 2)))
    step_ms = decode_ms / args.new_tokens
    return {
        "framework": "pytorch",
        "dtype": args.dtype,
        "batch": batch,
        "prompt_len": prompt_len,
        "new_tokens": args.new_tokens,
        "prefill_ms": prefill_ms,
        "prefill_tokens_per_s": batch * prompt_len / prefill_ms * 1e3,
        "decode_ms_per_token": step_ms,
        "decode_tokens_per_s": batch / step_ms * 1e3,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
    }


def bench(args):
    model = load(args.model, args.dtype)
    common = {
        "device": device_name(args.dtype),
        "model": args.model,
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "copy_gb_per_s": copy_bandwidth(),
    }
    for batch in (int(b) for b in args.batch.split(",")):
        for prompt_len in (int(p) for p in args.prompt_len.split(",")):
            row = {**bench_case(model, args, batch, prompt_len), **common}
            print(json.dumps(row), flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(row) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("greedy")
    g.add_argument("--model", required=True)
    g.add_argument("--prompt-ids", required=True)
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--dtype", choices=DTYPES, default="f32")
    g.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--ours", required=True)
    c.add_argument("--reference", required=True)
    c.add_argument("--tokens", type=int)
    c.add_argument("--rtol", type=float)
    b = sub.add_parser("bench")
    b.add_argument("--model", required=True)
    b.add_argument("--dtype", choices=DTYPES, default="bf16")
    b.add_argument("--batch", default="1")
    b.add_argument("--prompt-len", default="512")
    b.add_argument("--new-tokens", type=int, default=128)
    b.add_argument("--iters", type=int, default=5)
    b.add_argument("--json")
    args = parser.parse_args()
    {"greedy": greedy, "compare": compare, "bench": bench}[args.command](args)


if __name__ == "__main__":
    main()
