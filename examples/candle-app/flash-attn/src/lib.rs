//! candle-flash-attn's public API (0.11.1) on candle-hip: a crate that an
//! application puts in `[patch.crates-io]` as `candle-flash-attn`, so that
//! candle-transformers models built with their `flash-attn` feature run
//! fused attention on HIP tensors unchanged.
//!
//! On a HIP device with f16/bf16 operands and a head dim candle-hip has
//! kernels for (32, 64, 80, 96, 128, 256), the functions run
//! `candle_hip::fused::flash_attn`. Anywhere else (the CPU, f32, other head
//! dims) they compute the same attention unfused with tensor ops in f32
//! ([`attention_unfused`]), where the CUDA crate would fail: a model that
//! always takes the flash-attention path (Qwen3 in candle-transformers)
//! still runs on the CPU or in f32. The op structs ([`FlashAttn`],
//! [`FlashAttnVarLen`]) keep the CUDA crate's behaviour: HIP or an error.
//!
//! Masks follow flash-attention 2: `window_size_left = None` and
//! `window_size_right = Some(0)` is causal, the diagonal aligned to the
//! bottom right when `seqlen_q != seqlen_kv`; a query that sees no key gets
//! zeros. The variable-length functions run one sequence at a time (their
//! cumulative lengths are read to the host); paged KV caches
//! (`block_table`) are not supported.

#![warn(missing_docs)]

use candle::custom_backend::{BoxedStorage, CustomStorage};
use candle::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor};
use candle_hip::extension;
use candle_hip::fused::{AttentionKernel, FlashAttnParams, HEAD_DIMS};

/// Flash-attention v2 as a Candle op: `q.apply_op3(k, v, op)`.
pub struct FlashAttn {
    /// Multiplies `q·k`.
    pub softmax_scale: f32,
    /// ALiBi slopes, one f32 per query head.
    pub alibi_slopes: Option<Tensor>,
    /// Keys visible before a query's position (`None`: all).
    pub window_size_left: Option<usize>,
    /// Keys visible after a query's position (`None`: all; `Some(0)`: causal).
    pub window_size_right: Option<usize>,
    /// Soft-capping of the scaled scores (`softcap · tanh(s / softcap)`).
    pub softcap: Option<f32>,
}

impl FlashAttn {
    fn params(&self) -> FlashAttnParams {
        FlashAttnParams {
            softmax_scale: self.softmax_scale,
            window_left: self.window_size_left,
            window_right: self.window_size_right,
            softcap: self.softcap,
            kernel: AttentionKernel::Auto,
        }
    }

    fn hip_op(&self) -> extension::FlashAttn {
        extension::FlashAttn {
            params: self.params(),
            alibi_slopes: self.alibi_slopes.clone(),
            key_lens: None,
        }
    }
}

impl CustomOp3 for FlashAttn {
    fn name(&self) -> &'static str {
        "flash-attn"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        candle::bail!("no cpu support for flash-attn")
    }

    fn custom_fwd(
        &self,
        q: &dyn CustomStorage,
        q_l: &Layout,
        k: &dyn CustomStorage,
        k_l: &Layout,
        v: &dyn CustomStorage,
        v_l: &Layout,
    ) -> Result<(BoxedStorage, Shape)> {
        self.hip_op().custom_fwd(q, q_l, k, k_l, v, v_l)
    }
}

/// Whether the fused kernels take these operands.
fn fused_applies(q: &Tensor, k: &Tensor, v: &Tensor) -> bool {
    extension::as_hip_device(q.device()).is_some()
        && matches!(q.dtype(), DType::F16 | DType::BF16)
        && k.dtype() == q.dtype()
        && v.dtype() == q.dtype()
        && q.dims().len() == 4
        && HEAD_DIMS.contains(&q.dims()[3])
}

fn run(q: &Tensor, k: &Tensor, v: &Tensor, op: FlashAttn) -> Result<Tensor> {
    if fused_applies(q, k, v) {
        q.apply_op3(k, v, op)
    } else {
        attention_unfused(q, k, v, &op.params(), op.alibi_slopes.as_ref())
    }
}

/// The attention the fused kernels compute, with tensor ops in f32 on any
/// device: `q` (batch, s_q, h_q, d), `k` and `v` (batch, s_kv, h_kv, d),
/// flash-attention 2's masks, soft-capping and ALiBi slopes (one per query
/// head). The result has q's shape and dtype; rows that see no key are
/// zeros. Memory grows with `s_q · s_kv`: this is the reference, not the
/// fast path.
pub fn attention_unfused(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    params: &FlashAttnParams,
    alibi_slopes: Option<&Tensor>,
) -> Result<Tensor> {
    let (b, s_q, h_q, d) = q.dims4()?;
    let (kb, s_k, h_k, kd) = k.dims4()?;
    if kb != b || kd != d || v.dims() != k.dims() || h_k == 0 || h_q % h_k != 0 {
        candle::bail!(
            "flash-attn: q {:?}, k {:?}, v {:?} are not (batch, seq, heads, head_dim) with \
             matching batch and head_dim and key/value heads dividing the query heads",
            q.dims(),
            k.dims(),
            v.dims()
        )
    }
    let dev = q.device();
    let group = h_q / h_k;
    let heads = |x: &Tensor| -> Result<Tensor> {
        // (b, s, h_k, d) -> (b, h_q, s, d), each key/value head repeated for its group.
        let x = x.to_dtype(DType::F32)?.transpose(1, 2)?;
        let (b, h, s, d) = x.dims4()?;
        x.unsqueeze(2)?
            .expand((b, h, group, s, d))?
            .reshape((b, h * group, s, d))
    };
    let qf = q.to_dtype(DType::F32)?.transpose(1, 2)?.contiguous()?;
    let (kf, vf) = (heads(k)?, heads(v)?);
    let mut scores = (qf.matmul(&kf.t()?)? * params.softmax_scale as f64)?;
    if let Some(cap) = params.softcap.filter(|&c| c > 0.0) {
        scores = ((scores / cap as f64)?.tanh()? * cap as f64)?;
    }
    // Visibility and ALiBi distances, per (query row, key).
    let off = s_k as i64 - s_q as i64;
    let lo = |i: i64| params.window_left.map_or(i64::MIN, |w| i + off - w as i64);
    let hi = |i: i64| params.window_right.map_or(i64::MAX, |w| i + off + w as i64);
    let mut mask = Vec::with_capacity(s_q * s_k);
    let mut distance = Vec::with_capacity(s_q * s_k);
    let mut seen = Vec::with_capacity(s_q);
    for i in 0..s_q as i64 {
        let visible = |j: i64| j >= lo(i) && j <= hi(i);
        seen.push(if (0..s_k as i64).any(visible) {
            1f32
        } else {
            0.0
        });
        for j in 0..s_k as i64 {
            mask.push(if visible(j) { 0f32 } else { f32::NEG_INFINITY });
            distance.push((i + off - j).abs() as f32);
        }
    }
    let mask = Tensor::from_vec(mask, (s_q, s_k), dev)?;
    scores = scores.broadcast_add(&mask)?;
    if let Some(slopes) = alibi_slopes {
        let distance = Tensor::from_vec(distance, (1, 1, s_q, s_k), dev)?;
        let slopes = slopes.to_dtype(DType::F32)?.reshape((1, h_q, 1, 1))?;
        scores = scores.broadcast_sub(&distance.broadcast_mul(&slopes)?)?;
    }
    // Masked scores become -1e30 rather than -inf, so that a row with no
    // visible key is not NaN; `seen` then zeroes that row.
    let seen = Tensor::from_vec(seen, (s_q, 1), dev)?;
    let probs = candle_nn::ops::softmax_last_dim(&scores.maximum(-1e30)?)?;
    let out = probs.matmul(&vf)?.broadcast_mul(&seen)?;
    out.transpose(1, 2)?.contiguous()?.to_dtype(q.dtype())
}

fn op(
    softmax_scale: f32,
    alibi_slopes: Option<&Tensor>,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: Option<f32>,
) -> FlashAttn {
    FlashAttn {
        softmax_scale,
        alibi_slopes: alibi_slopes.cloned(),
        window_size_left,
        window_size_right,
        softcap,
    }
}

/// Flash-attention v2: `softmax(q·kᵀ·softmax_scale)·v`, causal or not.
///
/// `q` is (batch, seq_len_q, num_heads_q, head_size), `k` and `v` (batch,
/// seq_len_kv, num_heads_kv, head_size) with num_heads_kv dividing
/// num_heads_q; the result has q's shape.
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    run(
        q,
        k,
        v,
        op(softmax_scale, None, None, causal.then_some(0), None),
    )
}

/// [`flash_attn`] with a window: keys up to `window_size_left` before and
/// `window_size_right` after a query's position (`None`: unlimited).
pub fn flash_attn_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    run(
        q,
        k,
        v,
        op(
            softmax_scale,
            None,
            window_size_left,
            window_size_right,
            None,
        ),
    )
}

/// [`flash_attn`] with ALiBi slopes (f32, one per query head).
pub fn flash_attn_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    run(
        q,
        k,
        v,
        op(
            softmax_scale,
            Some(alibi_slopes),
            None,
            causal.then_some(0),
            None,
        ),
    )
}

/// [`flash_attn_windowed`] with ALiBi slopes.
pub fn flash_attn_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let op = op(
        softmax_scale,
        Some(alibi_slopes),
        window_size_left,
        window_size_right,
        None,
    );
    run(q, k, v, op)
}

/// [`flash_attn_alibi_windowed`] with Gemma-style soft-capping of the
/// scaled scores, `softcap · tanh(s / softcap)`.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let op = op(
        softmax_scale,
        alibi_slopes,
        window_size_left,
        window_size_right,
        Some(softcap),
    );
    run(q, k, v, op)
}

/// Flash-attention v2 over sequences of different lengths packed along the
/// first dimension: `q` (total_q, num_heads_q, head_size), `k` and `v`
/// (total_kv, num_heads_kv, head_size); `seqlens_q` and `seqlens_k` hold the
/// batch_size + 1 cumulative offsets (u32).
pub struct FlashAttnVarLen {
    /// Multiplies `q·k`.
    pub softmax_scale: f32,
    /// The longest query sequence (kept for API compatibility).
    pub max_seqlen_q: usize,
    /// The longest key/value sequence (kept for API compatibility).
    pub max_seqlen_k: usize,
    /// Cumulative query offsets, batch_size + 1 of them.
    pub seqlens_q: Tensor,
    /// Cumulative key/value offsets, batch_size + 1 of them.
    pub seqlens_k: Tensor,
    /// Paged KV cache block table: not supported (an error).
    pub block_table: Option<Tensor>,
    /// Prefix ranges of paged caches: not supported (an error).
    pub mm_prefix_ranges: Option<Tensor>,
    /// Page size of paged caches (unused without a block table).
    pub page_block_size: Option<usize>,
    /// ALiBi slopes, one f32 per query head.
    pub alibi_slopes: Option<Tensor>,
    /// Keys visible before a query's position (`None`: all).
    pub window_size_left: Option<usize>,
    /// Keys visible after a query's position (`None`: all; `Some(0)`: causal).
    pub window_size_right: Option<usize>,
    /// Soft-capping of the scaled scores.
    pub softcap: Option<f32>,
}

impl FlashAttnVarLen {
    /// Runs each sequence on its own and concatenates the results.
    pub fn forward(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        if self.block_table.is_some() || self.mm_prefix_ranges.is_some() {
            candle::bail!("flash-attn on HIP: paged KV caches and prefix ranges are not supported")
        }
        let offsets = |t: &Tensor| -> Result<Vec<usize>> {
            Ok(t.to_dtype(DType::U32)?
                .to_vec1::<u32>()?
                .into_iter()
                .map(|x| x as usize)
                .collect())
        };
        let (oq, ok) = (offsets(&self.seqlens_q)?, offsets(&self.seqlens_k)?);
        if oq.len() != ok.len() || oq.is_empty() {
            candle::bail!(
                "flash-attn varlen: seqlens_q has {} offsets, seqlens_k {}",
                oq.len(),
                ok.len()
            )
        }
        let mut outs = Vec::with_capacity(oq.len() - 1);
        for (wq, wk) in oq.windows(2).zip(ok.windows(2)) {
            if wq[1] < wq[0] || wk[1] < wk[0] {
                candle::bail!("flash-attn varlen: offsets must not decrease ({oq:?}, {ok:?})")
            }
            let one = |x: &Tensor, w: &[usize]| x.narrow(0, w[0], w[1] - w[0])?.unsqueeze(0);
            let op = op(
                self.softmax_scale,
                self.alibi_slopes.as_ref(),
                self.window_size_left,
                self.window_size_right,
                self.softcap,
            );
            let out = run(&one(q, wq)?, &one(k, wk)?, &one(v, wk)?, op)?;
            outs.push(out.squeeze(0)?);
        }
        Tensor::cat(&outs, 0)
    }
}

#[allow(clippy::too_many_arguments)]
fn varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: Option<f32>,
) -> Result<Tensor> {
    FlashAttnVarLen {
        softmax_scale,
        max_seqlen_q,
        max_seqlen_k,
        seqlens_q: seqlens_q.clone(),
        seqlens_k: seqlens_k.clone(),
        block_table: None,
        mm_prefix_ranges: None,
        page_block_size: None,
        alibi_slopes: alibi_slopes.cloned(),
        window_size_left,
        window_size_right,
        softcap,
    }
    .forward(q, k, v)
}

/// [`FlashAttnVarLen`], causal or not.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let right = causal.then_some(0);
    varlen(
        q,
        k,
        v,
        None,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale,
        None,
        right,
        None,
    )
}

/// [`FlashAttnVarLen`] with a window.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let (l, r) = (window_size_left, window_size_right);
    varlen(
        q,
        k,
        v,
        None,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale,
        l,
        r,
        None,
    )
}

/// [`FlashAttnVarLen`] over a paged KV cache: not supported on HIP (an
/// error naming it).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_paged_windowed(
    _q: &Tensor,
    _k: &Tensor,
    _v: &Tensor,
    _seqlens_q: &Tensor,
    _seqlens_k: &Tensor,
    _block_table: &Tensor,
    _mm_prefix_ranges: Option<&Tensor>,
    _max_seqlen_q: usize,
    _max_seqlen_k: usize,
    _softmax_scale: f32,
    _window_size_left: Option<usize>,
    _window_size_right: Option<usize>,
    _page_block_size: usize,
    _softcap: Option<f32>,
) -> Result<Tensor> {
    candle::bail!("flash-attn on HIP: paged KV caches (block_table) are not supported")
}

/// [`FlashAttnVarLen`] with ALiBi slopes.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let (s, right) = (Some(alibi_slopes), causal.then_some(0));
    varlen(
        q,
        k,
        v,
        s,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale,
        None,
        right,
        None,
    )
}

/// [`FlashAttnVarLen`] with ALiBi slopes and a window.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let (s, l, r) = (Some(alibi_slopes), window_size_left, window_size_right);
    varlen(
        q,
        k,
        v,
        s,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale,
        l,
        r,
        None,
    )
}

/// [`FlashAttnVarLen`] with ALiBi slopes, a window and soft-capping.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let (l, r, c) = (window_size_left, window_size_right, Some(softcap));
    varlen(
        q,
        k,
        v,
        alibi_slopes,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale,
        l,
        r,
        c,
    )
}
