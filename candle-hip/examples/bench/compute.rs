//! Matrix multiplication (rocBLAS), convolution (MIOpen), pooling and
//! upsampling cases.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};

use crate::cases::{Case, Measure, bytes, dims, op};
use crate::inputs;

/// Every compute case.
pub fn cases() -> Vec<Case> {
    vec![
        matmul(DType::BF16),
        matmul(DType::F32),
        matmul(DType::F16),
        attention_scores(DType::BF16),
        attention_scores(DType::F32),
        attention_values(DType::BF16),
        pool("max_pool2d", DType::BF16),
        pool("avg_pool2d", DType::F32),
        upsample_nearest2d(),
    ]
}

/// Batched matmul `(b, m, k) @ rhs -> (b, m, n)`; `rhs_l` is the layout of
/// the right operand as candle passes it (shape `(b, k, n)`), read from a
/// storage of `rhs_dims`.
fn batched(
    name: &'static str,
    dtype: DType,
    (b, m, n, k): (usize, usize, usize, usize),
    rhs_dims: [usize; 3],
    rhs_l: fn([usize; 3]) -> candle_core::Result<Layout>,
) -> Case {
    let work = Measure::Flops(2 * (b * m * n * k) as u64);
    let shape = if b == 1 {
        dims(&[m, n, k])
    } else {
        dims(&[b, m, n, k])
    };
    Case::new("matmul", name, shape, dtype.as_str(), work, move |dev| {
        let lhs = inputs::signed(dev, &[b, m, k], dtype)?;
        let rhs = inputs::signed(dev, &rhs_dims, dtype)?;
        let ll = Layout::contiguous((b, m, k));
        let rl = rhs_l(rhs_dims)?;
        op(move || {
            lhs.matmul(&rhs, (b, m, n, k), &ll, &rl)?;
            Ok(())
        })
    })
}

/// Square 4096 GEMM, both operands contiguous (shape `m x n x k`).
fn matmul(dtype: DType) -> Case {
    let s = 4096;
    batched("matmul", dtype, (1, s, s, s), [1, s, s], |d| {
        Ok(Layout::contiguous(&d[..]))
    })
}

/// Attention scores `q @ k^T`: 32 heads, 2048 tokens, head size 128, with
/// `k` stored (heads, tokens, 128) and read transposed (shape `b x m x n x k`).
fn attention_scores(dtype: DType) -> Case {
    let (h, t, d) = (32, 2048, 128);
    batched("bmm_qk", dtype, (h, t, t, d), [h, t, d], |d| {
        Layout::contiguous(&d[..]).transpose(1, 2)
    })
}

/// Attention output `p @ v`: (32, 2048, 2048) @ (32, 2048, 128).
fn attention_values(dtype: DType) -> Case {
    let (h, t, d) = (32, 2048, 128);
    batched("bmm_pv", dtype, (h, t, d, t), [h, t, d], |d| {
        Ok(Layout::contiguous(&d[..]))
    })
}

/// Input of the pooling and upsampling cases (ResNet stage-2 sized).
const IMAGE: [usize; 4] = [32, 256, 56, 56];

/// 2 x 2 pooling with stride 2.
fn pool(name: &'static str, dtype: DType) -> Case {
    let n: usize = IMAGE.iter().product();
    let work = Measure::Bytes(bytes(n, dtype) + bytes(n / 4, dtype));
    let shape = format!("{} k2 s2", dims(&IMAGE));
    let max = name == "max_pool2d";
    Case::new("pool", name, shape, dtype.as_str(), work, move |dev| {
        let x = inputs::signed(dev, &IMAGE, dtype)?;
        let l = Layout::contiguous(&IMAGE[..]);
        op(move || {
            if max {
                x.max_pool2d(&l, (2, 2), (2, 2))?;
            } else {
                x.avg_pool2d(&l, (2, 2), (2, 2))?;
            }
            Ok(())
        })
    })
}

/// Nearest-neighbour upsampling by 2 in both directions.
fn upsample_nearest2d() -> Case {
    let dtype = DType::F32;
    let input = [16, 256, 56, 56];
    let n: usize = input.iter().product();
    let work = Measure::Bytes(bytes(n, dtype) + bytes(4 * n, dtype));
    let shape = format!("{} x2", dims(&input));
    Case::new(
        "upsample",
        "upsample_nearest2d",
        shape,
        dtype.as_str(),
        work,
        move |dev| {
            let x = inputs::signed(dev, &input, dtype)?;
            let l = Layout::contiguous(&input[..]);
            op(move || {
                x.upsample_nearest2d(&l, 2 * input[2], 2 * input[3])?;
                Ok(())
            })
        },
    )
}
