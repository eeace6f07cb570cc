//! [`FlashAttn`]: fused attention ([`crate::fused::flash_attn`]) as a Candle
//! op on HIP tensors.

use candle_core::custom_backend::{BoxedStorage, CustomStorage};
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Storage, Tensor};

use super::{boxed, hip_storage};
use crate::fused::{self, FlashAttnParams};

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
        candle_core::bail!("{} runs on HIP devices only", self.name())
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
        let out = match &self.alibi_slopes {
            None => fused::flash_attn(q, q_l, k, k_l, v, v_l, None, &self.params)?,
            Some(slopes) => {
                let (storage, slopes_l) = slopes.storage_and_layout();
                let Storage::Custom(s) = &*storage else {
                    candle_core::bail!("{name}: the alibi slopes are not on the HIP device")
                };
                let s = hip_storage(s.as_ref(), name)?;
                fused::flash_attn(q, q_l, k, k_l, v, v_l, Some((s, slopes_l)), &self.params)?
            }
        };
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
    };
    q.apply_op3_no_bwd(k, v, &op)
}
