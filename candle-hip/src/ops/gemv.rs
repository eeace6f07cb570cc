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
//! `CANDLE_HIP_GEMV=0` in the environment (read once) sends these products
//! to rocBLAS too, for comparing the two paths.

use std::sync::OnceLock;

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use hip_safe::{DevicePtr, LaunchConfig};

use crate::error::Result;
use crate::kernel::catalogue as cat;
use crate::kernel::header::{ELEM_BLOCK, VEC_BYTES};
use crate::kernel::launch::to_u32;
use crate::size;
use crate::storage::HipStorage;

const OP: &str = "matmul";

/// The variable that turns the path off (`0`).
pub const GEMV_VAR: &str = "CANDLE_HIP_GEMV";

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var(GEMV_VAR).map_or(true, |v| v.trim() != "0"))
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

/// Computes the `n` outputs into `out` from element `out_offset` on through
/// `gemv_*` when [`plan`] accepts the product and the operands are 16-byte
/// aligned; `Ok(false)` (nothing done) otherwise.
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
    let w_rows = size::mul(OP, "the weight span", g.n - 1, g.w_stride)?;
    let w_span = size::add(OP, "the weight span", w_rows, g.k)?;
    let x = lhs.view_range(OP, g.x_start, g.k)?;
    let w = rhs.view_range(OP, g.w_start, w_span)?;
    let aligned = |p: usize| p.is_multiple_of(VEC_BYTES);
    if !aligned(x.device_ptr() as usize) || !aligned(w.device_ptr() as usize) {
        return Ok(false);
    }
    let y = out.view_range_mut(OP, out_offset, g.n)?;
    let launcher = lhs.device().kernels();
    let waves_per_block = (ELEM_BLOCK / launcher.wave_size().max(1)).max(1);
    let blocks = g.n.div_ceil(waves_per_block as usize);
    let cfg = LaunchConfig {
        grid_dim: (
            to_u32(OP, "the blocks of one wave per output", blocks)?,
            1,
            1,
        ),
        block_dim: (ELEM_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    let n = to_u32(OP, "n", g.n)?;
    let k = to_u32(OP, "k", g.k)?;
    let w_stride = g.w_stride as u64;
    let kernel = cat::GEMV.kernel(OP, dtype)?;
    // SAFETY: gemv_* takes (const T* x, const T* w, T* y, u32 n, u32 k, u64
    // w_stride); x holds k elements, w (n - 1) * w_stride + k, y n (checked
    // views); x, w, w_stride and k are whole 16-byte packs, and the grid has
    // one wave per output.
    unsafe { launcher.launch(kernel, cfg, &[&x, &w, &y, &n, &k, &w_stride]) }?;
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
