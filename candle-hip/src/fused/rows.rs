//! Row kernels over the last dimension: softmax, rms_norm, layer_norm
//! (`kernels/softmax.hip`, `kernels/norm.hip`): one block per row.

use candle_core::Layout;
use candle_core::backend::BackendStorage;
use hip_safe::KernelArg;

use crate::call;
use crate::error::{Result, invalid};
use crate::storage::HipStorage;
use crate::table;

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
        let rows = layout.shape().elem_count().checked_div(cols).unwrap_or(0);
        Ok(Rows { start, rows, cols })
    }

    fn len(&self) -> usize {
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

/// Launches row kernel `family` on `x`: arguments `(x, params..., out,
/// cols[, eps])`.
fn run(
    op: &'static str,
    family: &str,
    x: &HipStorage,
    layout: &Layout,
    params: &[Param<'_>],
    eps: Option<f32>,
) -> Result<HipStorage> {
    let rows = Rows::of(op, layout)?;
    let dtype = x.dtype();
    let kernel = table::kernel(family, op, dtype, None)?;
    let device = x.device();
    // SAFETY: the kernel writes every element of every row (or fails).
    let mut out = unsafe { device.alloc_storage(dtype, rows.len()) }?;
    if rows.len() == 0 {
        return Ok(out);
    }
    let cfg = call::row_config(
        op,
        rows.rows,
        rows.cols,
        dtype.size_in_bytes(),
        device.wave_size(),
    )?;
    let cols = call::to_u32(op, "the last dimension", rows.cols)?;
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
    unsafe { call::launch(device, kernel, cfg, &args) }?;
    Ok(out)
}

/// Softmax over the last dimension of a contiguous `x`
/// (`candle_nn::ops::softmax_last_dim`).
pub fn softmax_last_dim(x: &HipStorage, layout: &Layout) -> candle_core::Result<HipStorage> {
    run("softmax_last_dim", "softmax", x, layout, &[], None)
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
        "rms_norm",
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
    run(OP, "layer_norm", x, layout, &params, Some(eps))
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
}
