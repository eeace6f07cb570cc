//! Matrix multiplication (rocBLAS), convolution (MIOpen, and im2col +
//! GEMM), pooling and upsampling cases.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use candle_hip::conv::{self, ConvParams, ConvPath};

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
    ]
    .into_iter()
    .chain(decode_linears())
    .chain([
        conv2d("conv2d", DType::BF16, ConvPath::Auto),
        conv2d("conv2d", DType::F32, ConvPath::Auto),
        conv2d("conv2d_im2col", DType::BF16, ConvPath::Gemm),
        conv_transpose2d(DType::BF16),
        pool("max_pool2d", DType::BF16),
        pool("avg_pool2d", DType::F32),
        upsample_nearest2d(),
    ])
    .collect()
}

/// The linear layers of LLM decoding, bf16: `x (m, k) @ W^T` with `W`
/// stored `(n, k)` as candle-nn's `Linear` passes it, for m = 1, 4 and 16
/// tokens and the projections of an 8B Llama (attention and MLP, 4096 x
/// 4096, 4096 x 14336, 14336 x 4096) and its 128,256-entry vocabulary.
/// Reading the weights dominates, so the work is counted in bytes (weights,
/// input and output once each; shape `m x n x k`).
fn decode_linears() -> Vec<Case> {
    let mut cases = Vec::new();
    for (k, n) in [(4096, 4096), (4096, 14336), (14336, 4096), (4096, 128_256)] {
        for m in [1, 4, 16] {
            let dtype = DType::BF16;
            let work = Measure::Bytes(bytes(n * k + m * k + m * n, dtype));
            let shape = dims(&[m, n, k]);
            cases.push(Case::new(
                "matmul",
                "linear",
                shape,
                "bf16",
                work,
                move |dev| {
                    let lhs = inputs::signed(dev, &[1, m, k], dtype)?;
                    let rhs = inputs::signed(dev, &[1, n, k], dtype)?;
                    let ll = Layout::contiguous((1, m, k));
                    let rl = Layout::contiguous((1, n, k)).transpose(1, 2)?;
                    op(move || {
                        lhs.matmul(&rhs, (1, m, n, k), &ll, &rl)?;
                        Ok(())
                    })
                },
            ));
        }
    }
    cases
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

/// A ResNet stage-2 convolution: 3 x 3, padding 1, 256 to 256 channels on
/// 32 x 256 x 56 x 56 (`path` picks MIOpen or im2col + GEMM).
fn conv2d(name: &'static str, dtype: DType, path: ConvPath) -> Case {
    let (x, k, co) = (IMAGE, 3, 256);
    let [n, ci, h, w] = x;
    let work = Measure::Flops(2 * (n * co * h * w * ci * k * k) as u64);
    let shape = format!("{} k{k} p1 o{co}", dims(&x));
    Case::new("conv", name, shape, dtype.as_str(), work, move |dev| {
        let xs = inputs::signed(dev, &x, dtype)?;
        let ws = inputs::signed(dev, &[co, ci, k, k], dtype)?;
        let (xl, wl) = (
            Layout::contiguous(&x[..]),
            Layout::contiguous((co, ci, k, k)),
        );
        let params = ConvParams::uniform(1, 1, 1);
        op(move || {
            conv::conv2d(&xs, &xl, &ws, &wl, &params, path)?;
            Ok(())
        })
    })
}

/// A UNet-style upsampling: 4 x 4 transposed convolution, stride 2,
/// padding 1, 256 to 128 channels, 28 x 28 to 56 x 56, batch 16.
fn conv_transpose2d(dtype: DType) -> Case {
    let (x, k, co) = ([16, 256, 28, 28], 4, 128);
    let [n, ci, h, w] = x;
    let work = Measure::Flops(2 * (n * ci * h * w * co * k * k) as u64);
    let shape = format!("{} k{k} s2 p1 o{co}", dims(&x));
    Case::new(
        "conv",
        "conv_transpose2d",
        shape,
        dtype.as_str(),
        work,
        move |dev| {
            let xs = inputs::signed(dev, &x, dtype)?;
            let ws = inputs::signed(dev, &[ci, co, k, k], dtype)?;
            let (xl, wl) = (
                Layout::contiguous(&x[..]),
                Layout::contiguous((ci, co, k, k)),
            );
            let params = ConvParams::uniform(1, 2, 1);
            op(move || {
                conv::conv_transpose2d(&xs, &xl, &ws, &wl, &params, ConvPath::Auto)?;
                Ok(())
            })
        },
    )
}

/// Input of the convolution, pooling and upsampling cases (ResNet stage-2 sized).
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
