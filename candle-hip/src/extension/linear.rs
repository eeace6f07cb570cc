//! [`fused_linear`]: one token's linear layer with the norm or activation
//! before it and the residual addition after it in one launch
//! ([`crate::fused::fused_linear`]), on HIP tensors; [`fused_linear_swiglu`]
//! and [`fused_linear_rope_append`] with the op after the product in that
//! launch too (SwiGLU's activation; RoPE and the cache write);
//! [`fused_quantized_linear`]
//! the same against a quantized weight, in two
//! ([`QuantizedStorage::fused_matvec`]).

use std::ops::Deref;

use candle_core::custom_backend::{BoxedStorage, CustomStorage};
use candle_core::quantized::QTensor;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Storage, Tensor};

use super::decode::{Step, StepWrite};
use super::{boxed, hip_quantized, hip_storage, on_hip};
use crate::fused::{self, LinearInput, StepCache};
use crate::quantized::QuantizedStorage;

/// What [`fused_linear`] multiplies the weight with.
#[derive(Clone, Copy, Debug)]
pub enum FusedInput<'a> {
    /// `x` itself.
    Plain,
    /// candle-nn's `rms_norm(x, weight, eps)`.
    RmsNorm {
        /// The norm's scale, one element per column of `x`.
        weight: &'a Tensor,
        /// Added to the mean square.
        eps: f32,
    },
    /// `silu(gate) · up` of `x = [gate, up]` (its last dimension holds the
    /// two halves, as a fused gate/up projection writes them).
    SwiGlu,
}

/// [`FusedInput`] holding its tensor, as the op keeps it.
#[derive(Clone, Debug)]
pub(super) enum OwnedInput {
    Plain,
    RmsNorm { weight: Tensor, eps: f32 },
    SwiGlu,
}

/// The op behind [`fused_linear`] (`x'·wᵀ (+ residual)` of `x` and `w`) and
/// [`fused_linear_swiglu`] (`swiglu`: SwiGLU's activation of the product's
/// halves).
#[derive(Clone, Debug)]
struct FusedLinear {
    input: OwnedInput,
    residual: Option<Tensor>,
    swiglu: bool,
    /// The output's shape.
    shape: Shape,
}

impl CustomOp2 for FusedLinear {
    fn name(&self) -> &'static str {
        match self.swiglu {
            true => "hip-fused-linear-swiglu",
            false => "hip-fused-linear",
        }
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        super::hip_only(self.name())
    }

    fn custom_fwd(
        &self,
        x: &dyn CustomStorage,
        x_l: &Layout,
        w: &dyn CustomStorage,
        w_l: &Layout,
    ) -> Result<(BoxedStorage, Shape)> {
        let name = self.name();
        let (x, w) = (hip_storage(x, name)?, hip_storage(w, name)?);
        // The operands' storages stay borrowed while the kernel is queued.
        let operands = borrow_operands(&self.input, self.residual.as_ref());
        let (input, residual) = operands.on_hip(name)?;
        let out = match self.swiglu {
            true => fused::fused_linear_swiglu(x, x_l, w, w_l, input)?,
            false => fused::fused_linear(x, x_l, w, w_l, input, residual)?,
        };
        Ok((boxed(out), self.shape.clone()))
    }
}

/// The storages of a fused product's norm weight and residual, borrowed
/// from their tensors (`G`: the tensor's storage guard).
pub(super) struct Operands<'t, G> {
    input: &'t OwnedInput,
    norm: Option<(G, &'t Layout)>,
    residual: Option<(G, &'t Layout)>,
}

/// Borrows the storages of `input`'s norm weight and of `residual`.
pub(super) fn borrow_operands<'t>(
    input: &'t OwnedInput,
    residual: Option<&'t Tensor>,
) -> Operands<'t, impl Deref<Target = Storage> + 't> {
    let norm = match input {
        OwnedInput::RmsNorm { weight, .. } => Some(weight.storage_and_layout()),
        _ => None,
    };
    let residual = residual.map(Tensor::storage_and_layout);
    Operands {
        input,
        norm,
        residual,
    }
}

impl<G: Deref<Target = Storage>> Operands<'_, G> {
    /// The input and the residual as the kernels take them (op `name`'s
    /// error when one is not on a HIP device).
    #[allow(clippy::type_complexity)]
    pub(super) fn on_hip(
        &self,
        name: &str,
    ) -> Result<(LinearInput<'_>, Option<(&crate::HipStorage, &Layout)>)> {
        let input = match (self.input, &self.norm) {
            (OwnedInput::RmsNorm { eps, .. }, Some((s, l))) => LinearInput::RmsNorm {
                weight: on_hip(s, l, "norm weight", name)?,
                eps: *eps,
            },
            (OwnedInput::SwiGlu, _) => LinearInput::SwiGlu,
            _ => LinearInput::Plain,
        };
        let residual = self
            .residual
            .as_ref()
            .map(|(s, l)| on_hip(s, l, "residual", name))
            .transpose()?;
        Ok((input, residual))
    }
}

impl From<FusedInput<'_>> for OwnedInput {
    fn from(input: FusedInput) -> Self {
        match input {
            FusedInput::Plain => OwnedInput::Plain,
            FusedInput::RmsNorm { weight, eps } => OwnedInput::RmsNorm {
                weight: weight.clone(),
                eps,
            },
            FusedInput::SwiGlu => OwnedInput::SwiGlu,
        }
    }
}

/// The output shape of a fused product of `x` with `n` outputs (`x`'s dims
/// with the last one `n`), checked against the residual's (`op` names the
/// function in the error).
fn output_shape(op: &str, x: &Tensor, n: usize, residual: Option<&Tensor>) -> Result<Shape> {
    let mut dims = x.dims().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = n;
    }
    let shape = Shape::from(dims);
    if let Some(r) = residual
        && r.shape() != &shape
    {
        candle_core::bail!(
            "{op}: the residual is {:?}, the output {:?}",
            r.dims(),
            shape.dims()
        );
    }
    Ok(shape)
}

/// One token's `x'·weightᵀ (+ residual)` in one launch, where `x'` is `x`,
/// its RMS norm or its SwiGLU (`input`), `weight` is an `(n, k)` matrix as
/// candle-nn's `Linear` holds it and `residual` has the output's shape (`x`'s
/// dims with the last one `n`). `x` holds one row of `k` elements (`2k` for
/// SwiGLU), e.g. `(1, 1, k)`. What it computes equals candle-nn's separate
/// ops up to rounding: `x'` is rounded to the dtype as they round it, the
/// sum with the residual once.
///
/// `Ok(None)` when the fused kernel does not take the operands (not on a
/// HIP device, more than one row, a weight the kernel cannot stream, a row
/// too long to stage: [`fused::fused_linear_plan`]): compute it unfused.
/// Errors: a residual of another shape, operands on different devices or of
/// different dtypes.
pub fn fused_linear(
    x: &Tensor,
    weight: &Tensor,
    input: FusedInput,
    residual: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    let swiglu = matches!(input, FusedInput::SwiGlu);
    if super::as_hip_device(x.device()).is_none()
        || fused::fused_linear_plan(x.dtype(), x.layout(), weight.layout(), swiglu).is_none()
    {
        return Ok(None);
    }
    let shape = output_shape("fused_linear", x, weight.dim(0)?, residual)?;
    let op = FusedLinear {
        input: input.into(),
        residual: residual.cloned(),
        swiglu: false,
        shape,
    };
    x.apply_op2_no_bwd(weight, &op).map(Some)
}

/// One token's gate/up projection and SwiGLU's activation in one launch:
/// `silu(g)·u` where `[g, u] = x'·weightᵀ`, `weight` the `(2n, k)` matrix of
/// the gate's rows then the up projection's (concatenated along the
/// outputs) and `x'` as [`fused_linear`] takes it. Equals [`fused_linear`]
/// followed by [`super::silu_mul`] of its two halves, bit for bit. The
/// output has `x`'s dims with the last one `n`.
///
/// `Ok(None)` where [`fused_linear`] gives it, and for an odd number of
/// weight rows: compute it unfused.
pub fn fused_linear_swiglu(
    x: &Tensor,
    weight: &Tensor,
    input: FusedInput,
) -> Result<Option<Tensor>> {
    let swiglu = matches!(input, FusedInput::SwiGlu);
    let rows = weight.dim(0)?;
    if super::as_hip_device(x.device()).is_none()
        || rows % 2 == 1
        || fused::fused_linear_plan(x.dtype(), x.layout(), weight.layout(), swiglu).is_none()
    {
        return Ok(None);
    }
    let op = FusedLinear {
        input: input.into(),
        residual: None,
        swiglu: true,
        shape: output_shape("fused_linear_swiglu", x, rows / 2, None)?,
    };
    x.apply_op2_no_bwd(weight, &op).map(Some)
}

/// One decoding step's query/key/value projection (batch 1), RoPE and cache
/// write in one launch, in place in `state`: `x'·weightᵀ` (`x'` as
/// [`fused_linear`] takes it; `weight` the q, k and v projections stacked,
/// `(heads + 2 kv_heads) head_dim` rows), then what [`super::rope_append`]
/// does with those outputs (`state`, `cos`, `sin`, `pos` and `cache` as it
/// takes them). Leaves the state bit for bit as [`fused_linear`] followed by
/// [`super::rope_append`] does.
///
/// `Ok(false)`, writing nothing, where [`fused_linear`] gives `None`:
/// compute it unfused. Errors: those of both.
#[allow(clippy::too_many_arguments)]
pub fn fused_linear_rope_append(
    state: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    input: FusedInput,
    cos: &Tensor,
    sin: &Tensor,
    pos: &Tensor,
    cache: StepCache,
) -> Result<bool> {
    let swiglu = matches!(input, FusedInput::SwiGlu);
    if super::as_hip_device(x.device()).is_none()
        || fused::fused_linear_plan(x.dtype(), x.layout(), weight.layout(), swiglu).is_none()
    {
        return Ok(false);
    }
    let name = "hip-fused-linear-rope-append";
    let op = StepWrite::new(name, [cos, sin, pos], cache, input, |step: Step| {
        let (x, x_l) = step.x;
        // The weight's storage stays borrowed while the kernel is queued.
        let (w, w_l) = weight.storage_and_layout();
        let (w, w_l) = on_hip(&w, w_l, "weight", name)?;
        fused::fused_linear_rope_append(x, x_l, w, w_l, step.input, step.target)
    });
    op.apply(state, x)?;
    Ok(true)
}

/// The op behind [`fused_quantized_linear_parts`]: `x'·Wᵀ (+ residual)` of
/// `x` and the blocks of the parts of `W`.
struct FusedQuantizedLinear<'w> {
    parts: Vec<(&'w QuantizedStorage, &'w Shape)>,
    input: OwnedInput,
    residual: Option<Tensor>,
    /// The output's shape.
    shape: Shape,
}

impl CustomOp1 for FusedQuantizedLinear<'_> {
    fn name(&self) -> &'static str {
        "hip-fused-quantized-linear"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        super::hip_only(self.name())
    }

    fn custom_fwd(&self, x: &dyn CustomStorage, x_l: &Layout) -> Result<(BoxedStorage, Shape)> {
        let name = self.name();
        let x = hip_storage(x, name)?;
        let operands = borrow_operands(&self.input, self.residual.as_ref());
        let (input, residual) = operands.on_hip(name)?;
        let out = QuantizedStorage::fused_matvec_parts(&self.parts, x, x_l, input, residual)?;
        Ok((boxed(out), self.shape.clone()))
    }
}

/// [`fused_linear`] against a quantized weight (a `QTensor` of GGML blocks
/// on a HIP device, as `QMatMul` holds it): a decoding step's `x'·weightᵀ (+
/// residual)` for one token of each of a few sequences (the rows of `x`, up
/// to [`crate::quantized::MATVEC_MAX_ROWS`]), the norm or SwiGLU of each row
/// riding on the rounding of the activations and the residual on the
/// product, two launches. What it computes equals `QMatMul::forward` of the
/// separate ops' `x'` plus the residual, up to the order of the norm's sum.
///
/// `Ok(None)` when the fused kernels do not take the operands (not on a HIP
/// device, a plain f32/f16/bf16 weight, more rows:
/// [`QuantizedStorage::fused_matvec_takes`]): compute it unfused. Errors: a
/// residual of another shape, operands on different devices or of
/// different dtypes.
pub fn fused_quantized_linear(
    x: &Tensor,
    weight: &QTensor,
    input: FusedInput,
    residual: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    fused_quantized_linear_parts(x, &[weight], input, residual)
}

/// [`fused_quantized_linear`] against a weight stacked from `parts` along its
/// outputs (each `(n_i, k)`; the output holds part 0's outputs, then part
/// 1's, ...), as when a GGUF layer's q, k and v matrices have different block
/// types: the activations are rounded once for all parts, one launch, then
/// one mat-vec per part. `Ok(None)` also when the parts round their
/// activations to different types, and for several parts and more than one
/// row ([`QuantizedStorage::fused_parts_take`]).
pub fn fused_quantized_linear_parts(
    x: &Tensor,
    parts: &[&QTensor],
    input: FusedInput,
    residual: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    let swiglu = matches!(input, FusedInput::SwiGlu);
    let Some(blocks) = parts
        .iter()
        .map(|w| hip_quantized(w).map(|q| (q, w.shape())))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    if super::as_hip_device(x.device()).is_none()
        || !QuantizedStorage::fused_parts_take(&blocks, x.dtype(), x.layout(), swiglu)
    {
        return Ok(None);
    }
    let mut n = 0usize;
    for (_, shape) in &blocks {
        n += shape.dims2()?.0;
    }
    let shape = output_shape("fused_quantized_linear", x, n, residual)?;
    let op = FusedQuantizedLinear {
        parts: blocks,
        input: input.into(),
        residual: residual.cloned(),
        shape,
    };
    x.apply_op1_no_bwd(&op).map(Some)
}

/// [`fused_linear_rope_append`] against quantized weights (the q, k and v
/// matrices as `parts`, stacked along their outputs as
/// [`fused_quantized_linear_parts`] takes them): the mat-vecs store the
/// step's rotary pairs themselves, so the step's RoPE and cache write add
/// no launch. Interleaved RoPE only (`cache.interleaved`, as GGUF models
/// rotate). Leaves the state as [`fused_quantized_linear_parts`] followed
/// by [`super::rope_append`] does.
///
/// `Ok(false)`, writing nothing, where [`fused_quantized_linear_parts`]
/// gives `None`, for more than one row of `x` (one sequence's step) or
/// where RoPE rotates the halves: compute it unfused. Errors:
/// those of both.
#[allow(clippy::too_many_arguments)]
pub fn fused_quantized_linear_rope_append(
    state: &Tensor,
    x: &Tensor,
    parts: &[&QTensor],
    input: FusedInput,
    cos: &Tensor,
    sin: &Tensor,
    pos: &Tensor,
    cache: StepCache,
) -> Result<bool> {
    let swiglu = matches!(input, FusedInput::SwiGlu);
    let Some(blocks) = parts
        .iter()
        .map(|w| hip_quantized(w).map(|q| (q, w.shape())))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(false);
    };
    if !cache.interleaved
        || super::as_hip_device(x.device()).is_none()
        || !QuantizedStorage::fused_step_takes(&blocks, x.dtype(), x.layout(), swiglu)
    {
        return Ok(false);
    }
    let name = "hip-fused-quantized-rope-append";
    let op = StepWrite::new(name, [cos, sin, pos], cache, input, |step: Step| {
        let (x, x_l) = step.x;
        QuantizedStorage::fused_matvec_parts_rope_append(&blocks, x, x_l, step.input, step.target)
            .map_err(Into::into)
    });
    op.apply(state, x)?;
    Ok(true)
}
