//! The fused ops against candle-nn's CPU implementations: softmax_last_dim,
//! rms_norm, layer_norm and sigmoid over rows from 1 to 70001 elements,
//! rope / rope_i / rope_thd, rope_append (a decoding step's RoPE and cache
//! write) against rope and the rows it writes, silu_mul against candle-nn's
//! swiglu, and argsort (ties in index order, NaN and
//! signed zeros) against candle's CPU argsort and a host stable sort.
//! References are computed in f32 for f16/bf16 inputs (candle-nn rounds
//! its intermediates to the storage type) and in f64 otherwise.

use candle_core::{DType, Layout};
use candle_hip::fused;

use crate::common::{
    Arrange, DTYPES, FLOATS, Tol, acc_unit, cpu_tensor, hip_values, layout, rounded, start, to_f64,
    unit, upload,
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

/// rope_append against candle-nn's `rope` / `rope_i` of the step's query and
/// key heads at row `pos` of the tables: the rotated keys at row `pos` of the
/// key cache, the values at row `pos` of the value cache, the rotated query
/// after the caches, every other element of the state as it was (the state
/// starts random, so a stray write shows). A position past the cache or the
/// tables writes nothing.
#[test]
#[ignore = "needs a HIP device"]
fn rope_append_matches_rope_and_the_cache_rows() {
    let (dev, mut t, mut rng) = start(0x5eed_0009);
    // (heads, kv_heads, head_dim, max_len, table rows, positions): grouped
    // heads as the 1B and 8B shapes have them, one head, heads of 2.
    type Case = (usize, usize, usize, usize, usize, &'static [usize]);
    let cases: &[Case] = &[
        (1, 1, 2, 1, 1, &[0, 1]),
        (4, 2, 8, 5, 9, &[0, 3, 4, 5, 9]),
        (32, 8, 64, 40, 64, &[0, 39]),
        (8, 8, 128, 3, 2, &[1, 2]),
    ];
    for &(heads, kv_heads, d, max_len, rows, positions) in cases {
        for dtype in FLOATS {
            let rd = reference_dtype(dtype);
            let width = (heads + 2 * kv_heads) * d;
            let qkv = rounded(&rng.values(width, -3.0, 3.0), dtype);
            let angles = rng.values(rows * d / 2, 0.0, 6.3);
            let cos = rounded(&angles.iter().map(|a| a.cos()).collect::<Vec<_>>(), dtype);
            let sin = rounded(&angles.iter().map(|a| a.sin()).collect::<Vec<_>>(), dtype);
            let tl = Layout::contiguous((rows, d / 2));
            let (cs, ss) = (
                upload(&dev, &cos, &tl, dtype),
                upload(&dev, &sin, &tl, dtype),
            );
            let cache_len = kv_heads * max_len * d;
            let state_len = 2 * cache_len + heads * d;
            let initial = rounded(&rng.values(state_len, -1.0, 1.0), dtype);
            let state_l = Layout::contiguous(state_len);
            let qkv_l = Layout::contiguous((1, 1, width));
            let xs = upload(&dev, &qkv, &qkv_l, dtype);
            for interleaved in [false, true] {
                let cache = fused::StepCache {
                    heads,
                    kv_heads,
                    head_dim: d,
                    max_len,
                    interleaved,
                };
                for &pos in positions {
                    let mut want = initial.clone();
                    if pos < max_len && pos < rows {
                        let table = |v: &[f64]| {
                            cpu_tensor(&v[pos * d / 2..(pos + 1) * d / 2], &[1, d / 2], rd)
                        };
                        let qk = cpu_tensor(
                            &qkv[..(heads + kv_heads) * d],
                            &[1, heads + kv_heads, 1, d],
                            rd,
                        );
                        let rotated = if interleaved {
                            candle_nn::rotary_emb::rope_i(&qk, &table(&cos), &table(&sin))
                        } else {
                            candle_nn::rotary_emb::rope(&qk, &table(&cos), &table(&sin))
                        };
                        let rotated = to_f64(&rotated.unwrap());
                        want[2 * cache_len..].copy_from_slice(&rotated[..heads * d]);
                        for h in 0..kv_heads {
                            let row = (h * max_len + pos) * d;
                            let (k, v) = ((heads + h) * d, (heads + kv_heads + h) * d);
                            want[row..row + d].copy_from_slice(&rotated[k..k + d]);
                            want[cache_len + row..cache_len + row + d]
                                .copy_from_slice(&qkv[v..v + d]);
                        }
                    }
                    let p = upload(&dev, &[pos as f64], &Layout::contiguous(1), DType::U32);
                    let case = format!("{cache:?} table rows {rows} position {pos}");
                    t.check_run(
                        "rope_append",
                        dtype,
                        &case,
                        &want,
                        fused_tol(dtype, 4.0, 6.0),
                        || {
                            let mut state = upload(&dev, &initial, &state_l, dtype);
                            fused::rope_append(
                                &xs,
                                &qkv_l,
                                fused::StepTarget {
                                    state: (&mut state, &state_l),
                                    cos: (&cs, &tl),
                                    sin: (&ss, &tl),
                                    pos: (&p, &Layout::contiguous(1)),
                                    cache,
                                },
                            )?;
                            Ok(state)
                        },
                    );
                }
            }
        }
    }
    // What the checks refuse: a state of the wrong length, a position that
    // is not one u32, tables of another width, an odd head dimension.
    let cache = fused::StepCache {
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        max_len: 3,
        interleaved: false,
    };
    let dtype = DType::F32;
    let (tl, ql) = (Layout::contiguous((3, 2)), Layout::contiguous(16));
    let table = upload(&dev, &[0.5; 6], &tl, dtype);
    let qkv = upload(&dev, &[1.0; 16], &ql, dtype);
    let state_l = Layout::contiguous(cache.state_len().unwrap());
    let pos_l = Layout::contiguous(1);
    let p = upload(&dev, &[0.0], &pos_l, DType::U32);
    let run = |state_l: &Layout, p: &candle_hip::HipStorage, tl: &Layout, cache| {
        let mut state = upload(
            &dev,
            &vec![0.0; state_l.dims().iter().product()],
            state_l,
            dtype,
        );
        fused::rope_append(
            &qkv,
            &ql,
            fused::StepTarget {
                state: (&mut state, state_l),
                cos: (&table, tl),
                sin: (&table, tl),
                pos: (p, &pos_l),
                cache,
            },
        )
        .map_err(|e| e.to_string())
    };
    assert!(run(&state_l, &p, &tl, cache).is_ok());
    assert!(
        run(&Layout::contiguous(40), &p, &tl, cache)
            .unwrap_err()
            .contains("state")
    );
    let p_f32 = upload(&dev, &[0.0], &pos_l, DType::F32);
    assert!(
        run(&state_l, &p_f32, &tl, cache)
            .unwrap_err()
            .contains("one u32")
    );
    let wide = Layout::contiguous((2, 3));
    assert!(run(&state_l, &p, &wide, cache).unwrap_err().contains("cos"));
    let odd = fused::StepCache {
        head_dim: 3,
        ..cache
    };
    assert!(
        run(&state_l, &p, &tl, odd)
            .unwrap_err()
            .contains("even head dimension")
    );
    t.finish("conformance rope_append");
}

/// The products with SwiGLU's activation or the step's RoPE and cache
/// write in their launch (`fused_linear_swiglu`, `fused_linear_rope_append`)
/// against `fused_linear` followed by `silu_mul` of its halves or by
/// `rope_append`, bit for bit: each row's sum is the same in both kernels
/// (same split, same order) and is rounded to the dtype before the second
/// op. Plain inputs on and off a 16-byte boundary and the RMS norm; gate/up
/// weights from a few rows to the splits of long rows, narrowed from a wider
/// matrix; the step's heads with grouped heads, both RoPE layouts, positions
/// inside and past the cache and the tables (those write nothing: the state
/// starts random, so a stray write shows). `fused_linear` itself is checked
/// against a host reference above.
#[test]
#[ignore = "needs a HIP device"]
fn fused_pairs_match_the_separate_ops() {
    let (dev, mut t, mut rng) = start(0x5eed_000b);
    let inputs = [LinearIn::Plain, LinearIn::RmsNorm];
    let eps = 1e-5f32;
    for dtype in FLOATS {
        // (gate/up rows, k, row stride): the split grows as rows shrink.
        for (rows, k, stride) in [(2, 8, 8), (14, 64, 72), (2000, 256, 256), (64, 4096, 4096)] {
            let w_all = rounded(&rng.values(rows * stride, -1.0, 1.0), dtype);
            let w_full = Layout::contiguous((rows, stride));
            let w_l = w_full.narrow(1, 0, k).unwrap();
            let ws = upload(&dev, &w_all, &w_full, dtype);
            let g = rounded(&rng.values(k, -2.0, 2.0), dtype);
            let g_l = Layout::contiguous(k);
            let gs = upload(&dev, &g, &g_l, dtype);
            for (input, x_off) in inputs.iter().flat_map(|&i| [(i, 0), (i, 1)]) {
                let x = rounded(&rng.values(k, -3.0, 3.0), dtype);
                let x_l = Layout::contiguous_with_offset((1, 1, k), x_off);
                let xs = upload(&dev, &x, &x_l, dtype);
                let lin = match input {
                    LinearIn::RmsNorm => fused::LinearInput::RmsNorm {
                        weight: (&gs, &g_l),
                        eps,
                    },
                    _ => fused::LinearInput::Plain,
                };
                let case = format!("rows {rows} k {k} stride {stride} {input:?} x offset {x_off}");
                let want = fused::fused_linear(&xs, &x_l, &ws, &w_l, lin, None).and_then(|y| {
                    let half = Layout::contiguous(rows);
                    let (gate, up) = (
                        half.narrow(0, 0, rows / 2)?,
                        half.narrow(0, rows / 2, rows / 2)?,
                    );
                    fused::silu_mul(&y, &gate, &y, &up)
                });
                match want {
                    Ok(want) => t.check_run(
                        "fused_linear_swiglu",
                        dtype,
                        &case,
                        &hip_values(&want),
                        Tol::EXACT,
                        || fused::fused_linear_swiglu(&xs, &x_l, &ws, &w_l, lin),
                    ),
                    Err(e) => t.error("fused_linear_swiglu", dtype, &case, e),
                }
            }
        }
        // (heads, kv_heads, head_dim, max_len, table rows, positions, k).
        type Case = (usize, usize, usize, usize, usize, &'static [usize], usize);
        let cases: &[Case] = &[
            (1, 1, 2, 1, 1, &[0, 1], 8),
            (4, 2, 8, 5, 9, &[0, 4, 5, 9], 64),
            (32, 8, 64, 40, 64, &[39], 512),
        ];
        for &(heads, kv_heads, d, max_len, table_rows, positions, k) in cases {
            let rows = (heads + 2 * kv_heads) * d;
            let w = rounded(&rng.values(rows * k, -1.0, 1.0), dtype);
            let w_l = Layout::contiguous((rows, k));
            let ws = upload(&dev, &w, &w_l, dtype);
            let x = rounded(&rng.values(k, -3.0, 3.0), dtype);
            let x_l = Layout::contiguous((1, 1, k));
            let xs = upload(&dev, &x, &x_l, dtype);
            let g = rounded(&rng.values(k, -2.0, 2.0), dtype);
            let g_l = Layout::contiguous(k);
            let gs = upload(&dev, &g, &g_l, dtype);
            let angles = rng.values(table_rows * d / 2, 0.0, 6.3);
            let table = |f: fn(f64) -> f64| {
                rounded(&angles.iter().map(|&a| f(a)).collect::<Vec<_>>(), dtype)
            };
            let tl = Layout::contiguous((table_rows, d / 2));
            let (cs, ss) = (
                upload(&dev, &table(f64::cos), &tl, dtype),
                upload(&dev, &table(f64::sin), &tl, dtype),
            );
            let state_len = 2 * kv_heads * max_len * d + heads * d;
            let initial = rounded(&rng.values(state_len, -1.0, 1.0), dtype);
            let state_l = Layout::contiguous(state_len);
            let pos_l = Layout::contiguous(1);
            for (input, interleaved) in inputs.iter().flat_map(|&i| [(i, false), (i, true)]) {
                let lin = match input {
                    LinearIn::RmsNorm => fused::LinearInput::RmsNorm {
                        weight: (&gs, &g_l),
                        eps,
                    },
                    _ => fused::LinearInput::Plain,
                };
                let cache = fused::StepCache {
                    heads,
                    kv_heads,
                    head_dim: d,
                    max_len,
                    interleaved,
                };
                for &pos in positions {
                    let p = upload(&dev, &[pos as f64], &pos_l, DType::U32);
                    let case =
                        format!("{cache:?} table rows {table_rows} position {pos} k {k} {input:?}");
                    let run = |fused_step: bool| -> candle_core::Result<candle_hip::HipStorage> {
                        let mut state = upload(&dev, &initial, &state_l, dtype);
                        let step = fused::StepTarget {
                            state: (&mut state, &state_l),
                            cos: (&cs, &tl),
                            sin: (&ss, &tl),
                            pos: (&p, &pos_l),
                            cache,
                        };
                        if fused_step {
                            fused::fused_linear_rope_append(&xs, &x_l, &ws, &w_l, lin, step)?;
                        } else {
                            let qkv = fused::fused_linear(&xs, &x_l, &ws, &w_l, lin, None)?;
                            fused::rope_append(&qkv, &Layout::contiguous(rows), step)?;
                        }
                        Ok(state)
                    };
                    match run(false) {
                        Ok(want) => t.check_run(
                            "fused_linear_rope_append",
                            dtype,
                            &case,
                            &hip_values(&want),
                            Tol::EXACT,
                            || run(true),
                        ),
                        Err(e) => t.error("fused_linear_rope_append", dtype, &case, e),
                    }
                }
            }
        }
    }
    // What the checks refuse: an odd gate/up weight, a q/k/v weight whose
    // rows are not the step's heads.
    let dtype = DType::F32;
    let x_l = Layout::contiguous(8);
    let xs = upload(&dev, &[0.5; 8], &x_l, dtype);
    let odd_l = Layout::contiguous((3, 8));
    let odd = upload(&dev, &[0.5; 24], &odd_l, dtype);
    let err = fused::fused_linear_swiglu(&xs, &x_l, &odd, &odd_l, fused::LinearInput::Plain)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not two halves"), "{err}");
    let cache = fused::StepCache {
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        max_len: 3,
        interleaved: false,
    };
    let state_l = Layout::contiguous(cache.state_len().unwrap());
    let mut state = upload(
        &dev,
        &vec![0.0; cache.state_len().unwrap()],
        &state_l,
        dtype,
    );
    let tl = Layout::contiguous((3, 2));
    let table = upload(&dev, &[0.5; 6], &tl, dtype);
    let pos_l = Layout::contiguous(1);
    let p = upload(&dev, &[0.0], &pos_l, DType::U32);
    let step = fused::StepTarget {
        state: (&mut state, &state_l),
        cos: (&table, &tl),
        sin: (&table, &tl),
        pos: (&p, &pos_l),
        cache,
    };
    let err =
        fused::fused_linear_rope_append(&xs, &x_l, &odd, &odd_l, fused::LinearInput::Plain, step)
            .unwrap_err()
            .to_string();
    assert!(err.contains("the step's heads need 16"), "{err}");
    t.finish("conformance fused pairs");
}

/// silu_mul against candle-nn's swiglu of `[gate, up]`: the two halves of
/// one tensor (views with strides and offsets, as a fused gate/up
/// projection's output is split), and separate tensors in other layouts.
#[test]
#[ignore = "needs a HIP device"]
fn silu_mul_matches_candle_nn_swiglu() {
    let (dev, mut t, mut rng) = start(0x5eed_000a);
    let shapes: &[&[usize]] = &[&[1, 1], &[3, 7], &[1, 8192], &[2, 5, 96]];
    for &shape in shapes {
        let r = shape.len();
        let half = shape[r - 1];
        let mut whole = shape.to_vec();
        whole[r - 1] = 2 * half;
        let n: usize = whole.iter().product();
        for dtype in FLOATS {
            let rd = reference_dtype(dtype);
            let x = rounded(&rng.values(n, -8.0, 8.0), dtype);
            let want = to_f64(&candle_nn::ops::swiglu(&cpu_tensor(&x, &whole, rd)).unwrap());
            let tol = fused_tol(dtype, 4.0, 8.0);
            for arr in [Arrange::Contiguous, Arrange::Offset] {
                let l = layout(&whole, arr);
                let xs = upload(&dev, &x, &l, dtype);
                let (gate, up) = (
                    l.narrow(r - 1, 0, half).unwrap(),
                    l.narrow(r - 1, half, half).unwrap(),
                );
                t.check_run(
                    "silu_mul",
                    dtype,
                    format!("halves of {whole:?} {arr}"),
                    &want,
                    tol,
                    || fused::silu_mul(&xs, &gate, &xs, &up),
                );
            }
            // The halves as tensors of their own, gate transposed.
            let (g, u): (Vec<f64>, Vec<f64>) =
                x.chunks(2 * half)
                    .fold((Vec::new(), Vec::new()), |(mut g, mut u), row| {
                        g.extend_from_slice(&row[..half]);
                        u.extend_from_slice(&row[half..]);
                        (g, u)
                    });
            let (gl, ul) = (
                layout(shape, Arrange::Transposed),
                layout(shape, Arrange::Offset),
            );
            let (gs, us) = (upload(&dev, &g, &gl, dtype), upload(&dev, &u, &ul, dtype));
            t.check_run(
                "silu_mul",
                dtype,
                format!("{shape:?} transposed gate"),
                &want,
                tol,
                || fused::silu_mul(&gs, &gl, &us, &ul),
            );
        }
    }
    let (a, b) = (Layout::contiguous((2, 3)), Layout::contiguous((3, 2)));
    let xs = upload(&dev, &[1.0; 6], &a, DType::F32);
    let err = fused::silu_mul(&xs, &a, &xs, &b).unwrap_err().to_string();
    assert!(err.contains("differ in shape"), "{err}");
    t.finish("conformance silu_mul");
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
    // Rows the shared memory cannot stage, a transposed weight, and an input
    // of more than one row are left to the unfused ops: the plan says so and
    // the op refuses them.
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
    // k elements as two rows (the output would claim two rows of n).
    let w = Layout::contiguous((16, 64));
    assert!(
        fused::fused_linear_plan(DType::F32, &Layout::contiguous((1, 64)), &w, false).is_some()
    );
    assert_eq!(
        fused::fused_linear_plan(DType::F32, &Layout::contiguous((2, 32)), &w, false),
        None
    );
    assert_eq!(
        fused::fused_linear_plan(DType::F32, &Layout::contiguous((2, 64)), &w, true),
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
