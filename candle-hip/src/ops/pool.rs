//! 2-D pooling and upsampling (`pool.hip`, `upsample.hip`):
//! grid-stride kernels over output elements (output columns for nearest
//! upsampling), strided `(N, C, H, W)` sources, contiguous outputs.
//! Semantics follow candle's CPU backend.

use candle_core::Layout;
use candle_core::backend::BackendStorage;
use hip_safe::KernelArg;

use crate::error::{Result, invalid};
use crate::kernel::catalogue::{self as cat, Family};
use crate::kernel::grid::grid_stride;
use crate::kernel::launch::to_u32;
use crate::kernel::nchw::Nchw;
use crate::ops::elementwise;
use crate::size;
use crate::storage::HipStorage;

/// The work items of a kernel: output elements, or output columns (n, c, x)
/// for kernels that walk a column's rows.
#[derive(Clone, Copy)]
enum Items {
    Elements,
    Columns,
}

/// An image kernel family and what its threads take.
#[derive(Clone, Copy)]
struct ImageKernel {
    family: &'static Family,
    items: Items,
}

impl ImageKernel {
    const fn per_element(family: &'static Family) -> Self {
        ImageKernel {
            family,
            items: Items::Elements,
        }
    }
}

/// Runs image kernel `family` with arguments `(src, x, y, extra...)` into a
/// new contiguous `(N, C, out_h, out_w)` storage, one thread per item.
fn run(
    op: &'static str,
    kernel: ImageKernel,
    x: &HipStorage,
    layout: &Layout,
    src: &Nchw,
    out_hw: (usize, usize),
    extra: &[&dyn KernelArg],
) -> Result<HipStorage> {
    let function = kernel.family.kernel(op, x.dtype())?;
    let [n, c, _, _] = src.sizes();
    let len = size::product(op, "the output", &[n, c, out_hw.0, out_hw.1])?;
    let device = x.device();
    // SAFETY: the kernel writes every output element (or fails).
    let mut out = unsafe { device.alloc_storage(x.dtype(), len) }?;
    if len == 0 {
        return Ok(out);
    }
    if src.numel() == 0 {
        return Err(invalid(
            op,
            format!(
                "an empty input {:?} cannot fill an output of {len} elements",
                src.sizes()
            ),
        ));
    }
    let xs = x.view(op, layout)?;
    let dst = out.view_all_mut();
    let mut args: Vec<&dyn KernelArg> = vec![src, &xs, &dst];
    args.extend_from_slice(extra);
    let work = match kernel.items {
        Items::Elements => len,
        Items::Columns => n * c * out_hw.1,
    };
    let launcher = device.kernels();
    let cfg = grid_stride(work as u64, launcher.compute_units());
    // SAFETY: the pooling and upsampling kernels take (const Nchw src,
    // const T* x, T* y, ...) followed by `extra` (pool.hip,
    // upsample.hip); `x` spans every element `src` describes and the
    // kernels read only inside the windows / positions the callers checked;
    // `y` holds N * C * out_h * out_w elements.
    unsafe { launcher.launch(function, cfg, &args) }?;
    Ok(out)
}

/// Output size of a pooling window along one axis.
fn pooled(op: &'static str, size: usize, k: usize, stride: usize) -> Result<usize> {
    if k == 0 || stride == 0 || k > size {
        return Err(invalid(
            op,
            format!(
                "kernel {k} and stride {stride} do not fit an input of {size} (both must be at least 1)"
            ),
        ));
    }
    Ok((size - k) / stride + 1)
}

/// Shared by both poolings: `kernel` and `stride` are (height, width).
fn pool(
    op: &'static str,
    family: &'static Family,
    x: &HipStorage,
    layout: &Layout,
    kernel: (usize, usize),
    stride: (usize, usize),
) -> Result<HipStorage> {
    if layout.dims().len() != 4 {
        return Err(invalid(
            op,
            format!("expected (N, C, H, W), got {:?}", layout.dims()),
        ));
    }
    let src = Nchw::of(op, layout)?;
    let [_, _, h, w] = src.sizes();
    let out = (
        pooled(op, h, kernel.0, stride.0)?,
        pooled(op, w, kernel.1, stride.1)?,
    );
    let u32_of = |what, v| to_u32(op, what, v);
    let (kh, kw) = (
        u32_of("kernel height", kernel.0)?,
        u32_of("kernel width", kernel.1)?,
    );
    let (sh, sw) = (
        u32_of("stride height", stride.0)?,
        u32_of("stride width", stride.1)?,
    );
    let (oh, ow) = (out.0 as u64, out.1 as u64);
    run(
        op,
        ImageKernel::per_element(family),
        x,
        layout,
        &src,
        out,
        &[&kh, &kw, &sh, &sw, &oh, &ow],
    )
}

/// candle's `avg_pool2d`: the mean of each `kernel` window every `stride`
/// (both (height, width)), no padding; floating dtypes.
pub(crate) fn avg_pool2d(
    x: &HipStorage,
    layout: &Layout,
    kernel: (usize, usize),
    stride: (usize, usize),
) -> Result<HipStorage> {
    pool("avg_pool2d", &cat::AVG_POOL2D, x, layout, kernel, stride)
}

/// candle's `max_pool2d`: the maximum of each `kernel` window every
/// `stride` (both (height, width)), no padding; every dtype.
pub(crate) fn max_pool2d(
    x: &HipStorage,
    layout: &Layout,
    kernel: (usize, usize),
    stride: (usize, usize),
) -> Result<HipStorage> {
    pool("max_pool2d", &cat::MAX_POOL2D, x, layout, kernel, stride)
}

/// Nearest-neighbour upsampling of `(N, C, L)` or `(N, C, H, W)` to
/// `out` = (height, width) (height 1 for 1-D).
fn nearest(
    op: &'static str,
    x: &HipStorage,
    layout: &Layout,
    rank: usize,
    out: (usize, usize),
) -> Result<HipStorage> {
    if layout.dims().len() != rank {
        return Err(invalid(
            op,
            format!("expected a {rank}-D input, got {:?}", layout.dims()),
        ));
    }
    let src = Nchw::of(op, layout)?;
    let [_, _, h, w] = src.sizes();
    // Candle's CPU backend: source index floor(o * in / out) in f64.
    let (scale_h, scale_w) = (h as f64 / out.0 as f64, w as f64 / out.1 as f64);
    let (oh, ow) = (out.0 as u64, out.1 as u64);
    run(
        op,
        ImageKernel {
            family: &cat::UPSAMPLE_NEAREST2D,
            items: Items::Columns,
        },
        x,
        layout,
        &src,
        out,
        &[&oh, &ow, &scale_h, &scale_w],
    )
}

/// candle's `upsample_nearest1d`: `(N, C, L)` to `(N, C, size)`; every dtype.
pub(crate) fn upsample_nearest1d(
    x: &HipStorage,
    layout: &Layout,
    size: usize,
) -> Result<HipStorage> {
    nearest("upsample_nearest1d", x, layout, 3, (1, size))
}

/// candle's `upsample_nearest2d`: `(N, C, H, W)` to `(N, C, h, w)`; every dtype.
pub(crate) fn upsample_nearest2d(
    x: &HipStorage,
    layout: &Layout,
    h: usize,
    w: usize,
) -> Result<HipStorage> {
    nearest("upsample_nearest2d", x, layout, 4, (h, w))
}

/// PyTorch's source-coordinate scale along one axis, as candle's CPU
/// backend computes it; a scale factor that is not a positive number is
/// an error (candle's CPU backend indexes out of bounds with it).
fn bilinear_scale(
    input: usize,
    output: usize,
    align_corners: bool,
    factor: Option<f64>,
) -> Result<f64> {
    if align_corners {
        return Ok(if output > 1 {
            input.saturating_sub(1) as f64 / (output - 1) as f64
        } else {
            0.0
        });
    }
    match factor {
        None => Ok(input as f64 / output as f64),
        Some(f) if f.is_finite() && f > 0.0 => Ok(1.0 / f),
        Some(f) => Err(invalid(
            "upsample_bilinear2d",
            format!("a scale factor of {f}: it must be a positive number"),
        )),
    }
}

/// candle's `upsample_bilinear2d`: `(N, C, H, W)` to `(N, C, h, w)`, with
/// PyTorch's `align_corners` and optional scale factors; floating dtypes.
pub(crate) fn upsample_bilinear2d(
    x: &HipStorage,
    layout: &Layout,
    out_h: usize,
    out_w: usize,
    align_corners: bool,
    scale_h: Option<f64>,
    scale_w: Option<f64>,
) -> Result<HipStorage> {
    const OP: &str = "upsample_bilinear2d";
    if layout.dims().len() != 4 {
        return Err(invalid(
            OP,
            format!("expected (N, C, H, W), got {:?}", layout.dims()),
        ));
    }
    let src = Nchw::of(OP, layout)?;
    let [_, _, h, w] = src.sizes();
    if (h, w) == (out_h, out_w) {
        // Candle returns the input unchanged (here as a contiguous copy);
        // the lookup only reports dtypes without a bilinear kernel.
        cat::UPSAMPLE_BILINEAR2D.kernel(OP, x.dtype())?;
        return elementwise::unary(x, layout, &cat::UCOPY, OP);
    }
    let sh = bilinear_scale(h, out_h, align_corners, scale_h)?;
    let sw = bilinear_scale(w, out_w, align_corners, scale_w)?;
    let (oh, ow, align) = (out_h as u64, out_w as u64, u32::from(align_corners));
    run(
        OP,
        ImageKernel::per_element(&cat::UPSAMPLE_BILINEAR2D),
        x,
        layout,
        &src,
        (out_h, out_w),
        &[&oh, &ow, &sh, &sw, &align],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_sizes_and_errors() {
        assert_eq!(pooled("t", 7, 2, 2).unwrap(), 3);
        assert_eq!(pooled("t", 7, 3, 1).unwrap(), 5);
        assert_eq!(pooled("t", 2, 2, 5).unwrap(), 1);
        for (size, k, s) in [(2, 3, 1), (4, 0, 1), (4, 2, 0)] {
            assert!(
                pooled("max_pool2d", size, k, s)
                    .unwrap_err()
                    .to_string()
                    .contains("max_pool2d")
            );
        }
    }

    #[test]
    fn bilinear_scales_follow_pytorch() {
        let scale = |i, o, align, f| bilinear_scale(i, o, align, f).unwrap();
        assert_eq!(scale(4, 8, false, None), 0.5);
        assert_eq!(scale(4, 8, false, Some(2.5)), 0.4);
        assert_eq!(scale(4, 7, true, None), 0.5);
        assert_eq!(scale(4, 1, true, None), 0.0);
        assert_eq!(scale(4, 8, true, Some(3.0)), 3.0 / 7.0);
        // An empty input is refused later, by the launch.
        assert_eq!(scale(0, 8, true, None), 0.0);
        for bad in [0.0, -2.0, f64::NAN, f64::INFINITY] {
            let err = bilinear_scale(4, 8, false, Some(bad)).unwrap_err();
            assert!(err.to_string().contains("scale factor"), "{bad}: {err}");
        }
    }
}
