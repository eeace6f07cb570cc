//! [`fused_linear`]: one token's linear layer with the norm or activation
//! before it and the residual addition after it in one launch
//! ([`crate::fused::fused_linear`]), on HIP tensors.

use candle_core::custom_backend::{BoxedStorage, CustomStorage};
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};

use super::{boxed, hip_storage, on_hip};
use crate::fused::{self, LinearInput};

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
enum OwnedInput {
    Plain,
    RmsNorm { weight: Tensor, eps: f32 },
    SwiGlu,
}

/// The op behind [`fused_linear`]: `x'·wᵀ (+ residual)` of `x` and `w`.
#[derive(Clone, Debug)]
struct FusedLinear {
    input: OwnedInput,
    residual: Option<Tensor>,
    /// The output's shape.
    shape: Shape,
}

impl CustomOp2 for FusedLinear {
    fn name(&self) -> &'static str {
        "hip-fused-linear"
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
        // The norm weight's storage stays borrowed while the kernel is queued.
        let norm = match &self.input {
            OwnedInput::RmsNorm { weight, .. } => Some(weight.storage_and_layout()),
            _ => None,
        };
        let residual = self.residual.as_ref().map(|t| t.storage_and_layout());
        let input = match (&self.input, &norm) {
            (OwnedInput::RmsNorm { eps, .. }, Some((s, l))) => LinearInput::RmsNorm {
                weight: on_hip(s, l, "norm weight", name)?,
                eps: *eps,
            },
            (OwnedInput::SwiGlu, _) => LinearInput::SwiGlu,
            _ => LinearInput::Plain,
        };
        let residual = residual
            .as_ref()
            .map(|(s, l)| on_hip(s, l, "residual", name))
            .transpose()?;
        let out = fused::fused_linear(x, x_l, w, w_l, input, residual)?;
        Ok((boxed(out), self.shape.clone()))
    }
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
    let mut dims = x.dims().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = weight.dim(0)?;
    }
    let shape = Shape::from(dims);
    if let Some(r) = residual
        && r.shape() != &shape
    {
        candle_core::bail!(
            "fused_linear: the residual is {:?}, the output {:?}",
            r.dims(),
            shape.dims()
        );
    }
    let op = FusedLinear {
        input: match input {
            FusedInput::Plain => OwnedInput::Plain,
            FusedInput::RmsNorm { weight, eps } => OwnedInput::RmsNorm {
                weight: weight.clone(),
                eps,
            },
            FusedInput::SwiGlu => OwnedInput::SwiGlu,
        },
        residual: residual.cloned(),
        shape,
    };
    x.apply_op2_no_bwd(weight, &op).map(Some)
}
