//! Row kernels over the last dimension: softmax, rms_norm, layer_norm
//! (`softmax.hip`, `norm.hip`): one block per row.

use candle_core::Layout;
use candle_core::backend::BackendStorage;
use hip_safe::{KernelArg, LaunchConfig};

use crate::error::{Result, invalid};
use crate::kernel::catalogue::{self as cat, Family};
use crate::kernel::header::{REDUCE_MAX_BLOCK, ROW_CACHE_BYTES};
use crate::kernel::launch::to_u32;
use crate::size;
use crate::storage::HipStorage;

/// Where the rows of a contiguous input are: first element, rows, columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rows {
    pub(crate) start: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl Rows {
    /// The rows of `layout`, which must be contiguous and have a dimension.
    pub(crate) fn of(op: &'static str, layout: &Layout) -> Result<Rows> {
        let (start, _) = layout
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::RequiresContiguous { op }.bt())?;
        let cols = *layout
            .dims()
            .last()
            .ok_or_else(|| invalid(op, "the input has no last dimension"))?;
        let rows = size::numel(op, layout.dims())?
            .checked_div(cols)
            .unwrap_or(0);
        Ok(Rows { start, rows, cols })
    }

    /// Elements of all rows (the layout's element count).
    pub(crate) fn len(&self) -> usize {
        self.rows * self.cols
    }
}

/// Checks a per-column parameter (`alpha`, `beta`): same device and dtype as
/// `x`, one dimension of `cols` elements, contiguous. Returns its first element.
fn vector(
    op: &'static str,
    name: &str,
    x: &HipStorage,
    v: &HipStorage,
    layout: &Layout,
    cols: usize,
) -> Result<usize> {
    x.check_device(v, op)?;
    x.check_dtype(v, op)?;
    if layout.dims() != [cols] {
        return Err(invalid(
            op,
            format!(
                "{name} has shape {:?}, expected [{cols}] (the last dimension of the input)",
                layout.dims()
            ),
        ));
    }
    let (start, _) = layout
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::RequiresContiguous { op }.bt())?;
    Ok(start)
}

/// A per-column parameter as a kernel argument.
struct Param<'a> {
    storage: &'a HipStorage,
    start: usize,
}

/// One block per row for `rows` rows of `cols` elements of `elem_bytes`
/// bytes: whole waves, enough threads for each to hold its share of the row
/// in registers ([`ROW_CACHE_BYTES`]), at most `CH_REDUCE_MAX_BLOCK` threads
/// (longer rows are read twice, except 16-bit softmax rows of up to twice
/// that, which softmax caches).
fn row_config(
    op: &'static str,
    rows: usize,
    cols: usize,
    elem_bytes: usize,
    wave: u32,
) -> Result<LaunchConfig> {
    let blocks = u32::try_from(rows)
        .ok()
        .filter(|&r| r <= i32::MAX as u32)
        .ok_or_else(|| {
            invalid(
                op,
                format!("{rows} rows exceed the grid limit of 2^31 - 1 blocks"),
            )
        })?;
    let acc_bytes = elem_bytes.max(4);
    let wanted = cols.div_ceil(ROW_CACHE_BYTES / acc_bytes);
    let wave = wave.clamp(1, REDUCE_MAX_BLOCK) as usize;
    let threads = wanted
        .next_multiple_of(wave)
        .clamp(wave, REDUCE_MAX_BLOCK as usize);
    Ok(LaunchConfig {
        grid_dim: (blocks.max(1), 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// Launches row kernel `family` on `x`: arguments `(x, params..., out,
/// cols[, eps])`.
fn run(
    op: &'static str,
    family: &'static Family,
    x: &HipStorage,
    layout: &Layout,
    params: &[Param<'_>],
    eps: Option<f32>,
) -> Result<HipStorage> {
    let rows = Rows::of(op, layout)?;
    let dtype = x.dtype();
    let kernel = family.kernel(op, dtype)?;
    let device = x.device();
    // SAFETY: the kernel writes every element of every row (or fails).
    let mut out = unsafe { device.alloc_storage(dtype, rows.len()) }?;
    if rows.len() == 0 {
        return Ok(out);
    }
    let launcher = device.kernels();
    let cfg = row_config(
        op,
        rows.rows,
        rows.cols,
        dtype.size_in_bytes(),
        launcher.wave_size(),
    )?;
    let cols = to_u32(op, "the last dimension", rows.cols)?;
    let src = x.view_range(op, rows.start, rows.len())?;
    let param_views = params
        .iter()
        .map(|p| p.storage.view_range(op, p.start, rows.cols))
        .collect::<Result<Vec<_>>>()?;
    let dst = out.view_all_mut();
    let mut args: Vec<&dyn KernelArg> = vec![&src];
    args.extend(param_views.iter().map(|v| v as &dyn KernelArg));
    args.push(&dst);
    args.push(&cols);
    if let Some(eps) = &eps {
        args.push(eps);
    }
    // SAFETY: softmax_* takes (const T* src, T* dst, u32 cols), rms_norm_*
    // (src, alpha, dst, cols, float eps), layer_norm_* (src, alpha, beta,
    // dst, cols, float eps); src and dst hold rows x cols elements, the
    // parameters cols elements, and the grid has one block per row.
    unsafe { launcher.launch(kernel, cfg, &args) }?;
    Ok(out)
}

/// Softmax over the last dimension of a contiguous `x`
/// (`candle_nn::ops::softmax_last_dim`).
pub fn softmax_last_dim(x: &HipStorage, layout: &Layout) -> candle_core::Result<HipStorage> {
    run("softmax_last_dim", &cat::SOFTMAX, x, layout, &[], None)
}

/// `x / sqrt(mean(x²) + eps) * alpha` over the last dimension of a
/// contiguous `x`; `alpha` has one dimension, the size of `x`'s last
/// (`candle_nn::ops::rms_norm`).
pub fn rms_norm(
    x: &HipStorage,
    layout: &Layout,
    alpha: &HipStorage,
    alpha_layout: &Layout,
    eps: f32,
) -> candle_core::Result<HipStorage> {
    const OP: &str = "rms_norm";
    let cols = Rows::of(OP, layout)?.cols;
    let a = vector(OP, "alpha", x, alpha, alpha_layout, cols)?;
    run(
        OP,
        &cat::RMS_NORM,
        x,
        layout,
        &[Param {
            storage: alpha,
            start: a,
        }],
        Some(eps),
    )
}

/// `(x - mean) / sqrt(var + eps) * alpha + beta` over the last dimension of
/// a contiguous `x`; `alpha` and `beta` have one dimension, the size of
/// `x`'s last (`candle_nn::ops::layer_norm`).
pub fn layer_norm(
    x: &HipStorage,
    layout: &Layout,
    alpha: &HipStorage,
    alpha_layout: &Layout,
    beta: &HipStorage,
    beta_layout: &Layout,
    eps: f32,
) -> candle_core::Result<HipStorage> {
    const OP: &str = "layer_norm";
    let cols = Rows::of(OP, layout)?.cols;
    let a = vector(OP, "alpha", x, alpha, alpha_layout, cols)?;
    let b = vector(OP, "beta", x, beta, beta_layout, cols)?;
    let params = [
        Param {
            storage: alpha,
            start: a,
        },
        Param {
            storage: beta,
            start: b,
        },
    ];
    run(OP, &cat::LAYER_NORM, x, layout, &params, Some(eps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_contiguous_layouts() {
        let l = Layout::contiguous_with_offset((2, 3, 5), 7);
        assert_eq!(
            Rows::of("t", &l).unwrap(),
            Rows {
                start: 7,
                rows: 6,
                cols: 5
            }
        );
        let empty = Layout::contiguous((4, 0));
        assert_eq!(Rows::of("t", &empty).unwrap().len(), 0);
        let t = Layout::contiguous((3, 5)).transpose(0, 1).unwrap();
        let err = Rows::of("softmax_last_dim", &t).unwrap_err().to_string();
        assert!(
            err.contains("softmax_last_dim") && err.contains("contiguous"),
            "{err}"
        );
        assert!(Rows::of("t", &Layout::contiguous(())).is_err());
    }

    #[test]
    fn row_blocks_are_whole_waves_sized_to_the_row() {
        let threads =
            |cols, bytes, wave| row_config("t", 3, cols, bytes, wave).unwrap().block_dim.0;
        // rms_norm over 4096 bf16 or f32: 16 values per thread.
        assert_eq!(threads(4096, 2, 32), 256);
        assert_eq!(threads(4096, 4, 64), 256);
        assert_eq!(threads(4096, 8, 64), 512);
        // Short rows get one wave.
        assert_eq!(threads(100, 4, 64), 64);
        assert_eq!(threads(1, 8, 32), 32);
        // Rows up to 1024 threads' cache are cached: 16384 f32, 8192 f64.
        for (cols, bytes) in [(16384, 4), (8192, 8), (1000, 2), (16383, 2)] {
            let t = threads(cols, bytes, 32) as usize;
            assert!(
                cols <= t * ROW_CACHE_BYTES / bytes.max(4),
                "{cols} x {bytes} bytes in {t} threads"
            );
        }
        // Vocabulary softmax: the largest block; f32 rows are read twice,
        // 16-bit ones fit softmax's doubled cache (SoftmaxCache in
        // kernels/softmax.hip: 32 values per thread).
        let c = row_config("t", 8192, 32000, 4, 64).unwrap();
        assert_eq!((c.grid_dim.0, c.block_dim.0), (8192, 1024));
        let c = row_config("t", 8192, 32000, 2, 32).unwrap();
        assert!(32000 <= c.block_dim.0 as usize * 2 * ROW_CACHE_BYTES / 4);
    }

    #[test]
    fn huge_grids_are_refused() {
        let err = row_config("softmax", 1 << 31, 5, 4, 32)
            .unwrap_err()
            .to_string();
        assert!(err.contains("softmax") && err.contains("grid"), "{err}");
    }
}
