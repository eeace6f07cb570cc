//! Conformance of candle-hip part 2 (matmul, convolutions, pooling,
//! upsampling and the fused ops) with candle's CPU backend and candle-nn's
//! CPU implementations.
//!
//! Every case runs on the GPU through candle-hip and on the CPU through
//! candle (Tensor API), with the same values, for every dtype the op takes
//! and for contiguous, offset, transposed, narrowed and broadcast layouts,
//! over a spread of shapes that includes real model sizes (32 heads × 128,
//! a 32000-entry vocabulary, 4096-wide rms_norm, ResNet and UNet
//! convolutions, a Whisper conv1d). References are computed in higher
//! precision (f64; f32 for the fused ops on f16/bf16 inputs), so each
//! comparison bounds the GPU result's own error:
//! `|hip - ref| <= rel * |ref| + abs`, with `rel` and `abs` derived from the
//! unit roundoff of the output and accumulation types (see `Tol`). Selection
//! ops (max pooling, nearest upsampling, argsort) must match exactly.
//!
//! GPU tests are ignored without a device; on the NVIDIA test platform they
//! run with `--include-ignored` and each prints
//! `conformance_part2 <group>: N cases, M failures` and an op × dtype table.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout, Result, Shape, Tensor};
use candle_hip::conv::{ConvParams, ConvPath};
use candle_hip::{HipDevice, HipStorage, fused};

use crate::common::{
    Arrange, DTYPES, FLOATS, Rng, Tally, Tol, acc_unit, cpu_tensor, cpu_values, device, gemm_tol,
    host_storage, layout, rounded, to_f64, unit, upload,
};

// ---------------------------------------------------------------------------
// Matrix multiplication.

#[test]
#[ignore = "needs a HIP device"]
fn matmul_matches_cpu() {
    let dev = device();
    let mut t = Tally::default();
    let mut rng = Rng(0x5eed_0001);
    // (batch dims, m, n, k): edge sizes, GEMV-like decode steps, attention
    // (32 heads, 128 dims) and a 4096-wide projection.
    let shapes: &[(&[usize], usize, usize, usize)] = &[
        (&[], 1, 1, 1),
        (&[], 3, 5, 7),
        (&[2], 17, 33, 9),
        (&[4], 64, 64, 64),
        (&[2, 3], 5, 6, 7),
        (&[], 1, 4096, 128),
        (&[3], 128, 96, 257),
        (&[1, 32], 16, 16, 128),
        (&[1, 32], 16, 128, 16),
        (&[], 16, 4096, 4096),
    ];
    let lhs_arr = [
        Arrange::Contiguous,
        Arrange::Offset,
        Arrange::Transposed,
        Arrange::Narrowed,
    ];
    for &(batch, m, n, k) in shapes {
        let b: usize = batch.iter().product();
        let lhs_shape = [batch, &[m, k]].concat();
        let rhs_shape = [batch, &[k, n]].concat();
        let lhs = rng.eighths(b * m * k);
        let rhs = rng.eighths(b * k * n);
        // rhs shared by every batch (broadcast with stride 0).
        let shared_mat = rng.eighths(k * n);
        let shared: Vec<f64> = (0..b).flat_map(|_| shared_mat.iter().copied()).collect();
        let reference = |r: &[f64]| {
            to_f64(
                &cpu_tensor(&lhs, &lhs_shape, DType::F64)
                    .matmul(&cpu_tensor(r, &rhs_shape, DType::F64))
                    .unwrap(),
            )
        };
        let (want, want_shared) = (reference(&rhs), reference(&shared));
        let rhs_variants: Vec<(&str, Layout, &[f64], &[f64])> = {
            let mut v = vec![
                (
                    "contiguous",
                    layout(&rhs_shape, Arrange::Contiguous),
                    rhs.as_slice(),
                    want.as_slice(),
                ),
                (
                    "transposed",
                    layout(&rhs_shape, Arrange::Transposed),
                    rhs.as_slice(),
                    want.as_slice(),
                ),
            ];
            if !batch.is_empty() {
                let bl = Layout::contiguous((k, n))
                    .broadcast_as(rhs_shape.as_slice())
                    .unwrap();
                v.push(("broadcast", bl, shared.as_slice(), want_shared.as_slice()));
            }
            v
        };
        for dtype in FLOATS {
            let tol = gemm_tol(dtype, k);
            for arr in lhs_arr {
                let ll = layout(&lhs_shape, arr);
                let ls = upload(&dev, &lhs, &ll, dtype);
                for (name, rl, rv, want) in &rhs_variants {
                    let rs = upload(&dev, rv, rl, dtype);
                    let case = format!("{lhs_shape:?}x{rhs_shape:?} lhs {arr} rhs {name}");
                    t.check_run("matmul", dtype, &case, want, tol, || {
                        ls.matmul(&rs, (b, m, n, k), &ll, rl)
                    });
                }
            }
        }
    }
    t.finish("conformance matmul");
}

// ---------------------------------------------------------------------------
// Convolutions.

/// One convolution case (uniform padding/stride/dilation, as candle takes).
struct Conv {
    name: &'static str,
    x: &'static [usize],
    w: &'static [usize],
    padding: usize,
    stride: usize,
    dilation: usize,
    output_padding: usize,
    groups: usize,
}

#[rustfmt::skip]
const FORWARD: &[Conv] = &[
    Conv { name: "1x1 kernel", x: &[1, 1, 1, 1], w: &[1, 1, 1, 1], padding: 0, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "3x3 pad 1", x: &[2, 3, 5, 7], w: &[4, 3, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "3x2 pad 2 stride 3 dil 2", x: &[2, 4, 9, 10], w: &[6, 4, 3, 2], padding: 2, stride: 3, dilation: 2, output_padding: 0, groups: 1 },
    Conv { name: "grouped 3", x: &[2, 6, 8, 8], w: &[9, 2, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 3 },
    Conv { name: "ResNet 3x3 64", x: &[2, 64, 56, 56], w: &[64, 64, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "ResNet 1x1 256->64", x: &[2, 256, 28, 28], w: &[64, 256, 1, 1], padding: 0, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "ResNet stem 7x7/2", x: &[1, 3, 224, 224], w: &[64, 3, 7, 7], padding: 3, stride: 2, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "ResNet 3x3/2 128->256", x: &[2, 128, 28, 28], w: &[256, 128, 3, 3], padding: 1, stride: 2, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "UNet 3x3 320", x: &[1, 320, 32, 32], w: &[320, 320, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "UNet conv_in 4->320", x: &[2, 4, 64, 64], w: &[320, 4, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "1-D k3 pad 1", x: &[2, 3, 11], w: &[5, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "1-D k4 stride 2 dil 3", x: &[3, 4, 20], w: &[2, 4, 4], padding: 2, stride: 2, dilation: 3, output_padding: 0, groups: 1 },
    Conv { name: "1-D grouped 2", x: &[2, 4, 9], w: &[6, 2, 3], padding: 0, stride: 1, dilation: 1, output_padding: 0, groups: 2 },
    Conv { name: "Whisper conv1 80->384", x: &[1, 80, 3000], w: &[384, 80, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
];

#[rustfmt::skip]
const TRANSPOSED: &[Conv] = &[
    Conv { name: "3x3 stride 2 pad 1 outpad 1", x: &[2, 8, 7, 7], w: &[8, 4, 3, 3], padding: 1, stride: 2, dilation: 1, output_padding: 1, groups: 1 },
    Conv { name: "4x4 stride 2 (UNet up)", x: &[1, 64, 16, 16], w: &[64, 32, 4, 4], padding: 1, stride: 2, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "3x2 dil 2", x: &[2, 3, 5, 6], w: &[3, 5, 3, 2], padding: 0, stride: 1, dilation: 2, output_padding: 0, groups: 1 },
    Conv { name: "grouped 3 stride 2", x: &[2, 6, 5, 5], w: &[6, 2, 3, 3], padding: 1, stride: 2, dilation: 1, output_padding: 0, groups: 3 },
    Conv { name: "1-D k5 stride 3 dil 2", x: &[2, 4, 10], w: &[4, 3, 5], padding: 1, stride: 3, dilation: 2, output_padding: 1, groups: 1 },
    Conv { name: "1-D stride 1", x: &[1, 2, 7], w: &[2, 3, 3], padding: 0, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
];

/// candle's CPU result in f64.
fn conv_reference(c: &Conv, x: &[f64], w: &[f64], transposed: bool) -> Vec<f64> {
    let xt = cpu_tensor(x, c.x, DType::F64);
    let wt = cpu_tensor(w, c.w, DType::F64);
    let one = |x: &Tensor, w: &Tensor| -> Tensor {
        match (transposed, c.x.len()) {
            (false, 4) => x
                .conv2d(w, c.padding, c.stride, c.dilation, c.groups)
                .unwrap(),
            (false, _) => x
                .conv1d(w, c.padding, c.stride, c.dilation, c.groups)
                .unwrap(),
            (true, 4) => x
                .conv_transpose2d(w, c.padding, c.output_padding, c.stride, c.dilation)
                .unwrap(),
            (true, _) => x
                .conv_transpose1d(w, c.padding, c.output_padding, c.stride, c.dilation, 1)
                .unwrap(),
        }
    };
    if transposed && c.groups > 1 {
        // candle's transposed convolutions take no groups: one per group.
        let xs = xt.chunk(c.groups, 1).unwrap();
        let ws = wt.chunk(c.groups, 0).unwrap();
        let parts: Vec<Tensor> = xs.iter().zip(&ws).map(|(x, w)| one(x, w)).collect();
        return to_f64(&Tensor::cat(&parts, 1).unwrap());
    }
    to_f64(&one(&xt, &wt))
}

fn run_conv(
    dev_x: &HipStorage,
    xl: &Layout,
    dev_w: &HipStorage,
    wl: &Layout,
    c: &Conv,
    transposed: bool,
    path: ConvPath,
) -> Result<HipStorage> {
    if c.x.len() == 4 {
        let p = ConvParams {
            output_padding: [c.output_padding; 2],
            groups: c.groups,
            ..ConvParams::<2>::uniform(c.padding, c.stride, c.dilation)
        };
        if transposed {
            candle_hip::conv::conv_transpose2d(dev_x, xl, dev_w, wl, &p, path)
        } else {
            candle_hip::conv::conv2d(dev_x, xl, dev_w, wl, &p, path)
        }
    } else {
        let p = ConvParams {
            output_padding: [c.output_padding],
            groups: c.groups,
            ..ConvParams::<1>::uniform(c.padding, c.stride, c.dilation)
        };
        if transposed {
            candle_hip::conv::conv_transpose1d(dev_x, xl, dev_w, wl, &p, path)
        } else {
            candle_hip::conv::conv1d(dev_x, xl, dev_w, wl, &p, path)
        }
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn convolutions_match_cpu() {
    let dev = device();
    let mut t = Tally::default();
    let mut rng = Rng(0x5eed_0002);
    for (transposed, cases) in [(false, FORWARD), (true, TRANSPOSED)] {
        for c in cases {
            let x = rng.eighths(c.x.iter().product());
            let w = rng.eighths(c.w.iter().product());
            let want = conv_reference(c, &x, &w, transposed);
            // Terms per output: (input channels per group) x taps.
            let in_per_group = c.x[1] / c.groups;
            let terms = (in_per_group * c.w[2..].iter().product::<usize>()) as f64;
            let small = c.x.iter().product::<usize>() < 100_000;
            let arrangements: &[Arrange] = if small {
                &[
                    Arrange::Contiguous,
                    Arrange::ChannelSlice,
                    Arrange::Narrowed,
                ]
            } else {
                &[Arrange::Contiguous]
            };
            let op = match (transposed, c.x.len()) {
                (false, 4) => "conv2d",
                (false, _) => "conv1d",
                (true, 4) => "conv_transpose2d",
                (true, _) => "conv_transpose1d",
            };
            for dtype in FLOATS {
                let tol = gemm_tol(dtype, terms as usize);
                let wl = Layout::contiguous(c.w);
                let ws = upload(&dev, &w, &wl, dtype);
                for &arr in arrangements {
                    let xl = layout(c.x, arr);
                    let xs = upload(&dev, &x, &xl, dtype);
                    let paths: &[ConvPath] = if dtype == DType::F64 {
                        &[ConvPath::Auto]
                    } else {
                        &[ConvPath::Auto, ConvPath::Gemm]
                    };
                    for &path in paths {
                        let case = format!("{} x{:?} w{:?} {arr} {path:?}", c.name, c.x, c.w);
                        t.check_run(op, dtype, &case, &want, tol, || {
                            run_conv(&xs, &xl, &ws, &wl, c, transposed, path)
                        });
                    }
                }
            }
        }
    }
    t.finish("conformance convolutions");
}

// ---------------------------------------------------------------------------
// Pooling and upsampling.

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

// ---------------------------------------------------------------------------
// Fused ops against candle-nn.

/// The dtype candle-nn computes the reference in: f32 for half inputs
/// (candle-nn rounds intermediates to the storage type), f64 otherwise.
fn reference_dtype(dtype: DType) -> DType {
    if matches!(dtype, DType::F16 | DType::BF16) {
        DType::F32
    } else {
        DType::F64
    }
}

/// The smallest positive value (subnormal) of a float dtype, as an absolute
/// floor for values that underflow.
fn tiny(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        DType::BF16 | DType::F32 => 1e-38,
        _ => 1e-300,
    }
}

/// Tolerance of a fused op whose result is a few f32/f64 operations away
/// from the exact value and is rounded once: `ops` accumulation roundoffs
/// plus one output rounding, relative; `abs` covers cancellation.
fn fused_tol(dtype: DType, ops: f64, magnitude: f64) -> Tol {
    let rel = 2.0 * unit(dtype) + ops * acc_unit(dtype) + 4.0 * unit(reference_dtype(dtype));
    Tol {
        rel,
        abs: tiny(dtype) + rel * magnitude,
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn row_ops_match_candle_nn() {
    let dev = device();
    let mut t = Tally::default();
    let mut rng = Rng(0x5eed_0004);
    // Rows: single elements, odd sizes (no 16-byte packs), attention rows,
    // the 32000 vocabulary, 4096 hidden, and rows beyond the register cache
    // (16 values per thread of 1024; softmax keeps 32 of f16/bf16: an odd
    // row and one of exactly 32 x 1024 reach that cache's limits).
    let shapes: &[&[usize]] = &[
        &[1, 1],
        &[3, 7],
        &[5, 33],
        &[2, 32, 16, 128],
        &[4, 1000],
        &[8, 32000],
        &[2, 20001],
        &[2, 32768],
        &[16, 4096],
        &[3, 5120],
        &[2, 40000],
        &[2, 70001],
    ];
    for &shape in shapes {
        let cols = *shape.last().unwrap();
        let n: usize = shape.iter().product();
        for dtype in FLOATS {
            let rd = reference_dtype(dtype);
            let x = rounded(&rng.values(n, -3.0, 3.0), dtype);
            let alpha = rounded(&rng.values(cols, -2.0, 2.0), dtype);
            let beta = rounded(&rng.values(cols, -1.0, 1.0), dtype);
            let xt = cpu_tensor(&x, shape, rd);
            let (at, bt) = (
                cpu_tensor(&alpha, &[cols], rd),
                cpu_tensor(&beta, &[cols], rd),
            );
            let eps = 1e-5f32;
            for arr in [Arrange::Contiguous, Arrange::Offset] {
                let l = layout(shape, arr);
                let xs = upload(&dev, &x, &l, dtype);
                let al = layout(&[cols], arr);
                let (als, bls) = (
                    upload(&dev, &alpha, &al, dtype),
                    upload(&dev, &beta, &al, dtype),
                );
                let case = format!("{shape:?} {arr}");
                let log_n = (cols as f64).log2().max(1.0);

                let want = to_f64(&candle_nn::ops::softmax_last_dim(&xt).unwrap());
                t.check_run(
                    "softmax_last_dim",
                    dtype,
                    &case,
                    &want,
                    fused_tol(dtype, 8.0 * log_n, 0.0),
                    || fused::softmax_last_dim(&xs, &l),
                );

                let want = if rd == DType::F64 {
                    candle_nn::ops::rms_norm_slow(&xt, &at, eps).unwrap()
                } else {
                    candle_nn::ops::rms_norm(&xt, &at, eps).unwrap()
                };
                t.check_run(
                    "rms_norm",
                    dtype,
                    &case,
                    &to_f64(&want),
                    fused_tol(dtype, 4.0 * log_n, 0.0),
                    || fused::rms_norm(&xs, &l, &als, &al, eps),
                );

                let want = if rd == DType::F64 {
                    candle_nn::ops::layer_norm_slow(&xt, &at, &bt, eps).unwrap()
                } else {
                    candle_nn::ops::layer_norm(&xt, &at, &bt, eps).unwrap()
                };
                let want = to_f64(&want);
                let magnitude = want.iter().fold(0f64, |m, v| m.max(v.abs()));
                t.check_run(
                    "layer_norm",
                    dtype,
                    &case,
                    &want,
                    fused_tol(dtype, 8.0 * log_n, magnitude),
                    || fused::layer_norm(&xs, &l, &als, &al, &bls, &al, eps),
                );
            }
            // Sigmoid takes any layout.
            for arr in [Arrange::Contiguous, Arrange::Transposed, Arrange::Narrowed] {
                let l = layout(shape, arr);
                let xs = upload(&dev, &x, &l, dtype);
                let want = to_f64(&candle_nn::ops::sigmoid(&xt).unwrap());
                t.check_run(
                    "sigmoid",
                    dtype,
                    format!("{shape:?} {arr}").as_str(),
                    &want,
                    fused_tol(dtype, 4.0, 0.0),
                    || fused::sigmoid(&xs, &l),
                );
            }
        }
    }
    // Masked attention rows: -inf entries contribute nothing.
    for dtype in FLOATS {
        let mut x = rounded(&rng.values(4 * 64, -3.0, 3.0), dtype);
        for (i, v) in x.iter_mut().enumerate() {
            if i % 64 > i / 64 * 16 + 3 {
                *v = f64::NEG_INFINITY;
            }
        }
        let want = to_f64(
            &candle_nn::ops::softmax_last_dim(&cpu_tensor(&x, &[4, 64], reference_dtype(dtype)))
                .unwrap(),
        );
        let l = Layout::contiguous((4, 64));
        let xs = upload(&dev, &x, &l, dtype);
        t.check_run(
            "softmax_last_dim",
            dtype,
            "causal mask",
            &want,
            fused_tol(dtype, 64.0, 0.0),
            || fused::softmax_last_dim(&xs, &l),
        );
    }
    t.finish("conformance softmax, rms_norm, layer_norm, sigmoid");
}

#[test]
#[ignore = "needs a HIP device"]
fn rope_matches_candle_nn() {
    let dev = device();
    let mut t = Tally::default();
    let mut rng = Rng(0x5eed_0005);
    // (b, heads, t, d, cos/sin rows, batched tables): 32 heads x 128 dims
    // at prefill and decode, tables longer than the sequence.
    let cases: &[(usize, usize, usize, usize, usize, bool)] = &[
        (1, 1, 1, 2, 1, false),
        (2, 3, 5, 8, 7, false),
        (1, 32, 16, 128, 4096, false),
        (2, 32, 1, 128, 64, false),
        (2, 4, 7, 16, 7, true),
        (3, 8, 33, 64, 33, true),
    ];
    for &(b, h, seq, d, rows, batched) in cases {
        for dtype in FLOATS {
            let rd = reference_dtype(dtype);
            let x = rounded(&rng.values(b * h * seq * d, -3.0, 3.0), dtype);
            let table_shape: Vec<usize> = if batched {
                vec![b, rows, d / 2]
            } else {
                vec![rows, d / 2]
            };
            let table_len = table_shape.iter().product();
            let angles = rng.values(table_len, 0.0, 6.3);
            let cos = rounded(&angles.iter().map(|a| a.cos()).collect::<Vec<_>>(), dtype);
            let sin = rounded(&angles.iter().map(|a| a.sin()).collect::<Vec<_>>(), dtype);
            let (ct, st) = (
                cpu_tensor(&cos, &table_shape, rd),
                cpu_tensor(&sin, &table_shape, rd),
            );
            let tl = Layout::contiguous(table_shape.as_slice());
            let (cs, ss) = (
                upload(&dev, &cos, &tl, dtype),
                upload(&dev, &sin, &tl, dtype),
            );
            let tol = fused_tol(dtype, 4.0, 6.0);
            for (op, shape) in [
                ("rope_i", [b, h, seq, d]),
                ("rope", [b, h, seq, d]),
                ("rope_thd", [b, seq, h, d]),
            ] {
                let xt = cpu_tensor(&x, &shape, rd);
                let want = match op {
                    "rope_i" => candle_nn::rotary_emb::rope_i(&xt, &ct, &st),
                    "rope" => candle_nn::rotary_emb::rope(&xt, &ct, &st),
                    _ => candle_nn::rotary_emb::rope_thd(&xt, &ct, &st),
                };
                let want = to_f64(&want.unwrap());
                for arr in [Arrange::Contiguous, Arrange::Offset] {
                    let l = layout(&shape, arr);
                    let xs = upload(&dev, &x, &l, dtype);
                    let case = format!("{shape:?} tables {table_shape:?} {arr}");
                    t.check_run(op, dtype, &case, &want, tol, || match op {
                        "rope_i" => fused::rope_i(&xs, &l, &cs, &tl, &ss, &tl),
                        "rope" => fused::rope(&xs, &l, &cs, &tl, &ss, &tl),
                        _ => fused::rope_thd(&xs, &l, &cs, &tl, &ss, &tl),
                    });
                }
            }
        }
    }
    t.finish("conformance rope");
}

#[test]
#[ignore = "needs a HIP device"]
fn argsort_matches_cpu() {
    let dev = device();
    let mut t = Tally::default();
    let mut rng = Rng(0x5eed_0006);
    // Rows up to the shared-memory limits (4096 for 8-byte types, 8192,
    // 16384 for u8), just past them, and a vocabulary; rows around the
    // register-pass span (128 positions at wave 32, 256 at wave 64).
    let shapes: &[&[usize]] = &[
        &[3, 1],
        &[4, 7],
        &[2, 100],
        &[2, 3, 64],
        &[3, 128],
        &[2, 129],
        &[2, 256],
        &[2, 257],
        &[2, 511],
        &[2, 4097],
        &[5, 8192],
        &[2, 8193],
        &[1, 16384],
        &[1, 32000],
        &[3, 1000],
    ];
    for &shape in shapes {
        let n: usize = shape.iter().product();
        for dtype in DTYPES {
            // Few distinct values: many ties, which must keep index order.
            let values = if FLOATS.contains(&dtype) {
                rounded(&rng.values(n, -3.0, 3.0), dtype)
            } else {
                rng.ints(n, 50)
            };
            let values: Vec<f64> = if shape[1] == 1000 {
                values.iter().map(|v| v.round()).collect()
            } else {
                values
            };
            let xt = cpu_tensor(&values, shape, dtype);
            for asc in [true, false] {
                let want = to_f64(&xt.arg_sort_last_dim(asc).unwrap());
                for arr in [Arrange::Contiguous, Arrange::Offset] {
                    let l = layout(shape, arr);
                    let xs = upload(&dev, &values, &l, dtype);
                    let case = format!("{shape:?} asc {asc} {arr}");
                    t.check_run("arg_sort_last_dim", dtype, &case, &want, Tol::EXACT, || {
                        fused::arg_sort_last_dim(&xs, &l, asc)
                    });
                }
            }
        }
    }
    // NaN (after every number, by index, in both directions) and signed
    // zeros (equal, by index), which candle's CPU argsort cannot order:
    // against a host stable sort.
    for cols in [7, 129, 300, 1000] {
        let values: Vec<f64> = (0..cols)
            .map(|i| match i % 11 {
                3 => f64::NAN,
                5 => -0.0,
                7 => 0.0,
                _ => ((i * 37) % 19) as f64 - 9.0,
            })
            .collect();
        for asc in [true, false] {
            let mut order: Vec<usize> = (0..cols).collect();
            order.sort_by(|&a, &b| {
                let (x, y) = (values[a], values[b]);
                match (x.is_nan(), y.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ if asc => x.partial_cmp(&y).unwrap(),
                    _ => y.partial_cmp(&x).unwrap(),
                }
            });
            let want: Vec<f64> = order.iter().map(|&i| i as f64).collect();
            for dtype in FLOATS {
                let l = layout(&[1, cols], Arrange::Contiguous);
                let xs = upload(&dev, &values, &l, dtype);
                t.check_run(
                    "arg_sort_last_dim",
                    dtype,
                    format!("NaN and signed zeros, {cols} asc {asc}"),
                    &want,
                    Tol::EXACT,
                    || fused::arg_sort_last_dim(&xs, &l, asc),
                );
            }
        }
    }
    t.finish("conformance argsort");
}

// ---------------------------------------------------------------------------
// Errors: what candle refuses (or cannot express) is refused, not computed.

#[test]
#[ignore = "needs a HIP device"]
fn invalid_inputs_are_errors() {
    let dev = device();
    let data = vec![1.0; 64];
    let f32s = |l: &Layout| upload(&dev, &data, l, DType::F32);
    let mut cases = 0;
    let mut expect_err = |what: &str, r: Result<HipStorage>, needle: &str| {
        cases += 1;
        match r {
            Ok(_) => panic!("{what}: expected an error"),
            Err(e) => assert!(e.to_string().contains(needle), "{what}: {e}"),
        }
    };
    // matmul: an operand with no unit-stride dimension.
    let strided = Layout::new(Shape::from((3, 4)), vec![8, 2], 0);
    let rhs = Layout::contiguous((4, 5));
    expect_err(
        "matmul strided",
        f32s(&strided).matmul(&f32s(&rhs), (1, 3, 5, 4), &strided, &rhs),
        "lhs",
    );
    // matmul: integer dtypes.
    let u = upload(&dev, &data, &Layout::contiguous((3, 4)), DType::U32);
    let ur = upload(&dev, &data, &rhs, DType::U32);
    expect_err(
        "matmul u32",
        u.matmul(&ur, (1, 3, 5, 4), &Layout::contiguous((3, 4)), &rhs),
        "U32",
    );
    // Fused row ops need contiguous input, alpha of the row length.
    let tl = Layout::contiguous((4, 8)).transpose(0, 1).unwrap();
    expect_err(
        "softmax transposed",
        fused::softmax_last_dim(&f32s(&tl), &tl),
        "contiguous",
    );
    let l = Layout::contiguous((4, 8));
    let al = Layout::contiguous(7);
    expect_err(
        "rms_norm alpha",
        fused::rms_norm(&f32s(&l), &l, &f32s(&al), &al, 1e-5),
        "alpha",
    );
    expect_err(
        "softmax u8",
        fused::softmax_last_dim(&upload(&dev, &data, &l, DType::U8), &l),
        "U8",
    );
    // rope: tables shorter than the sequence.
    let xl = Layout::contiguous((1, 2, 8, 4));
    let cl = Layout::contiguous((4, 2));
    expect_err(
        "rope short table",
        fused::rope(&f32s(&xl), &xl, &f32s(&cl), &cl, &f32s(&cl), &cl),
        "inconsistent",
    );
    // Convolutions: f64 with MIOpen only, a kernel larger than the input.
    let x = Layout::contiguous((1, 1, 2, 2));
    let w = Layout::contiguous((1, 1, 3, 3));
    let xd = upload(&dev, &data, &x, DType::F64);
    let wd = upload(&dev, &data, &w, DType::F64);
    let p = ConvParams::<2>::uniform(1, 1, 1);
    expect_err(
        "conv2d f64 MIOpen",
        candle_hip::conv::conv2d(&xd, &x, &wd, &w, &p, ConvPath::Miopen),
        "F64",
    );
    let p0 = ConvParams::<2>::uniform(0, 1, 1);
    expect_err(
        "conv2d kernel too large",
        candle_hip::conv::conv2d(&f32s(&x), &x, &f32s(&w), &w, &p0, ConvPath::Auto),
        "does not fit",
    );
    // Pooling windows larger than the input.
    let il = Layout::contiguous((1, 1, 2, 2));
    expect_err(
        "max_pool2d window",
        f32s(&il).max_pool2d(&il, (3, 3), (1, 1)),
        "do not fit",
    );
    expect_err(
        "avg_pool2d u32",
        upload(&dev, &data, &il, DType::U32).avg_pool2d(&il, (1, 1), (1, 1)),
        "U32",
    );
    println!("conformance errors: {cases} cases, 0 failures");
}
