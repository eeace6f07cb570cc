//! The fused transformer ops of `candle_hip::fused`: softmax, rms_norm,
//! layer_norm, the three rope variants, sigmoid and arg_sort.

use candle_core::{DType, Layout};
use candle_hip::fused;

use crate::cases::{Case, Measure, bytes, dims, op};
use crate::inputs;

/// Rows and vocabulary of the softmax cases.
const ROWS: usize = 8192;
const VOCAB: usize = 32000;
/// Tokens and hidden size of the normalisation cases.
const TOKENS: usize = 16384;
const HIDDEN: usize = 4096;
/// Batch, heads, tokens and head size of the rope cases.
const ROPE: [usize; 4] = [8, 32, 2048, 128];
/// Elements of the sigmoid case (64 Mi).
const N: usize = 1 << 26;
/// Normalisation epsilon.
const EPS: f32 = 1e-5;

/// Every fused-op case.
pub fn cases() -> Vec<Case> {
    vec![
        softmax(DType::F32),
        softmax(DType::BF16),
        norm("rms_norm", DType::BF16),
        norm("rms_norm", DType::F32),
        norm("layer_norm", DType::BF16),
        norm("layer_norm", DType::F32),
        rope(Rope::Interleaved, DType::BF16),
        rope(Rope::Halves, DType::BF16),
        rope(Rope::Thd, DType::BF16),
        rope(Rope::Halves, DType::F32),
        sigmoid(),
        arg_sort(),
    ]
}

fn softmax(dtype: DType) -> Case {
    let n = ROWS * VOCAB;
    let work = Measure::Bytes(2 * bytes(n, dtype));
    Case::new(
        "fused",
        "softmax_last_dim",
        dims(&[ROWS, VOCAB]),
        dtype.as_str(),
        work,
        move |dev| {
            let x = inputs::signed(dev, &[ROWS, VOCAB], dtype)?;
            let l = Layout::contiguous((ROWS, VOCAB));
            op(move || {
                fused::softmax_last_dim(&x, &l)?;
                Ok(())
            })
        },
    )
}

/// rms_norm (`alpha`) or layer_norm (`alpha`, `beta`) over the hidden size.
fn norm(name: &'static str, dtype: DType) -> Case {
    let n = TOKENS * HIDDEN;
    let layer = name == "layer_norm";
    let params = if layer { 2 } else { 1 };
    let work = Measure::Bytes(2 * bytes(n, dtype) + params * bytes(HIDDEN, dtype));
    Case::new(
        "fused",
        name,
        dims(&[TOKENS, HIDDEN]),
        dtype.as_str(),
        work,
        move |dev| {
            let x = inputs::signed(dev, &[TOKENS, HIDDEN], dtype)?;
            let alpha = inputs::positive(dev, &[HIDDEN], dtype)?;
            let beta = inputs::signed(dev, &[HIDDEN], dtype)?;
            let (xl, pl) = (
                Layout::contiguous((TOKENS, HIDDEN)),
                Layout::contiguous(HIDDEN),
            );
            op(move || {
                if layer {
                    fused::layer_norm(&x, &xl, &alpha, &pl, &beta, &pl, EPS)?;
                } else {
                    fused::rms_norm(&x, &xl, &alpha, &pl, EPS)?;
                }
                Ok(())
            })
        },
    )
}

/// candle-nn's rope variants.
#[derive(Clone, Copy)]
enum Rope {
    /// `rope_i`: interleaved pairs, `x: (b, h, t, d)`.
    Interleaved,
    /// `rope`: halves of the last dimension, `x: (b, h, t, d)`.
    Halves,
    /// `rope_thd`: halves, `x: (b, t, h, d)`.
    Thd,
}

fn rope(variant: Rope, dtype: DType) -> Case {
    let [b, h, t, d] = ROPE;
    let (name, x_dims) = match variant {
        Rope::Interleaved => ("rope_i", [b, h, t, d]),
        Rope::Halves => ("rope", [b, h, t, d]),
        Rope::Thd => ("rope_thd", [b, t, h, d]),
    };
    let n = b * h * t * d;
    let work = Measure::Bytes(2 * bytes(n, dtype) + 2 * bytes(t * d / 2, dtype));
    Case::new(
        "fused",
        name,
        dims(&x_dims),
        dtype.as_str(),
        work,
        move |dev| {
            let x = inputs::signed(dev, &x_dims, dtype)?;
            let cos = inputs::signed(dev, &[t, d / 2], dtype)?;
            let sin = inputs::signed(dev, &[t, d / 2], dtype)?;
            let xl = Layout::contiguous(&x_dims[..]);
            let cl = Layout::contiguous((t, d / 2));
            let f = match variant {
                Rope::Interleaved => fused::rope_i,
                Rope::Halves => fused::rope,
                Rope::Thd => fused::rope_thd,
            };
            op(move || {
                f(&x, &xl, &cos, &cl, &sin, &cl)?;
                Ok(())
            })
        },
    )
}

fn sigmoid() -> Case {
    let dtype = DType::F32;
    let work = Measure::Bytes(2 * bytes(N, dtype));
    Case::new(
        "fused",
        "sigmoid",
        dims(&[N]),
        dtype.as_str(),
        work,
        move |dev| {
            let x = inputs::signed(dev, &[N], dtype)?;
            let l = Layout::contiguous(N);
            op(move || {
                fused::sigmoid(&x, &l)?;
                Ok(())
            })
        },
    )
}

/// Ascending arg_sort of rows of 1024 (sorted in shared memory).
fn arg_sort() -> Case {
    let (rows, cols) = (16384, 1024);
    let dtype = DType::F32;
    let work = Measure::Bytes(bytes(rows * cols, dtype) + bytes(rows * cols, DType::U32));
    Case::new(
        "fused",
        "arg_sort_last",
        dims(&[rows, cols]),
        dtype.as_str(),
        work,
        move |dev| {
            let x = inputs::signed(dev, &[rows, cols], dtype)?;
            let l = Layout::contiguous((rows, cols));
            op(move || {
                fused::arg_sort_last_dim(&x, &l, true)?;
                Ok(())
            })
        },
    )
}
