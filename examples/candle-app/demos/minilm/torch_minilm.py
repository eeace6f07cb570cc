"""PyTorch's side of the MiniLM demo: the same weights, tokenizer and sentences as
`minilm run`, embedded on the GPU with transformers' BertModel (mean pooling over the
attention mask, L2 normalisation, as sentence-transformers does) and timed with CUDA events.

usage: torch_minilm.py <model-dir> <sentences.txt> <out.json> [iters]

Writes the device name, the median batch and per-sentence times in milliseconds, the batch
embeddings and the token ids to <out.json>, which `minilm run --torch <out.json>` reads.
"""

import json
import statistics
import sys

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


def timed(model, ids, mask, iters):
    """The embeddings and the median time in ms of `iters` runs after three warm-ups."""
    with torch.inference_mode():
        out = embed(model, ids, mask)
        for _ in range(2):
            embed(model, ids, mask)
        times = []
        for _ in range(iters):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            embed(model, ids, mask)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return out, statistics.median(times)


def tensors(encodings):
    """Token ids and attention mask of encodings as int64 GPU tensors."""
    ids = torch.tensor([e.ids for e in encodings], dtype=torch.long, device="cuda")
    mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.long, device="cuda")
    return ids, mask


def main():
    model_dir, sentences_file, out_file = sys.argv[1:4]
    iters = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    with open(sentences_file, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    # Full f32 arithmetic, as candle's CPU backend and the HIP backend compute.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    tokenizer = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    model = BertModel.from_pretrained(model_dir, dtype=torch.float32, add_pooling_layer=False)
    model = model.to("cuda").eval()

    batch = tokenizer.encode_batch(sentences)
    ids, mask = tensors(batch)
    embeddings, batch_ms = timed(model, ids, mask, iters)
    sentence_ms = [
        timed(model, *tensors(tokenizer.encode_batch([s])), iters)[1] for s in sentences
    ]

    report = {
        "device": f"{torch.cuda.get_device_name()} (torch {torch.__version__}, "
        f"transformers BertModel, f32, TF32 off)",
        "batch_ms": batch_ms,
        "sentence_ms": sentence_ms,
        "embeddings": embeddings.float().cpu().tolist(),
        "input_ids": [e.ids for e in batch],
    }
    with open(out_file, "w", encoding="utf-8") as f:
        json.dump(report, f)
    print(f"PyTorch on {report['device']}: batch of {len(sentences)} in {batch_ms:.2f} ms")


if __name__ == "__main__":
    main()
