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

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use hip_safe::DevicePtr;

use crate::error::{Result, invalid};
use crate::kernel::catalogue as cat;
use crate::kernel::grid::per_pack;
use crate::kernel::header::VEC_BYTES;
use crate::kernel::launch::{to_u32, view_or_null};
use crate::ops::gemv::{launch_config, split, weight_rows};
use crate::size;
use crate::storage::HipStorage;

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
pub(crate) fn is_one_row(x_l: &Layout, k: usize, swiglu: bool) -> bool {
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
) -> Result<hip_safe::DeviceView<'a, u8>> {
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
    x.check_device(w, OP)?;
    x.check_dtype(w, OP)?;
    let dtype = x.dtype();
    let swiglu = matches!(input, LinearInput::SwiGlu);
    let Some((n, k, w_stride)) = fused_linear_plan(dtype, x_l, w_l, swiglu) else {
        return Err(invalid(
            OP,
            format!(
                "no fused kernel for x {:?} against a weight {:?} (strides {:?}) of {dtype:?}: \
                 compute it unfused",
                x_l.dims(),
                w_l.dims(),
                w_l.stride()
            ),
        ));
    };
    let (norm_w, eps) = match input {
        LinearInput::RmsNorm { weight, eps } => {
            (Some(operand_vector(OP, x, weight, "norm weight", k)?), eps)
        }
        _ => (None, 0.0),
    };
    let residual = residual
        .map(|r| operand_vector(OP, x, r, "residual", n))
        .transpose()?;
    let wv = weight_rows(OP, w, w_l.start_offset(), (n, k, w_stride))?;
    if !(wv.device_ptr() as usize).is_multiple_of(VEC_BYTES) {
        return Err(invalid(
            OP,
            "the weight does not start on a 16-byte boundary",
        ));
    }
    let xv = x.view(OP, x_l)?;
    let device = x.device();
    // SAFETY: the kernel writes all n outputs.
    let mut out = unsafe { device.alloc_storage(dtype, n) }?;
    let y = out.view_all_mut();
    let launcher = device.kernels();
    let wave = launcher.wave_size();
    let split = split(n, k, dtype.size_in_bytes(), wave, launcher.compute_units());
    let mut cfg = launch_config(n, split, wave)?;
    // A few blocks per compute unit, each looping over its share of the
    // outputs: every block stages x' once, so fewer blocks stage it fewer
    // times (one block per handful of outputs re-read x and recomputed x'
    // thousands of times for a wide product).
    let resident = (launcher.compute_units().max(1)).saturating_mul(BLOCKS_PER_CU);
    cfg.grid_dim.0 = cfg.grid_dim.0.min(resident);
    // The kernel reads a plain x on a 16-byte boundary in place
    // (`gemv_reads_in_place` of gemv.hip) and stages x' otherwise.
    let in_place =
        matches!(input, LinearInput::Plain) && (xv.device_ptr() as usize).is_multiple_of(VEC_BYTES);
    let staged = if in_place {
        0
    } else {
        size::mul(OP, "the staged input", k, dtype.size_in_bytes())?.next_multiple_of(VEC_BYTES)
    };
    cfg.shared_mem_bytes = to_u32(OP, "the staged input", staged)?;
    let (norm_arg, residual_arg) = (
        view_or_null(norm_w.as_ref()),
        view_or_null(residual.as_ref()),
    );
    let (n32, k32) = (to_u32(OP, "n", n)?, to_u32(OP, "k", k)?);
    let (split32, code) = (to_u32(OP, "the waves per output", split)?, input.code());
    let w_stride = w_stride as u64;
    let kernel = cat::GEMV_FUSED.kernel(OP, dtype)?;
    // SAFETY: gemv_fused_* takes (const T* x, const T* w, T* y, u32 n, u32 k,
    // u64 w_stride, u32 split, u32 input, const T* norm_w, float eps, const
    // T* residual); x holds k elements (2k for SwiGLU), w (n - 1) * w_stride
    // + k from a 16-byte boundary with k and w_stride whole packs, y n,
    // norm_w k or null, residual n or null (checked views); the grid has one
    // group of `split` waves per output (`launch_config`), and the dynamic
    // shared memory holds k elements (at most MAX_STAGED_BYTES).
    unsafe {
        launcher.launch(
            kernel,
            cfg,
            &[
                &xv,
                &wv,
                &y,
                &n32,
                &k32,
                &w_stride,
                &split32,
                &code,
                norm_arg,
                &eps,
                residual_arg,
            ],
        )
    }?;
    Ok(out)
}
