//! One token's linear layer with its neighbours folded in (`gemv_fused_*` of
//! `gemv.hip`): `y = x'·Wᵀ (+ residual)`, where `x'` is `x`, its RMS norm or
//! the SwiGLU of its two halves. A decode step spends most of its launches
//! on such small element-wise kernels around its matrix-vector products;
//! this folds the norm before a projection, the activation before the down
//! projection and the residual addition after a projection into the
//! product's own launch. Each block writes `x'` into shared memory, rounded
//! to the dtype as the separate kernels round it (a plain `x` on a 16-byte
//! boundary is read in place instead), then multiplies it with its rows of
//! the weight as [`crate::ops`]' one-row product does.
//!
//! [`fused_linear_swiglu`] and [`fused_linear_rope_append`] fold the kernel
//! after a product in as well (`gemv_pairs_*`): each group of waves
//! multiplies two rows, a gate row with its up row or the two rows of a
//! rotary pair, and stores what SwiGLU's activation or RoPE with the cache
//! write makes of them.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use hip_safe::{DevicePtr, DeviceRepr, DeviceView, KernelArg, LaunchConfig};

use crate::error::{Result, invalid};
use crate::kernel::catalogue::{self as cat, Kernel};
use crate::kernel::grid::per_pack;
use crate::kernel::header::VEC_BYTES;
use crate::kernel::launch::{to_u32, view_or_null};
use crate::ops::gemv::{launch_config, split, weight_rows};
use crate::size;
use crate::storage::HipStorage;

use super::rope::{StepRope, StepTarget};

const OP: &str = "fused_linear";

/// The most bytes of `x'` a block stages in shared memory: the 48 KiB every
/// target gives a block without opting in (NVIDIA's default limit; AMD GPUs
/// have 64 KiB), less room for the kernel's own few hundred bytes.
pub const MAX_STAGED_BYTES: usize = 44 * 1024;

/// Blocks per compute unit of a fused launch: at the gemv kernels' 256
/// threads, 32 waves of 32 lanes (16 of 64) per unit keep enough weight
/// loads in flight to stream at the memory's rate.
const BLOCKS_PER_CU: u32 = 4;

/// What the product multiplies the weight with (`CH_GEMV_INPUT_*` of
/// `gemv.hip`).
#[derive(Clone, Copy)]
pub enum LinearInput<'a> {
    /// `x` itself (`k` elements).
    Plain,
    /// `x / sqrt(mean(x²) + eps) · weight` over `x`'s `k` elements
    /// (candle-nn's `rms_norm`), `weight` a contiguous vector of `k`.
    RmsNorm {
        /// The norm's scale, with its layout.
        weight: (&'a HipStorage, &'a Layout),
        /// Added to the mean square.
        eps: f32,
    },
    /// `silu(x[i]) · x[k + i]`: `x` holds `2k` elements, the gate then the
    /// up projection (a fused gate/up product's output).
    SwiGlu,
}

impl LinearInput<'_> {
    /// `CH_GEMV_INPUT_*` of `gemv.hip` (and `CH_QACT_INPUT_*` of
    /// `quantized.hip`, the same codes).
    pub(crate) fn code(&self) -> u32 {
        match self {
            LinearInput::Plain => 0,
            LinearInput::RmsNorm { .. } => 1,
            LinearInput::SwiGlu => 2,
        }
    }
}

/// The weight's outputs, columns and row stride when the fused kernel takes
/// `x` (contiguous, of `dtype`) against the weight of layout `w_l`: a float
/// dtype, a rank-2 `(n, k)` weight with unit-stride rows, `k` and the row
/// stride whole 16-byte packs, the weight's start on a pack, `x` one row
/// (its last dimension) of `k` elements (`2k` for [`LinearInput::SwiGlu`],
/// `swiglu`) and `k` elements
/// of `x'` within [`MAX_STAGED_BYTES`]. `None` when it does not: compute
/// the same unfused.
pub fn fused_linear_plan(
    dtype: DType,
    x_l: &Layout,
    w_l: &Layout,
    swiglu: bool,
) -> Option<(usize, usize, usize)> {
    if !matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
        return None;
    }
    let (&[n, k], &[w_stride, 1]) = (w_l.dims(), w_l.stride()) else {
        return None;
    };
    let pack = per_pack(dtype.size_in_bytes());
    let packed = |v: usize| v.is_multiple_of(pack);
    let fits = k.checked_mul(dtype.size_in_bytes())? <= MAX_STAGED_BYTES;
    let usable = n > 0
        && k > 0
        && packed(k)
        && packed(w_stride)
        && w_stride >= k
        && packed(w_l.start_offset())
        && fits
        && is_one_row(x_l, k, swiglu);
    usable.then_some((n, k, w_stride))
}

/// Whether `x_l` is one contiguous row, its last dimension, of `k` elements
/// (`2k` for SwiGLU, `swiglu`): the input of the fused one-token products.
fn is_one_row(x_l: &Layout, k: usize, swiglu: bool) -> bool {
    let width = k.checked_mul(if swiglu { 2 } else { 1 });
    x_l.is_contiguous()
        && x_l.dims().last().copied() == width
        && Some(x_l.shape().elem_count()) == width
}

/// `v` as a contiguous vector of `len` elements of `x`'s dtype on its device
/// (`what` names it in `op`'s errors).
pub(crate) fn operand_vector<'a>(
    op: &'static str,
    x: &HipStorage,
    (v, l): (&'a HipStorage, &Layout),
    what: &str,
    len: usize,
) -> Result<DeviceView<'a, u8>> {
    x.check_device(v, op)?;
    x.check_dtype(v, op)?;
    if !l.is_contiguous() || l.shape().elem_count() != len {
        return Err(invalid(
            op,
            format!(
                "the {what} must be contiguous with {len} elements, got {:?}",
                l.dims()
            ),
        ));
    }
    v.view(op, l)
}

/// The operands and launch of a fused product, as every `gemv_fused_*` and
/// `gemv_pairs_*` launch takes them.
struct Product<'a> {
    x: DeviceView<'a, u8>,
    w: DeviceView<'a, u8>,
    norm_w: Option<DeviceView<'a, u8>>,
    eps: f32,
    input: u32,
    /// Items: outputs of `gemv_fused_*`, pairs of `gemv_pairs_*`.
    items: u32,
    k: u32,
    w_stride: u64,
    split: u32,
    cfg: LaunchConfig,
}

impl<'a> Product<'a> {
    /// Checks `x'·wᵀ` as `op` and lays out its launch: `items` groups of
    /// waves (given the weight's rows; an error when they do not pair as
    /// the kernel needs), each split as the product of every row is split,
    /// so that a row's sum is the same in either kernel.
    fn new(
        op: &'static str,
        (x, x_l): (&'a HipStorage, &'a Layout),
        (w, w_l): (&'a HipStorage, &'a Layout),
        input: LinearInput<'a>,
        items: impl FnOnce(usize) -> Result<usize>,
    ) -> Result<Product<'a>> {
        x.check_device(w, op)?;
        x.check_dtype(w, op)?;
        let dtype = x.dtype();
        let swiglu = matches!(input, LinearInput::SwiGlu);
        let Some((n, k, w_stride)) = fused_linear_plan(dtype, x_l, w_l, swiglu) else {
            return Err(invalid(
                op,
                format!(
                    "no fused kernel for x {:?} against a weight {:?} (strides {:?}) of \
                     {dtype:?}: compute it unfused",
                    x_l.dims(),
                    w_l.dims(),
                    w_l.stride()
                ),
            ));
        };
        let items = items(n)?;
        let (norm_w, eps) = match input {
            LinearInput::RmsNorm { weight, eps } => {
                (Some(operand_vector(op, x, weight, "norm weight", k)?), eps)
            }
            _ => (None, 0.0),
        };
        let wv = weight_rows(op, w, w_l.start_offset(), (n, k, w_stride))?;
        if !(wv.device_ptr() as usize).is_multiple_of(VEC_BYTES) {
            return Err(invalid(
                op,
                "the weight does not start on a 16-byte boundary",
            ));
        }
        let xv = x.view(op, x_l)?;
        let launcher = x.device().kernels();
        let wave = launcher.wave_size();
        let split = split(n, k, dtype.size_in_bytes(), wave, launcher.compute_units());
        let mut cfg = launch_config(items, split, wave)?;
        // A few blocks per compute unit, each looping over its share of the
        // items: every block stages x' once, so fewer blocks stage it fewer
        // times (one block per handful of outputs re-read x and recomputed
        // x' thousands of times for a wide product).
        let resident = (launcher.compute_units().max(1)).saturating_mul(BLOCKS_PER_CU);
        cfg.grid_dim.0 = cfg.grid_dim.0.min(resident);
        // The kernels read a plain x on a 16-byte boundary in place
        // (`gemv_reads_in_place` of gemv.hip) and stage x' otherwise.
        let in_place = matches!(input, LinearInput::Plain)
            && (xv.device_ptr() as usize).is_multiple_of(VEC_BYTES);
        let staged = if in_place {
            0
        } else {
            size::mul(op, "the staged input", k, dtype.size_in_bytes())?.next_multiple_of(VEC_BYTES)
        };
        cfg.shared_mem_bytes = to_u32(op, "the staged input", staged)?;
        Ok(Product {
            x: xv,
            w: wv,
            norm_w,
            eps,
            input: input.code(),
            items: to_u32(op, "the products' items", items)?,
            k: to_u32(op, "k", k)?,
            w_stride: w_stride as u64,
            split: to_u32(op, "the waves per output", split)?,
            cfg,
        })
    }
}

impl Product<'_> {
    /// Launches `kernel` (`gemv_fused_*` or `gemv_pairs_*`) on the product
    /// into `y`, with `tail` after the arguments both kernels share: (const
    /// T* x, const T* w, T* y, u32 n, u32 k, u64 w_stride, u32 split, u32
    /// input, const T* norm_w, float eps, tail...).
    ///
    /// # Safety
    ///
    /// `kernel` takes those arguments, `y` holds what it writes for the
    /// product's items and `tail` is what it takes after them.
    unsafe fn launch(
        &self,
        x: &HipStorage,
        kernel: Kernel,
        y: &dyn KernelArg,
        tail: &[&dyn KernelArg],
    ) -> candle_core::Result<()> {
        let mut args: Vec<&dyn KernelArg> = vec![
            &self.x,
            &self.w,
            y,
            &self.items,
            &self.k,
            &self.w_stride,
            &self.split,
            &self.input,
            view_or_null(self.norm_w.as_ref()),
            &self.eps,
        ];
        args.extend_from_slice(tail);
        // SAFETY: x, w and norm_w are checked views of the operands
        // (`Product::new`: x holds k elements, 2k for SwiGLU; w the rows the
        // items take from a 16-byte boundary, k and w_stride whole packs;
        // norm_w k or null), the grid has one group of `split` waves per
        // item and the dynamic shared memory holds k elements (at most
        // MAX_STAGED_BYTES); the caller vouches for the kernel, y and tail.
        unsafe { x.device().kernels().launch(kernel, self.cfg, &args) }?;
        Ok(())
    }
}

/// `y = x'·Wᵀ (+ residual)` for one token: `x` (contiguous, `k` elements, or
/// `2k` for [`LinearInput::SwiGlu`]), `w` an `(n, k)` weight as candle-nn's
/// `Linear` holds it, `residual` (optional) a contiguous vector of `n`.
/// Returns the `n` outputs, contiguous, in the dtype of `x`.
///
/// Errors: operands [`fused_linear_plan`] refuses (check it first and
/// compute those unfused), a weight buffer off a 16-byte boundary, and
/// mismatched devices, dtypes or lengths.
pub fn fused_linear(
    x: &HipStorage,
    x_l: &Layout,
    w: &HipStorage,
    w_l: &Layout,
    input: LinearInput,
    residual: Option<(&HipStorage, &Layout)>,
) -> candle_core::Result<HipStorage> {
    let p = Product::new(OP, (x, x_l), (w, w_l), input, Ok)?;
    let n = p.items as usize;
    let residual = residual
        .map(|r| operand_vector(OP, x, r, "residual", n))
        .transpose()?;
    let device = x.device();
    // SAFETY: the kernel writes all n outputs.
    let mut out = unsafe { device.alloc_storage(x.dtype(), n) }?;
    let y = out.view_all_mut();
    let kernel = cat::GEMV_FUSED.kernel(OP, x.dtype())?;
    // SAFETY: gemv_fused_* takes the shared arguments, then (const T*
    // residual); y holds the n outputs, residual n or null (a checked view).
    unsafe { p.launch(x, kernel, &y, &[view_or_null(residual.as_ref())]) }?;
    Ok(out)
}

/// `CH_GEMV_PAIRS_*` of `gemv.hip`.
const PAIRS_SWIGLU: u32 = 0;
const PAIRS_ROPE: u32 = 1;
const PAIRS_ROPE_I: u32 = 2;

/// `GemvRope` of `gemv.hip`: heads, kv_heads, head_dim, max_len and the
/// tables' rows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct GemvRope([u32; 5]);

// SAFETY: `#[repr(C)]`, five u32 as the C struct of five ch_u32: no padding,
// every bit pattern valid.
unsafe impl DeviceRepr for GemvRope {}

/// SwiGLU's activation of one token's gate/up product, in the product's
/// launch: `silu(g)·u` of `g = x'·Gᵀ` and `u = x'·Uᵀ`, where `w` is the
/// `(2n, k)` weight `[G; U]` (a fused gate/up projection's) and `x'` as
/// [`fused_linear`] takes it. Each of `g` and `u` is rounded to the dtype
/// first, so the result is bit for bit [`fused_linear`]'s product followed
/// by `silu_mul` of its two halves. Returns the `n` activations.
///
/// Errors: those of [`fused_linear`], and an odd number of weight rows.
pub fn fused_linear_swiglu(
    x: &HipStorage,
    x_l: &Layout,
    w: &HipStorage,
    w_l: &Layout,
    input: LinearInput,
) -> candle_core::Result<HipStorage> {
    const OP: &str = "fused_linear_swiglu";
    let p = Product::new(OP, (x, x_l), (w, w_l), input, |rows| {
        if rows % 2 == 1 {
            return Err(invalid(
                OP,
                format!("the gate/up weight has {rows} rows: not two halves"),
            ));
        }
        Ok(rows / 2)
    })?;
    let device = x.device();
    // SAFETY: the kernel writes all n activations.
    let mut out = unsafe { device.alloc_storage(x.dtype(), p.items as usize) }?;
    let y = out.view_all_mut();
    launch_pairs(OP, &p, x, &y, PAIRS_SWIGLU, None)?;
    Ok(out)
}

/// A decoding step's query/key/value product with RoPE and the cache write
/// in its launch: `x'·Wᵀ` for the `(heads + 2 kv_heads) head_dim` rows of
/// `w` (the q, k and v projections stacked), then what [`rope_append`]
/// does with those outputs, into `step`'s state (`x'` as [`fused_linear`]
/// takes it; `step` as [`rope_append`] takes it). Each output is rounded to
/// the dtype first, so the state ends bit for bit as [`fused_linear`]
/// followed by [`rope_append`] leaves it.
///
/// Errors: those of both.
///
/// [`rope_append`]: super::rope_append
pub fn fused_linear_rope_append(
    x: &HipStorage,
    x_l: &Layout,
    w: &HipStorage,
    w_l: &Layout,
    input: LinearInput,
    step: StepTarget,
) -> candle_core::Result<()> {
    const OP: &str = "fused_linear_rope_append";
    let cache = step.cache;
    let step = StepRope::new(OP, x, step)?;
    let qkv_len = cache
        .qkv_len()
        .ok_or_else(|| invalid(OP, format!("{cache:?} overflows")))?;
    let p = Product::new(OP, (x, x_l), (w, w_l), input, |rows| {
        if rows != qkv_len {
            return Err(invalid(
                OP,
                format!("the weight has {rows} rows; the step's heads need {qkv_len} ({cache:?})"),
            ));
        }
        Ok(rows / 2)
    })?;
    let output = if cache.interleaved {
        PAIRS_ROPE_I
    } else {
        PAIRS_ROPE
    };
    launch_pairs(OP, &p, x, &step.state, output, Some(&step))
}

/// Launches `gemv_pairs_*` for `p` into `y` (the activations, or the step's
/// state with `rope`).
fn launch_pairs(
    op: &'static str,
    p: &Product,
    x: &HipStorage,
    y: &dyn KernelArg,
    output: u32,
    rope: Option<&StepRope>,
) -> candle_core::Result<()> {
    let kernel = cat::GEMV_PAIRS.kernel(op, x.dtype())?;
    let (cos, sin, pos, dims) = match rope {
        Some(r) => (
            view_or_null(Some(&r.cos)),
            view_or_null(Some(&r.sin)),
            view_or_null(Some(&r.pos)),
            GemvRope(r.dims),
        ),
        None => (
            view_or_null(None),
            view_or_null(None),
            view_or_null(None),
            GemvRope::default(),
        ),
    };
    // SAFETY: gemv_pairs_* takes the shared arguments, then (u32 output,
    // const T* cos, const T* sin, const u32* pos, GemvRope rope), with 2n
    // rows of w; for SwiGLU y holds n elements, for RoPE y is the state of
    // `rope.dims` and cos, sin and pos are its checked tables and position
    // (`StepRope::new`), the rows being the step's heads.
    unsafe { p.launch(x, kernel, y, &[&output, cos, sin, pos, &dims]) }?;
    Ok(())
}
