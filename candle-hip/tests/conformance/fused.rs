//! The fused ops against candle-nn's CPU implementations: softmax_last_dim,
//! rms_norm, layer_norm and sigmoid over rows from 1 to 70001 elements,
//! rope / rope_i / rope_thd, and argsort (ties in index order, NaN and
//! signed zeros) against candle's CPU argsort and a host stable sort.
//! References are computed in f32 for f16/bf16 inputs (candle-nn rounds
//! its intermediates to the storage type) and in f64 otherwise.

use candle_core::{DType, Layout};
use candle_hip::fused;

use crate::common::{
    Arrange, DTYPES, FLOATS, Tol, acc_unit, cpu_tensor, layout, rounded, start, to_f64, unit,
    upload,
};

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
    let (dev, mut t, mut rng) = start(0x5eed_0004);
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
    let (dev, mut t, mut rng) = start(0x5eed_0005);
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
    let (dev, mut t, mut rng) = start(0x5eed_0006);
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

/// Which `x'` a fused-linear case feeds the product.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LinearIn {
    Plain,
    RmsNorm,
    SwiGlu,
}

/// `fused::fused_linear` against a host reference: `x'` computed in f64 from
/// the rounded inputs and rounded to the dtype (as the kernel, and
/// candle-nn's separate ops, round it), then the product and the residual in
/// f64. Shapes cover every split of the one-row product (few long rows to
/// many short ones, a 2048 x 8192 down projection, a 3072 x 2048 fused qkv),
/// a weight narrowed from a wider one (row stride > k, rows from an
/// offset), each input with and without a residual, and x on and off a
/// 16-byte boundary. Tolerance: the kernel sums k products in f32 (f64) in
/// a different order (`log2 k + 2` accumulation roundoffs of
/// `sum |x'·w|`), `x'` may round to the
/// neighbouring value where the device's exp or f32 norm differs from the
/// host's (two units of the dtype of `sum |x'·w|`), and the output rounds
/// once.
#[test]
#[ignore = "needs a HIP device"]
fn fused_linear_matches_a_host_reference() {
    let (dev, mut t, mut rng) = start(0x5eed_0005);
    // (n, k, row stride, first row).
    let shapes: [(usize, usize, usize, usize); 7] = [
        (1, 8, 8, 0),
        (7, 64, 64, 0),
        (33, 520, 528, 3),
        (1000, 256, 256, 0),
        (3072, 2048, 2048, 0),
        (2048, 8192, 8192, 0),
        (96, 4096, 4104, 5),
    ];
    let inputs = [LinearIn::Plain, LinearIn::RmsNorm, LinearIn::SwiGlu];
    for (n, k, stride, row0) in shapes {
        for dtype in FLOATS {
            let elem = dtype.size_in_bytes();
            if k * elem > fused::MAX_STAGED_BYTES || !stride.is_multiple_of(16 / elem) {
                continue;
            }
            let w_all = rounded(&rng.values((row0 + n) * stride, -1.0, 1.0), dtype);
            let w_full = Layout::contiguous((row0 + n, stride));
            let w_l = w_full.narrow(0, row0, n).unwrap().narrow(1, 0, k).unwrap();
            let ws = upload(&dev, &w_all, &w_full, dtype);
            let g = rounded(&rng.values(k, -2.0, 2.0), dtype);
            let r = rounded(&rng.values(n, -4.0, 4.0), dtype);
            let (g_l, r_l) = (Layout::contiguous(k), Layout::contiguous((1, n)));
            let (gs, rs) = (upload(&dev, &g, &g_l, dtype), upload(&dev, &r, &r_l, dtype));
            // x from a 16-byte boundary (read in place or staged in packs)
            // and one element past it (staged element by element), the
            // latter on the smaller shapes.
            let x_offsets: &[usize] = if n * k <= 1 << 18 { &[0, 1] } else { &[0] };
            for (input, &x_off) in inputs
                .iter()
                .flat_map(|i| x_offsets.iter().map(move |o| (*i, o)))
            {
                let x_len = if input == LinearIn::SwiGlu { 2 * k } else { k };
                let x = rounded(&rng.values(x_len, -3.0, 3.0), dtype);
                let x_l = Layout::contiguous_with_offset((1, x_len), x_off);
                let xs = upload(&dev, &x, &x_l, dtype);
                let eps = 1e-5f32;
                let staged: Vec<f64> = match input {
                    LinearIn::Plain => x.clone(),
                    LinearIn::RmsNorm => {
                        let ms = x.iter().map(|v| v * v).sum::<f64>() / k as f64;
                        let inv = 1.0 / (ms + eps as f64).sqrt();
                        (0..k).map(|i| x[i] * inv * g[i]).collect()
                    }
                    LinearIn::SwiGlu => {
                        let silu: Vec<f64> =
                            x[..k].iter().map(|&v| v / (1.0 + (-v).exp())).collect();
                        let silu = rounded(&silu, dtype);
                        (0..k).map(|i| silu[i] * x[k + i]).collect()
                    }
                };
                let staged = rounded(&staged, dtype);
                for with_residual in [false, true] {
                    let mut worst_sum = 0f64;
                    let want: Vec<f64> = (0..n)
                        .map(|j| {
                            let row = &w_all[(row0 + j) * stride..][..k];
                            let dot: f64 = (0..k).map(|i| staged[i] * row[i]).sum();
                            let sum: f64 = (0..k).map(|i| (staged[i] * row[i]).abs()).sum();
                            worst_sum = worst_sum.max(sum);
                            dot + if with_residual { r[j] } else { 0.0 }
                        })
                        .collect();
                    let ops = (k as f64).log2() + 2.0;
                    let tol = Tol {
                        rel: 2.0 * unit(dtype),
                        abs: (ops * acc_unit(dtype) + 2.0 * unit(dtype)) * worst_sum + tiny(dtype),
                    };
                    let case = format!(
                        "n {n} k {k} stride {stride} row0 {row0} {input:?} x offset {x_off} \
                         residual {with_residual}"
                    );
                    let lin = match input {
                        LinearIn::Plain => fused::LinearInput::Plain,
                        LinearIn::RmsNorm => fused::LinearInput::RmsNorm {
                            weight: (&gs, &g_l),
                            eps,
                        },
                        LinearIn::SwiGlu => fused::LinearInput::SwiGlu,
                    };
                    let residual = with_residual.then_some((&rs, &r_l));
                    t.check_run("fused_linear", dtype, &case, &want, tol, || {
                        fused::fused_linear(&xs, &x_l, &ws, &w_l, lin, residual)
                    });
                }
            }
        }
    }
    // Rows the shared memory cannot stage, and a transposed weight, are left
    // to the unfused ops: the plan says so and the op refuses them.
    let long = Layout::contiguous((4, 32 * 1024));
    assert_eq!(
        fused::fused_linear_plan(DType::F16, &Layout::contiguous(32 * 1024), &long, false),
        None
    );
    let transposed = Layout::contiguous((64, 16)).transpose(0, 1).unwrap();
    assert_eq!(
        fused::fused_linear_plan(DType::F32, &Layout::contiguous(64), &transposed, false),
        None
    );
    let x_l = Layout::contiguous(64);
    let xs = upload(&dev, &[0.5; 64], &x_l, DType::F32);
    let ws = upload(
        &dev,
        &[0.5; 1024],
        &Layout::contiguous((64, 16)),
        DType::F32,
    );
    let err = fused::fused_linear(&xs, &x_l, &ws, &transposed, fused::LinearInput::Plain, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("compute it unfused"), "{err}");
    t.finish("conformance fused_linear");
}
