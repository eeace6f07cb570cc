//! Matrix multiplication (rocBLAS, and gemv.hip for decode-shaped products)
//! against candle's CPU matmul in f64: edge sizes, decode-step GEMVs (long
//! rows split over several waves too), attention (32 heads x 128) and a 4096-wide
//! projection; left operands contiguous, offset, transposed or narrowed;
//! right operands contiguous, transposed, broadcast over the batch, or one
//! transposed weight for every batch (candle-nn's `Linear`).
//! Operands are multiples of 1/8, so the reference is exact and the
//! tolerance (`gemm_tol`) bounds the GPU result's own error.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};

use crate::common::{Arrange, FLOATS, cpu_tensor, gemm_tol, layout, start, to_f64, upload};

#[test]
#[ignore = "needs a HIP device"]
fn matmul_matches_cpu() {
    let (dev, mut t, mut rng) = start(0x5eed_0001);
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
        // Decoding one token (gemv.hip: one row, k whole 16-byte packs) and
        // the edges that go to rocBLAS: one output, several rows or batches,
        // k not whole packs.
        (&[], 1, 300, 64),
        (&[1], 1, 40, 1024),
        (&[], 1, 1, 512),
        (&[4], 1, 33, 264),
        (&[], 2, 17, 1024),
        (&[], 1, 24, 60),
        // Rows long enough for gemv.hip to split each output over several
        // waves on the emulated devices (48 to 304 compute units): up to
        // 16 waves per output (f64, wave 64), groups past n in the last
        // block (n = 33), lanes with a partial last step (k = 1032, 8200).
        (&[], 1, 256, 14336),
        (&[], 1, 64, 8192),
        (&[], 1, 33, 1032),
        (&[1], 1, 24, 8200),
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
                // One (n, k) weight for every batch, as candle-nn's Linear
                // passes it.
                let wl = Layout::contiguous((n, k))
                    .transpose(0, 1)
                    .unwrap()
                    .broadcast_as(rhs_shape.as_slice())
                    .unwrap();
                v.push((
                    "linear weight",
                    wl,
                    shared.as_slice(),
                    want_shared.as_slice(),
                ));
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
