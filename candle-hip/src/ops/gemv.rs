//! Decoding one token through `gemv.hip`: `x · Wᵀ` for a single row `x`,
//! with `W` stored `(n, k)` row-major, as candle-nn's `Linear` multiplies one
//! token by its weight. The product streams the weight once, so it is bound
//! by memory bandwidth, and a kernel launch costs far less host time than a
//! GEMM library call, which dominates a decoding step at batch 1. Every other
//! product goes to rocBLAS, several rows included: measured on the test
//! platform (`benches/PERF_NOTES.md`), one wave per output loses to the
//! library's kernels once it must read each pack of the weight against
//! several rows.
//!
//! Each output is one wave's work (`gemv_*`), or a group of `split` waves'
//! (`gemv_split_*`, [`split`]) when `n` outputs alone would leave most of
//! the device's waves idle, as the narrow projections of a small model or
//! of grouped-query attention do (`n` = 512 or 1024 outputs of rows of
//! 2048 or 4096).
//!
//! `CANDLE_HIP_GEMV=0` in the environment (read once) sends these products
//! to rocBLAS too, for comparing the two paths; `CANDLE_HIP_GEMV_SPLIT=S`
//! (read once; 1, 2, 4, 8 or 16, other values are ignored) takes `S` waves
//! per output for every shape instead of [`split`]'s choice, for measuring.

use std::sync::OnceLock;

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use hip_safe::{DevicePtr, LaunchConfig};

use crate::error::{Result, invalid};
use crate::kernel::catalogue as cat;
use crate::kernel::grid::per_pack;
use crate::kernel::header::{ELEM_BLOCK, REDUCE_MAX_BLOCK, VEC_BYTES};
use crate::kernel::launch::to_u32;
use crate::size;
use crate::storage::HipStorage;

const OP: &str = "matmul";

/// The variable that turns the path off (`0`).
pub const GEMV_VAR: &str = "CANDLE_HIP_GEMV";

/// `CH_GEMV_UNROLL` (gemv.hip): packs each lane loads before using them.
const UNROLL: usize = 4;

/// `CH_GEMV_MAX_SPLIT` (gemv.hip): the most waves one output is split over.
const MAX_SPLIT: usize = 16;

/// Waves a compute unit holds at once, as [`split`] counts them: CDNA's
/// 4 SIMDs of 8 waves and RDNA's 2 SIMDs of 16; NVIDIA's SMs (the test
/// platform) hold up to 64 warps, fewer at this kernel's register use.
const RESIDENT_WAVES_PER_CU: usize = 32;

/// [`split`] splits outputs while all of them take fewer waves than this
/// many per compute unit: half of [`RESIDENT_WAVES_PER_CU`]. Measured on the
/// test platform (H200, 132 SMs, bf16, weights streamed from memory), 4096
/// outputs of one wave (31 per SM) stream as fast as any split of them
/// (k = 14,336: 30.6 us at S = 1, 31.5 at 2, 33.5 at 4; 92 % of the copy
/// bandwidth on an H100), and fewer outputs gain from splitting up to about
/// that many waves: n = 2048 (k = 8192) 13.0 -> 11.4 us at S = 2, n = 1024
/// (k = 4096) 7.1 -> 5.5 at 4, n = 256 (k = 14,336) 16.0 -> 5.3 at 8.
const SPLIT_BELOW_WAVES_PER_CU: usize = RESIDENT_WAVES_PER_CU / 2;

/// The variable that fixes the waves per output.
pub const GEMV_SPLIT_VAR: &str = "CANDLE_HIP_GEMV_SPLIT";

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var(GEMV_VAR).map_or(true, |v| v.trim() != "0"))
}

/// `CANDLE_HIP_GEMV_SPLIT`, when it holds a split the kernel takes.
fn forced_split() -> Option<usize> {
    static FORCED: OnceLock<Option<usize>> = OnceLock::new();
    *FORCED.get_or_init(|| {
        let v = std::env::var(GEMV_SPLIT_VAR).ok()?;
        let s = v.trim().parse::<usize>().ok()?;
        (s.is_power_of_two() && s <= MAX_SPLIT).then_some(s)
    })
}

/// Where the operands of a one-row product are, in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gemv {
    /// Outputs: rows of W.
    pub(crate) n: usize,
    /// Elements of x and of each row of W.
    pub(crate) k: usize,
    /// First element of x.
    pub(crate) x_start: usize,
    /// First element of W's first row (output 0), and the step between rows.
    pub(crate) w_start: usize,
    pub(crate) w_stride: usize,
}

/// The product as a [`Gemv`], when it is one the kernel takes: a float
/// dtype, one row of x (`b * m == 1`) with unit-stride columns, a weight
/// whose `k` elements per output are unit-stride, and `k` and the weight's
/// row stride whole 16-byte packs. Pointer alignment is checked when the
/// views exist ([`try_run`]).
pub(crate) fn plan(
    dtype: DType,
    (b, m, n, k): (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Option<Gemv> {
    if !matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
        return None;
    }
    let pack = VEC_BYTES / dtype.size_in_bytes();
    let (ls, rs) = (lhs_l.stride(), rhs_l.stride());
    let rank = ls.len();
    if b != 1 || m != 1 || n == 0 || !k.is_multiple_of(pack) || rank < 2 || rs.len() != rank {
        return None;
    }
    // x: unit-stride columns; W: the rhs (k x n) with unit-stride rows.
    let w_stride = if n == 1 { k } else { rs[rank - 1] };
    if ls[rank - 1] != 1 || rs[rank - 2] != 1 || w_stride < k || !w_stride.is_multiple_of(pack) {
        return None;
    }
    Some(Gemv {
        n,
        k,
        x_start: lhs_l.start_offset(),
        w_start: rhs_l.start_offset(),
        w_stride,
    })
}

/// Waves per output (`S`, a power of two up to `CH_GEMV_MAX_SPLIT`) for
/// `n` outputs of `k` elements of `elem_bytes` bytes on a device of
/// `compute_units` units of `wave`-lane waves: the smallest `S` with `n * S`
/// at least [`SPLIT_BELOW_WAVES_PER_CU`] waves per unit (so a split grid
/// ends with between half of and all the waves a unit holds), but no more than
/// leaves every lane one full unrolled step (`S * wave * CH_GEMV_UNROLL`
/// packs per row): past that, splitting further adds waves that each issue
/// fewer loads while a group already has all of its row's loads in flight
/// at once. Also no more waves than one block holds. 1 means `gemv_*`.
pub(crate) fn split(n: usize, k: usize, elem_bytes: usize, wave: u32, compute_units: u32) -> usize {
    let wave = (wave as usize).max(1);
    let packs = k / per_pack(elem_bytes);
    let cap = (packs / wave.saturating_mul(UNROLL))
        .min(MAX_SPLIT)
        .min(REDUCE_MAX_BLOCK as usize / wave);
    let wanted = (compute_units.max(1) as usize).saturating_mul(SPLIT_BELOW_WAVES_PER_CU);
    let mut s = 1;
    while s * 2 <= cap && n.saturating_mul(s) < wanted {
        s *= 2;
    }
    s
}

/// The launch of `n` outputs with `split` waves each on `wave`-lane waves:
/// blocks of at least `CH_ELEM_BLOCK` threads and whole groups of `split`
/// waves (at most `CH_REDUCE_MAX_BLOCK` threads), one output per group.
pub(crate) fn launch_config(n: usize, split: usize, wave: u32) -> Result<LaunchConfig> {
    let wave = wave.max(1) as usize;
    let waves = (ELEM_BLOCK as usize / wave).max(1).max(split);
    let threads = size::mul(OP, "the threads of a block", waves, wave)?;
    if !split.is_power_of_two()
        || split > MAX_SPLIT
        || !waves.is_multiple_of(split)
        || threads > REDUCE_MAX_BLOCK as usize
    {
        return Err(invalid(
            OP,
            format!("no block of {wave}-lane waves holds groups of {split} waves"),
        ));
    }
    let blocks = n.div_ceil(waves / split);
    Ok(LaunchConfig {
        grid_dim: (
            to_u32(OP, "the blocks of one group per output", blocks)?,
            1,
            1,
        ),
        block_dim: (to_u32(OP, "the threads of a block", threads)?, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// Read access to the `n` rows of `k` elements of a weight, `w_stride`
/// elements apart, from element `start` of `w` (op `op` in errors).
pub(crate) fn weight_rows<'a>(
    op: &'static str,
    w: &'a HipStorage,
    start: usize,
    (n, k, w_stride): (usize, usize, usize),
) -> Result<hip_safe::DeviceView<'a, u8>> {
    let rows = size::mul(op, "the weight span", n.saturating_sub(1), w_stride)?;
    let span = size::add(op, "the weight span", rows, k)?;
    w.view_range(op, start, span)
}

/// Computes the `n` outputs into `out` from element `out_offset` on through
/// `gemv_*` or `gemv_split_*` ([`split`]) when [`plan`] accepts the product
/// and the operands are 16-byte aligned; `Ok(false)` (nothing done)
/// otherwise.
pub(crate) fn try_run(
    lhs: &HipStorage,
    rhs: &HipStorage,
    bmnk: (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
    out: &mut HipStorage,
    out_offset: usize,
) -> Result<bool> {
    let dtype = lhs.dtype();
    let Some(g) = plan(dtype, bmnk, lhs_l, rhs_l).filter(|_| enabled()) else {
        return Ok(false);
    };
    let x = lhs.view_range(OP, g.x_start, g.k)?;
    let w = weight_rows(OP, rhs, g.w_start, (g.n, g.k, g.w_stride))?;
    let aligned = |p: usize| p.is_multiple_of(VEC_BYTES);
    if !aligned(x.device_ptr() as usize) || !aligned(w.device_ptr() as usize) {
        return Ok(false);
    }
    let y = out.view_range_mut(OP, out_offset, g.n)?;
    let launcher = lhs.device().kernels();
    let wave = launcher.wave_size();
    let split = forced_split().unwrap_or_else(|| {
        split(
            g.n,
            g.k,
            dtype.size_in_bytes(),
            wave,
            launcher.compute_units(),
        )
    });
    let cfg = launch_config(g.n, split, wave)?;
    let n = to_u32(OP, "n", g.n)?;
    let k = to_u32(OP, "k", g.k)?;
    let w_stride = g.w_stride as u64;
    if split == 1 {
        let kernel = cat::GEMV.kernel(OP, dtype)?;
        // SAFETY: gemv_* takes (const T* x, const T* w, T* y, u32 n, u32 k,
        // u64 w_stride); x holds k elements, w (n - 1) * w_stride + k, y n
        // (checked views); x, w, w_stride and k are whole 16-byte packs, and
        // the grid has one wave per output (`launch_config`).
        unsafe { launcher.launch(kernel, cfg, &[&x, &w, &y, &n, &k, &w_stride]) }?;
    } else {
        let split = to_u32(OP, "the waves per output", split)?;
        let kernel = cat::GEMV_SPLIT.kernel(OP, dtype)?;
        // SAFETY: gemv_split_* takes gemv_*'s parameters and u32 split, with
        // the same views and packs; `split` is 2, 4, 8 or 16 and the grid
        // has one group of `split` waves per output, whole groups per block
        // (`launch_config` checks both).
        unsafe { launcher.launch(kernel, cfg, &[&x, &w, &y, &n, &k, &w_stride, &split]) }?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// candle-nn's Linear: x (b, m, k) times its weight (n, k) broadcast to
    /// (b, n, k) and transposed.
    fn linear(b: usize, m: usize, n: usize, k: usize) -> (Layout, Layout) {
        let x = Layout::contiguous((b, m, k));
        let w = Layout::contiguous((n, k))
            .broadcast_as((b, n, k))
            .unwrap()
            .transpose(1, 2)
            .unwrap();
        (x, w)
    }

    #[test]
    fn linear_layers_of_one_token_are_gemvs() {
        let (x, w) = linear(1, 1, 4096, 4096);
        let g = plan(DType::BF16, (1, 1, 4096, 4096), &x, &w).unwrap();
        assert_eq!((g.n, g.k, g.w_stride), (4096, 4096, 4096));
        let (x, w) = linear(1, 1, 1, 64);
        assert_eq!(
            plan(DType::F64, (1, 1, 1, 64), &x, &w).unwrap().w_stride,
            64
        );
        // A weight narrowed to its first 32 of 48 columns.
        let w = Layout::new((1, 32, 10).into(), vec![0, 1, 48], 16);
        let g = plan(
            DType::F32,
            (1, 1, 10, 32),
            &Layout::contiguous((1, 1, 32)),
            &w,
        )
        .unwrap();
        assert_eq!((g.w_start, g.w_stride), (16, 48));
    }

    #[test]
    fn constants_match_gemv_hip() {
        let gemv = candle_hip_kernels::GEMV;
        assert_eq!(
            gemv.define("CH_GEMV_UNROLL"),
            Some(UNROLL.to_string().as_str())
        );
        assert_eq!(
            gemv.define("CH_GEMV_MAX_SPLIT"),
            Some(MAX_SPLIT.to_string().as_str())
        );
    }

    #[test]
    fn outputs_split_over_waves_until_the_device_is_half_full() {
        // An H100 through the test platform: 132 units, warp 32, bf16;
        // (n, k) of Llama-3.1-8B's and Llama-3.2-1B's projections. Splits
        // stop at 16 x 132 = 2112 waves.
        let h100 = |n, k| split(n, k, 2, 32, 132);
        assert_eq!(h100(4096, 14336), 1); // 8B MLP down: 4096 waves
        assert_eq!(h100(14336, 4096), 1); // 8B MLP up and gate
        assert_eq!(h100(4096, 4096), 1); // 8B attention q and out
        assert_eq!(h100(128_256, 4096), 1); // 8B vocabulary
        assert_eq!(h100(1024, 4096), 4); // 8B attention k and v
        assert_eq!(h100(2048, 8192), 2); // 1B MLP down: 2048 < 2112 waves
        assert_eq!(h100(1024, 2048), 2); // capped: 256 packs per row
        assert_eq!(h100(512, 2048), 2); // 1B attention k and v, capped
        assert_eq!(h100(256, 14336), 8); // capped: 14 unrolled steps
        // An MI300X (304 units, wave 64): 4864 waves.
        assert_eq!(split(4096, 14336, 2, 64, 304), 2);
        assert_eq!(split(1024, 4096, 2, 64, 304), 2); // capped at 512 packs
        assert_eq!(split(1024, 4096, 8, 64, 304), 8); // f64: 2048 packs
        // Short rows keep one wave per output; a lone output takes the
        // most waves its row allows, never more than 16 nor a block.
        assert_eq!(split(1, 64, 4, 32, 132), 1);
        assert_eq!(split(1, 1 << 20, 2, 32, 132), MAX_SPLIT);
        assert_eq!(split(1, 1 << 20, 2, 128, 132), 8);
        assert_eq!(split(1, 1 << 20, 2, 0, 0), MAX_SPLIT);
        for n in [1, 7, 4096, usize::MAX] {
            for k in [0, 8, 1000, 14336, 1 << 30] {
                for wave in [32, 64] {
                    let s = split(n, k, 2, wave, 100);
                    assert!(s.is_power_of_two() && s <= MAX_SPLIT, "{n} {k} {wave}: {s}");
                    let cfg = launch_config(n.min(1 << 20), s, wave).unwrap();
                    let threads = cfg.block_dim.0 as usize;
                    assert!(threads <= REDUCE_MAX_BLOCK as usize && threads >= ELEM_BLOCK as usize);
                    assert!((threads / wave as usize).is_multiple_of(s));
                }
            }
        }
    }

    #[test]
    fn groups_of_waves_tile_the_outputs() {
        // Wave 64, 8 and 16 waves per output: blocks of one output.
        let c = launch_config(5, 8, 64).unwrap();
        assert_eq!((c.grid_dim.0, c.block_dim.0), (5, 512));
        let c = launch_config(5, 16, 64).unwrap();
        assert_eq!((c.grid_dim.0, c.block_dim.0), (5, 1024));
        // Wave 32, one wave per output: today's 256-thread blocks of 8.
        let c = launch_config(4096, 1, 32).unwrap();
        assert_eq!((c.grid_dim.0, c.block_dim.0), (512, 256));
        let c = launch_config(4096, 4, 32).unwrap();
        assert_eq!((c.grid_dim.0, c.block_dim.0), (2048, 256));
        // Wave 32, 2 waves per output: 4 outputs per block, the last block
        // with 3 groups past n.
        let c = launch_config(5, 2, 32).unwrap();
        assert_eq!((c.grid_dim.0, c.block_dim.0), (2, 256));
        // No block holds 32 waves of 64, nor groups of 3.
        assert!(launch_config(5, 32, 64).is_err());
        assert!(launch_config(5, 3, 32).is_err());
        // More blocks than a 32-bit grid: an error, not a truncation.
        assert!(launch_config(usize::MAX, 1, 32).is_err());
    }

    #[test]
    fn other_products_go_to_rocblas() {
        // Several rows, a k that is not whole packs, an integer dtype.
        let (x, w) = linear(1, 2, 64, 32);
        assert_eq!(plan(DType::F32, (1, 2, 64, 32), &x, &w), None);
        let (x, w) = linear(4, 1, 64, 32);
        assert_eq!(plan(DType::F32, (4, 1, 64, 32), &x, &w), None);
        let (x, w) = linear(1, 1, 64, 30);
        assert_eq!(plan(DType::F32, (1, 1, 64, 30), &x, &w), None);
        let (x, w) = linear(1, 1, 64, 32);
        assert_eq!(plan(DType::U32, (1, 1, 64, 32), &x, &w), None);
        // A weight whose k is not unit-stride, x with strided columns.
        let w = Layout::contiguous((1, 32, 64));
        assert_eq!(plan(DType::F32, (1, 1, 64, 32), &x, &w), None);
        let (_, w) = linear(1, 1, 64, 32);
        let xt = Layout::contiguous((1, 32, 1)).transpose(1, 2).unwrap();
        let xt = Layout::new(xt.shape().clone(), vec![32, 1, 2], 0);
        assert_eq!(plan(DType::F32, (1, 1, 64, 32), &xt, &w), None);
    }
}
