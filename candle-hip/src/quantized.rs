//! GGML's quantized tensors on the device: the blocks of a GGUF tensor as
//! they are in the file, dequantized and multiplied by `quantized.hip`.
//!
//! [`QuantizedStorage`] holds the blocks of one tensor. It is what candle's
//! `QTensor` keeps on a HIP device (through the extension point of
//! `patches/`, `candle_hip::extension`), and it is usable on its own:
//! [`QuantizedStorage::dequantize`] gives the values in f32, f16 or bf16,
//! bit for bit as candle's CPU `dequantize` computes them, and
//! [`QuantizedStorage::matmul_t`] is `QMatMul`'s product `x · Wᵀ`:
//! - up to [`MATVEC_MAX_ROWS`] rows of `x` (decoding, short prompts): as
//!   candle's CPU backend computes it. `quantize_act_*` rounds the
//!   activations to 8 bits with the CPU's arithmetic for the weight's
//!   vec-dot type (q8_0, q8_1 or q8k), and `qmatvec_*` takes the integer dot
//!   products of each block with them and scales them as the CPU's `vec_dot`
//!   does (one wave per two outputs, each block of `W` read once per 8
//!   rows). Only the order of the float sums differs, so a model gives the
//!   CPU's tokens up to near ties.
//!   f16 and bf16 activations are read and the product written in their
//!   dtype, as if cast to f32 around the CPU's product;
//! - more rows (prefill): `W` dequantized, then the GEMM of
//!   [`BackendStorage::matmul`] (rocBLAS) in the activations' dtype, except
//!   that f32 activations (candle-transformers' quantized models compute in
//!   f32) multiply block weights in bf16, with f32 accumulation and the
//!   result widened back: the bf16 GEMM is many times faster than the f32
//!   one, and bf16's 8 bits keep more of the activations than the CPU's
//!   8-bit rounding of them.
//!
//! [`QuantizedStorage::fused_matvec`] is the mat-vec of one decode step
//! with its neighbours folded in: the RMS norm or SwiGLU before the product
//! rides on the activation rounding, the residual addition after it on the
//! product's own store, so that a projection takes two launches where the
//! separate ops take four.
//!
//! The plain GGML types (f32, f16, bf16) are stored as a storage of that
//! dtype, dequantized by a cast.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Layout, Shape};

use crate::error::{Result, hip, invalid};
use crate::fused::attention::{self, Attended, Splits};
use crate::fused::{
    FlashAttnExtras, FlashAttnParams, LinearInput, StepRope, StepTarget, operand_vector,
};
use crate::kernel::catalogue as cat;
use crate::kernel::launch::{to_u32, view_or_null};
use crate::kernel::{grid, header};
use crate::ops::copy::Dense;
use crate::{HipDevice, HipStorage, size};
use hip_safe::{DevicePtr, DeviceRepr, DeviceView, DeviceViewMut};

/// The most rows of `x` that go through the matrix-vector kernel (it reads
/// the weight once per 8 rows); more go through dequantization and a GEMM.
pub const MATVEC_MAX_ROWS: usize = 32;

/// The rows of `x` (`x_l`) a fused product takes against a weight of `k`
/// columns: 1 to [`MATVEC_MAX_ROWS`] contiguous rows of `k` values (`2k`
/// for SwiGLU, `swiglu`); `None` otherwise.
fn fused_rows(x_l: &Layout, k: usize, swiglu: bool) -> Option<usize> {
    let width = k.checked_mul(if swiglu { 2 } else { 1 })?;
    let count = x_l.shape().elem_count();
    let rows = count.checked_div(width)?;
    (x_l.is_contiguous()
        && x_l.dims().last() == Some(&width)
        && (1..=MATVEC_MAX_ROWS).contains(&rows))
    .then_some(rows)
}

/// Values per sub-block, the unit of work of the kernels.
const SUB: usize = 32;

/// The most threads of `dequantize_*` that share a sub-block, which the grid
/// is sized for (`CH_DQ_MAX_LANES`).
const DEQUANT_MAX_LANES: u64 = 4;

/// Activations each thread of `quantize_act_*` rounds (`CH_QACT_PER_LANE`).
const ACT_PER_LANE: usize = 8;

/// Rows up to which the mat-vec takes `qmatvec_few_*`, whose fewer
/// accumulators let more waves share a compute unit (`CH_QMATVEC_FEW_ROWS`).
const MATVEC_FEW_ROWS: usize = 2;

/// Outputs each wave of `qmatvec_*` computes (`CH_QMATVEC_OUTS`).
const MATVEC_OUTS_PER_WAVE: u32 = 2;

/// Threads per block of `qmatvec_*` (the kernel bench's `qmv` mode measured
/// blocks of 4 NVIDIA warps faster than blocks of 8 with two outputs per
/// wave).
const MATVEC_BLOCK: u32 = 128;

/// Values per row from which one row's mat-vec splits ([`matvec_split_family`]).
const MATVEC_SPLIT_MIN_K: usize = 8192;

/// Waves per compute unit below which an unsplit mat-vec leaves the device
/// short of waves, so that one row's long rows split ([`matvec_split_family`]).
const MATVEC_SPLIT_MAX_WAVES_PER_UNIT: usize = 12;

/// The split few-rows mat-vec (`qmatvec_few_split_*`: two waves per group
/// of outputs) for `rows` rows of `k` values and `n` outputs against
/// `block` weights on `waves_per_block`-wave blocks, on a device of
/// `compute_units`, where it is taken: one row of long rows (a decode
/// step's down product) of a type with a split kernel, where one wave per
/// group would give the device fewer than
/// [`MATVEC_SPLIT_MAX_WAVES_PER_UNIT`] waves per compute unit; else `None`
/// (one wave per group). Where the device has waves enough the split's
/// barrier and shared-memory sum cost more than the shorter walk saves,
/// and the types whose few-rows mat-vec walks pairs of sub-blocks (Q4_K,
/// Q5_K) lost everywhere with their larger registers
/// (`benches/results/h100-2026-12-07-split-rows.md`).
fn matvec_split_family(
    block: GgmlDType,
    (n, k): (usize, usize),
    rows: usize,
    waves_per_block: u32,
    compute_units: usize,
) -> Option<&'static cat::Family> {
    let unsplit_waves = n.div_ceil(MATVEC_OUTS_PER_WAVE as usize);
    let short_of_waves = unsplit_waves < MATVEC_SPLIT_MAX_WAVES_PER_UNIT * compute_units;
    let taken =
        rows == 1 && k >= MATVEC_SPLIT_MIN_K && short_of_waves && waves_per_block.is_multiple_of(2);
    cat::qmatvec_split_family(block).filter(|_| taken)
}

/// `QRope` of `quantized.hip`: a step's rotary pairs on the mat-vec's
/// outputs (device addresses of the tables and the position, null `cos`
/// for none), the first global row of the launch, and the step's heads,
/// kv_heads, head_dim, max_len and table rows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct QRope {
    cos: u64,
    sin: u64,
    pos: u64,
    first: u32,
    heads: u32,
    kv_heads: u32,
    d: u32,
    max_len: u32,
    rows: u32,
}

// SAFETY: `#[repr(C)]`, three u64 then six u32 as the C struct of three
// pointers and six ch_u32: no padding, every bit pattern valid (the kernel
// reads the pointers only where `cos` is not null).
unsafe impl DeviceRepr for QRope {}
const _: () = assert!(std::mem::size_of::<QRope>() == 3 * 8 + 6 * 4);
// The step's rotary pairs are each wave's adjacent outputs.
const _: () = assert!(MATVEC_OUTS_PER_WAVE.is_multiple_of(2));

/// Zero bytes after the blocks of every allocation: the mat-vec reads a
/// block's integers as whole aligned words, up to 4 bytes past the last
/// block (`q_words` in `quantized.hip`).
const Q_PAD: usize = 16;

/// The blocks of one quantized tensor on a HIP device.
#[derive(Debug)]
pub struct QuantizedStorage {
    dtype: GgmlDType,
    /// The blocks as bytes (u8), or for f32/f16/bf16 the values themselves,
    /// then `Q_PAD` zero bytes.
    data: HipStorage,
    /// The size of the blocks in bytes, without the padding.
    bytes: usize,
}

/// The candle dtype a plain GGML type stores its values in.
fn plain_dtype(dtype: GgmlDType) -> Option<DType> {
    match dtype {
        GgmlDType::F32 => Some(DType::F32),
        GgmlDType::F16 => Some(DType::F16),
        GgmlDType::BF16 => Some(DType::BF16),
        _ => None,
    }
}

/// The block type the mat-vec rounds the activations to for weights of
/// `block`: its vec-dot type in candle's CPU code (`Q::ACT` of
/// `quantized.hip`), whose `quantize_act_*` kernel serves every weight type
/// that rounds to it.
fn activation_type(block: GgmlDType) -> GgmlDType {
    match block {
        GgmlDType::Q4_0 | GgmlDType::Q5_0 | GgmlDType::Q8_0 => GgmlDType::Q8_0,
        GgmlDType::Q4_1 | GgmlDType::Q5_1 | GgmlDType::Q8_1 => GgmlDType::Q8_1,
        _ => GgmlDType::Q8K,
    }
}

/// The code of an activation type in the kernels that take it as an
/// argument (`flash_combine_round`'s `act`: `q_round<ACT>` of `common.h`).
fn activation_code(act: GgmlDType) -> u32 {
    match act {
        GgmlDType::Q8_0 => 0,
        GgmlDType::Q8_1 => 1,
        _ => 2,
    }
}

/// Checks that rows of `k` values are whole blocks of `weights`' type, as
/// the activations rounded for them must be before any rounding kernel
/// writes their scales.
fn whole_blocks(weights: &QuantizedStorage, k: usize) -> Result<()> {
    if k.is_multiple_of(weights.dtype.block_size()) {
        return Ok(());
    }
    Err(invalid(
        "qmatmul",
        format!("{k} columns are not whole {:?} blocks", weights.dtype),
    ))
}

impl QuantizedStorage {
    /// Copies `data`, whole blocks of `dtype` in GGML's layout, to `device`.
    pub fn from_blocks(device: &HipDevice, dtype: GgmlDType, data: &[u8]) -> Result<Self> {
        const OP: &str = "load_quantized";
        let block_bytes = dtype.type_size();
        if !data.len().is_multiple_of(block_bytes) {
            return Err(invalid(
                OP,
                format!(
                    "{} bytes are not a whole number of {dtype:?} blocks of {block_bytes} bytes",
                    data.len()
                ),
            ));
        }
        let stream = device.stream();
        let padded = size::add(OP, "the blocks", data.len(), Q_PAD)?;
        let mut buffer = stream.alloc_zeros::<u8>(padded).map_err(hip)?;
        stream.memcpy_htod(data, &mut buffer).map_err(hip)?;
        let stored = plain_dtype(dtype).unwrap_or(DType::U8);
        Ok(Self {
            dtype,
            data: HipStorage::new(buffer, stored, device.clone()),
            bytes: data.len(),
        })
    }

    /// The block type.
    pub fn dtype(&self) -> GgmlDType {
        self.dtype
    }

    /// The device holding the blocks.
    pub fn device(&self) -> &HipDevice {
        self.data.device()
    }

    /// The size of the blocks in bytes.
    pub fn size_in_bytes(&self) -> usize {
        self.bytes
    }

    /// The blocks copied to host memory, in GGML's layout.
    pub fn to_host(&self) -> Result<Vec<u8>> {
        let mut bytes = vec![0u8; self.size_in_bytes()];
        let stream = self.device().stream();
        let blocks = self.data.buffer().slice(..self.bytes).map_err(hip)?;
        stream.memcpy_dtoh(&blocks, &mut bytes).map_err(hip)?;
        Ok(bytes)
    }

    /// How many values the blocks hold.
    fn capacity(&self) -> usize {
        self.size_in_bytes() / self.dtype.type_size() * self.dtype.block_size()
    }

    /// The first `elem_count` values as a contiguous storage of `dtype`
    /// (f32, f16 or bf16), computed as candle's CPU `to_float` computes them
    /// (then rounded once to f16/bf16).
    pub fn dequantize(&self, elem_count: usize, dtype: DType) -> Result<HipStorage> {
        const OP: &str = "dequantize";
        let block = self.dtype.block_size();
        if elem_count > self.capacity() || !elem_count.is_multiple_of(block) {
            return Err(invalid(
                OP,
                format!(
                    "{elem_count} values of {:?} blocks: the storage holds {} in blocks of {block}",
                    self.dtype,
                    self.capacity()
                ),
            ));
        }
        if plain_dtype(self.dtype).is_some() {
            return self.data.to_dtype(&Layout::contiguous(elem_count), dtype);
        }
        let kernel = cat::DEQUANTIZE.quantized(OP, self.dtype, dtype)?;
        let device = self.device();
        // SAFETY: every value is written by the kernel below before use.
        let mut out = unsafe { device.alloc_uninit(&Shape::from(elem_count), dtype) }?;
        let subs = elem_count / SUB;
        if subs == 0 {
            return Ok(out);
        }
        let blocks_bytes = elem_count / block * self.dtype.type_size();
        let src = self.data.view_range(OP, 0, blocks_bytes)?;
        let dst = out.view_range_mut(OP, 0, elem_count)?;
        // The kernel loops over what a capped grid does not cover.
        let parts = (subs as u64).saturating_mul(DEQUANT_MAX_LANES);
        let cfg = grid::grid_stride(parts, device.kernels().compute_units());
        let subs = subs as u64;
        // SAFETY: dequantize_<q>_<dtype>(const u8* blocks, T* y, u64 subs)
        // reads subs * 32 values' blocks (blocks_bytes, checked view) and
        // writes subs * 32 = elem_count values of dtype (fresh, aligned).
        unsafe { device.kernels().launch(kernel, cfg, &[&src, &dst, &subs]) }?;
        Ok(out)
    }

    /// `QMatMul`'s product `xs · Wᵀ`, where this storage holds `W` with the
    /// shape `w_shape`, `(n, k)`, and `xs` (f32, f16 or bf16, `layout`) ends
    /// in `k`. Returns the product in `xs`'s dtype with `xs`'s shape, `k`
    /// replaced by `n`.
    pub fn matmul_t(
        &self,
        w_shape: &Shape,
        xs: &HipStorage,
        layout: &Layout,
    ) -> Result<(HipStorage, Shape)> {
        const OP: &str = "qmatmul";
        let (n, k) = w_shape.dims2()?;
        let dims = layout.dims();
        let in_dtype = xs.dtype();
        if dims.last() != Some(&k) || dims.len() < 2 {
            return Err(invalid(
                OP,
                format!("input of shape {dims:?} times a quantized {w_shape:?} weight transposed"),
            ));
        }
        if !matches!(in_dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(candle_core::Error::UnsupportedDTypeForOp(in_dtype, OP).bt());
        }
        let w_count = size::mul(OP, "the weight", n, k)?;
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().expect("rank >= 2") = n;
        let out_shape = Shape::from(out_dims);
        let rows = layout.shape().elem_count() / k.max(1);
        let blocks = plain_dtype(self.dtype).is_none();
        let matvec = rows <= MATVEC_MAX_ROWS && blocks && n > 0;
        // The dtype the product runs in: the activations' own, except that
        // the GEMM of block weights multiplies f32 activations in bf16 (see
        // the module docs).
        let compute = if !matvec && blocks && in_dtype == DType::F32 {
            DType::BF16
        } else {
            in_dtype
        };
        let dense = Dense::of(OP, xs, layout)?;
        let x_layout = Layout::contiguous_with_offset((rows, k), dense.start());
        let cast;
        let (x, x_layout) = if compute == in_dtype {
            (dense.storage(), x_layout)
        } else {
            cast = dense.storage().to_dtype(&x_layout, compute)?;
            (&cast, Layout::contiguous((rows, k)))
        };
        let y = if matvec {
            self.matvec((x, x_layout.start_offset()), (n, k), rows)?
        } else {
            let w = self.dequantize(w_count, compute)?;
            let w_t = Layout::contiguous((n, k)).transpose(0, 1)?;
            x.matmul(&w, (1, rows, n, k), &x_layout, &w_t)?
        };
        let out = if compute == in_dtype {
            y
        } else {
            y.to_dtype(&Layout::contiguous((rows, n)), in_dtype)?
        };
        Ok((out, out_shape))
    }

    /// Whether [`fused_matvec`](Self::fused_matvec) takes `x` (`x_l`) against
    /// a weight of shape `w_shape`, `(n, k)`, held by these blocks: GGML
    /// blocks (not a plain type), `x` contiguous of f32, f16 or bf16 with
    /// 1 to [`MATVEC_MAX_ROWS`] rows (along its last dimension) of `k`
    /// values (`2k` for SwiGLU, `swiglu`). Otherwise compute the same
    /// unfused.
    pub fn fused_matvec_takes(
        &self,
        w_shape: &Shape,
        dtype: DType,
        x_l: &Layout,
        swiglu: bool,
    ) -> bool {
        Self::fused_parts_take(&[(self, w_shape)], dtype, x_l, swiglu)
    }

    /// Whether [`fused_matvec_parts`](Self::fused_matvec_parts) takes `x`
    /// against `parts`: each as [`fused_matvec_takes`](Self::fused_matvec_takes)
    /// says, all with the same `k` and rounding their activations to the same
    /// type (q4_0, q5_0, q8_0; q4_1, q5_1, q8_1; or the k-quants), and one row
    /// of `x` where there are several parts.
    pub fn fused_parts_take(
        parts: &[(&QuantizedStorage, &Shape)],
        dtype: DType,
        x_l: &Layout,
        swiglu: bool,
    ) -> bool {
        let Some(&(first, first_shape)) = parts.first() else {
            return false;
        };
        let Ok((_, k)) = first_shape.dims2() else {
            return false;
        };
        let part_takes = |(q, shape): &(&QuantizedStorage, &Shape)| {
            plain_dtype(q.dtype).is_none()
                && activation_type(q.dtype) == activation_type(first.dtype)
                && matches!(shape.dims2(), Ok((n, kp)) if n > 0 && kp == k)
        };
        matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
            && k > 0
            && fused_rows(x_l, k, swiglu).is_some_and(|rows| rows == 1 || parts.len() == 1)
            && parts.iter().all(part_takes)
    }

    /// Whether [`fused_matvec_parts_rope_append`](Self::fused_matvec_parts_rope_append)
    /// takes `x` against `parts`: as [`fused_parts_take`](Self::fused_parts_take)
    /// says, with one row of `x` (one sequence's step).
    pub fn fused_step_takes(
        parts: &[(&QuantizedStorage, &Shape)],
        dtype: DType,
        x_l: &Layout,
        swiglu: bool,
    ) -> bool {
        Self::fused_parts_rows(parts, dtype, x_l, swiglu) == Some(1)
    }

    /// The rows of `x` that [`fused_matvec_parts`](Self::fused_matvec_parts)
    /// multiplies with `parts`, or `None` where it does not take them
    /// ([`fused_parts_take`](Self::fused_parts_take)).
    fn fused_parts_rows(
        parts: &[(&QuantizedStorage, &Shape)],
        dtype: DType,
        x_l: &Layout,
        swiglu: bool,
    ) -> Option<usize> {
        let (_, k) = parts.first()?.1.dims2().ok()?;
        fused_rows(x_l, k, swiglu).filter(|_| Self::fused_parts_take(parts, dtype, x_l, swiglu))
    }

    /// One decode step's `x'·Wᵀ (+ residual)`, where this storage holds `W`
    /// of shape `w_shape`, `(n, k)`, and `x'` is `x`, the RMS norm of each of
    /// its rows or the SwiGLU of each row's halves (`input`, as
    /// [`crate::fused::fused_linear`] takes it; the norm weight a contiguous
    /// vector of `k`): the rounding of `x'` to 8 bits and the mat-vec, two
    /// launches. `x` holds a few rows
    /// ([`fused_matvec_takes`](Self::fused_matvec_takes)); `residual`
    /// (optional) a contiguous `rows * n` values in `x`'s dtype. Returns the
    /// `rows * n` outputs, contiguous, in `x`'s dtype: what `rms_norm` or
    /// `silu_mul`, [`matmul_t`](Self::matmul_t) and the addition give one
    /// after the other, up to the order of the norm's sum.
    pub fn fused_matvec(
        &self,
        w_shape: &Shape,
        x: &HipStorage,
        x_l: &Layout,
        input: LinearInput,
        residual: Option<(&HipStorage, &Layout)>,
    ) -> Result<HipStorage> {
        Self::fused_matvec_parts(&[(self, w_shape)], x, x_l, input, residual)
    }

    /// [`fused_matvec`](Self::fused_matvec) against weights stacked along
    /// their outputs, held apart (the q, k and v matrices of a GGUF layer
    /// whose block types differ, such as Q4_K_M's): `x'` is rounded once and
    /// each part's mat-vec writes its slice of the `Σ n` outputs (and adds
    /// its slice of `residual`), one launch per part and no concatenation.
    /// The parts must round to one activation type
    /// ([`fused_parts_take`](Self::fused_parts_take)).
    pub fn fused_matvec_parts(
        parts: &[(&QuantizedStorage, &Shape)],
        x: &HipStorage,
        x_l: &Layout,
        input: LinearInput,
        residual: Option<(&HipStorage, &Layout)>,
    ) -> Result<HipStorage> {
        const OP: &str = "fused_qmatvec";
        let swiglu = matches!(input, LinearInput::SwiGlu);
        let (widths, rows) = Self::checked_parts(OP, parts, (x, x_l), swiglu, residual)?;
        let act = Rounded::of(
            parts[0].0,
            (x, x_l.start_offset()),
            widths[0].1,
            rows,
            input,
        )?;
        Self::matvec_parts(parts, &widths, &act, residual)
    }

    /// The `(n_i, k)` of `parts` and the rows of `x` for a fused product of
    /// `x` (read with `x_l`; `swiglu` as
    /// [`fused_parts_take`](Self::fused_parts_take) takes it) plus
    /// `residual`, after checking that the fused kernels take
    /// them, that the parts live on `x`'s device and that the residual is a
    /// vector of the `Σ n_i` outputs of each of `x`'s rows; op `op`'s error
    /// otherwise.
    fn checked_parts(
        op: &'static str,
        parts: &[(&QuantizedStorage, &Shape)],
        (x, x_l): (&HipStorage, &Layout),
        swiglu: bool,
        residual: Option<(&HipStorage, &Layout)>,
    ) -> Result<(Vec<(usize, usize)>, usize)> {
        let Some(rows) = Self::fused_parts_rows(parts, x.dtype(), x_l, swiglu) else {
            let weights: Vec<_> = parts.iter().map(|(q, s)| (s.dims(), q.dtype)).collect();
            return Err(invalid(
                op,
                format!(
                    "no fused product of x {:?} ({:?}) and the weights {weights:?}: compute it \
                     unfused",
                    x_l.dims(),
                    x.dtype(),
                ),
            ));
        };
        let mut widths = Vec::with_capacity(parts.len());
        for (q, shape) in parts {
            q.data.check_device(x, op)?;
            widths.push(shape.dims2()?);
        }
        let n = widths
            .iter()
            .try_fold(0usize, |sum, &(n, _)| size::add(op, "the outputs", sum, n))?;
        if let Some(r) = residual {
            operand_vector(op, x, r, "residual", size::mul(op, "the outputs", rows, n)?)?;
        }
        Ok((widths, rows))
    }

    /// The mat-vecs of `parts` (of `widths`, `(n_i, k)`) with the rounded
    /// activations `act`, plus `residual` (checked against the outputs by
    /// the caller), each writing its slice of the outputs (several parts
    /// take one row, [`fused_parts_take`](Self::fused_parts_take)).
    fn matvec_parts(
        parts: &[(&QuantizedStorage, &Shape)],
        widths: &[(usize, usize)],
        act: &Rounded,
        residual: Option<(&HipStorage, &Layout)>,
    ) -> Result<HipStorage> {
        const OP: &str = "fused_qmatvec";
        if parts.len() > 1 && act.rows > 1 {
            return Err(invalid(
                OP,
                format!(
                    "{} parts of {} rows: each part writes its columns of one row",
                    parts.len(),
                    act.rows
                ),
            ));
        }
        let n: usize = widths.iter().map(|&(n, _)| n).sum();
        let count = size::mul(OP, "the outputs", act.rows, n)?;
        // SAFETY: the parts' mat-vecs write every one of the rows * n outputs.
        let mut y = unsafe { act.q.device().alloc_uninit(&Shape::from(count), act.dtype) }?;
        let mut start = 0;
        for (&(q, _), &(n_part, _)) in parts.iter().zip(widths) {
            let len = act.rows * n_part;
            let res = residual
                .map(|(r, l)| r.view_range(OP, l.start_offset() + start, len))
                .transpose()?;
            let yv = y.view_range_mut(OP, start, len)?;
            q.launch_matvec(act, n_part, &yv, res.as_ref(), QRope::default())?;
            start += len;
        }
        Ok(y)
    }

    /// One decode step's attention and output projection: the fused
    /// attention of `q` (one query of one sequence) over `k` and `v`, as
    /// [`crate::fused::flash_attn`] takes them, multiplied by the weights
    /// stacked from `parts` (each `(n_i, h_q · head_dim)`), plus `residual`:
    /// what [`fused_matvec_parts`](Self::fused_matvec_parts) gives of
    /// `flash_attn`'s output, bit for bit. Where the attention ends with
    /// flash-decoding's merge, the merge rounds the activations itself
    /// (`flash_combine_round`): a launch fewer than the two ops.
    ///
    /// Errors: those of both ops, and an attention of more than one row.
    #[allow(clippy::too_many_arguments)]
    pub fn fused_attention_matvec_parts(
        parts: &[(&QuantizedStorage, &Shape)],
        (q, q_l): (&HipStorage, &Layout),
        (k, k_l): (&HipStorage, &Layout),
        (v, v_l): (&HipStorage, &Layout),
        extras: FlashAttnExtras,
        params: &FlashAttnParams,
        residual: Option<(&HipStorage, &Layout)>,
    ) -> Result<HipStorage> {
        const OP: &str = "fused_attention_qmatvec";
        let dims = q_l.dims();
        if dims.len() != 4 || dims[..2] != [1, 1] {
            return Err(invalid(
                OP,
                format!("an attention of one query row, not q {dims:?}"),
            ));
        }
        let splits = match attention::attend(q, q_l, k, k_l, v, v_l, extras, params)? {
            Attended::Output(out) => {
                let row = Layout::contiguous((1, out.len()));
                return Self::fused_matvec_parts(parts, &out, &row, LinearInput::Plain, residual);
            }
            Attended::Splits(splits) => splits,
        };
        // The attention's output rows, of q's dtype and on its device.
        let rows = Layout::contiguous((splits.rows(), splits.row_width()));
        let (widths, _) = Self::checked_parts(OP, parts, (q, &rows), false, residual)?;
        let act = Rounded::of_splits(parts[0].0, &splits)?;
        Self::matvec_parts(parts, &widths, &act, residual)
    }

    /// One decode step's query/key/value product against `parts` (as
    /// [`fused_matvec_parts`](Self::fused_matvec_parts) takes them, stacked
    /// to the step's `(heads + 2 kv_heads) head_dim` rows) with RoPE and the
    /// cache write in the mat-vecs' own launches: the outputs go where
    /// [`crate::fused::rope_append`] puts them, into `step`'s state, each
    /// rounded to `x`'s dtype first. Interleaved RoPE only (`rope_i`, as
    /// GGUF models rotate): each wave of the mat-vec holds two adjacent
    /// outputs, a rotary pair.
    ///
    /// Errors: those of [`fused_matvec_parts`](Self::fused_matvec_parts) and
    /// [`crate::fused::rope_append`], RoPE of the halves, a part with an
    /// odd number of rows, and rows other than the step's heads.
    pub fn fused_matvec_parts_rope_append(
        parts: &[(&QuantizedStorage, &Shape)],
        x: &HipStorage,
        x_l: &Layout,
        input: LinearInput,
        step: StepTarget,
    ) -> Result<()> {
        const OP: &str = "fused_qmatvec_rope_append";
        let cache = step.cache;
        let swiglu = matches!(input, LinearInput::SwiGlu);
        if !Self::fused_step_takes(parts, x.dtype(), x_l, swiglu) || !cache.interleaved {
            return Err(invalid(
                OP,
                format!(
                    "no fused step of x {:?} ({:?}) with {cache:?}: compute it unfused",
                    x_l.dims(),
                    x.dtype()
                ),
            ));
        }
        let step = StepRope::new(OP, x, step)?;
        let mut widths = Vec::with_capacity(parts.len());
        for (q, shape) in parts {
            q.data.check_device(x, OP)?;
            let (n, k) = shape.dims2()?;
            if n % 2 == 1 {
                return Err(invalid(
                    OP,
                    format!("a part of {n} rows splits a rotary pair"),
                ));
            }
            widths.push((n, k));
        }
        let n = widths
            .iter()
            .try_fold(0usize, |sum, &(n, _)| size::add(OP, "the outputs", sum, n))?;
        if Some(n) != cache.qkv_len() {
            return Err(invalid(
                OP,
                format!("the weights have {n} rows; the step's heads are {cache:?}"),
            ));
        }
        let act = Rounded::of(parts[0].0, (x, x_l.start_offset()), widths[0].1, 1, input)?;
        let [heads, kv_heads, d, max_len, rows] = step.dims;
        let mut first = 0;
        for (&(q, _), &(n_part, _)) in parts.iter().zip(&widths) {
            let rope = QRope {
                cos: step.cos.device_ptr() as u64,
                sin: step.sin.device_ptr() as u64,
                pos: step.pos.device_ptr() as u64,
                first: to_u32(OP, "the first row", first)?,
                heads,
                kv_heads,
                d,
                max_len,
                rows,
            };
            q.launch_matvec(&act, n_part, &step.state, None, rope)?;
            first += n_part;
        }
        Ok(())
    }

    /// `quantize_act_*` then `qmatvec_*`: `rows` contiguous rows of `k`
    /// values (f32, f16 or bf16) of `x` from its element `x.1` on times `W`ᵀ
    /// of shape `(n, k)`, in `x`'s dtype.
    fn matvec(
        &self,
        x: (&HipStorage, usize),
        (n, k): (usize, usize),
        rows: usize,
    ) -> Result<HipStorage> {
        let act = Rounded::of(self, x, k, rows, LinearInput::Plain)?;
        let out_count = size::mul("qmatmul", "the product", rows, n)?;
        // SAFETY: the kernel writes every one of the rows * n values.
        let mut y = unsafe {
            self.device()
                .alloc_uninit(&Shape::from(out_count), x.0.dtype())
        }?;
        let yv = y.view_range_mut("qmatmul", 0, out_count)?;
        self.launch_matvec(&act, n, &yv, None, QRope::default())?;
        Ok(y)
    }

    /// `qmatvec_*` of these blocks, `W` of shape `(n, act.k)`, with the
    /// rounded activations `act`: the `act.rows * n` outputs (in the
    /// activations' dtype) into `yv`, plus `residual` (as many values, or
    /// none); or, where `rope.cos` is not null (one row, no residual), the
    /// step's rotary pairs into the state `yv` (`QRope` of quantized.hip,
    /// whose tables, position and state the caller checked).
    fn launch_matvec(
        &self,
        act: &Rounded,
        n: usize,
        yv: &DeviceViewMut<'_, u8>,
        residual: Option<&DeviceView<'_, u8>>,
        rope: QRope,
    ) -> Result<()> {
        const OP: &str = "qmatmul";
        let (k, rows, dtype) = (act.k, act.rows, act.dtype);
        let block = self.dtype.block_size();
        let w_count = size::mul(OP, "the weight", n, k)?;
        if !k.is_multiple_of(block) || w_count > self.capacity() {
            return Err(invalid(
                OP,
                format!(
                    "a ({n}, {k}) weight of {:?} blocks of {block}: the storage holds {} values",
                    self.dtype,
                    self.capacity()
                ),
            ));
        }
        if activation_type(self.dtype) != act.block {
            return Err(invalid(
                OP,
                format!(
                    "{:?} weights take activations rounded to {:?}, not {:?}",
                    self.dtype,
                    activation_type(self.dtype),
                    act.block
                ),
            ));
        }
        let launcher = self.device().kernels();
        let out_count = size::mul(OP, "the product", rows, n)?;
        let out_bytes = size::mul(OP, "the product", out_count, dtype.size_in_bytes())?;
        if rope.cos == 0 && yv.len() != out_bytes {
            return Err(invalid(
                OP,
                format!("{out_count} outputs of {dtype:?} into {} bytes", yv.len()),
            ));
        }
        if rope.cos != 0 && (rows != 1 || residual.is_some() || !n.is_multiple_of(2)) {
            return Err(invalid(
                OP,
                format!("a step's rotary pairs take one row and even outputs, not {rows} x {n}"),
            ));
        }
        let w = self
            .data
            .view_range(OP, 0, w_count / block * self.dtype.type_size())?;
        let (qv, dv, sv) = act.views()?;
        let residual_arg = view_or_null(residual);
        let (n32, k32) = (to_u32(OP, "n", n)?, to_u32(OP, "k", k)?);
        // One wave (`split` waves) per MATVEC_OUTS_PER_WAVE outputs: n /
        // outputs per block stays far below the grid's limit for a 32-bit n.
        let waves_per_block = (MATVEC_BLOCK / launcher.wave_size().max(1)).max(1);
        let compute_units = launcher.compute_units() as usize;
        let split_family =
            matvec_split_family(self.dtype, (n, k), rows, waves_per_block, compute_units);
        let split = if split_family.is_some() { 2 } else { 1 };
        let outs_per_block = waves_per_block / split * MATVEC_OUTS_PER_WAVE;
        let cfg = grid::linear(u64::from(n32.div_ceil(outs_per_block)), MATVEC_BLOCK);
        let rows32 = to_u32(OP, "rows", rows)?;
        let family = split_family
            .unwrap_or_else(|| cat::qmatvec_family(self.dtype, rows <= MATVEC_FEW_ROWS));
        let kernel = family.quantized(OP, self.dtype, dtype)?;
        let y_dtype = header::dtype_code(dtype)
            .ok_or_else(|| candle_core::Error::UnsupportedDTypeForOp(dtype, OP).bt())?;
        // SAFETY: qmatvec[_few[_split]]_<q>(const u8* w, const i8* q, const
        // float* d, const float* s, void* y, u32 y_dtype, u32 n, u32 k, u32
        // rows, const void* residual, QRope rope): w (the start of a fresh
        // allocation, so 16-byte aligned, Q_PAD bytes after the blocks)
        // holds n rows of k / QK blocks, q rows * k bytes (fresh, so 16-byte
        // aligned), d and s rows * k / 32 f32, y rows * n values of y_dtype,
        // the activations' dtype (checked above; the kernel lookup accepted
        // it), residual as many of that dtype (the caller's checked view) or
        // null; one wave per MATVEC_OUTS_PER_WAVE outputs (two for the split
        // kernel, taken with an even number of waves a block). With rope (one
        // row, so a few-rows kernel, which stores it; even n) y is the step's
        // state and rope's tables and position its checked views, alive in
        // the caller's StepRope while the kernel is queued.
        unsafe {
            launcher.launch(
                kernel,
                cfg,
                &[
                    &w,
                    &qv,
                    &dv,
                    &sv,
                    yv,
                    &y_dtype,
                    &n32,
                    &k32,
                    &rows32,
                    residual_arg,
                    &rope,
                ],
            )
        }
    }
}

/// Activations rounded to 8 bits for the mat-vec (`quantize_act_*`): the
/// integers, the scales and q8_1's sums of `rows` rows of `k` values.
struct Rounded {
    /// The activation type they are rounded to.
    block: GgmlDType,
    /// The dtype of the activations (and of the products' outputs).
    dtype: DType,
    rows: usize,
    k: usize,
    q: HipStorage,
    d: HipStorage,
    s: HipStorage,
}

impl Rounded {
    /// `rows` contiguous rows of `k` values of `x` from its element `x.1`
    /// on (of `2k` for SwiGLU), made `x'` by `input` (row by row) and
    /// rounded for the mat-vec of `weights`' blocks.
    fn of(
        weights: &QuantizedStorage,
        (x, x_start): (&HipStorage, usize),
        k: usize,
        rows: usize,
        input: LinearInput,
    ) -> Result<Rounded> {
        const OP: &str = "qmatmul";
        let block = activation_type(weights.dtype);
        whole_blocks(weights, k)?;
        let launcher = weights.device().kernels();
        // SAFETY: quantize_act_* below writes every integer, scale and sum.
        let mut act = unsafe { Rounded::uninit(weights.device(), block, x.dtype(), rows, k) }?;
        let (count, scales) = (rows * k, rows * k / SUB);
        {
            let x_count = if matches!(input, LinearInput::SwiGlu) {
                size::mul(OP, "the input", count, 2)?
            } else {
                count
            };
            let xv = x.view_range(OP, x_start, x_count)?;
            let (norm_w, eps) = match input {
                LinearInput::RmsNorm { weight, eps } => {
                    // The kernel's norm walks each row with a u32 count.
                    to_u32(OP, "k", k)?;
                    (Some(operand_vector(OP, x, weight, "norm weight", k)?), eps)
                }
                _ => (None, 0.0f32),
            };
            let norm_arg = view_or_null(norm_w.as_ref());
            let (qv, dv, sv) = (
                act.q.view_range_mut(OP, 0, count)?,
                act.d.view_range_mut(OP, 0, scales)?,
                act.s.view_range_mut(OP, 0, scales)?,
            );
            // The norm and SwiGLU take a row of blocks (grid y) per row.
            let cfg = if matches!(input, LinearInput::Plain) {
                grid::grid_stride((count / ACT_PER_LANE) as u64, launcher.compute_units())
            } else {
                let mut cfg =
                    grid::grid_stride((k / ACT_PER_LANE) as u64, launcher.compute_units());
                // The fused products take at most MATVEC_MAX_ROWS rows.
                cfg.grid_dim.1 = to_u32(OP, "rows", rows)?;
                cfg
            };
            let kernel = cat::QUANTIZE_ACT.quantized(OP, block, x.dtype())?;
            let (count, code) = (count as u64, input.code());
            // SAFETY: quantize_act_<a>_<dtype>(const T* x, i8* q, float* d,
            // float* s, u64 count, u32 input, const T* norm_w, float eps): x
            // holds count values (2 * count for SwiGLU), q count bytes, d and
            // s count / 32 f32, norm_w k values or null (checked views); the
            // norm and SwiGLU take a row of k = count / grid y values per
            // grid row; k is whole blocks of the activation type (whole
            // weight blocks, 32 or 256 values).
            unsafe {
                launcher.launch(
                    kernel,
                    cfg,
                    &[&xv, &qv, &dv, &sv, &count, &code, norm_arg, &eps],
                )
            }?;
        }
        Ok(act)
    }

    /// Room for `rows` rows of `k` activations rounded to `block`, for
    /// products in `dtype`.
    ///
    /// # Safety
    /// Every integer, scale and sum must be written before a mat-vec reads
    /// them.
    unsafe fn uninit(
        device: &HipDevice,
        block: GgmlDType,
        dtype: DType,
        rows: usize,
        k: usize,
    ) -> Result<Rounded> {
        let count = size::mul("qmatmul", "the input", rows, k)?;
        let scales = count / SUB;
        // SAFETY (the three allocations): forwarded to the caller.
        let (q, d, s) = unsafe {
            (
                device.alloc_uninit(&Shape::from(count), DType::U8)?,
                device.alloc_uninit(&Shape::from(scales), DType::F32)?,
                device.alloc_uninit(&Shape::from(scales), DType::F32)?,
            )
        };
        Ok(Rounded {
            block,
            dtype,
            rows,
            k,
            q,
            d,
            s,
        })
    }

    /// The merge of flash-decoding's `splits` (one row of `h_q · head_dim`
    /// values, whole blocks of `weights`' type: the caller checks) rounded
    /// for the mat-vec of `weights`' blocks by the merge itself.
    fn of_splits(weights: &QuantizedStorage, splits: &Splits) -> Result<Rounded> {
        const OP: &str = "qmatmul";
        let block = activation_type(weights.dtype);
        let (rows, k) = (splits.rows(), splits.row_width());
        whole_blocks(weights, k)?;
        // SAFETY: flash_combine_round writes every integer, scale and sum.
        let mut act = unsafe { Rounded::uninit(weights.device(), block, splits.dtype(), rows, k) }?;
        let (count, scales) = (rows * k, rows * k / SUB);
        splits.merge_rounded(
            activation_code(block),
            &act.q.view_range_mut(OP, 0, count)?,
            &act.d.view_range_mut(OP, 0, scales)?,
            &act.s.view_range_mut(OP, 0, scales)?,
        )?;
        Ok(act)
    }

    /// The integers, scales and sums as the mat-vec reads them.
    #[allow(clippy::type_complexity)]
    fn views(
        &self,
    ) -> Result<(
        hip_safe::DeviceView<'_, u8>,
        hip_safe::DeviceView<'_, u8>,
        hip_safe::DeviceView<'_, u8>,
    )> {
        const OP: &str = "qmatmul";
        let (count, scales) = (self.rows * self.k, self.rows * self.k / SUB);
        Ok((
            self.q.view_range(OP, 0, count)?,
            self.d.view_range(OP, 0, scales)?,
            self.s.view_range(OP, 0, scales)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_rows_split_where_the_device_is_short_of_waves() {
        let h100 = 132;
        let split = |block, shape, rows, waves| {
            matvec_split_family(block, shape, rows, waves, h100).map(|f| f.name)
        };
        // Llama-3.2-1B's and Llama-3.1-8B's down products at batch 1.
        assert_eq!(
            split(GgmlDType::Q6K, (2048, 8192), 1, 4),
            Some("qmatvec_few_split")
        );
        assert_eq!(split(GgmlDType::Q6K, (4096, 14336), 1, 4), None);
        assert_eq!(
            split(GgmlDType::Q4_0, (2048, 8192), 1, 4),
            Some("qmatvec_few_split")
        );
        // Short rows, several rows, a type that walks pairs, odd waves.
        assert_eq!(split(GgmlDType::Q6K, (2048, 4096), 1, 4), None);
        assert_eq!(split(GgmlDType::Q6K, (2048, 8192), 2, 4), None);
        assert_eq!(split(GgmlDType::Q4K, (2048, 8192), 1, 4), None);
        assert_eq!(split(GgmlDType::Q8_0, (2048, 8192), 1, 1), None);
    }

    #[test]
    fn constants_match_quantized_hip() {
        assert_eq!(
            candle_hip_kernels::COMMON_HEADER.define("CH_QACT_PER_LANE"),
            Some(ACT_PER_LANE.to_string().as_str())
        );
        assert_eq!(
            candle_hip_kernels::QUANTIZED.define("CH_QMATVEC_OUTS"),
            Some(MATVEC_OUTS_PER_WAVE.to_string().as_str())
        );
        assert_eq!(
            candle_hip_kernels::QUANTIZED.define("CH_DQ_MAX_LANES"),
            Some(DEQUANT_MAX_LANES.to_string().as_str())
        );
        assert_eq!(
            candle_hip_kernels::QUANTIZED.define("CH_QMATVEC_FEW_ROWS"),
            Some(MATVEC_FEW_ROWS.to_string().as_str())
        );
    }
}
