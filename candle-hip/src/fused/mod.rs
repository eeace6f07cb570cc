//! The fused ops transformer models call, as HIP kernels, with the
//! arguments of candle-nn's ops (storage-level: each takes the storages and
//! layouts that the candle tensors hold, and returns a new contiguous
//! storage):
//!
//! | function | candle op | dtypes |
//! |---|---|---|
//! | [`softmax_last_dim`] | `candle_nn::ops::softmax_last_dim` | f16, bf16, f32, f64 |
//! | [`rms_norm`] | `candle_nn::ops::rms_norm` | f16, bf16, f32, f64 |
//! | [`layer_norm`] | `candle_nn::ops::layer_norm` | f16, bf16, f32, f64 |
//! | [`rope_i`], [`rope`], [`rope_thd`] | `candle_nn::rotary_emb::{rope_i, rope, rope_thd}` | f16, bf16, f32, f64 |
//! | [`rope_append`] | one decoding step's `rope`/`rope_i` of its query and key heads and the key/value-cache write at a device position | f16, bf16, f32, f64 |
//! | [`sigmoid`] | `candle_nn::ops::sigmoid` | f16, bf16, f32, f64 |
//! | [`silu_mul`] | `silu(gate) * up` (`candle_nn::ops::swiglu` on the two halves) | f16, bf16, f32, f64 |
//! | [`arg_sort_last_dim`] | `Tensor::arg_sort_last_dim` | every dtype (u32 output) |
//! | [`flash_attn`] | `candle_flash_attn::flash_attn*` | f16, bf16 |
//! | [`fused_linear`] | one token's `Linear` with an RMS norm or SwiGLU before it and a residual addition after it | f16, bf16, f32, f64 |
//! | [`fused_linear_swiglu`] | one token's gate/up `Linear` (with an RMS norm before it) and SwiGLU's activation after it | f16, bf16, f32, f64 |
//! | [`fused_linear_rope_append`] | one token's q/k/v `Linear` (with an RMS norm before it) and [`rope_append`] after it | f16, bf16, f32, f64 |
//!
//! They are functions rather than candle custom ops because candle-nn's ops
//! (and candle-core 0.11.1's `Tensor`) only reach the CPU, CUDA and Metal
//! backends; the candle extension patch routes them here.
//!
//! Numerics: f16/bf16 compute in f32 and f64 in f64, each output rounded
//! once; softmax subtracts the row maximum; layer_norm takes the variance of
//! the centred values. Results therefore differ from candle's CPU versions
//! (which round intermediate results to the storage type) by rounding only.

mod argsort;
pub(crate) mod attention;
mod linear;
mod rope;
mod rows;

pub use argsort::{arg_sort_last_dim, shared_sort_max_cols};
pub use attention::{
    AttentionKernel, DECODE_MAX_QUERIES, FlashAttnExtras, FlashAttnParams, HEAD_DIMS, flash_attn,
};
pub(crate) use linear::operand_vector;
pub use linear::{
    LinearInput, MAX_STAGED_BYTES, fused_linear, fused_linear_plan, fused_linear_rope_append,
    fused_linear_swiglu,
};
pub(crate) use rope::StepRope;
pub use rope::{StepCache, StepTarget, rope, rope_append, rope_i, rope_thd};
pub use rows::{layer_norm, rms_norm, softmax_last_dim};

use candle_core::Layout;

use crate::kernel::catalogue as cat;
use crate::ops::elementwise;
use crate::storage::HipStorage;

/// `1 / (1 + exp(-x))` element-wise over any layout
/// (`candle_nn::ops::sigmoid`).
pub fn sigmoid(x: &HipStorage, layout: &Layout) -> candle_core::Result<HipStorage> {
    elementwise::unary(x, layout, &cat::SIGMOID, "sigmoid")
}

/// `silu(gate) * up` element-wise over any layouts of one shape, in one
/// launch (SwiGLU's activation: `candle_nn::ops::swiglu` of `[gate, up]`).
pub fn silu_mul(
    gate: &HipStorage,
    gate_l: &Layout,
    up: &HipStorage,
    up_l: &Layout,
) -> candle_core::Result<HipStorage> {
    const OP: &str = "silu_mul";
    if gate_l.dims() != up_l.dims() {
        return Err(crate::error::invalid(
            OP,
            format!(
                "gate {:?} and up {:?} differ in shape",
                gate_l.dims(),
                up_l.dims()
            ),
        ));
    }
    gate.check_device(up, OP)?;
    elementwise::binary(gate, up, gate_l, up_l, &cat::SILU_MUL, OP)
}
