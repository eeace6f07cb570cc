//! Launch-saving ops of a decoding step on HIP tensors: [`silu_mul`]
//! (SwiGLU's activation in one launch) and [`rope_append`] (RoPE and the
//! key/value-cache write in one launch, in place).

use candle_core::custom_backend::{BoxedStorage, CustomStorage};
use candle_core::{CpuStorage, CustomOp2, InplaceOp2, Layout, Result, Shape, Tensor};

use super::linear::{FusedInput, OwnedInput, borrow_operands};
use super::{BridgeStorage, Hip, boxed, hip_storage, on_hip};
use crate::HipStorage;
use crate::fused::{self, LinearInput, StepCache, StepTarget};

/// The op behind [`silu_mul`].
struct SiluMul;

impl CustomOp2 for SiluMul {
    fn name(&self) -> &'static str {
        "hip-silu-mul"
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
        gate: &dyn CustomStorage,
        gate_l: &Layout,
        up: &dyn CustomStorage,
        up_l: &Layout,
    ) -> Result<(BoxedStorage, Shape)> {
        let name = self.name();
        let (gate, up) = (hip_storage(gate, name)?, hip_storage(up, name)?);
        let out = fused::silu_mul(gate, gate_l, up, up_l)?;
        Ok((boxed(out), gate_l.shape().clone()))
    }
}

/// `silu(gate) * up`: one launch on a HIP device (computed in f32, or f64
/// for f64, and rounded once), candle's `silu` and `mul` elsewhere. `gate`
/// and `up` have one shape and any layouts (e.g. the two halves of a fused
/// gate/up projection, as `candle_nn::ops::swiglu` splits it).
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if super::as_hip_device(gate.device()).is_none() {
        return gate.silu()? * up;
    }
    gate.apply_op2_no_bwd(up, &SiluMul)
}

/// What a [`StepWrite`] hands the function that writes the step, borrowed
/// while its kernels are queued.
pub(super) struct Step<'a> {
    /// The source and its layout.
    pub x: Operand<'a>,
    /// What the product multiplies: `x`, its RMS norm or its SwiGLU.
    pub input: LinearInput<'a>,
    /// The state (the destination), the tables and the position.
    pub target: StepTarget<'a>,
}

/// A HIP storage and its layout, as the step's kernels take an operand.
pub(super) type Operand<'a> = (&'a HipStorage, &'a Layout);

/// An op that writes a decoding step into its state (the destination) from
/// `x` (the source), holding the step's RoPE tables
/// (`(positions, head_dim / 2)`), its position (one u32 on the device), its
/// cache layout and the product's input. HIP devices only.
pub(super) struct StepWrite<F> {
    name: &'static str,
    cos: Tensor,
    sin: Tensor,
    pos: Tensor,
    cache: StepCache,
    input: OwnedInput,
    write: F,
}

impl<F> StepWrite<F>
where
    F: Fn(Step<'_>) -> Result<()>,
{
    /// The op `name`, writing the step with `write`.
    pub fn new(
        name: &'static str,
        [cos, sin, pos]: [&Tensor; 3],
        cache: StepCache,
        input: FusedInput,
        write: F,
    ) -> Self {
        StepWrite {
            name,
            cos: cos.clone(),
            sin: sin.clone(),
            pos: pos.clone(),
            cache,
            input: input.into(),
            write,
        }
    }

    /// Writes the step from `x` into `state`.
    pub fn apply(&self, state: &Tensor, x: &Tensor) -> Result<()> {
        state.inplace_op2(x, self)
    }
}

impl<F> InplaceOp2 for StepWrite<F>
where
    F: Fn(Step<'_>) -> Result<()>,
{
    fn name(&self) -> &'static str {
        self.name
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<()> {
        super::hip_only(self.name)
    }

    fn custom_fwd(
        &self,
        state: &mut dyn CustomStorage,
        state_l: &Layout,
        x: &dyn CustomStorage,
        x_l: &Layout,
    ) -> Result<()> {
        let name = self.name;
        let state = BridgeStorage::<Hip>::downcast_mut(state, name)?;
        let x = hip_storage(x, name)?;
        let (cos, cos_l) = self.cos.storage_and_layout();
        let (sin, sin_l) = self.sin.storage_and_layout();
        let (pos, pos_l) = self.pos.storage_and_layout();
        let operands = borrow_operands(&self.input, None);
        let (input, _) = operands.on_hip(name)?;
        (self.write)(Step {
            x: (x, x_l),
            input,
            target: StepTarget {
                state: (state, state_l),
                cos: on_hip(&cos, cos_l, "cos table", name)?,
                sin: on_hip(&sin, sin_l, "sin table", name)?,
                pos: on_hip(&pos, pos_l, "position", name)?,
                cache: self.cache,
            },
        })
    }
}

/// One decoding step (batch 1) in one launch, in place in `state`: RoPE of
/// the step's query and key heads at the position `pos` holds, the rotated
/// keys and the values written at that position of the caches, the rotated
/// query beside them. `state` holds `cache`'s layout ([`StepCache`]: keys,
/// values, query; contiguous), `qkv` the step's fused projection (query,
/// key, value heads), `cos`/`sin` the tables of every position
/// (`(positions, head_dim / 2)`), `pos` one u32 on the device, read there
/// (a captured step serves every position). [`fused::rope_append`] states
/// the checks. HIP devices only: elsewhere, rotate with candle-nn's `rope`
/// and write the caches with `slice_set`/`scatter_set`.
pub fn rope_append(
    state: &Tensor,
    qkv: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    pos: &Tensor,
    cache: StepCache,
) -> Result<()> {
    let name = "hip-rope-append";
    let op = StepWrite::new(
        name,
        [cos, sin, pos],
        cache,
        FusedInput::Plain,
        |step: Step| {
            let (qkv, qkv_l) = step.x;
            fused::rope_append(qkv, qkv_l, step.target)
        },
    );
    op.apply(state, qkv)
}
