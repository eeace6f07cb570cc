//! Fused attention (`candle_hip::fused::flash_attn`) at the shapes
//! Llama-3-8B uses (head dim 128): prefill over 512 to 16k tokens, causal and
//! not, 32 to 128 (batch x heads); decode of one token over 1k to 32k cached
//! keys with 8 key/value heads for 32 query heads. The unfused path
//! (`q·kᵀ`, scale, softmax, `·v` with rocBLAS and our softmax; no mask, so
//! it does less than the causal fused kernel) is measured on the prefill
//! shapes up to 4k. PyTorch's `scaled_dot_product_attention` runs the same
//! keys in `benches/torch_bench.py`.
//!
//! Work: prefill counts `4·b·h·s²·d` FLOPs (half of it when causal, as
//! flash-attention counts); decode counts the bytes of K and V read once.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use candle_hip::fused::{self, FlashAttnParams};

use crate::cases::{Case, Measure, bytes, op};
use crate::inputs;

const D: usize = 128;

/// Every attention case.
pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (b, h, s, causal) in [
        (1, 32, 512, true),
        (1, 32, 2048, true),
        (1, 32, 4096, true),
        (1, 32, 4096, false),
        (4, 32, 4096, true),
        (1, 32, 16384, true),
    ] {
        cases.push(prefill(b, h, s, causal));
        if s <= 4096 && b == 1 {
            cases.push(unfused(b, h, s));
        }
    }
    for (b, s_k) in [(1, 1024), (1, 4096), (1, 32768), (8, 4096)] {
        cases.push(decode(b, s_k));
    }
    cases
}

/// `b{b} h{h} s{s} d128[ causal]`, the key both benchmark sides build.
fn shape(b: usize, h: usize, s: usize, causal: bool) -> String {
    format!("b{b} h{h} s{s} d{D}{}", if causal { " causal" } else { "" })
}

fn prefill(b: usize, h: usize, s: usize, causal: bool) -> Case {
    let flops = 4 * b * h * s * s * D / if causal { 2 } else { 1 };
    let dtype = DType::BF16;
    Case::new(
        "attention",
        "flash_attn",
        shape(b, h, s, causal),
        dtype.as_str(),
        Measure::Flops(flops as u64),
        move |dev| {
            let l = Layout::contiguous((b, s, h, D));
            let q = inputs::signed(dev, &[b, s, h, D], dtype)?;
            let k = inputs::signed(dev, &[b, s, h, D], dtype)?;
            let v = inputs::signed(dev, &[b, s, h, D], dtype)?;
            let p = FlashAttnParams::new(1.0 / (D as f32).sqrt(), causal);
            op(move || {
                fused::flash_attn(&q, &l, &k, &l, &v, &l, Default::default(), &p)?;
                Ok(())
            })
        },
    )
}

/// Scores, softmax and the weighted sum as separate ops, (b·h) batched.
fn unfused(b: usize, h: usize, s: usize) -> Case {
    let flops = 4 * b * h * s * s * D;
    let dtype = DType::BF16;
    let n = b * h;
    Case::new(
        "attention",
        "attention_unfused",
        shape(b, h, s, false),
        dtype.as_str(),
        Measure::Flops(flops as u64),
        move |dev| {
            let ql = Layout::contiguous((n, s, D));
            let kt = Layout::contiguous((n, s, D)).transpose(1, 2)?;
            let sl = Layout::contiguous((n, s, s));
            let q = inputs::signed(dev, &[n, s, D], dtype)?;
            let k = inputs::signed(dev, &[n, s, D], dtype)?;
            let v = inputs::signed(dev, &[n, s, D], dtype)?;
            let scale = 1.0 / (D as f64).sqrt();
            op(move || {
                let scores = q.matmul(&k, (n, s, s, D), &ql, &kt)?;
                let scores = scores.affine(&sl, scale, 0.0)?;
                let p = fused::softmax_last_dim(&scores, &sl)?;
                p.matmul(&v, (n, s, D, s), &sl, &ql)?;
                Ok(())
            })
        },
    )
}

/// One query token per sequence over `s_k` cached keys, 32 query heads
/// sharing 8 key/value heads.
fn decode(b: usize, s_k: usize) -> Case {
    let (h_q, h_k) = (32, 8);
    let dtype = DType::BF16;
    let work = Measure::Bytes(2 * bytes(b * s_k * h_k * D, dtype));
    Case::new(
        "attention",
        "flash_decode",
        format!("b{b} h{h_q}/{h_k} q1 k{s_k} d{D}"),
        dtype.as_str(),
        work,
        move |dev| {
            let ql = Layout::contiguous((b, 1, h_q, D));
            let kl = Layout::contiguous((b, s_k, h_k, D));
            let q = inputs::signed(dev, &[b, 1, h_q, D], dtype)?;
            let k = inputs::signed(dev, &[b, s_k, h_k, D], dtype)?;
            let v = inputs::signed(dev, &[b, s_k, h_k, D], dtype)?;
            let p = FlashAttnParams::new(1.0 / (D as f32).sqrt(), true);
            op(move || {
                fused::flash_attn(&q, &ql, &k, &kl, &v, &kl, Default::default(), &p)?;
                Ok(())
            })
        },
    )
}
