//! GGML's quantized blocks against candle's CPU quantized code: every block
//! type candle-core 0.11.1 reads, quantized on the CPU by candle from data
//! with ordinary, extreme (near the f16 limit, subnormal scales) and zero
//! blocks, then loaded on the device.
//!
//! - Dequantization must give candle's CPU values bit for bit (f32), and
//!   those values rounded once for f16 and bf16.
//! - `QMatMul`'s product is checked against the exact product of the
//!   CPU-dequantized weight and `x` (computed in f64) and against candle's
//!   CPU `QMatMul`. Up to 32 rows the device, like the CPU, first rounds each
//!   32 (or 256) values of `x` to 8 bits with a scale stored in f16: each
//!   activation is off by at most half a step (amax / 254) plus the f16
//!   rounding of the scale (127 steps times 2^-11 relative), so a product is
//!   within `B = sum_i |w_i| * amax_256(x) * (1/254 + 1/2048)` of the exact
//!   one, plus f32 accumulation (k terms) and the output rounding; it is
//!   within 2B of the CPU's (B covers the CPU's own rounding, whether its
//!   path takes 32 or 256 values per scale: candle's AVX-512 repacked q8_0
//!   path takes 256). Beyond 32 rows the device multiplies the activations,
//!   not rounded to 8 bits, by the dequantized weight (a GEMM): against the
//!   exact product, accumulation and the GEMM dtype's roundings; B against
//!   the CPU. That the rounding is the
//!   CPU's own shows in the generation program's GGUF tests (the same greedy
//!   tokens). Beyond 32 rows f32 activations multiply block weights in bf16:
//!   both operands and the result rounded to bf16 (2^-9 relative each) on
//!   top of the f32 accumulation. Shapes cover 1 to 9 rows (one pass of the
//!   kernel and two), 33 rows (dequantize + GEMM), k of two blocks or not a multiple of the
//!   waves' stride, n that does not fill the last block of waves, and offset
//!   or transposed inputs in f32, f16 and bf16.

use candle_core::backend::BackendStorage;
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{CpuStorage, DType, Device, Layout, Module, Shape, Tensor};
use candle_hip::quantized::{MATVEC_MAX_ROWS, QuantizedStorage};

use crate::common::{Rng, Tol, compare_bits, cpu_values, start, unit};

/// Every GGML type candle-core 0.11.1 reads.
const TYPES: [GgmlDType; 15] = [
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q8_1,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::Q8K,
];

/// `blocks` blocks' worth of values: each block (of the type's size) gets
/// its own character: normal values, values near the f16 limit of the
/// scales (unless not `extreme`: products in f16 would overflow), tiny
/// values (subnormal f16 scales), all zeros, one spike.
fn block_values(rng: &mut Rng, dtype: GgmlDType, blocks: usize, extreme: bool) -> Vec<f32> {
    let size = dtype.block_size().max(32);
    let mut v = Vec::with_capacity(blocks * size);
    for b in 0..blocks {
        let kind = match if b < 5 { b } else { rng.below(5) } {
            1 if !extreme => 0,
            kind => kind,
        };
        for i in 0..size {
            let x = rng.uniform(-1.0, 1.0);
            v.push(match kind {
                0 => x as f32,
                // Scales up to ~ 65504 / 8 * 8 stay finite in every type.
                1 => (x * 3.0e4) as f32,
                2 => (x * 1.0e-6) as f32,
                3 => 0.0,
                _ => {
                    if i == 3 {
                        50.0
                    } else {
                        (x * 0.01) as f32
                    }
                }
            });
        }
    }
    v
}

/// A CPU quantized tensor of shape `(n, k)` from `values`.
fn quantize(values: &[f32], n: usize, k: usize, dtype: GgmlDType) -> QTensor {
    let t = Tensor::from_slice(values, (n, k), &Device::Cpu).unwrap();
    QTensor::quantize(&t, dtype).unwrap()
}

/// The CPU storage of a contiguous CPU tensor.
fn cpu_storage(t: &Tensor) -> candle_core::Result<CpuStorage> {
    match &*t.storage_and_layout().0 {
        candle_core::Storage::Cpu(s) => Ok(s.clone()),
        _ => candle_core::bail!("not a CPU tensor"),
    }
}

/// `values` in `dtype` on the device.
fn upload(
    dev: &candle_hip::HipDevice,
    values: Vec<f64>,
    dtype: DType,
) -> candle_core::Result<candle_hip::HipStorage> {
    let len = values.len();
    let t = Tensor::from_vec(values, len, &Device::Cpu)?.to_dtype(dtype)?;
    candle_core::backend::BackendDevice::storage_from_cpu_storage(dev, &cpu_storage(&t)?)
}

fn load(dev: &candle_hip::HipDevice, q: &QTensor) -> QuantizedStorage {
    QuantizedStorage::from_blocks(dev, q.dtype(), &q.data().unwrap()).unwrap()
}

/// Columns per row: whole blocks, at least 32 values.
fn row_len(dtype: GgmlDType, blocks: usize) -> usize {
    dtype.block_size().max(32) * blocks
}

#[test]
#[ignore = "needs a HIP device"]
fn dequantization_is_candles_bit_for_bit() {
    let (dev, mut t, mut rng) = start(0x5eed_0051);
    for dtype in TYPES {
        for (n, blocks) in [(1, 1), (3, 2), (17, 5), (64, 16)] {
            let k = row_len(dtype, blocks);
            let q = quantize(
                &block_values(&mut rng, dtype, n * blocks, true),
                n,
                k,
                dtype,
            );
            let hip = load(&dev, &q);
            assert_eq!(hip.to_host().unwrap(), q.data().unwrap().to_vec());
            let cpu = q.dequantize(&Device::Cpu).unwrap();
            for out in [DType::F32, DType::F16, DType::BF16] {
                let want = cpu_storage(&cpu.to_dtype(out).unwrap()).unwrap();
                let got = hip.dequantize(n * k, out).and_then(|s| s.to_cpu_storage());
                let outcome = match got {
                    Ok(got) => compare_bits(&got, &want),
                    Err(e) => Err(e.to_string()),
                };
                t.record(
                    &format!("dequantize {dtype:?}"),
                    out,
                    || format!("({n}, {k})"),
                    outcome,
                );
            }
        }
    }
    t.finish("conformance dequantize");
}

/// The device product, the f64 product of the CPU-dequantized weight, and
/// candle's CPU QMatMul, for one case.
struct Products {
    hip: Vec<f64>,
    exact: Vec<f64>,
    /// None where candle's CPU QMatMul refuses the case: it multiplies
    /// plain (f32/f16/bf16) weights as an f32 tensor, which takes f32 inputs
    /// only.
    cpu: Option<Vec<f64>>,
    /// Per output: sum of |w_i x_i|, and the bound of 8-bit activation
    /// rounding, sum of |w_i| * amax_256(x) * (1/254 + 1/2048).
    magnitude: Vec<f64>,
    q8_bound: Vec<f64>,
}

#[allow(clippy::too_many_arguments)]
fn products(
    dev: &candle_hip::HipDevice,
    rng: &mut Rng,
    dtype: GgmlDType,
    n: usize,
    k: usize,
    rows: usize,
    x_dtype: DType,
    arrange: usize,
) -> candle_core::Result<Products> {
    let blocks = n * k / dtype.block_size().max(32);
    let w_values = block_values(rng, dtype, blocks, x_dtype != DType::F16);
    let q = quantize(&w_values, n, k, dtype);
    let w = cpu_values(&cpu_storage(&q.dequantize(&Device::Cpu)?)?);
    let x_values: Vec<f32> = (0..rows * k)
        .map(|_| rng.uniform(-2.0, 2.0) as f32)
        .collect();
    let x_cpu = Tensor::from_slice(&x_values, (1, rows, k), &Device::Cpu)?.to_dtype(x_dtype)?;
    let x = cpu_values(&cpu_storage(&x_cpu.to_dtype(DType::F64)?.flatten_all()?)?);

    // The input on the device: contiguous, behind an offset, or stored
    // transposed (k, rows) and viewed as (rows, k).
    let (host, layout): (Vec<f64>, Layout) = match arrange {
        0 => (x.clone(), Layout::contiguous((1, rows, k))),
        1 => {
            let mut h = vec![0.5; 3];
            h.extend_from_slice(&x);
            (h, Layout::contiguous_with_offset((1, rows, k), 3))
        }
        _ => {
            let mut h = vec![0.0; rows * k];
            for r in 0..rows {
                for i in 0..k {
                    h[i * rows + r] = x[r * k + i];
                }
            }
            let l = Layout::contiguous((1, k, rows)).transpose(1, 2)?;
            (h, l)
        }
    };
    let len = host.len();
    let host_t = Tensor::from_vec(host, len, &Device::Cpu)?.to_dtype(x_dtype)?;
    let storage = cpu_storage(&host_t)?;
    let x_hip = candle_core::backend::BackendDevice::storage_from_cpu_storage(dev, &storage)?;

    let hip_q = load(dev, &q);
    let (y, shape) = hip_q.matmul_t(&Shape::from((n, k)), &x_hip, &layout)?;
    assert_eq!(shape.dims(), &[1, rows, n]);
    let hip = cpu_values(&y.to_cpu_storage()?);

    let plain = matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
    let cpu = if plain && x_dtype != DType::F32 {
        None
    } else {
        let cpu_y = QMatMul::from_qtensor(quantize(&w_values, n, k, dtype))?.forward(&x_cpu)?;
        Some(cpu_values(&cpu_storage(&cpu_y.to_dtype(DType::F64)?)?))
    };

    let vec_block = 256;
    let mut exact = Vec::with_capacity(rows * n);
    let mut magnitude = Vec::with_capacity(rows * n);
    let mut q8_bound = Vec::with_capacity(rows * n);
    for r in 0..rows {
        let xr = &x[r * k..(r + 1) * k];
        let amax: Vec<f64> = xr
            .chunks(vec_block)
            .map(|c| c.iter().fold(0.0f64, |m, v| m.max(v.abs())))
            .collect();
        for j in 0..n {
            let wj = &w[j * k..(j + 1) * k];
            let (mut s, mut m, mut b) = (0.0, 0.0, 0.0);
            for i in 0..k {
                s += wj[i] * xr[i];
                m += (wj[i] * xr[i]).abs();
                b += wj[i].abs() * amax[i / vec_block] * (1.0 / 254.0 + 1.0 / 2048.0);
            }
            exact.push(s);
            magnitude.push(m);
            q8_bound.push(b);
        }
    }
    Ok(Products {
        hip,
        exact,
        cpu,
        magnitude,
        q8_bound,
    })
}

#[test]
#[ignore = "needs a HIP device"]
fn quantized_matmul_within_the_block_bounds() {
    let (dev, mut t, mut rng) = start(0x5eed_0052);
    for dtype in TYPES {
        let bs = dtype.block_size().max(32);
        // k: two blocks, a few, more than a wave's stride of sub-blocks, and
        // rows long enough for several waves per output (even block counts:
        // candle's CPU dot products require them).
        for (n, k) in [
            (1, 2 * bs),
            (7, 4 * bs),
            (67, 2048.max(bs) + 2 * bs),
            (5, 8192 + 2 * bs),
        ] {
            for rows in [1, 2, 5, 8, 9, 33] {
                for (x_dtype, arrange) in [
                    (DType::F32, 0),
                    (DType::F32, 1),
                    (DType::F32, 2),
                    (DType::F16, 0),
                    (DType::BF16, 0),
                ] {
                    if arrange != 0 && rows > 8 && n > 1 {
                        continue;
                    }
                    let case =
                        || format!("n {n} k {k} rows {rows} x {x_dtype:?} arrange {arrange}");
                    let op = format!("qmatmul {dtype:?}");
                    let p = match products(&dev, &mut rng, dtype, n, k, rows, x_dtype, arrange) {
                        Ok(p) => p,
                        Err(e) => {
                            t.error(&op, x_dtype, case(), e);
                            continue;
                        }
                    };
                    // f32 accumulation over k terms, then the output rounding
                    // (and f16's subnormal spacing). With half inputs, the
                    // GEMM path (rows > 32, and plain weights always)
                    // multiplies weights rounded to the input dtype: relative
                    // rounding, or for f16 weights below its normal range an
                    // absolute 2^-25 per term (|x| < 2).
                    let plain = matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
                    let matvec = rows <= MATVEC_MAX_ROWS && !plain;
                    let half_weights = x_dtype != DType::F32 && !matvec;
                    let bf16_gemm = x_dtype == DType::F32 && !matvec && !plain;
                    let weight_rounding = if half_weights {
                        unit(x_dtype)
                    } else if bf16_gemm {
                        2.0 * unit(DType::BF16)
                    } else {
                        0.0
                    };
                    let acc = (k as f64 + 2.0) * unit(DType::F32) + weight_rounding;
                    let floor = match x_dtype {
                        DType::F16 if half_weights => 2f64.powi(-24) + k as f64 * 2f64.powi(-24),
                        DType::F16 => 2f64.powi(-24),
                        _ => 1e-30,
                    };
                    let mut outcome = Ok(());
                    for i in 0..p.exact.len() {
                        let tol = Tol {
                            rel: if bf16_gemm {
                                unit(DType::BF16)
                            } else {
                                unit(x_dtype)
                            },
                            abs: acc * p.magnitude[i]
                                + floor
                                + if matvec { p.q8_bound[i] } else { 0.0 },
                        };
                        if !tol.accepts(p.hip[i], p.exact[i]) {
                            outcome = Err(format!(
                                "output {i}: {} vs exact {} (tolerance {tol:?})",
                                p.hip[i], p.exact[i]
                            ));
                            break;
                        }
                        let cpu_tol = Tol {
                            rel: 2.0 * unit(x_dtype),
                            abs: p.q8_bound[i] * if matvec { 2.0 } else { 1.0 }
                                + 2.0 * acc * p.magnitude[i]
                                + floor,
                        };
                        if let Some(cpu) =
                            p.cpu.as_ref().filter(|c| !cpu_tol.accepts(p.hip[i], c[i]))
                        {
                            outcome = Err(format!(
                                "output {i}: {} vs candle's CPU {} (tolerance {cpu_tol:?})",
                                p.hip[i], cpu[i]
                            ));
                            break;
                        }
                    }
                    t.record(&op, x_dtype, case, outcome);
                }
            }
        }
    }
    t.finish("conformance qmatmul");
}

#[test]
#[ignore = "needs a HIP device"]
fn bad_quantized_input_is_an_error() {
    let (dev, _, _) = start(0x5eed_0053);
    // Not a whole number of blocks.
    let err = QuantizedStorage::from_blocks(&dev, GgmlDType::Q4K, &[0u8; 145]).unwrap_err();
    assert!(err.to_string().contains("Q4K"), "{err}");
    let q = QuantizedStorage::from_blocks(&dev, GgmlDType::Q4_0, &[0u8; 18 * 4]).unwrap();
    // More values than the blocks hold, or not whole blocks.
    assert!(q.dequantize(160, DType::F32).is_err());
    assert!(q.dequantize(40, DType::F32).is_err());
    assert!(q.dequantize(128, DType::F64).is_err());
    // A weight larger than the storage, k not matching the input.
    let x = candle_core::backend::BackendDevice::storage_from_cpu_storage(
        &dev,
        &CpuStorage::F32(vec![1.0; 64]),
    )
    .unwrap();
    let l = Layout::contiguous((1, 64));
    assert!(q.matmul_t(&Shape::from((4, 64)), &x, &l).is_err());
    assert!(q.matmul_t(&Shape::from((2, 32)), &x, &l).is_err());
    let (y, shape) = q.matmul_t(&Shape::from((2, 64)), &x, &l).unwrap();
    assert_eq!(shape.dims(), &[1, 2]);
    assert_eq!(cpu_values(&y.to_cpu_storage().unwrap()), vec![0.0, 0.0]);
    // Integer inputs.
    let xi = candle_core::backend::BackendDevice::storage_from_cpu_storage(
        &dev,
        &CpuStorage::U32(vec![1; 64]),
    )
    .unwrap();
    assert!(q.matmul_t(&Shape::from((2, 64)), &xi, &l).is_err());
}

/// One fused product's case: the weight's type and shape, the input dtype
/// and form, with or without the residual.
struct FusedCase {
    dtype: GgmlDType,
    n: usize,
    k: usize,
    x_dtype: DType,
    input: usize,
    residual: bool,
    /// Rows of `x` (sequences of a batched decoding step).
    rows: usize,
}

/// `fused_matvec` of `rows` rows against the same ops run one after the
/// other on the device for each row alone (`fused::rms_norm` or
/// `fused::silu_mul`, `matmul_t`, the addition), which the tests above hold
/// to candle's CPU: bit for bit. The activations are multiples of 1/4 in
/// [-2, 2], whose squares sum exactly in any order, so the norm's sum (the
/// one computation the fused kernel orders differently) is the same too.
fn fused_against_separate(
    dev: &candle_hip::HipDevice,
    rng: &mut Rng,
    c: &FusedCase,
) -> candle_core::Result<std::result::Result<(), String>> {
    use candle_hip::fused::{self, LinearInput};
    let FusedCase {
        n,
        k,
        x_dtype,
        rows,
        ..
    } = *c;
    let up = |values: &[f64], dtype: DType| upload(dev, values.to_vec(), dtype);
    let quarters = |rng: &mut Rng, len: usize| -> Vec<f64> {
        (0..len)
            .map(|_| (rng.below(17) as f64 - 8.0) / 4.0)
            .collect()
    };
    let blocks = n * k / c.dtype.block_size();
    let q = quantize(
        &block_values(rng, c.dtype, blocks, x_dtype != DType::F16),
        n,
        k,
        c.dtype,
    );
    let hip_q = load(dev, &q);
    let width = if c.input == 2 { 2 * k } else { k };
    let x = up(&quarters(rng, rows * width), x_dtype)?;
    let x_l = Layout::contiguous((rows, width));
    let norm_w = up(
        &(0..k).map(|_| rng.uniform(0.5, 1.5)).collect::<Vec<_>>(),
        x_dtype,
    )?;
    let residual = up(
        &(0..rows * n)
            .map(|_| rng.uniform(-4.0, 4.0))
            .collect::<Vec<_>>(),
        x_dtype,
    )?;
    let vec_k = Layout::contiguous(k);
    let all_n = Layout::contiguous(rows * n);
    let eps = 1e-5;
    let input = match c.input {
        1 => LinearInput::RmsNorm {
            weight: (&norm_w, &vec_k),
            eps,
        },
        2 => LinearInput::SwiGlu,
        _ => LinearInput::Plain,
    };
    let res = c.residual.then_some((&residual, &all_n));
    let w_shape = Shape::from((n, k));
    let got = hip_q.fused_matvec(&w_shape, &x, &x_l, input, res)?;

    // x' row by row through the one-row ops (f16, bf16 and f32 widen to f64
    // and back exactly), then one product of all rows.
    let x_host = cpu_values(&x.to_cpu_storage()?);
    let mut x_prime = Vec::with_capacity(rows * k);
    for r in 0..rows {
        let x_row = Layout::contiguous_with_offset((1, k), r * width);
        let row = match c.input {
            1 => fused::rms_norm(&x, &x_row, &norm_w, &vec_k, eps)?,
            2 => {
                let up_l = Layout::contiguous_with_offset((1, k), r * width + k);
                fused::silu_mul(&x, &x_row, &x, &up_l)?
            }
            _ => {
                x_prime.extend_from_slice(&x_host[r * width..][..k]);
                continue;
            }
        };
        x_prime.extend(cpu_values(&row.to_cpu_storage()?));
    }
    let all_rows = Layout::contiguous((rows, k));
    let (y, _) = hip_q.matmul_t(&w_shape, &up(&x_prime, x_dtype)?, &all_rows)?;
    let want = if c.residual {
        y.binary_impl::<candle_core::op::Add>(&residual, &all_n, &all_n)?
    } else {
        y
    };
    let want = cpu_values(&want.to_cpu_storage()?);
    // f16, bf16 and f32 widen to f64 exactly, sign and NaN payload kept:
    // equal bits there are equal bits here.
    let got = cpu_values(&got.to_cpu_storage()?);
    Ok(
        match got
            .iter()
            .zip(&want)
            .position(|(g, w)| g.to_bits() != w.to_bits())
        {
            None if got.len() == want.len() => Ok(()),
            None => Err(format!("{} outputs, expected {}", got.len(), want.len())),
            Some(i) => Err(format!("output {i}: {} against {}", got[i], want[i])),
        },
    )
}

/// The (input, residual, rows) of each fused product case: every input
/// with and without the residual for one row, and for three (a batched
/// decoding step: the norm and SwiGLU per row).
fn cases() -> impl Iterator<Item = (usize, bool, usize)> {
    (0..3).flat_map(|input| {
        [false, true]
            .into_iter()
            .flat_map(move |residual| [1, 3].map(|rows| (input, residual, rows)))
    })
}

#[test]
#[ignore = "needs a HIP device"]
fn fused_quantized_products_equal_the_separate_ops() {
    let (dev, mut t, mut rng) = start(0x5eed_0054);
    for dtype in TYPES
        .into_iter()
        .filter(|d| !matches!(d, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16))
    {
        let bs = dtype.block_size().max(32);
        // The last rows are long enough for the split mat-vec of one row.
        for (n, k) in [(3, 2 * bs), (67, 2048.max(bs) + 2 * bs), (5, 8192 + 2 * bs)] {
            for x_dtype in [DType::F32, DType::F16, DType::BF16] {
                for (input, residual, rows) in cases() {
                    let c = FusedCase {
                        dtype,
                        n,
                        k,
                        x_dtype,
                        input,
                        residual,
                        rows,
                    };
                    let case = format!(
                        "n {n} k {k} input {} residual {residual} rows {rows}",
                        ["plain", "rms_norm", "swiglu"][input]
                    );
                    let op = format!("fused_qmatvec {dtype:?}");
                    match fused_against_separate(&dev, &mut rng, &c) {
                        Ok(outcome) => t.record(&op, x_dtype, || case.clone(), outcome),
                        Err(e) => t.error(&op, x_dtype, case, e),
                    }
                }
            }
        }
    }
    t.finish("conformance fused_qmatvec");
}

/// `fused_matvec_parts` of weights of two block types that round to one
/// activation type, stacked along their outputs, against each part's
/// separate product, concatenated, plus the residual: bit for bit (the
/// activations as in `fused_against_separate`).
#[test]
#[ignore = "needs a HIP device"]
fn fused_quantized_parts_equal_the_separate_products() {
    use candle_hip::fused::{self, LinearInput};
    let (dev, mut t, mut rng) = start(0x5eed_0056);
    let pairs = [
        (GgmlDType::Q4K, GgmlDType::Q6K),
        (GgmlDType::Q4_0, GgmlDType::Q8_0),
        (GgmlDType::Q4_1, GgmlDType::Q5_1),
    ];
    for (a, b) in pairs {
        for x_dtype in [DType::F32, DType::BF16] {
            let case = || format!("{a:?} (19 rows) + {b:?} (5 rows), k 512, norm, residual");
            let op = "fused_qmatvec parts";
            let outcome = (|| -> candle_core::Result<std::result::Result<(), String>> {
                let k = 512;
                let up = |values: Vec<f64>, dtype: DType| upload(&dev, values, dtype);
                let weights: Vec<(QuantizedStorage, Shape)> = [(a, 19), (b, 5)]
                    .into_iter()
                    .map(|(dtype, n)| {
                        let blocks = n * k / dtype.block_size();
                        let values = block_values(&mut rng, dtype, blocks, true);
                        (
                            load(&dev, &quantize(&values, n, k, dtype)),
                            Shape::from((n, k)),
                        )
                    })
                    .collect();
                let x = up(
                    (0..k).map(|_| (rng.below(17) as f64 - 8.0) / 4.0).collect(),
                    x_dtype,
                )?;
                let norm_w = up((0..k).map(|_| rng.uniform(0.5, 1.5)).collect(), x_dtype)?;
                let residual = up((0..24).map(|_| rng.uniform(-4.0, 4.0)).collect(), x_dtype)?;
                let (vec_k, row) = (Layout::contiguous(k), Layout::contiguous((1, k)));
                let input = LinearInput::RmsNorm {
                    weight: (&norm_w, &vec_k),
                    eps: 1e-5,
                };
                let parts: Vec<_> = weights.iter().map(|(q, s)| (q, s)).collect();
                let res_l = Layout::contiguous(24);
                let got = QuantizedStorage::fused_matvec_parts(
                    &parts,
                    &x,
                    &row,
                    input,
                    Some((&residual, &res_l)),
                )?;
                let normed = fused::rms_norm(&x, &row, &norm_w, &vec_k, 1e-5)?;
                let mut want = Vec::new();
                for (q, shape) in &weights {
                    let (y, _) = q.matmul_t(shape, &normed, &row)?;
                    want.extend(cpu_values(&y.to_cpu_storage()?));
                }
                let want = up(want, x_dtype)?;
                let want = want.binary_impl::<candle_core::op::Add>(&residual, &res_l, &res_l)?;
                Ok(compare_bits(
                    &got.to_cpu_storage()?,
                    &want.to_cpu_storage()?,
                ))
            })();
            match outcome {
                Ok(o) => t.record(op, x_dtype, case, o),
                Err(e) => t.error(op, x_dtype, case(), e),
            }
        }
    }
    t.finish("conformance fused_qmatvec parts");
}

/// `fused_attention_matvec_parts` (a decoding step's attention, its merge
/// rounding the o product's input) against `flash_attn` followed by
/// `fused_matvec_parts` of its output, plus the residual: bit for bit. Key
/// caches long enough for several splits (the merge rounds) and short (one
/// split: the attention writes its output, rounded as before), head dims
/// whose heads fill the merge's blocks of 256 values or straddle them
/// (80), the three activation types, and weights of two block types.
#[test]
#[ignore = "needs a HIP device"]
fn fused_attention_product_equals_the_separate_ops() {
    use candle_hip::fused::{self, FlashAttnExtras, FlashAttnParams, LinearInput};
    let (dev, mut t, mut rng) = start(0x5eed_0057);
    // (weights as (block type, rows), heads, kv heads, head dim, cache, filled)
    type Case = (
        &'static [(GgmlDType, usize)],
        usize,
        usize,
        usize,
        usize,
        u32,
    );
    let cases: [Case; 6] = [
        (&[(GgmlDType::Q4K, 24)], 8, 2, 64, 512, 300),
        (
            &[(GgmlDType::Q4K, 16), (GgmlDType::Q6K, 8)],
            4,
            4,
            128,
            1024,
            1000,
        ),
        (&[(GgmlDType::Q8_0, 40)], 16, 4, 80, 700, 650),
        (&[(GgmlDType::Q4_1, 9)], 2, 1, 80, 512, 77),
        (&[(GgmlDType::Q4_0, 33)], 8, 8, 32, 300, 300),
        (&[(GgmlDType::Q4K, 24)], 8, 2, 64, 40, 40),
    ];
    for (weights, h_q, h_k, d, s_k, filled) in cases {
        for dtype in [DType::BF16, DType::F16] {
            let case =
                || format!("{weights:?}, h_q {h_q}, h_k {h_k}, d {d}, {filled} of {s_k} keys");
            let op = "fused_attention_qmatvec";
            let outcome = (|| -> candle_core::Result<std::result::Result<(), String>> {
                let k = h_q * d;
                let up = |values: Vec<f64>, dtype: DType| upload(&dev, values, dtype);
                let blocks: Vec<(QuantizedStorage, Shape)> = weights
                    .iter()
                    .map(|&(wt, n)| {
                        let values = block_values(&mut rng, wt, n * k / wt.block_size(), true);
                        (
                            load(&dev, &quantize(&values, n, k, wt)),
                            Shape::from((n, k)),
                        )
                    })
                    .collect();
                let parts: Vec<_> = blocks.iter().map(|(q, s)| (q, s)).collect();
                let n: usize = weights.iter().map(|&(_, n)| n).sum();
                let mut values = |count: usize| -> Vec<f64> {
                    (0..count).map(|_| rng.uniform(-2.0, 2.0)).collect()
                };
                let (q, kc, vc) = (
                    up(values(k), dtype)?,
                    up(values(s_k * h_k * d), dtype)?,
                    up(values(s_k * h_k * d), dtype)?,
                );
                let residual = up(values(n), dtype)?;
                let lens = up(vec![filled as f64], DType::U32)?;
                let (q_l, kv_l) = (
                    Layout::contiguous((1, 1, h_q, d)),
                    Layout::contiguous((1, s_k, h_k, d)),
                );
                let (res_l, lens_l, row) = (
                    Layout::contiguous(n),
                    Layout::contiguous(1),
                    Layout::contiguous((1, k)),
                );
                let extras = || FlashAttnExtras {
                    alibi_slopes: None,
                    key_lens: Some((&lens, &lens_l)),
                };
                let params = FlashAttnParams::new(1.0 / (d as f32).sqrt(), false);
                let got = QuantizedStorage::fused_attention_matvec_parts(
                    &parts,
                    (&q, &q_l),
                    (&kc, &kv_l),
                    (&vc, &kv_l),
                    extras(),
                    &params,
                    Some((&residual, &res_l)),
                )?;
                let attended =
                    fused::flash_attn(&q, &q_l, &kc, &kv_l, &vc, &kv_l, extras(), &params)?;
                let want = QuantizedStorage::fused_matvec_parts(
                    &parts,
                    &attended,
                    &row,
                    LinearInput::Plain,
                    Some((&residual, &res_l)),
                )?;
                Ok(compare_bits(
                    &got.to_cpu_storage()?,
                    &want.to_cpu_storage()?,
                ))
            })();
            match outcome {
                Ok(o) => t.record(op, dtype, case, o),
                Err(e) => t.error(op, dtype, case(), e),
            }
        }
    }
    t.finish("conformance fused_attention_qmatvec");
}

/// `fused_matvec_parts_rope_append` (the step's q/k/v mat-vecs storing its
/// rotary pairs) against `fused_matvec_parts` followed by `rope_append`, bit
/// for bit: the state starts random, so a stray write shows, and a position
/// past the cache writes nothing. Parts of one block type and of two (q
/// and k in one, v in another, as Q4_K_M's layers), plain and normed
/// inputs; the halves' RoPE, odd parts and rows other than the heads are
/// refused.
#[test]
#[ignore = "needs a HIP device"]
fn fused_quantized_rope_append_equals_the_separate_ops() {
    use candle_hip::fused::{self, LinearInput, StepCache, StepTarget};
    let (dev, mut t, mut rng) = start(0x5eed_0057);
    let cache = StepCache {
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
        max_len: 6,
        interleaved: true,
    };
    let (k, table_rows) = (512, 8);
    // Rows of each part: the q and k heads, then the v heads.
    let (qk_rows, v_rows) = ((4 + 2) * 32, 2 * 32);
    let types = [
        (GgmlDType::Q4K, GgmlDType::Q6K),
        (GgmlDType::Q8_0, GgmlDType::Q8_0),
        (GgmlDType::Q5_1, GgmlDType::Q4_1),
    ];
    for (a, b) in types {
        for x_dtype in [DType::F32, DType::BF16] {
            for (norm, pos) in [(false, 0), (true, 5), (true, 6)] {
                let case = || format!("{a:?} + {b:?}, norm {norm}, position {pos}");
                let op = "fused_qmatvec rope_append";
                let outcome = (|| -> candle_core::Result<std::result::Result<(), String>> {
                    let up = |values: Vec<f64>, dtype: DType| upload(&dev, values, dtype);
                    let weights: Vec<(QuantizedStorage, Shape)> = [(a, qk_rows), (b, v_rows)]
                        .into_iter()
                        .map(|(dtype, n)| {
                            let blocks = n * k / dtype.block_size();
                            let values = block_values(&mut rng, dtype, blocks, false);
                            (
                                load(&dev, &quantize(&values, n, k, dtype)),
                                Shape::from((n, k)),
                            )
                        })
                        .collect();
                    let x = up((0..k).map(|_| rng.uniform(-2.0, 2.0)).collect(), x_dtype)?;
                    let norm_w = up((0..k).map(|_| rng.uniform(0.5, 1.5)).collect(), x_dtype)?;
                    let angles: Vec<f64> = (0..table_rows * 16)
                        .map(|_| rng.uniform(0.0, 6.3))
                        .collect();
                    let cos = up(angles.iter().map(|a| a.cos()).collect(), x_dtype)?;
                    let sin = up(angles.iter().map(|a| a.sin()).collect(), x_dtype)?;
                    let tl = Layout::contiguous((table_rows, 16));
                    let state_len = cache.state_len().unwrap();
                    let initial: Vec<f64> =
                        (0..state_len).map(|_| rng.uniform(-1.0, 1.0)).collect();
                    let state_l = Layout::contiguous(state_len);
                    let pos_l = Layout::contiguous(1);
                    let p = candle_core::backend::BackendDevice::storage_from_cpu_storage(
                        &dev,
                        &CpuStorage::U32(vec![pos]),
                    )?;
                    let (vec_k, row) = (Layout::contiguous(k), Layout::contiguous((1, k)));
                    let input = match norm {
                        true => LinearInput::RmsNorm {
                            weight: (&norm_w, &vec_k),
                            eps: 1e-5,
                        },
                        false => LinearInput::Plain,
                    };
                    let parts: Vec<_> = weights.iter().map(|(q, s)| (q, s)).collect();
                    let target = |state| StepTarget {
                        state: (state, &state_l),
                        cos: (&cos, &tl),
                        sin: (&sin, &tl),
                        pos: (&p, &pos_l),
                        cache,
                    };
                    let mut got = up(initial.clone(), x_dtype)?;
                    QuantizedStorage::fused_matvec_parts_rope_append(
                        &parts,
                        &x,
                        &row,
                        input,
                        target(&mut got),
                    )?;
                    let qkv = QuantizedStorage::fused_matvec_parts(&parts, &x, &row, input, None)?;
                    let mut want = up(initial, x_dtype)?;
                    let qkv_l = Layout::contiguous(qk_rows + v_rows);
                    fused::rope_append(&qkv, &qkv_l, target(&mut want))?;
                    Ok(compare_bits(
                        &got.to_cpu_storage()?,
                        &want.to_cpu_storage()?,
                    ))
                })();
                match outcome {
                    Ok(o) => t.record(op, x_dtype, case, o),
                    Err(e) => t.error(op, x_dtype, case(), e),
                }
            }
        }
    }
    // The halves' RoPE, a part that splits a rotary pair, rows other than
    // the step's heads.
    let x = candle_core::backend::BackendDevice::storage_from_cpu_storage(
        &dev,
        &CpuStorage::F32(vec![0.5; 256]),
    )
    .unwrap();
    let row = Layout::contiguous((1, 256));
    let small = StepCache {
        heads: 1,
        kv_heads: 1,
        head_dim: 2,
        max_len: 2,
        interleaved: true,
    };
    let state_l = Layout::contiguous(small.state_len().unwrap());
    let table = candle_core::backend::BackendDevice::storage_from_cpu_storage(
        &dev,
        &CpuStorage::F32(vec![0.5; 2]),
    )
    .unwrap();
    let p = candle_core::backend::BackendDevice::storage_from_cpu_storage(
        &dev,
        &CpuStorage::U32(vec![0]),
    )
    .unwrap();
    let (tl, pl) = (Layout::contiguous((2, 1)), Layout::contiguous(1));
    let q = QuantizedStorage::from_blocks(&dev, GgmlDType::Q8K, &vec![0u8; 292 * 6]).unwrap();
    let run = |rows: usize, cache: StepCache| {
        let mut state = candle_core::backend::BackendDevice::storage_from_cpu_storage(
            &dev,
            &CpuStorage::F32(vec![0.0; small.state_len().unwrap()]),
        )
        .unwrap();
        let shape = Shape::from((rows, 256));
        let step = StepTarget {
            state: (&mut state, &state_l),
            cos: (&table, &tl),
            sin: (&table, &tl),
            pos: (&p, &pl),
            cache,
        };
        QuantizedStorage::fused_matvec_parts_rope_append(
            &[(&q, &shape)],
            &x,
            &row,
            LinearInput::Plain,
            step,
        )
        .map_err(|e| e.to_string())
    };
    assert!(run(6, small).is_ok());
    let halves = StepCache {
        interleaved: false,
        ..small
    };
    assert!(run(6, halves).unwrap_err().contains("unfused"));
    assert!(run(5, small).unwrap_err().contains("splits a rotary pair"));
    assert!(run(4, small).unwrap_err().contains("the step's heads"));
    t.finish("conformance fused_qmatvec rope_append");
}

#[test]
#[ignore = "needs a HIP device"]
fn fused_quantized_product_refuses_what_it_does_not_take() {
    use candle_hip::fused::LinearInput;
    let (dev, _, _) = start(0x5eed_0055);
    let q = QuantizedStorage::from_blocks(&dev, GgmlDType::Q4_0, &[0u8; 18 * 4]).unwrap();
    let x = candle_core::backend::BackendDevice::storage_from_cpu_storage(
        &dev,
        &CpuStorage::F32(vec![1.0; 128]),
    )
    .unwrap();
    let w = Shape::from((2, 64));
    let one = Layout::contiguous((1, 64));
    // More rows than the mat-vec takes, a row of the wrong length, a SwiGLU
    // input of one half.
    let two = Layout::contiguous((2, 64));
    let many = Layout::contiguous((MATVEC_MAX_ROWS + 1, 64));
    assert!(!q.fused_matvec_takes(&w, DType::F32, &many, false));
    assert!(
        q.fused_matvec(&w, &x, &many, LinearInput::Plain, None)
            .is_err()
    );
    let short = Layout::contiguous((1, 32));
    assert!(
        q.fused_matvec(&w, &x, &short, LinearInput::Plain, None)
            .is_err()
    );
    assert!(
        q.fused_matvec(&w, &x, &one, LinearInput::SwiGlu, None)
            .is_err()
    );
    // k values (2k for SwiGLU) as two rows: the output would claim two rows.
    let split = Layout::contiguous((2, 32));
    assert!(!q.fused_matvec_takes(&w, DType::F32, &split, false));
    assert!(
        q.fused_matvec(&w, &x, &split, LinearInput::Plain, None)
            .is_err()
    );
    assert!(!q.fused_matvec_takes(&w, DType::F32, &two, true));
    // A residual or norm weight of the wrong length or dtype.
    let l3 = Layout::contiguous(3);
    let r = &x;
    assert!(
        q.fused_matvec(&w, &x, &one, LinearInput::Plain, Some((r, &l3)))
            .is_err()
    );
    let half = x.to_dtype(&Layout::contiguous(2), DType::F16).unwrap();
    let l2 = Layout::contiguous(2);
    assert!(
        q.fused_matvec(&w, &x, &one, LinearInput::Plain, Some((&half, &l2)))
            .is_err()
    );
    let norm = LinearInput::RmsNorm {
        weight: (&x, &l3),
        eps: 1e-5,
    };
    assert!(q.fused_matvec(&w, &x, &one, norm, None).is_err());
    // A plain weight type has no fused product.
    let p = QuantizedStorage::from_blocks(&dev, GgmlDType::F32, &[0u8; 4 * 128]).unwrap();
    assert!(
        p.fused_matvec(&w, &x, &one, LinearInput::Plain, None)
            .is_err()
    );
    // Several parts take one row only (each writes its columns of it).
    let halves = [(&q, &Shape::from((1, 64))), (&q, &Shape::from((1, 64)))];
    assert!(QuantizedStorage::fused_parts_take(
        &halves,
        DType::F32,
        &one,
        false
    ));
    assert!(!QuantizedStorage::fused_parts_take(
        &halves,
        DType::F32,
        &two,
        false
    ));
    // Parts that round their activations to different types.
    let k = QuantizedStorage::from_blocks(&dev, GgmlDType::Q4K, &[0u8; 144]).unwrap();
    let (w32, w256) = (Shape::from((2, 256)), Shape::from((1, 256)));
    let x256 = Layout::contiguous((1, 256));
    let parts = [(&q, &w32), (&k, &w256)];
    let x_long = candle_core::backend::BackendDevice::storage_from_cpu_storage(
        &dev,
        &CpuStorage::F32(vec![1.0; 256]),
    )
    .unwrap();
    assert!(
        QuantizedStorage::fused_matvec_parts(&parts, &x_long, &x256, LinearInput::Plain, None)
            .is_err()
    );
    // What it takes works: zero blocks give the residual back.
    let l2 = Layout::contiguous(2);
    let y = q
        .fused_matvec(&w, &x, &one, LinearInput::Plain, Some((&x, &l2)))
        .unwrap();
    assert_eq!(cpu_values(&y.to_cpu_storage().unwrap()), vec![1.0, 1.0]);
    // An attention row of 64 values against Q4_K rows (blocks of 256),
    // over a cache long enough for the merge to round: refused before any
    // rounding writes the scales of a 256-value block.
    use candle_hip::fused::{FlashAttnExtras, FlashAttnParams};
    let q_row = x_long
        .to_dtype(&Layout::contiguous(64), DType::F16)
        .unwrap();
    let kv_shape = Shape::from((1, 4096, 1, 64));
    let cache =
        candle_core::backend::BackendDevice::zeros_impl(&dev, &kv_shape, DType::F16).unwrap();
    let (q_l, kv_l) = (
        Layout::contiguous((1, 1, 1, 64)),
        Layout::contiguous(kv_shape),
    );
    let err = QuantizedStorage::fused_attention_matvec_parts(
        &[(&k, &Shape::from((2, 64)))],
        (&q_row, &q_l),
        (&cache, &kv_l),
        (&cache, &kv_l),
        FlashAttnExtras {
            alibi_slopes: None,
            key_lens: None,
        },
        &FlashAttnParams::new(0.125, false),
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("not whole Q4K blocks"), "{err}");
}
