//! The MIOpen path: hip-safe's `Dnn` on contiguous operands.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout, WithDType};
use hip_safe::{ConvConfig, ConvTransposeConfig, DnnType};

use super::Problem;
use crate::device::HipDevice;
use crate::error::Result;
use crate::handles;
use crate::ops::copy::Dense;
use crate::size;
use crate::storage::HipStorage;
use crate::typed::{Typed, TypedMut};

/// Whether `Auto` takes MIOpen: a dtype MIOpen convolves here and a
/// library that loads.
pub(crate) fn applies(dtype: DType, device: &HipDevice) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32) && handles::dnn(device).is_ok()
}

/// What the convolution call itself returned: MIOpen's own failures (no
/// solver for a configuration, ...) are kept apart from errors of the
/// preparation, because another path may still answer them.
pub(crate) type Answer = std::result::Result<(), hip_safe::Error>;

/// Runs `prob` with MIOpen into the contiguous `y`.
pub(crate) fn run(
    op: &'static str,
    prob: &Problem,
    x: &HipStorage,
    x_l: &Layout,
    w: &HipStorage,
    w_l: &Layout,
    y: &mut HipStorage,
) -> Result<Answer> {
    let x = Dense::of("conv", x, x_l)?;
    let w = Dense::of("conv", w, w_l)?;
    match y.dtype() {
        DType::F32 => convolve::<f32>(op, prob, &x, &w, y),
        DType::F16 => convolve::<half::f16>(op, prob, &x, &w, y),
        DType::BF16 => convolve::<half::bf16>(op, prob, &x, &w, y),
        dtype => {
            Err(candle_core::Error::UnsupportedDTypeForOp(dtype, "convolution with MIOpen").bt())
        }
    }
}

fn convolve<T: DnnType + WithDType>(
    op: &'static str,
    prob: &Problem,
    x: &Dense<'_>,
    w: &Dense<'_>,
    y: &mut HipStorage,
) -> Result<Answer> {
    let dnn = handles::dnn(y.device())?;
    let [n, c, h, wd] = prob.x.sizes();
    let [_, k_out, oh, ow] = prob.y;
    let x_len = prob.x.numel();
    let w_len = size::numel(op, &prob.w)?;
    let xv = Typed::<T>::new(op, x.storage(), x.start(), x_len)?;
    let wv = Typed::<T>::new(op, w.storage(), w.start(), w_len)?;
    let mut yv = TypedMut::<T>::new(op, y, 0, n * k_out * oh * ow)?;
    let kernel = [prob.w[2], prob.w[3]];
    if prob.transposed {
        let cfg = ConvTransposeConfig {
            batch: n,
            in_channels: c,
            out_channels: k_out,
            input: [h, wd],
            kernel,
            padding: prob.padding,
            output_padding: prob.output_padding,
            stride: prob.stride,
            dilation: prob.dilation,
            groups: prob.groups,
        };
        Ok(dnn.conv_transpose::<T>(&cfg, &xv, &wv, &mut yv))
    } else {
        let cfg = ConvConfig {
            batch: n,
            in_channels: c,
            out_channels: k_out,
            input: [h, wd],
            kernel,
            padding: prob.padding,
            stride: prob.stride,
            dilation: prob.dilation,
            groups: prob.groups,
        };
        Ok(dnn.conv_forward::<T>(cfg, &xv, &wv, &mut yv))
    }
}
