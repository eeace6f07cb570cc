//! [`FlashAttn`]: fused attention ([`crate::fused::flash_attn`]) as a Candle
//! op on HIP tensors.

use candle_core::custom_backend::{BoxedStorage, CustomStorage};
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};

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
