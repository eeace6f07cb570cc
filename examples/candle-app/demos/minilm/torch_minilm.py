"""PyTorch's side of the MiniLM demo: the same weights, tokenizer and sentences as
`minilm run`, embedded on the GPU with transformers' BertModel (mean pooling over the
attention mask, L2 normalisation, as sentence-transformers does) and timed with CUDA events.

usage: torch_minilm.py <model-dir> <sentences.txt> <out.json> [iters]
                       [--batches 1,8,64] [--attn sdpa|eager] [--cpu]

A batch of b is the first b sentences, padded to the longest; a batch of 1 is every sentence
on its own. Writes to <out.json>, which `minilm run --torch <out.json>` reads: the device
name, and for every sentence on its own and every batch its token ids, embeddings and median
time in milliseconds. `--attn` picks transformers' attention implementation (default: the
library's own choice, "sdpa" in transformers 5); the report names the one used. `--cpu` is a
dry run of the script on a machine without a GPU (host wall-clock times).
"""

import argparse
import json
import statistics
import time

import torch
from tokenizers import Tokenizer
from transformers import BertModel


def embed(model, ids, mask):
    """Mean-pooled, L2-normalised embeddings of a batch already on the GPU."""
    hidden = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))
    hidden = hidden.last_hidden_state
    m = mask.unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(mean, p=2, dim=1)


class Mark:
    """A point in time on the device's queue: a CUDA event on the GPU, the host clock on the
    CPU (after the work queued so far, which on the CPU is done)."""

    def __init__(self, device):
        self.event = torch.cuda.Event(enable_timing=True) if device.type == "cuda" else None
        self.host = None

    def record(self):
        """Marks now."""
        if self.event is not None:
            self.event.record()
        self.host = time.perf_counter()
        return self

    def ms_since(self, start):
        """Milliseconds from `start` to this mark, waiting for the device to reach it."""
        if self.event is None:
            return (self.host - start.host) * 1e3
        self.event.synchronize()
        return start.event.elapsed_time(self.event)


def timed(model, ids, mask, iters):
    """The embeddings and the median time in ms of `iters` runs after three warm-ups."""
    with torch.inference_mode():
        out = embed(model, ids, mask)
        for _ in range(2):
            embed(model, ids, mask)
        times = []
        for _ in range(iters):
            start = Mark(ids.device).record()
            embed(model, ids, mask)
            times.append(Mark(ids.device).record().ms_since(start))
    return out, statistics.median(times)


def tensors(encodings, device="cuda"):
    """Token ids and attention mask of encodings as int64 tensors on `device`."""
    ids = torch.tensor([e.ids for e in encodings], dtype=torch.long, device=device)
    mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.long, device=device)
    return ids, mask


def load(model_dir, attn=None, device="cuda"):
    """The tokenizer (padding each batch to its longest sentence) and the f32 model on
    `device`, with TF32 off (full f32 arithmetic, as candle's CPU backend and HIP compute)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tokenizer = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    extra = {"attn_implementation": attn} if attn else {}
    model = BertModel.from_pretrained(
        model_dir, dtype=torch.float32, add_pooling_layer=False, **extra
    )
    return tokenizer, model.to(device).eval()


def read_sentences(path):
    """The non-empty lines of `path`."""
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def parse_batches(text):
    """Batch sizes from "1,8,64"."""
    return [int(b) for b in text.split(",") if b.strip()]


def measured(model, encodings, iters):
    """A report entry: token ids, embeddings and median time of one batch."""
    embeddings, ms = timed(model, *tensors(encodings, model.device), iters)
    return {
        "input_ids": [e.ids for e in encodings],
        "embeddings": embeddings.float().cpu().tolist(),
        "ms": ms,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("sentences")
    parser.add_argument("out")
    parser.add_argument("iters", nargs="?", type=int, default=10)
    parser.add_argument("--batches", type=parse_batches, default=[1, 8, 64])
    parser.add_argument("--attn", choices=["sdpa", "eager"], default=None)
    parser.add_argument("--cpu", action="store_true", help="dry run without a GPU")
    args = parser.parse_args()
    if not args.cpu and not torch.cuda.is_available():
        parser.error("no CUDA device (--cpu runs the script on the CPU)")
    device = "cpu" if args.cpu else "cuda"
    sentences = read_sentences(args.sentences)
    for b in args.batches:
        if not 1 <= b <= len(sentences):
            parser.error(f"a batch of {b} needs 1 to {len(sentences)} sentences")

    tokenizer, model = load(args.model_dir, args.attn, device)
    attn = model.config._attn_implementation
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    report = {
        "device": f"{name} (torch {torch.__version__}, "
        f"transformers BertModel, attention {attn}, f32, TF32 off)",
        "singles": [],
        "batches": [],
    }
    for b in args.batches:
        if b == 1:
            report["singles"] = [
                measured(model, tokenizer.encode_batch([s]), args.iters) for s in sentences
            ]
            times = [s["ms"] for s in report["singles"]]
            print(f"PyTorch, each sentence on its own: median {statistics.median(times):.2f} ms")
        else:
            entry = measured(model, tokenizer.encode_batch(sentences[:b]), args.iters)
            report["batches"].append({"size": b, **entry})
            print(f"PyTorch, batch of {b}: {entry['ms']:.2f} ms")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f)
    print(f"PyTorch on {report['device']}")


if __name__ == "__main__":
    main()
