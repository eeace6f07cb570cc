//! Fused attention (`fused::flash_attn`) against a host reference computed
//! in f64 from the same (rounded) inputs: head dims 32 to 256, grouped- and
//! multi-query heads, causal and not, `s_q != s_k` (including rows that see
//! no key), windows, soft-capping, ALiBi, lengths that are not multiples of
//! the tiles, transposed operands, both kernels (prefill and decode) on the
//! same cases.
//!
//! Tolerance, from the kernels' arithmetic: scores and sums run in f32; the
//! prefill kernel rounds the probabilities `p ≤ 1` to the input type before
//! multiplying them with V (as flash-attention does), which moves the
//! output by at most `u · max|v|` (`u` the type's unit roundoff: the
//! normaliser is the unrounded sum); the output is rounded once. So
//! `|got - want| <= 2u·|want| + 2u·max|v| + 1e-5`.

use candle_core::{DType, Layout};
use candle_hip::fused::{self, AttentionKernel, FlashAttnExtras, FlashAttnParams};

use crate::common::{Rng, Tally, Tol, hip_values, rounded, start, unit, upload};

/// One attention problem.
#[derive(Clone, Copy, Debug)]
struct Case {
    b: usize,
    s_q: usize,
    s_k: usize,
    h_q: usize,
    h_k: usize,
    d: usize,
    left: Option<usize>,
    right: Option<usize>,
    softcap: Option<f32>,
    alibi: bool,
    /// Operands stored (b, h, s, d) and transposed, as candle-transformers
    /// passes them.
    transposed: bool,
    /// Key lengths on the device ([`key_lens`]): k and v are caches of s_k
    /// positions filled to those lengths.
    key_lens: bool,
    /// The score scale: 1/√d times this (negative: the softmax favours the
    /// smallest products; the kernels must not assume a positive scale).
    scale_factor: f32,
}

impl Case {
    fn new(
        b: usize,
        s_q: usize,
        s_k: usize,
        h_q: usize,
        h_k: usize,
        d: usize,
        causal: bool,
    ) -> Case {
        Case {
            b,
            s_q,
            s_k,
            h_q,
            h_k,
            d,
            left: None,
            right: causal.then_some(0),
            softcap: None,
            alibi: false,
            transposed: false,
            key_lens: false,
            scale_factor: 1.0,
        }
    }
}

/// Host inputs of a case, rounded to the dtype (row-major b, s, h, d).
struct Inputs {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    slopes: Vec<f64>,
}

fn inputs(rng: &mut Rng, c: &Case, dtype: DType) -> Inputs {
    let nq = c.b * c.s_q * c.h_q * c.d;
    let nk = c.b * c.s_k * c.h_k * c.d;
    Inputs {
        q: rounded(&rng.values(nq, -2.0, 2.0), dtype),
        k: rounded(&rng.values(nk, -2.0, 2.0), dtype),
        v: rounded(&rng.values(nk, -1.0, 1.0), dtype),
        slopes: (0..c.h_q).map(|h| 0.5f64.powi(h as i32 % 8 + 1)).collect(),
    }
}

/// The filled lengths of a key-length case's caches, one per batch element:
/// two thirds of the cache, more than all of it (counts as all), none.
fn key_lens(c: &Case) -> Vec<u32> {
    (0..c.b)
        .map(|bi| [c.s_k * 2 / 3, c.s_k + 5, 0][bi % 3] as u32)
        .collect()
}

/// The keys batch element `bi` attends over.
fn keys_of(c: &Case, bi: usize) -> usize {
    if c.key_lens {
        (key_lens(c)[bi] as usize).min(c.s_k)
    } else {
        c.s_k
    }
}

/// The reference output rows `rows` (indices into (b, s_q, h_q)), each d
/// values, in f64 with flash-attention 2's masks.
fn reference(c: &Case, x: &Inputs, scale: f32, rows: &[usize]) -> Vec<f64> {
    let d = c.d;
    let mut out = Vec::with_capacity(rows.len() * d);
    for &row in rows {
        let (bi, rest) = (row / (c.s_q * c.h_q), row % (c.s_q * c.h_q));
        let s_k = keys_of(c, bi);
        let off = s_k as i64 - c.s_q as i64;
        let (i, h) = (rest / c.h_q, rest % c.h_q);
        let kvh = h / (c.h_q / c.h_k);
        let q = &x.q[row * d..(row + 1) * d];
        let pos = i as i64 + off;
        let lo = c.left.map_or(i64::MIN, |w| pos - w as i64);
        let hi = c.right.map_or(i64::MAX, |w| pos + w as i64);
        let mut scores = Vec::new();
        for j in 0..s_k {
            let jj = j as i64;
            if jj < lo || jj > hi {
                continue;
            }
            let kr = ((bi * c.s_k + j) * c.h_k + kvh) * d;
            let dot: f64 = (0..d).map(|e| q[e] * x.k[kr + e]).sum();
            let mut s = dot * scale as f64;
            if let Some(cap) = c.softcap.filter(|&cap| cap > 0.0) {
                s = cap as f64 * (s / cap as f64).tanh();
            }
            if c.alibi {
                s -= x.slopes[h] * (pos - jj).abs() as f64;
            }
            scores.push((j, s));
        }
        let m = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = scores.iter().map(|s| (s.1 - m).exp()).sum();
        for e in 0..d {
            let acc: f64 = scores
                .iter()
                .map(|&(j, s)| (s - m).exp() * x.v[((bi * c.s_k + j) * c.h_k + kvh) * d + e])
                .sum();
            out.push(if scores.is_empty() { 0.0 } else { acc / total });
        }
    }
    out
}

/// The layout of a (b, s, h, d) operand, optionally stored (b, h, s, d).
fn operand_layout(c: &Case, s: usize, h: usize) -> Layout {
    if c.transposed {
        Layout::contiguous((c.b, h, s, c.d))
            .transpose(1, 2)
            .unwrap()
    } else {
        Layout::contiguous((c.b, s, h, c.d))
    }
}

/// Runs `c` on the device with `kernel` and records it; the reference
/// covers every row, or `sample` random rows of long cases.
fn run_case(
    t: &mut Tally,
    rng: &mut Rng,
    dev: &candle_hip::HipDevice,
    c: Case,
    dtype: DType,
    kernel: AttentionKernel,
    sample: Option<usize>,
) {
    let x = inputs(rng, &c, dtype);
    let scale = c.scale_factor / (c.d as f32).sqrt();
    let (ql, kl) = (
        operand_layout(&c, c.s_q, c.h_q),
        operand_layout(&c, c.s_k, c.h_k),
    );
    let q = upload(dev, &x.q, &ql, dtype);
    let k = upload(dev, &x.k, &kl, dtype);
    let v = upload(dev, &x.v, &kl, dtype);
    let slopes_l = Layout::contiguous(c.h_q);
    let slopes = upload(dev, &x.slopes, &slopes_l, DType::F32);
    let params = FlashAttnParams {
        softmax_scale: scale,
        window_left: c.left,
        window_right: c.right,
        softcap: c.softcap,
        kernel,
    };
    let all = c.b * c.s_q * c.h_q;
    let rows: Vec<usize> = match sample {
        Some(n) if n < all => (0..n).map(|_| rng.below(all)).collect(),
        _ => (0..all).collect(),
    };
    let want = reference(&c, &x, scale, &rows);
    let u = unit(dtype);
    let tol = Tol {
        rel: 2.0 * u,
        abs: 2.0 * u + 1e-5,
    };
    let lens_l = Layout::contiguous(c.b);
    let lens_f64: Vec<f64> = key_lens(&c).into_iter().map(f64::from).collect();
    let lens = upload(dev, &lens_f64, &lens_l, DType::U32);
    let extras = FlashAttnExtras {
        alibi_slopes: c.alibi.then_some((&slopes, &slopes_l)),
        key_lens: c.key_lens.then_some((&lens, &lens_l)),
    };
    let op = format!("flash_attn {kernel:?} d{}", c.d);
    match fused::flash_attn(&q, &ql, &k, &kl, &v, &kl, extras, &params) {
        Ok(out) => {
            let got_all = hip_values(&out);
            let got: Vec<f64> = rows
                .iter()
                .flat_map(|&r| got_all[r * c.d..(r + 1) * c.d].iter().copied())
                .collect();
            t.check_values(&op, dtype, format!("{c:?}"), &got, &want, tol);
        }
        Err(e) => t.error(&op, dtype, format!("{c:?}"), e),
    }
}

const KERNELS: [AttentionKernel; 3] = [
    AttentionKernel::Auto,
    AttentionKernel::Prefill,
    AttentionKernel::Decode,
];

#[test]
#[ignore = "needs a HIP device"]
fn flash_attn_matches_a_host_reference() {
    let (dev, mut t, mut rng) = start(0x5eed_a77e);
    let mut cases = vec![
        // Decode shapes: one query over a cache, grouped heads.
        Case::new(2, 1, 37, 8, 2, 128, true),
        Case::new(1, 1, 300, 4, 1, 64, false),
        Case::new(1, 4, 129, 8, 8, 80, true),
        Case::new(1, 1, 200, 4, 2, 256, true),
        // Prefill: squares, s_q < s_k (a cache), tiles cut short.
        Case::new(1, 17, 17, 2, 1, 128, true),
        Case::new(2, 70, 70, 4, 2, 64, true),
        Case::new(1, 33, 100, 2, 2, 96, true),
        Case::new(1, 65, 65, 2, 1, 256, false),
        Case::new(1, 40, 19, 2, 2, 128, true),
        Case::new(1, 9, 1, 1, 1, 64, false),
        Case::new(1, 21, 23, 8, 2, 32, true),
    ];
    let mut special = Case::new(1, 50, 80, 4, 2, 128, true);
    special.left = Some(20);
    cases.push(special);
    special.left = Some(5);
    special.right = Some(3);
    special.softcap = Some(5.0);
    cases.push(special);
    let mut alibi = Case::new(1, 20, 40, 4, 4, 64, true);
    alibi.alibi = true;
    cases.push(alibi);
    alibi.right = None;
    alibi.s_q = 3;
    cases.push(alibi);
    let mut transposed = Case::new(2, 24, 24, 4, 2, 128, true);
    transposed.transposed = true;
    cases.push(transposed);
    // A negative scale over several key tiles of every kernel, large enough
    // that one tile's scores span more than f16's range of exponentials.
    let mut negative = Case::new(1, 150, 150, 2, 1, 64, false);
    negative.scale_factor = -6.0;
    cases.push(negative);
    negative.right = Some(0);
    cases.push(negative);
    for c in cases {
        for dtype in [DType::F16, DType::BF16] {
            for kernel in KERNELS {
                run_case(&mut t, &mut rng, &dev, c, dtype, kernel, None);
            }
        }
    }
    // Caches filled to lengths on the device (the decode kernel only): a
    // static cache's step, causal and not, grouped heads, transposed caches
    // as a (b, h, s, d) cache reads.
    let mut cached = vec![
        Case::new(3, 1, 300, 32, 8, 64, false),
        Case::new(3, 1, 77, 8, 2, 128, true),
        Case::new(2, 4, 129, 4, 4, 80, true),
    ];
    let mut transposed = Case::new(3, 1, 513, 8, 8, 64, false);
    transposed.transposed = true;
    cached.push(transposed);
    for mut c in cached {
        c.key_lens = true;
        for dtype in [DType::F16, DType::BF16] {
            for kernel in [AttentionKernel::Auto, AttentionKernel::Decode] {
                run_case(&mut t, &mut rng, &dev, c, dtype, kernel, None);
            }
        }
    }
    t.finish("conformance attention");
}

#[test]
#[ignore = "needs a HIP device"]
fn flash_attn_random_and_long_shapes() {
    let (dev, mut t, mut rng) = start(0x5eed_a77f);
    for _ in 0..24 {
        let d = rng.pick(&fused::HEAD_DIMS);
        let h_k = rng.pick(&[1, 2, 4]);
        let h_q = h_k * rng.pick(&[1, 2, 4, 8]);
        let s_k = 1 + rng.below(700);
        let s_q = if rng.chance(0.3) {
            1 + rng.below(8)
        } else {
            1 + rng.below(s_k + 40)
        };
        let mut c = Case::new(1 + rng.below(2), s_q, s_k, h_q, h_k, d, rng.chance(0.5));
        c.transposed = rng.chance(0.3);
        let dtype = rng.pick(&[DType::F16, DType::BF16]);
        run_case(
            &mut t,
            &mut rng,
            &dev,
            c,
            dtype,
            AttentionKernel::Auto,
            Some(64),
        );
    }
    // Long sequences, sampled rows: 16k-token prefill, a 32k-key decode.
    for (s_q, s_k) in [(4096, 4096), (16384, 16384), (1, 32768), (4, 16384)] {
        let c = Case::new(1, s_q, s_k, 4, 1, 128, true);
        run_case(
            &mut t,
            &mut rng,
            &dev,
            c,
            DType::BF16,
            AttentionKernel::Auto,
            Some(16),
        );
    }
    t.finish("conformance attention (random, long)");
}

#[test]
#[ignore = "needs a HIP device"]
fn flash_attn_refuses_bad_operands() {
    let dev = crate::common::device();
    let l = |dims: &[usize]| Layout::contiguous(dims);
    let up = |dims: &[usize], dtype| {
        let n: usize = dims.iter().product();
        upload(&dev, &vec![0.5; n], &l(dims), dtype)
    };
    let p = FlashAttnParams::new(0.125, true);
    let err = |q: &[usize], k: &[usize], dtype| {
        let (qs, ks) = (up(q, dtype), up(k, dtype));
        fused::flash_attn(&qs, &l(q), &ks, &l(k), &ks, &l(k), Default::default(), &p)
            .unwrap_err()
            .to_string()
    };
    let e = err(&[1, 4, 2, 64], &[1, 4, 2, 64], DType::F32);
    assert!(e.contains("f16 and bf16 only"), "{e}");
    let e = err(&[1, 4, 2, 72], &[1, 4, 2, 72], DType::F16);
    assert!(e.contains("head_dim 72 has no kernel"), "{e}");
    let e = err(&[1, 4, 3, 64], &[1, 4, 2, 64], DType::F16);
    assert!(e.contains("must divide 3 query heads"), "{e}");
    let e = err(&[1, 4, 2, 64], &[2, 4, 2, 64], DType::F16);
    assert!(e.contains("disagree"), "{e}");
    let e = err(&[4, 2, 64], &[4, 2, 64], DType::F16);
    assert!(e.contains("rank 4"), "{e}");
    // Key lengths: u32, one per sequence, and the decode kernel only.
    let (qs, ks) = (
        up(&[2, 1, 2, 64], DType::F16),
        up(&[2, 9, 2, 64], DType::F16),
    );
    let with_lens = |lens: &[usize], dtype, kernel| {
        let lens_s = up(lens, dtype);
        let extras = FlashAttnExtras {
            key_lens: Some((&lens_s, &l(lens))),
            ..Default::default()
        };
        let p = FlashAttnParams { kernel, ..p };
        let (kl, ql) = (l(&[2, 9, 2, 64]), l(&[2, 1, 2, 64]));
        fused::flash_attn(&qs, &ql, &ks, &kl, &ks, &kl, extras, &p)
            .unwrap_err()
            .to_string()
    };
    let e = with_lens(&[2], DType::F32, AttentionKernel::Auto);
    assert!(
        e.contains("key lengths (one per sequence) must be a contiguous U32 vector of 2"),
        "{e}"
    );
    let e = with_lens(&[3], DType::U32, AttentionKernel::Auto);
    assert!(e.contains("vector of 2, got U32 [3]"), "{e}");
    let e = with_lens(&[2], DType::U32, AttentionKernel::Prefill);
    assert!(e.contains("key lengths need the decode kernel"), "{e}");
    // An empty batch is an empty result, not an error.
    let (qs, ks) = (
        up(&[0, 4, 2, 64], DType::F16),
        up(&[0, 4, 2, 64], DType::F16),
    );
    let out = fused::flash_attn(
        &qs,
        &l(&[0, 4, 2, 64]),
        &ks,
        &l(&[0, 4, 2, 64]),
        &ks,
        &l(&[0, 4, 2, 64]),
        Default::default(),
        &p,
    );
    assert_eq!(out.unwrap().len(), 0);
}
