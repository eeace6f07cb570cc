//! The unfused computation (what the crate runs off HIP) against a direct
//! host loop: grouped heads, a cache (s_q < s_kv), causal, windowed,
//! soft-capped and ALiBi attention, and rows that see no key.

use candle::{Device, Tensor};

/// `n` values in [-1, 1) from a fixed sequence.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn direct(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (s_q, s_k, h_q, h_k, d): (usize, usize, usize, usize, usize),
    scale: f32,
    left: Option<usize>,
    right: Option<usize>,
    softcap: Option<f32>,
    slopes: Option<&[f32]>,
) -> Vec<f32> {
    let mut out = vec![0f32; s_q * h_q * d];
    let off = s_k as i64 - s_q as i64;
    for i in 0..s_q {
        for h in 0..h_q {
            let kvh = h / (h_q / h_k);
            let pos = i as i64 + off;
            let mut scores = Vec::new();
            for j in 0..s_k {
                let jj = j as i64;
                if left.is_some_and(|w| jj < pos - w as i64)
                    || right.is_some_and(|w| jj > pos + w as i64)
                {
                    continue;
                }
                let dot: f32 = (0..d)
                    .map(|e| q[(i * h_q + h) * d + e] * k[(j * h_k + kvh) * d + e])
                    .sum();
                let mut s = dot * scale;
                if let Some(c) = softcap {
                    s = c * (s / c).tanh();
                }
                if let Some(sl) = slopes {
                    s -= sl[h] * (pos - jj).abs() as f32;
                }
                scores.push((j, s));
            }
            let m = scores.iter().map(|s| s.1).fold(f32::NEG_INFINITY, f32::max);
            let total: f32 = scores.iter().map(|s| (s.1 - m).exp()).sum();
            for e in 0..d {
                let acc: f32 = scores
                    .iter()
                    .map(|&(j, s)| (s - m).exp() * v[(j * h_k + kvh) * d + e])
                    .sum();
                out[(i * h_q + h) * d + e] = if scores.is_empty() { 0.0 } else { acc / total };
            }
        }
    }
    out
}

#[test]
fn unfused_attention_matches_a_direct_loop() {
    let (s_q, s_k, h_q, h_k, d) = (5, 9, 4, 2, 8);
    let q = values(s_q * h_q * d, 1);
    let k = values(s_k * h_k * d, 2);
    let v = values(s_k * h_k * d, 3);
    let slopes = [0.5f32, 0.25, 0.125, 0.0625];
    let dev = Device::Cpu;
    let t = |x: &[f32], s, h| Tensor::from_slice(x, (1, s, h, d), &dev).unwrap();
    let (qt, kt, vt) = (t(&q, s_q, h_q), t(&k, s_k, h_k), t(&v, s_k, h_k));
    let st = Tensor::from_slice(&slopes, 4, &dev).unwrap();
    let scale = 0.3;
    // (window left, window right, softcap, alibi)
    type Variant = (Option<usize>, Option<usize>, Option<f32>, bool);
    let cases: [Variant; 5] = [
        (None, None, None, false),
        (None, Some(0), None, false),
        (Some(2), Some(1), None, false),
        (None, Some(0), Some(0.5), false),
        (Some(3), Some(0), None, true),
    ];
    for (left, right, softcap, alibi) in cases {
        let got = candle_flash_attn::flash_attn_alibi_windowed_softcap(
            &qt,
            &kt,
            &vt,
            alibi.then_some(&st),
            scale,
            left,
            right,
            softcap.unwrap_or(0.0),
        )
        .unwrap();
        let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let slopes = alibi.then_some(&slopes[..]);
        let want = direct(
            &q,
            &k,
            &v,
            (s_q, s_k, h_q, h_k, d),
            scale,
            left,
            right,
            softcap,
            slopes,
        );
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() < 1e-5,
                "{left:?} {right:?} {softcap:?} {alibi}: {g} vs {w}"
            );
        }
    }
    // A query before every key (s_q > s_kv, causal) sees nothing: zeros.
    let q2 = Tensor::from_slice(&values(7 * 4 * 8, 4), (1, 7, 4, 8), &dev).unwrap();
    let out = candle_flash_attn::flash_attn(
        &q2,
        &kt.narrow(1, 0, 3).unwrap(),
        &vt.narrow(1, 0, 3).unwrap(),
        0.3,
        true,
    )
    .unwrap();
    let first = out
        .narrow(1, 0, 4)
        .unwrap()
        .abs()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert_eq!(first, 0.0);
}
