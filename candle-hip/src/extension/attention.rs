//! [`FlashAttn`]: fused attention ([`crate::fused::flash_attn`]) as a Candle
//! op on HIP tensors, and [`flash_attn_quantized_linear`], a decoding
//! step's attention with its output projection against GGML blocks.

use candle_core::custom_backend::{BoxedStorage, CustomStorage};
use candle_core::quantized::QTensor;
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};

use super::{as_hip_device, boxed, hip_quantized, hip_storage, on_hip};
use crate::HipStorage;
use crate::fused::{self, FlashAttnExtras, FlashAttnParams};
use crate::quantized::QuantizedStorage;

/// Fused attention of `q` (batch, s_q, h_q, head_dim) over `k` and `v`
/// (batch, s_k, h_k, head_dim), f16 or bf16, as
/// `q.apply_op3_no_bwd(&k, &v, &op)`; the result is (batch, s_q, h_q,
/// head_dim). [`crate::fused::flash_attn`] states the masks and limits.
#[derive(Clone, Debug)]
pub struct FlashAttn {
    /// Scale, windows, soft-capping and kernel choice.
    pub params: FlashAttnParams,
    /// ALiBi slopes, one f32 per query head, on the same device.
    pub alibi_slopes: Option<Tensor>,
    /// The keys of each sequence, one u32 per batch element, on the same
    /// device ([`FlashAttnExtras::key_lens`]).
    pub key_lens: Option<Tensor>,
}

impl CustomOp3 for FlashAttn {
    fn name(&self) -> &'static str {
        "hip-flash-attn"
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
        super::hip_only(self.name())
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
        let name = self.name();
        let (q, k, v) = hip_qkv([q, k, v], name)?;
        let alibi = self.alibi_slopes.as_ref().map(|t| t.storage_and_layout());
        let key_lens = self.key_lens.as_ref().map(|t| t.storage_and_layout());
        let extras = FlashAttnExtras {
            alibi_slopes: alibi
                .as_ref()
                .map(|(s, l)| on_hip(s, l, "alibi slopes", name))
                .transpose()?,
            key_lens: key_lens
                .as_ref()
                .map(|(s, l)| on_hip(s, l, "key lengths", name))
                .transpose()?,
        };
        let out = fused::flash_attn(q, q_l, k, k_l, v, v_l, extras, &self.params)?;
        Ok((boxed(out), q_l.shape().clone()))
    }
}

/// The HIP storages of an attention's q, k and v (op `name`'s error for
/// another backend's).
fn hip_qkv<'a>(
    [q, k, v]: [&'a dyn CustomStorage; 3],
    name: &str,
) -> Result<(&'a HipStorage, &'a HipStorage, &'a HipStorage)> {
    Ok((
        hip_storage(q, name)?,
        hip_storage(k, name)?,
        hip_storage(v, name)?,
    ))
}

/// Fused attention of HIP tensors (see [`FlashAttn`]).
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    params: FlashAttnParams,
    alibi_slopes: Option<&Tensor>,
) -> Result<Tensor> {
    let op = FlashAttn {
        params,
        alibi_slopes: alibi_slopes.cloned(),
        key_lens: None,
    };
    q.apply_op3_no_bwd(k, v, &op)
}

/// Decoding attention over KV caches whose filled lengths live on the
/// device: `q` (batch, s_q ≤ [`fused::DECODE_MAX_QUERIES`], h_q, head_dim)
/// over `k_cache` and `v_cache` (batch, positions, h_k, head_dim), sequence
/// `b` seeing the first `key_lens[b]` positions (a u32 vector on the same
/// device; see [`FlashAttnExtras::key_lens`]). The kernels and their
/// arguments do not depend on the lengths, so a captured decode step
/// replays for every length.
pub fn flash_attn_with_key_lens(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    key_lens: &Tensor,
    params: FlashAttnParams,
) -> Result<Tensor> {
    let op = FlashAttn {
        params,
        alibi_slopes: None,
        key_lens: Some(key_lens.clone()),
    };
    q.apply_op3_no_bwd(k_cache, v_cache, &op)
}

/// The op behind [`flash_attn_quantized_linear`].
struct AttentionQuantizedLinear<'w> {
    params: FlashAttnParams,
    key_lens: Tensor,
    parts: Vec<(&'w QuantizedStorage, &'w Shape)>,
    residual: Option<Tensor>,
    /// The output's shape.
    shape: Shape,
}

impl CustomOp3 for AttentionQuantizedLinear<'_> {
    fn name(&self) -> &'static str {
        "hip-attention-quantized-linear"
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
        super::hip_only(self.name())
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
        let name = self.name();
        let (q, k, v) = hip_qkv([q, k, v], name)?;
        let (lens, lens_l) = self.key_lens.storage_and_layout();
        let residual = self.residual.as_ref().map(|t| t.storage_and_layout());
        let extras = FlashAttnExtras {
            alibi_slopes: None,
            key_lens: Some(on_hip(&lens, lens_l, "key lengths", name)?),
        };
        let residual = residual
            .as_ref()
            .map(|(s, l)| on_hip(s, l, "residual", name))
            .transpose()?;
        let out = QuantizedStorage::fused_attention_matvec_parts(
            &self.parts,
            (q, q_l),
            (k, k_l),
            (v, v_l),
            extras,
            &self.params,
            residual,
        )?;
        Ok((boxed(out), self.shape.clone()))
    }
}

/// One decoding step's attention and output projection against GGML
/// blocks: [`flash_attn_with_key_lens`] of `q` (one query of one sequence,
/// `(1, 1, h_q, head_dim)`), then `o · weightᵀ + residual` of its output
/// `o` against the weight stacked from `parts` along its outputs (each
/// `(n_i, h_q · head_dim)`, as [`super::fused_quantized_linear_parts`]
/// takes them), bit for bit those two ops; where the attention merges
/// flash-decoding's key splits, the merge rounds the product's activations
/// itself, one launch fewer. The output is `(1, 1, Σ n_i)`, the residual's
/// shape.
///
/// `Ok(None)` where the fused kernels do not take the operands (not on a
/// HIP device, weights that are not GGML blocks of one activation type, or
/// more than one query row): compute it unfused. Errors: those of the two
/// ops.
pub fn flash_attn_quantized_linear(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    key_lens: &Tensor,
    params: FlashAttnParams,
    parts: &[&QTensor],
    residual: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    let Some(blocks) = parts
        .iter()
        .map(|w| hip_quantized(w).map(|b| (b, w.shape())))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let (b, s_q, h_q, d) = q.dims4()?;
    let Some(width) = h_q.checked_mul(d) else {
        return Ok(None);
    };
    let row = Layout::contiguous((1, width));
    if as_hip_device(q.device()).is_none()
        || (b, s_q) != (1, 1)
        || !QuantizedStorage::fused_parts_take(&blocks, q.dtype(), &row, false)
    {
        return Ok(None);
    }
    let n = blocks.iter().map(|(_, s)| s.dims()[0]).sum::<usize>();
    let shape = Shape::from((1, 1, n));
    if let Some(r) = residual
        && r.shape() != &shape
    {
        candle_core::bail!(
            "flash_attn_quantized_linear: the residual is {:?}, the output {:?}",
            r.dims(),
            shape.dims()
        );
    }
    let op = AttentionQuantizedLinear {
        params,
        key_lens: key_lens.clone(),
        parts: blocks,
        residual: residual.cloned(),
        shape,
    };
    q.apply_op3_no_bwd(k_cache, v_cache, &op).map(Some)
}
