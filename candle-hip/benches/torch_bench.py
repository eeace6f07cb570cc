#!/usr/bin/env python3
"""PyTorch eager side of the candle-hip benchmark.

Runs the cases of `examples/bench` (same keys: op, shape, dtype; same sizes
and dtypes; same bytes / FLOP counts) with PyTorch eager on the CUDA device,
timed the same way: CUDA events, a warm-up, then the median of several
samples, each sample queuing enough runs to last about 2 ms. Tiny-tensor
cases time the host instead (per-op overhead).

Numerics are pinned to what candle-hip computes: TF32 is off for f32 GEMMs
and convolutions, and half-precision GEMMs do not use reduced-precision
reductions. cuDNN autotuning is on (MIOpen, and the shim's cuDNN, also pick
the fastest algorithm).

    torch_bench.py [--out DIR] [--filter TEXT] [--list] [--sdpa-backend NAME]

Writes DIR/bench_torch.csv and DIR/bench_torch.json (device facts); DIR
defaults to $HIP_ON_CUDA_OUT, else ./bench-out. `--list` prints the case
keys and work (bytes or FLOPs) without importing torch. `--sdpa-backend`
leaves scaled_dot_product_attention only that backend (flash: FlashAttention
2; efficient: the memory-efficient CUTLASS kernels; cudnn; math) instead of
PyTorch's choice, to see which one the default picks and what each reaches
on the same GPU.
"""

import argparse
import csv
import json
import math
import os
import statistics
import sys
import time

# Same timing constants as examples/bench/timing.rs.
WARMUP_RUNS = 2
TARGET_SAMPLE_US = 2000.0
MAX_REPS = 100
MIN_SAMPLES = 5
MAX_SAMPLES = 25
SAMPLE_BUDGET_S = 1.5
HOST_WARMUP_RUNS = 50
HOST_SAMPLES = 7
HOST_REPS = 1000

FIELDS = ["family", "op", "shape", "dtype", "metric", "torch_us", "gbps_or_tflops", "error"]

SIZES = {"u8": 1, "u32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8}

N = 1 << 26  # elements of the large element-wise cases
SIDE = 8192
ROWS, VOCAB = 8192, 32000
TOKENS, HIDDEN = 16384, 4096
EPS = 1e-5


def dims(*d):
    return "x".join(str(x) for x in d)


def nbytes(n, dtype):
    return n * SIZES[dtype]


class Case:
    """One case: key, what is measured, and a builder of the timed call.

    `build(t)` gets the torch module, creates the inputs on the GPU and
    returns a zero-argument callable that runs the op once.
    """

    def __init__(self, family, op, shape, dtype, measure, build):
        self.family, self.op, self.shape, self.dtype = family, op, shape, dtype
        self.measure = measure  # ("bytes", n) | ("flops", n) | ("host_async",) | ("host_sync",)
        self.build = build

    def key(self):
        return f"{self.op},{self.shape},{self.dtype}"

    def describe(self):
        return " ".join(str(x) for x in self.measure)

    def metric(self):
        return {"bytes": "GB/s", "flops": "TFLOP/s"}.get(self.measure[0], "us/op")

    def rate(self, us):
        kind = self.measure[0]
        if us <= 0 or kind not in ("bytes", "flops"):
            return None
        return self.measure[1] / (us * 1e3) if kind == "bytes" else self.measure[1] / (us * 1e6)


# ---- inputs -----------------------------------------------------------------

def tdtype(t, name):
    return {"u8": t.uint8, "u32": t.int32, "i64": t.int64, "f16": t.float16,
            "bf16": t.bfloat16, "f32": t.float32, "f64": t.float64}[name]


def signed(t, shape, dtype):
    return t.empty(shape, dtype=tdtype(t, dtype), device="cuda").uniform_(-2.0, 2.0)


def positive(t, shape, dtype):
    return t.empty(shape, dtype=tdtype(t, dtype), device="cuda").uniform_(0.1, 2.0)


def ids(t, shape, bound, wide=False):
    return t.randint(0, bound, shape, device="cuda", dtype=t.int64 if wide else t.int32)


def random_input(t, n, dtype, pos=False):
    if dtype == "u8":
        return t.randint(0, 256, (n,), device="cuda", dtype=t.uint8)
    return positive(t, (n,), dtype) if pos else signed(t, (n,), dtype)


# ---- cases --------------------------------------------------------------------

def memcpy_case():
    n = 1 << 28

    def build(t):
        src = signed(t, (n,), "f32")
        dst = t.empty_like(src)
        return lambda: dst.copy_(src)
    return Case("copy", "memcpy_dtod", dims(n), "f32", ("bytes", 2 * nbytes(n, "f32")), build)


def unary(name, dtype, fn, pos=False):
    def build(t):
        x = random_input(t, N, dtype, pos)
        f = fn(t)
        return lambda: f(x)
    return Case("unary", name, dims(N), dtype, ("bytes", 2 * nbytes(N, dtype)), build)


def scalar_op(name, dtype, fn):
    def build(t):
        x = random_input(t, N, dtype, pos=True)
        f = fn(t)
        return lambda: f(x)
    return Case("affine", name, dims(N), dtype, ("bytes", 2 * nbytes(N, dtype)), build)


def binary(name, dtype, fn):
    def build(t):
        a, b = random_input(t, N, dtype, True), random_input(t, N, dtype, True)
        f = fn(t)
        return lambda: f(a, b)
    return Case("binary", name, dims(N), dtype, ("bytes", 3 * nbytes(N, dtype)), build)


def broadcast(name, dtype, rhs, fn):
    work = 2 * nbytes(SIDE * SIDE, dtype) + nbytes(rhs[0] * rhs[1], dtype)

    def build(t):
        a, b = positive(t, (SIDE, SIDE), dtype), positive(t, rhs, dtype)
        f = fn(t)
        return lambda: f(a, b)
    return Case("binary", name, dims(SIDE, SIDE), dtype, ("bytes", work), build)


def cmp(name, dtype, fn):
    def build(t):
        a, b = random_input(t, N, dtype), random_input(t, N, dtype)
        f = fn(t)
        return lambda: f(a, b)
    return Case("cmp", name, dims(N), dtype, ("bytes", 2 * nbytes(N, dtype) + N), build)


def where_cond(dtype):
    def build(t):
        mask = t.randint(0, 2, (N,), device="cuda", dtype=t.uint8).bool()
        a, b = random_input(t, N, dtype), random_input(t, N, dtype)
        return lambda: t.where(mask, a, b)
    return Case("where", "where_cond", dims(N), dtype, ("bytes", N + 3 * nbytes(N, dtype)), build)


def cast(src, dst):
    def build(t):
        x = random_input(t, N, src)
        to = tdtype(t, dst)
        return lambda: x.to(to)
    return Case("cast", "cast", dims(N), f"{src}->{dst}", ("bytes", nbytes(N, src) + nbytes(N, dst)), build)


def transposed_unary(name, dtype, fn):
    # A SIDE x SIDE matrix read transposed (the key's shape ends in " t").
    def build(t):
        x = random_input(t, SIDE * SIDE, dtype).view(SIDE, SIDE).t()
        f = fn(t)
        return lambda: f(x)
    return Case("unary", name, f"{dims(SIDE, SIDE)} t", dtype, ("bytes", 2 * nbytes(SIDE * SIDE, dtype)), build)


def transposed_cast(src, dst):
    def build(t):
        x = random_input(t, SIDE * SIDE, src).view(SIDE, SIDE).t()
        to = tdtype(t, dst)
        return lambda: x.to(to)
    return Case("cast", "cast", f"{dims(SIDE, SIDE)} t", f"{src}->{dst}",
                ("bytes", nbytes(SIDE * SIDE, src) + nbytes(SIDE * SIDE, dst)), build)


def overhead_cases():
    tiny = 1024

    def add(t):
        a, b = signed(t, (tiny,), "f32"), signed(t, (tiny,), "f32")
        return lambda: t.add(a, b)

    def exp(t):
        x = signed(t, (tiny,), "f32")
        return lambda: t.exp(x)

    def sum_last(t):
        x = signed(t, (32, 32), "f32")
        return lambda: x.sum(dim=1, keepdim=True)
    return [
        Case("overhead", "add_queued", dims(tiny), "f32", ("host_async",), add),
        Case("overhead", "add_synced", dims(tiny), "f32", ("host_sync",), add),
        Case("overhead", "exp_queued", dims(tiny), "f32", ("host_async",), exp),
        Case("overhead", "sum_last_queued", dims(32, 32), "f32", ("host_async",), sum_last),
    ]


def elementwise_cases():
    def F(t):
        return t.nn.functional
    cases = [
        unary("silu", "bf16", lambda t: F(t).silu),
        unary("exp", "f32", lambda t: t.exp),
        unary("gelu", "bf16", lambda t: lambda x: F(t).gelu(x, approximate="tanh")),
        unary("gelu_erf", "f32", lambda t: F(t).gelu),
        unary("sqrt", "f16", lambda t: t.sqrt, pos=True),
        unary("relu", "f32", lambda t: t.relu),
        unary("tanh", "bf16", lambda t: t.tanh),
        # One kernel: -0.5 + 1.5 * x (a 0-dim CPU tensor is a scalar operand).
        scalar_op("affine", "f32", lambda t: lambda x, c=t.tensor(-0.5): t.add(c, x, alpha=1.5)),
        scalar_op("affine", "bf16", lambda t: lambda x, c=t.tensor(-0.5): t.add(c, x, alpha=1.5)),
        scalar_op("powf", "f32", lambda t: lambda x: t.pow(x, 1.7)),
        scalar_op("elu", "f32", lambda t: lambda x: F(t).elu(x, 0.5)),
        binary("add", "f32", lambda t: t.add),
        binary("add", "bf16", lambda t: t.add),
        binary("mul", "f16", lambda t: t.mul),
        binary("div", "f32", lambda t: t.div),
        binary("maximum", "bf16", lambda t: t.maximum),
        broadcast("add_bcast_row", "f32", (1, SIDE), lambda t: t.add),
        broadcast("mul_bcast_col", "bf16", (SIDE, 1), lambda t: t.mul),
        cmp("lt", "f32", lambda t: t.lt),
        cmp("eq", "bf16", lambda t: t.eq),
        where_cond("f32"),
        where_cond("bf16"),
    ]
    cases.append(transposed_unary("silu", "bf16", lambda t: F(t).silu))
    for src, dst in [("bf16", "f32"), ("f32", "bf16"), ("f32", "f16"), ("f16", "f32"), ("u8", "f32")]:
        cases.append(cast(src, dst))
    cases.append(transposed_cast("f32", "bf16"))
    return cases + overhead_cases()


def reduce(name, dtype, shape, fn, out_elems, out_dtype=None):
    work = nbytes(math.prod(shape), dtype) + nbytes(out_elems, out_dtype or dtype)

    def build(t):
        x = signed(t, shape, dtype)
        return lambda: fn(x)
    return Case("reduce", name, dims(*shape), dtype, ("bytes", work), build)


def data_cases():
    cases = [
        reduce("sum_last", "f32", (ROWS, VOCAB), lambda x: x.sum(dim=1, keepdim=True), ROWS),
        reduce("max_last", "bf16", (ROWS, VOCAB), lambda x: x.amax(dim=1, keepdim=True), ROWS),
        reduce("argmax_last", "f32", (ROWS, VOCAB), lambda x: x.argmax(dim=1, keepdim=True), ROWS, "u32"),
        reduce("sum_dim0", "f32", (SIDE, SIDE), lambda x: x.sum(dim=0, keepdim=True), SIDE),
        reduce("sum_all", "f32", (SIDE, SIDE), lambda x: x.sum(), 1),
    ]

    def index_select(t):
        table, i = signed(t, (VOCAB, 4096), "bf16"), ids(t, (8192,), VOCAB)
        return lambda: t.index_select(table, 0, i)
    cases.append(Case("index", "index_select", f"{dims(VOCAB, 4096)} ids 8192", "bf16",
                      ("bytes", 2 * nbytes(8192 * 4096, "bf16") + nbytes(8192, "u32")), index_select))

    def gather(t):
        src, i = signed(t, (ROWS, VOCAB), "f32"), ids(t, (ROWS, 4096), VOCAB, wide=True)
        return lambda: t.gather(src, 1, i)
    g = ROWS * 4096
    cases.append(Case("index", "gather", f"{dims(ROWS, VOCAB)} ids {dims(ROWS, 4096)}", "f32",
                      ("bytes", 2 * nbytes(g, "f32") + nbytes(g, "u32")), gather))

    acc_src, acc_dst, cols = 8192, 1024, 4096
    src_n, dst_n = acc_src * cols, acc_dst * cols
    acc_shape = f"{dims(acc_dst, cols)} src {dims(acc_src, cols)}"

    def scatter_add(t):
        dst, src = signed(t, (acc_dst, cols), "f32"), signed(t, (acc_src, cols), "f32")
        i = ids(t, (acc_src, cols), acc_dst, wide=True)
        return lambda: dst.scatter_add_(0, i, src)
    cases.append(Case("index", "scatter_add", acc_shape, "f32",
                      ("bytes", nbytes(src_n, "f32") + nbytes(src_n, "u32") + 2 * nbytes(dst_n, "f32")),
                      scatter_add))

    def index_add(t):
        dst, src = signed(t, (acc_dst, cols), "f32"), signed(t, (acc_src, cols), "f32")
        i = ids(t, (acc_src,), acc_dst)
        return lambda: dst.index_add(0, i, src)
    cases.append(Case("index", "index_add", acc_shape, "f32",
                      ("bytes", nbytes(src_n, "f32") + nbytes(acc_src, "u32") + 2 * nbytes(dst_n, "f32")),
                      index_add))

    def strided(name, shape, dtype, src_shape, view):
        def build(t):
            src = signed(t, src_shape, dtype)
            v = view(src)
            dst = t.empty(v.shape, dtype=src.dtype, device="cuda")
            return lambda: dst.copy_(v)
        return Case("copy", name, shape, dtype, ("bytes", 2 * nbytes(math.prod(src_shape), dtype)), build)
    cases += [
        strided("transpose", dims(SIDE, SIDE), "f32", (SIDE, SIDE), lambda x: x.t()),
        strided("transpose", dims(SIDE, SIDE), "bf16", (SIDE, SIDE), lambda x: x.t()),
        strided("permute_0213", f"{dims(4096, 32, 128)} t01", "bf16", (4096, 32, 128), lambda x: x.transpose(0, 1)),
    ]

    half = SIDE // 2

    def narrow(t):
        src = signed(t, (SIDE, SIDE), "f32")
        v = src[:, :half]
        dst = t.empty(v.shape, dtype=src.dtype, device="cuda")
        return lambda: dst.copy_(v)
    cases.append(Case("copy", "narrow_copy", f"{dims(SIDE, SIDE)} cols 0..{half}", "f32",
                      ("bytes", 2 * nbytes(SIDE * half, "f32")), narrow))

    heads, seq, dim = 32, 2048, 128

    def kv_cat(t):
        a, b = signed(t, (heads, seq, dim), "bf16"), signed(t, (heads, seq, dim), "bf16")
        dst = t.empty((heads, 2 * seq, dim), dtype=a.dtype, device="cuda")
        return lambda: t.cat([a, b], dim=1, out=dst)
    cases.append(Case("copy", "kv_cat", f"2 x {dims(heads, seq, dim)}", "bf16",
                      ("bytes", 4 * nbytes(heads * seq * dim, "bf16")), kv_cat))

    def fill(t):
        dst = signed(t, (N,), "f32")
        return lambda: dst.fill_(1.5)
    cases.append(Case("copy", "fill", dims(N), "f32", ("bytes", nbytes(N, "f32")), fill))

    def rand_uniform(t):
        return lambda: t.rand((N,), device="cuda", dtype=t.float32)

    def rand_normal(t):
        return lambda: t.randn((N,), device="cuda", dtype=t.bfloat16)
    cases += [
        Case("random", "rand_uniform", dims(N), "f32", ("bytes", nbytes(N, "f32")), rand_uniform),
        Case("random", "rand_normal", dims(N), "bf16", ("bytes", nbytes(N, "bf16")), rand_normal),
    ]
    return cases


def fused_cases():
    cases = []
    for dtype in ("f32", "bf16"):
        def softmax(t, dtype=dtype):
            x = signed(t, (ROWS, VOCAB), dtype)
            return lambda: t.softmax(x, dim=-1)
        cases.append(Case("fused", "softmax_last_dim", dims(ROWS, VOCAB), dtype,
                          ("bytes", 2 * nbytes(ROWS * VOCAB, dtype)), softmax))
    for name, dtype in [("rms_norm", "bf16"), ("rms_norm", "f32"), ("layer_norm", "bf16"), ("layer_norm", "f32")]:
        layer = name == "layer_norm"

        def norm(t, dtype=dtype, layer=layer):
            x = signed(t, (TOKENS, HIDDEN), dtype)
            alpha, beta = positive(t, (HIDDEN,), dtype), signed(t, (HIDDEN,), dtype)
            F = t.nn.functional
            if layer:
                return lambda: F.layer_norm(x, (HIDDEN,), alpha, beta, EPS)
            return lambda: F.rms_norm(x, (HIDDEN,), alpha, EPS)
        work = 2 * nbytes(TOKENS * HIDDEN, dtype) + (2 if layer else 1) * nbytes(HIDDEN, dtype)
        cases.append(Case("fused", name, dims(TOKENS, HIDDEN), dtype, ("bytes", work), norm))

    b, h, tk, d = 8, 32, 2048, 128
    for name, dtype in [("rope_i", "bf16"), ("rope", "bf16"), ("rope_thd", "bf16"), ("rope", "f32")]:
        shape = (b, tk, h, d) if name == "rope_thd" else (b, h, tk, d)

        def rope(t, name=name, dtype=dtype, shape=shape):
            # PyTorch has no fused rope: the eager composition models use.
            x = signed(t, shape, dtype)
            cos, sin = signed(t, (tk, d // 2), dtype), signed(t, (tk, d // 2), dtype)
            if name == "rope_thd":
                cos, sin = cos[:, None, :], sin[:, None, :]
            if name == "rope_i":
                def run():
                    x1, x2 = x[..., 0::2], x[..., 1::2]
                    return t.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
                return run

            def run():
                x1, x2 = x[..., : d // 2], x[..., d // 2:]
                return t.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
            return run
        work = 2 * nbytes(b * h * tk * d, dtype) + 2 * nbytes(tk * d // 2, dtype)
        cases.append(Case("fused", name, dims(*shape), dtype, ("bytes", work), rope))

    def sigmoid(t):
        x = signed(t, (N,), "f32")
        return lambda: t.sigmoid(x)
    cases.append(Case("fused", "sigmoid", dims(N), "f32", ("bytes", 2 * nbytes(N, "f32")), sigmoid))

    rows, cols = 16384, 1024

    def arg_sort(t):
        x = signed(t, (rows, cols), "f32")
        return lambda: t.argsort(x, dim=-1)
    cases.append(Case("fused", "arg_sort_last", dims(rows, cols), "f32",
                      ("bytes", nbytes(rows * cols, "f32") + nbytes(rows * cols, "u32")), arg_sort))
    return cases


def compute_cases():
    cases = []

    def mm(name, dtype, bmnk, rhs_t):
        b, m, n, k = bmnk

        def build(t):
            lhs = signed(t, (b, m, k), dtype)
            if rhs_t:
                rhs = signed(t, (b, n, k), dtype).transpose(1, 2)
            else:
                rhs = signed(t, (b, k, n), dtype)
            if b == 1:
                lhs, rhs = lhs[0], rhs[0]
            return lambda: t.matmul(lhs, rhs)
        shape = dims(m, n, k) if b == 1 else dims(b, m, n, k)
        return Case("matmul", name, shape, dtype, ("flops", 2 * b * m * n * k), build)
    s = 4096
    h, tk, d = 32, 2048, 128
    cases += [
        mm("matmul", "bf16", (1, s, s, s), False),
        mm("matmul", "f32", (1, s, s, s), False),
        mm("matmul", "f16", (1, s, s, s), False),
        mm("bmm_qk", "bf16", (h, tk, tk, d), True),
        mm("bmm_qk", "f32", (h, tk, tk, d), True),
        mm("bmm_pv", "bf16", (h, tk, d, tk), False),
    ]
    # The linear layers of LLM decoding: x (m, k) @ W^T, W stored (n, k), as
    # candle-nn's Linear; counted in bytes (weights, input, output once each).
    for k, n in [(4096, 4096), (4096, 14336), (14336, 4096), (4096, 128256)]:
        for m in [1, 4, 16]:
            case = mm("linear", "bf16", (1, m, n, k), True)
            case.measure = ("bytes", nbytes(n * k + m * k + m * n, "bf16"))
            cases.append(case)

    image = (32, 256, 56, 56)
    n = math.prod(image)
    k, co = 3, 256
    conv_flops = 2 * image[0] * co * image[2] * image[3] * image[1] * k * k
    for name, dtype in [("conv2d", "bf16"), ("conv2d", "f32"), ("conv2d_im2col", "bf16")]:
        # conv2d_im2col is our im2col + GEMM path; PyTorch runs its own conv2d.
        def conv(t, dtype=dtype):
            x, w = signed(t, image, dtype), signed(t, (co, image[1], k, k), dtype)
            return lambda: t.nn.functional.conv2d(x, w, padding=1)
        cases.append(Case("conv", name, f"{dims(*image)} k{k} p1 o{co}", dtype, ("flops", conv_flops), conv))

    tx, tk, tco = (16, 256, 28, 28), 4, 128

    def conv_t(t):
        x, w = signed(t, tx, "bf16"), signed(t, (tx[1], tco, tk, tk), "bf16")
        return lambda: t.nn.functional.conv_transpose2d(x, w, stride=2, padding=1)
    cases.append(Case("conv", "conv_transpose2d", f"{dims(*tx)} k{tk} s2 p1 o{tco}", "bf16",
                      ("flops", 2 * math.prod(tx) * tco * tk * tk), conv_t))
    for name, dtype in [("max_pool2d", "bf16"), ("avg_pool2d", "f32")]:
        def pool(t, name=name, dtype=dtype):
            x = signed(t, image, dtype)
            f = getattr(t.nn.functional, name)
            return lambda: f(x, 2, 2)
        cases.append(Case("pool", name, f"{dims(*image)} k2 s2", dtype,
                          ("bytes", nbytes(n, dtype) + nbytes(n // 4, dtype)), pool))

    up = (16, 256, 56, 56)
    un = math.prod(up)

    def upsample(t):
        x = signed(t, up, "f32")
        return lambda: t.nn.functional.interpolate(x, size=(2 * up[2], 2 * up[3]), mode="nearest")
    cases.append(Case("upsample", "upsample_nearest2d", f"{dims(*up)} x2", "f32",
                      ("bytes", nbytes(un, "f32") + nbytes(4 * un, "f32")), upsample))
    return cases


def attention_cases():
    """The keys of examples/bench/attention.rs with PyTorch's
    scaled_dot_product_attention on (batch, heads, seq, head_dim) tensors
    (the backend PyTorch picks, cuDNN's on an H100 with torch 2.11, unless
    --sdpa-backend names one); decode shares 8 key/value heads among 32
    query heads through enable_gqa."""
    cases = []
    d = 128

    def shape(b, h, s, causal):
        return f"b{b} h{h} s{s} d{d}" + (" causal" if causal else "")

    for b, h, s, causal in [(1, 32, 512, True), (1, 32, 2048, True), (1, 32, 4096, True),
                            (1, 32, 4096, False), (4, 32, 4096, True), (1, 32, 16384, True)]:
        def prefill(t, b=b, h=h, s=s, causal=causal):
            q, k, v = (signed(t, (b, h, s, d), "bf16") for _ in range(3))
            f = t.nn.functional.scaled_dot_product_attention
            return lambda: f(q, k, v, is_causal=causal)
        flops = 4 * b * h * s * s * d // (2 if causal else 1)
        cases.append(Case("attention", "flash_attn", shape(b, h, s, causal), "bf16",
                          ("flops", flops), prefill))
    for b, s_k in [(1, 1024), (1, 4096), (1, 32768), (8, 4096)]:
        def decode(t, b=b, s_k=s_k):
            q = signed(t, (b, 32, 1, d), "bf16")
            k, v = (signed(t, (b, 8, s_k, d), "bf16") for _ in range(2))
            f = t.nn.functional.scaled_dot_product_attention
            return lambda: f(q, k, v, enable_gqa=True)
        cases.append(Case("attention", "flash_decode", f"b{b} h32/8 q1 k{s_k} d{d}", "bf16",
                          ("bytes", 2 * nbytes(b * s_k * 8 * d, "bf16")), decode))
    return cases


def reference():
    return memcpy_case()


def all_cases():
    return elementwise_cases() + data_cases() + fused_cases() + compute_cases() + attention_cases()


# ---- timing -------------------------------------------------------------------

def gpu_time_us(t, fn):
    for _ in range(WARMUP_RUNS):
        fn()
    t.cuda.synchronize()
    once = sample(t, fn, 1)
    reps = int(min(max(math.ceil(TARGET_SAMPLE_US / max(once, 1e-3)), 1), MAX_REPS))
    started = time.perf_counter()
    times = []
    while len(times) < MIN_SAMPLES or (len(times) < MAX_SAMPLES and time.perf_counter() - started < SAMPLE_BUDGET_S):
        times.append(sample(t, fn, reps))
    return statistics.median(times)


def sample(t, fn, reps):
    start, stop = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1000.0 / reps


def host_time_us(t, fn, sync_each):
    for _ in range(HOST_WARMUP_RUNS):
        fn()
    t.cuda.synchronize()
    times = []
    for _ in range(HOST_SAMPLES):
        started = time.perf_counter()
        for _ in range(HOST_REPS):
            fn()
            if sync_each:
                t.cuda.synchronize()
        t.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e6 / HOST_REPS)
    return statistics.median(times)


def run_case(t, case):
    """Returns (microseconds, None) or (None, error message)."""
    try:
        fn = case.build(t)
        kind = case.measure[0]
        if kind == "host_async":
            return host_time_us(t, fn, False), None
        if kind == "host_sync":
            return host_time_us(t, fn, True), None
        return gpu_time_us(t, fn), None
    except Exception as e:  # noqa: BLE001 - any failure becomes an ERROR row
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return None, f"{type(e).__name__}: {lines[0] if lines else ''}"
    finally:
        t.cuda.synchronize()
        t.cuda.empty_cache()


def row(case, us, error):
    rate = case.rate(us) if us is not None else None
    return {
        "family": case.family, "op": case.op, "shape": case.shape, "dtype": case.dtype,
        "metric": case.metric(),
        "torch_us": f"{us:.3f}" if us is not None else "",
        "gbps_or_tflops": f"{rate:.3f}" if rate is not None else "",
        "error": error or "",
    }


def console(r):
    key = f"{r['family']:<10} {r['op']:<22} {r['shape']:<34} {r['dtype']:<10}"
    if r["error"]:
        return f"{key} ERROR {r['error']}"
    rate = f"{float(r['gbps_or_tflops']):>9.1f} {r['metric']}" if r["gbps_or_tflops"] else ""
    return f"{key} {float(r['torch_us']):>12.2f} us {rate}"


# --sdpa-backend's names and the torch.backends.cuda switch of each.
SDPA_BACKENDS = {"flash": "enable_flash_sdp", "efficient": "enable_mem_efficient_sdp",
                 "cudnn": "enable_cudnn_sdp", "math": "enable_math_sdp"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("HIP_ON_CUDA_OUT", "bench-out"))
    parser.add_argument("--filter", default=None, help="run only cases whose key contains this text")
    parser.add_argument("--list", action="store_true", help="print the case keys and exit")
    parser.add_argument("--sdpa-backend", choices=sorted(SDPA_BACKENDS), default=None,
                        help="the only backend scaled_dot_product_attention may use")
    args = parser.parse_args()

    ref = reference()
    cases = [c for c in all_cases() if args.filter is None or args.filter in c.key()]
    if args.list:
        for c in [ref] + cases:
            print(f"{c.key()}\t{c.describe()}")
        return 0

    import torch as t  # only needed to measure

    if not t.cuda.is_available():
        print("torch_bench: no CUDA device", file=sys.stderr)
        return 1
    t.backends.cuda.matmul.allow_tf32 = False
    t.backends.cudnn.allow_tf32 = False
    t.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    t.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    t.backends.cudnn.benchmark = True
    if args.sdpa_backend is not None:
        for name, enable in SDPA_BACKENDS.items():
            getattr(t.backends.cuda, enable)(name == args.sdpa_backend)
    t.manual_seed(0)

    os.makedirs(args.out, exist_ok=True)
    props = t.cuda.get_device_properties(0)
    meta = {"device": t.cuda.get_device_name(0), "torch": t.__version__, "cuda": t.version.cuda,
            "cudnn": t.backends.cudnn.version(), "sm": f"{props.major}.{props.minor}",
            "sdpa_backend": args.sdpa_backend or "default"}
    with open(os.path.join(args.out, "bench_torch.json"), "w") as f:
        json.dump(meta, f)
        f.write("\n")
    print(f"device: {meta['device']} (torch {meta['torch']}, CUDA {meta['cuda']})")

    path = os.path.join(args.out, "bench_torch.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for case in [ref] + cases:
            us, error = run_case(t, case)
            r = row(case, us, error)
            print(console(r), flush=True)
            writer.writerow(r)
            f.flush()
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
