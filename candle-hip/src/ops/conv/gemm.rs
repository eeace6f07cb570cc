//! The GEMM path: im2col + rocBLAS for convolutions, rocBLAS + col2im for
//! transposed ones (`im2col.hip`, `ops::matmul`).
//!
//! Forward, per image and group g: `y[g] (K/G × M) = W[g] (K/G × C/G·kh·kw)
//! · col[g] (C/G·kh·kw × M)`, M = out_h·out_w, written straight into the
//! NCHW output. 1×1 convolutions with unit stride and no padding multiply
//! the input itself. Transposed: `col[g] (K/G·kh·kw × H·W) = W[g]ᵀ · x[g]`,
//! then col2im gathers each output element from the columns that reach it
//! (no atomics, deterministic). The column buffer holds as many images as
//! fit [`COL_BUDGET_BYTES`] (at least one).

use candle_core::Layout;
use candle_core::backend::BackendStorage;
use hip_safe::KernelArg;

use super::Problem;
use crate::error::Result;
use crate::kernel::catalogue as cat;
use crate::kernel::grid::grid_stride;
use crate::kernel::launch::to_u32;
use crate::kernel::nchw::{ConvGeom, Nchw};
use crate::ops::copy::Dense;
use crate::ops::matmul::matmul_into;
use crate::storage::HipStorage;

/// The most bytes of columns materialised at once.
pub(crate) const COL_BUDGET_BYTES: usize = 256 << 20;

/// Images per chunk when each needs `per_image` column elements.
fn images_per_chunk(per_image: usize, elem_bytes: usize, images: usize) -> usize {
    (COL_BUDGET_BYTES / per_image.saturating_mul(elem_bytes).max(1)).clamp(1, images.max(1))
}

/// The kernel geometry of `prob`: for im2col, `in` is the image and `out`
/// the output; col2im (transposed) uses the same fields the same way.
fn geom(op: &'static str, prob: &Problem) -> Result<ConvGeom> {
    let u = |what, v| to_u32(op, what, v);
    let [_, _, h, w] = prob.x.sizes();
    Ok(ConvGeom {
        in_h: h as u64,
        in_w: w as u64,
        out_h: prob.y[2] as u64,
        out_w: prob.y[3] as u64,
        kh: u("kernel height", prob.w[2])?,
        kw: u("kernel width", prob.w[3])?,
        ph: u("padding", prob.padding[0])?,
        pw: u("padding", prob.padding[1])?,
        sh: u("stride", prob.stride[0])?,
        sw: u("stride", prob.stride[1])?,
        dh: u("dilation", prob.dilation[0])?,
        dw: u("dilation", prob.dilation[1])?,
    })
}

/// Whether the image's rows follow each other in memory (H and W merge).
fn rows_merge(x: &Nchw) -> bool {
    let [_, _, h, w] = x.dims;
    h * w <= 1 || (x.strides[3] == 1 && (h == 1 || x.strides[2] == w))
}

/// Runs `prob` through GEMM into the contiguous `y`.
pub(crate) fn run(
    op: &'static str,
    prob: &Problem,
    x: &HipStorage,
    x_l: &Layout,
    w: &HipStorage,
    w_l: &Layout,
    y: &mut HipStorage,
) -> Result<()> {
    let w = Dense::of("conv", w, w_l)?;
    if prob.transposed {
        transposed(op, prob, x, x_l, &w, y)
    } else {
        forward(op, prob, x, x_l, &w, y)
    }
}

fn forward(
    op: &'static str,
    prob: &Problem,
    x: &HipStorage,
    x_l: &Layout,
    w: &Dense<'_>,
    y: &mut HipStorage,
) -> Result<()> {
    let [n, c, _, _] = prob.x.sizes();
    let [k, cg, kh, kw] = prob.w;
    let g = prob.groups;
    let (kg, red) = (k / g, cg * kh * kw);
    let m = prob.y[2] * prob.y[3];
    // W[g] for `nb` images: (nb, G, K/G, C/G·kh·kw), shared by the images.
    let weights = |nb: usize| {
        Layout::new(
            (nb, g, kg, red).into(),
            vec![0, kg * red, red, 1],
            w.start(),
        )
    };
    let pointwise = kh == 1 && kw == 1 && prob.stride == [1, 1] && prob.padding == [0, 0];
    if pointwise && rows_merge(&prob.x) {
        let s = prob.x.strides.map(|v| v as usize);
        let xs = Layout::new(
            (n, g, cg, m).into(),
            vec![s[0], cg * s[1], s[1], 1],
            x_l.start_offset(),
        );
        return matmul_into(w.storage(), x, (n * g, kg, m, red), &weights(n), &xs, y, 0);
    }
    let per_image = c * kh * kw * m;
    let chunk = images_per_chunk(per_image, x.dtype().size_in_bytes(), n);
    let device = x.device();
    // SAFETY: im2col writes every column element of the images it is given
    // before the GEMM reads them.
    let mut col = unsafe { device.alloc_storage(x.dtype(), chunk * per_image) }?;
    let kernel = cat::IM2COL.kernel(op, x.dtype())?;
    let launcher = device.kernels();
    let g_info = geom(op, prob)?;
    let xs = x.view(op, x_l)?;
    for n0 in (0..n).step_by(chunk) {
        let nb = chunk.min(n - n0);
        {
            let dst = col.view_range_mut(op, 0, nb * per_image)?;
            let (first, count) = (n0 as u64, nb as u64);
            let args: [&dyn KernelArg; 6] = [&prob.x, &xs, &dst, &first, &count, &g_info];
            let cfg = grid_stride((nb * per_image) as u64, launcher.compute_units());
            // SAFETY: im2col_T takes (const Nchw src, const T* x, T* col,
            // u64 n0, u64 nb, const ConvGeom g); `xs` spans every element
            // of the source layout, positions outside the image are not
            // read, and `col` holds nb * C * kh * kw * out_h * out_w elements.
            unsafe { launcher.launch(kernel, cfg, &args) }?;
        }
        let cols = Layout::new(
            (nb, g, red, m).into(),
            vec![c * kh * kw * m, red * m, m, 1],
            0,
        );
        matmul_into(
            w.storage(),
            &col,
            (nb * g, kg, m, red),
            &weights(nb),
            &cols,
            y,
            n0 * k * m,
        )?;
    }
    Ok(())
}

fn transposed(
    op: &'static str,
    prob: &Problem,
    x: &HipStorage,
    x_l: &Layout,
    w: &Dense<'_>,
    y: &mut HipStorage,
) -> Result<()> {
    let [n, c, h, wd] = prob.x.sizes();
    let [_, kg, kh, kw] = prob.w;
    let g = prob.groups;
    let (cg, rows) = (c / g, kg * kh * kw);
    let hw = h * wd;
    let k = kg * g;
    let out_len = prob.y[2] * prob.y[3];
    // The input as (N, G, C/G, H·W) matrices, copied when H and W do not merge.
    let copy;
    let (xs, x_start, s) = if rows_merge(&prob.x) {
        (x, x_l.start_offset(), prob.x.strides.map(|v| v as usize))
    } else {
        copy = Dense::of("conv", x, x_l)?;
        (copy.storage(), copy.start(), [c * hw, hw, wd, 1])
    };
    // W[g]ᵀ: (K/G·kh·kw × C/G) read from the (C, K/G·kh·kw) weights.
    let weights = |nb: usize| {
        Layout::new(
            (nb, g, rows, cg).into(),
            vec![0, cg * rows, 1, rows],
            w.start(),
        )
    };
    let per_image = k * kh * kw * hw;
    let chunk = images_per_chunk(per_image, x.dtype().size_in_bytes(), n);
    let device = x.device();
    // SAFETY: the GEMM writes every column element of the images it is
    // given before col2im reads them.
    let mut col = unsafe { device.alloc_storage(x.dtype(), chunk * per_image) }?;
    let kernel = cat::COL2IM.kernel(op, x.dtype())?;
    let launcher = device.kernels();
    let g_info = geom(op, prob)?;
    for n0 in (0..n).step_by(chunk) {
        let nb = chunk.min(n - n0);
        let inputs = Layout::new(
            (nb, g, cg, hw).into(),
            vec![s[0], cg * s[1], s[1], 1],
            x_start + n0 * s[0],
        );
        matmul_into(
            w.storage(),
            xs,
            (nb * g, rows, hw, cg),
            &weights(nb),
            &inputs,
            &mut col,
            0,
        )?;
        let src = col.view_range(op, 0, nb * per_image)?;
        let dst = y.view_range_mut(op, n0 * k * out_len, nb * k * out_len)?;
        let (count, channels) = (nb as u64, k as u64);
        let args: [&dyn KernelArg; 5] = [&src, &dst, &count, &channels, &g_info];
        let cfg = grid_stride((nb * k * out_len) as u64, launcher.compute_units());
        // SAFETY: col2im_T takes (const T* col, T* y, u64 nb, u64 channels,
        // const ConvGeom g); `col` holds nb * K * kh * kw * H * W elements
        // and `y` nb * K * out_h * out_w, and every tap it reads lies inside
        // the input positions checked in the kernel.
        unsafe { launcher.launch(kernel, cfg, &args) }?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_fit_the_budget_with_at_least_one_image() {
        assert_eq!(images_per_chunk(1000, 4, 32), 32);
        let big = 2304 * 3136; // ResNet 3x3x256 on 56x56
        assert_eq!(images_per_chunk(big, 4, 32), COL_BUDGET_BYTES / (big * 4));
        assert_eq!(images_per_chunk(COL_BUDGET_BYTES, 4, 8), 1);
        assert_eq!(images_per_chunk(10, 4, 0), 1);
    }

    #[test]
    fn image_rows_merge_when_width_is_unit_stride_and_rows_adjacent() {
        let x = |l: Layout| Nchw::of("t", &l).unwrap();
        assert!(rows_merge(&x(Layout::contiguous((2, 3, 4, 5)))));
        assert!(rows_merge(&x(Layout::contiguous((2, 6, 4, 5))
            .narrow(1, 1, 3)
            .unwrap())));
        assert!(!rows_merge(&x(Layout::contiguous((2, 3, 4, 8))
            .narrow(3, 0, 5)
            .unwrap())));
        assert!(!rows_merge(&x(Layout::contiguous((2, 3, 5, 4))
            .transpose(2, 3)
            .unwrap())));
        assert!(rows_merge(&x(Layout::contiguous((2, 3, 7)))));
    }
}
