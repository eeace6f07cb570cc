//! [`FlashAttn`]: fused attention ([`crate::fused::flash_attn`]) as a Candle
//! op on HIP tensors; [`flash_decode_splits_with_key_lens`] and
//! [`flash_merge`], flash-decoding in its two halves.

use candle_core::backend::BackendStorage;
use candle_core::custom_backend::{BoxedStorage, CustomStorage};
use candle_core::{
    CpuStorage, CustomOp1, CustomOp3, DType, Layout, Result, Shape, Storage, Tensor,
};

use super::{boxed, hip_storage, on_hip};
use crate::fused::{self, FlashAttnExtras, FlashAttnParams};

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
    /// Whether the op returns flash-decoding's records before their merge
    /// ([`fused::flash_decode_splits`]) instead of the attention's output.
    pub splits: bool,
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
        let (q, k, v) = (
            hip_storage(q, name)?,
            hip_storage(k, name)?,
            hip_storage(v, name)?,
        );
        let alibi = self.alibi_slopes.as_ref().map(|t| t.storage_and_layout());
        let key_lens = self.key_lens.as_ref().map(|t| t.storage_and_layout());
        let extras = extras(name, alibi.as_ref(), key_lens.as_ref())?;
        let (out, shape) = match self.splits {
            false => {
                let out = fused::flash_attn(q, q_l, k, k_l, v, v_l, extras, &self.params)?;
                (out, q_l.shape().clone())
            }
            true => fused::flash_decode_splits(q, q_l, k, k_l, v, v_l, extras, &self.params)?,
        };
        Ok((boxed(out), shape))
    }
}

/// A storage guard with its layout, as `Tensor::storage_and_layout` gives it.
type Borrowed<'a, G> = (G, &'a Layout);

/// The extras of a fused attention from the borrowed storages of its
/// tensors (op `name`'s error when one is not on a HIP device).
fn extras<'a, G: std::ops::Deref<Target = Storage>>(
    name: &str,
    alibi: Option<&'a Borrowed<'a, G>>,
    key_lens: Option<&'a Borrowed<'a, G>>,
) -> Result<FlashAttnExtras<'a>> {
    Ok(FlashAttnExtras {
        alibi_slopes: alibi
            .map(|(s, l)| on_hip(s, l, "alibi slopes", name))
            .transpose()?,
        key_lens: key_lens
            .map(|(s, l)| on_hip(s, l, "key lengths", name))
            .transpose()?,
    })
}

/// The op behind [`flash_merge`].
struct FlashMerge {
    dtype: DType,
}

impl CustomOp1 for FlashMerge {
    fn name(&self) -> &'static str {
        "hip-flash-merge"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        super::hip_only(self.name())
    }

    fn custom_fwd(&self, part: &dyn CustomStorage, l: &Layout) -> Result<(BoxedStorage, Shape)> {
        let part = hip_storage(part, self.name())?;
        let out = fused::flash_merge(part, l, self.dtype)?;
        let [b, h_q, s_q, _, d] = fused::splits_dims("flash_merge", part.dtype(), l)?;
        Ok((boxed(out), Shape::from((b, s_q, h_q, d))))
    }
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
        splits: false,
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
    with_key_lens([q, k_cache, v_cache], key_lens, params, false)
}

/// [`flash_attn_with_key_lens`] without the merge of flash-decoding's key
/// splits: the records, an f32 tensor `(batch, h_q, s_q, splits, head_dim
/// + 2)` ([`fused::flash_decode_splits`]). [`flash_merge`] of them is
/// [`flash_attn_with_key_lens`]'s output bit for bit; a quantized product
/// merges them in its own activation rounding
/// ([`super::FusedInput::Splits`]), one launch fewer.
pub fn flash_decode_splits_with_key_lens(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    key_lens: &Tensor,
    params: FlashAttnParams,
) -> Result<Tensor> {
    with_key_lens([q, k_cache, v_cache], key_lens, params, true)
}

/// [`FlashAttn`] of `q` over the caches with `key_lens`, its output or its
/// records (`splits`).
fn with_key_lens(
    [q, k_cache, v_cache]: [&Tensor; 3],
    key_lens: &Tensor,
    params: FlashAttnParams,
    splits: bool,
) -> Result<Tensor> {
    let op = FlashAttn {
        params,
        alibi_slopes: None,
        key_lens: Some(key_lens.clone()),
        splits,
    };
    q.apply_op3_no_bwd(k_cache, v_cache, &op)
}

/// The attention's output `(batch, s_q, h_q, head_dim)` in `dtype` (f16 or
/// bf16) from flash-decoding's records `part`
/// ([`flash_decode_splits_with_key_lens`]), one launch.
pub fn flash_merge(part: &Tensor, dtype: DType) -> Result<Tensor> {
    part.apply_op1_no_bwd(&FlashMerge { dtype })
}
