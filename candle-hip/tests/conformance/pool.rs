//! Pooling (max, avg) and upsampling (nearest 1-D / 2-D, bilinear) against
//! candle's CPU backend: max pooling and nearest upsampling select values
//! and must match exactly; averages and bilinear interpolation are compared
//! with a reference computed in f64.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout, Result};
use candle_hip::{HipDevice, HipStorage};

use crate::common::{
    Arrange, DTYPES, FLOATS, Rng, Tally, Tol, acc_unit, cpu_values, device, host_storage, layout,
    rounded, unit, upload,
};

const IMAGE_ARRANGEMENTS: [Arrange; 4] = [
    Arrange::Contiguous,
    Arrange::Offset,
    Arrange::Transposed,
    Arrange::ChannelSlice,
];

/// Values for a dtype: small integers for integer dtypes (exact
/// everywhere), uniform in [-3, 3) rounded to the dtype for floats.
fn image_values(rng: &mut Rng, n: usize, dtype: DType) -> Vec<f64> {
    if FLOATS.contains(&dtype) {
        rounded(&rng.values(n, -3.0, 3.0), dtype)
    } else {
        rng.ints(n, 100)
    }
}

/// Runs a storage op on the CPU backend (in `ref_dtype`) and on the GPU
/// (in `dtype`) with the same layout, and records the comparison.
#[allow(clippy::too_many_arguments)]
fn compare_storage_op(
    t: &mut Tally,
    dev: &HipDevice,
    op: &str,
    case: &str,
    values: &[f64],
    l: &Layout,
    dtype: DType,
    ref_dtype: DType,
    tol: Tol,
    f_cpu: impl Fn(&CpuStorage, &Layout) -> Result<CpuStorage>,
    f_hip: impl Fn(&HipStorage, &Layout) -> Result<HipStorage>,
) {
    let host = host_storage(values, l, ref_dtype, 0.0);
    let want = match f_cpu(&host, l) {
        Ok(out) => cpu_values(&out),
        Err(e) => return t.error(op, dtype, case, format!("CPU reference failed: {e}")),
    };
    let dev_in = upload(dev, values, l, dtype);
    t.check_run(op, dtype, case, &want, tol, || f_hip(&dev_in, l));
}

/// (shape, kernel, stride) of a pooling case.
type PoolCase = (&'static [usize], (usize, usize), (usize, usize));
/// (shape, target, align_corners, scale factors) of a bilinear case.
type BilinearCase = (&'static [usize], (usize, usize), bool, Option<(f64, f64)>);

#[test]
#[ignore = "needs a HIP device"]
fn pooling_and_upsampling_match_cpu() {
    let dev = device();
    let mut t = Tally::default();
    let mut rng = Rng(0x5eed_0003);
    // (shape, kernel, stride): ResNet's 3x3/2 max pool, uneven windows.
    let pools: &[PoolCase] = &[
        (&[2, 3, 8, 9], (2, 2), (2, 2)),
        (&[2, 5, 7, 7], (2, 3), (1, 2)),
        (&[1, 1, 1, 1], (1, 1), (1, 1)),
        (&[1, 64, 112, 112], (3, 3), (2, 2)),
    ];
    for &(shape, k, s) in pools {
        for dtype in DTYPES {
            let values = image_values(&mut rng, shape.iter().product(), dtype);
            for arr in IMAGE_ARRANGEMENTS {
                let l = layout(shape, arr);
                let case = format!("{shape:?} k{k:?} s{s:?} {arr}");
                compare_storage_op(
                    &mut t,
                    &dev,
                    "max_pool2d",
                    &case,
                    &values,
                    &l,
                    dtype,
                    dtype,
                    Tol::EXACT,
                    |x, l| x.max_pool2d(l, k, s),
                    |x, l| x.max_pool2d(l, k, s),
                );
                if FLOATS.contains(&dtype) {
                    let taps = (k.0 * k.1) as f64;
                    let tol = Tol {
                        rel: 2.0 * unit(dtype),
                        abs: (2.0 * unit(dtype) + taps * acc_unit(dtype)) * 3.0,
                    };
                    compare_storage_op(
                        &mut t,
                        &dev,
                        "avg_pool2d",
                        &case,
                        &values,
                        &l,
                        dtype,
                        DType::F64,
                        tol,
                        |x, l| x.avg_pool2d(l, k, s),
                        |x, l| x.avg_pool2d(l, k, s),
                    );
                }
            }
        }
    }
    // Nearest: (shape, target); 1-D shapes have three dimensions.
    let nearest: &[(&[usize], (usize, usize))] = &[
        (&[2, 3, 5, 7], (10, 14)),
        (&[1, 4, 6, 6], (4, 9)),
        (&[2, 3, 64, 64], (128, 128)),
        (&[2, 3, 7], (1, 15)),
        (&[1, 2, 9], (1, 4)),
    ];
    for &(shape, (h, w)) in nearest {
        for dtype in DTYPES {
            let values = image_values(&mut rng, shape.iter().product(), dtype);
            for arr in IMAGE_ARRANGEMENTS {
                let l = layout(shape, arr);
                let case = format!("{shape:?} -> ({h}, {w}) {arr}");
                if shape.len() == 3 {
                    compare_storage_op(
                        &mut t,
                        &dev,
                        "upsample_nearest1d",
                        &case,
                        &values,
                        &l,
                        dtype,
                        dtype,
                        Tol::EXACT,
                        |x, l| x.upsample_nearest1d(l, w),
                        |x, l| x.upsample_nearest1d(l, w),
                    );
                } else {
                    compare_storage_op(
                        &mut t,
                        &dev,
                        "upsample_nearest2d",
                        &case,
                        &values,
                        &l,
                        dtype,
                        dtype,
                        Tol::EXACT,
                        |x, l| x.upsample_nearest2d(l, h, w),
                        |x, l| x.upsample_nearest2d(l, h, w),
                    );
                }
            }
        }
    }
    // Bilinear: (shape, target, align_corners, scale factors).
    let bilinear: &[BilinearCase] = &[
        (&[2, 3, 5, 7], (10, 14), false, None),
        (&[2, 3, 5, 7], (10, 14), true, None),
        (&[1, 2, 8, 8], (3, 5), false, None),
        (&[1, 2, 8, 8], (3, 5), true, None),
        (&[1, 2, 4, 6], (10, 9), false, Some((2.5, 1.5))),
        (&[1, 4, 32, 32], (64, 64), false, None),
        (&[1, 1, 1, 1], (3, 2), true, None),
    ];
    for &(shape, (h, w), align, scales) in bilinear {
        for dtype in FLOATS {
            let values = image_values(&mut rng, shape.iter().product(), dtype);
            let tol = Tol {
                rel: 2.0 * unit(dtype),
                abs: 4.0 * (unit(dtype) + 4.0 * acc_unit(dtype)) * 3.0,
            };
            for arr in IMAGE_ARRANGEMENTS {
                let l = layout(shape, arr);
                let case = format!("{shape:?} -> ({h}, {w}) align {align} scales {scales:?} {arr}");
                let (sh, sw) = (scales.map(|s| s.0), scales.map(|s| s.1));
                compare_storage_op(
                    &mut t,
                    &dev,
                    "upsample_bilinear2d",
                    &case,
                    &values,
                    &l,
                    dtype,
                    DType::F64,
                    tol,
                    |x, l| x.upsample_bilinear2d(l, h, w, align, sh, sw),
                    |x, l| x.upsample_bilinear2d(l, h, w, align, sh, sw),
                );
            }
        }
    }
    t.finish("conformance pooling and upsampling");
}
