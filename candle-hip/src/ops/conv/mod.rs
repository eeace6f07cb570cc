//! Convolutions: 1-D and 2-D, forward and transposed, through MIOpen
//! (hip-safe's `Dnn`) or through im2col + GEMM (rocBLAS), with explicit
//! parameters (padding, stride, dilation, output padding, groups).
//!
//! Which path runs ([`ConvPath`]): MIOpen for f16, bf16 and f32 when the
//! MIOpen library loads; im2col (`im2col.hip`) + rocBLAS otherwise, and
//! always for f64 (hip-safe's `Dnn` has no f64). A configuration MIOpen
//! fails on (it has no solver for some shapes and dtypes) runs through
//! im2col + GEMM instead, with a `tracing` warning, and so do its repeats
//! on that device. Both take any input
//! layout (non-contiguous inputs are copied for MIOpen, read in place by
//! im2col) and write a new contiguous output.
//!
//! Candle's `BackendStorage` conv methods get their parameters from
//! candle's `ParamsConv*` structs, whose fields are private to candle-core:
//! `conv/params.rs` reads them from the structs' `Debug` text (the one
//! place that does so), checked against the operands' shapes.

mod gemm;
mod miopen;
pub(crate) mod params;

use std::collections::HashSet;
use std::sync::Mutex;

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};

use crate::error::{Result, invalid};
use crate::kernel::nchw::Nchw;
use crate::size;
use crate::storage::HipStorage;

/// Which implementation runs a convolution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvPath {
    /// MIOpen where it applies (f16, bf16, f32 with the library present),
    /// im2col + GEMM otherwise.
    #[default]
    Auto,
    /// MIOpen only (an error for f64 or without the library).
    Miopen,
    /// im2col (or col2im) + rocBLAS GEMM.
    Gemm,
}

/// Parameters of an `N`-dimensional convolution (`N` = 1 or 2), per
/// spatial axis (height, width for 2-D).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvParams<const N: usize> {
    /// Zero padding on both sides.
    pub padding: [usize; N],
    /// Step between outputs.
    pub stride: [usize; N],
    /// Spacing between kernel taps.
    pub dilation: [usize; N],
    /// Transposed convolutions only: extra outputs at the end of each axis
    /// (smaller than the stride or the dilation).
    pub output_padding: [usize; N],
    /// Channel groups: input and output channels must divide by it.
    pub groups: usize,
}

impl<const N: usize> ConvParams<N> {
    /// The same padding, stride and dilation on every axis, no output
    /// padding, one group (candle's parameters).
    pub fn uniform(padding: usize, stride: usize, dilation: usize) -> Self {
        ConvParams {
            padding: [padding; N],
            stride: [stride; N],
            dilation: [dilation; N],
            output_padding: [0; N],
            groups: 1,
        }
    }
}

/// A convolution as the two paths see it: 2-D, 1-D ones with a unit height.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The input.
    pub(crate) x: Nchw,
    /// Weights: forward `(K, C / groups, kh, kw)`, transposed
    /// `(C, K / groups, kh, kw)`.
    pub(crate) w: [usize; 4],
    /// Output `(N, K, out_h, out_w)`.
    pub(crate) y: [usize; 4],
    pub(crate) padding: [usize; 2],
    pub(crate) stride: [usize; 2],
    pub(crate) dilation: [usize; 2],
    pub(crate) output_padding: [usize; 2],
    pub(crate) groups: usize,
    pub(crate) transposed: bool,
}

impl Problem {
    /// Checks shapes and parameters; 1-D problems (`N` = 1, 3-D layouts)
    /// become 2-D ones of height 1.
    fn new<const N: usize>(
        op: &'static str,
        x_l: &Layout,
        w_l: &Layout,
        p: &ConvParams<N>,
        transposed: bool,
    ) -> Result<Problem> {
        let rank = N + 2;
        if x_l.dims().len() != rank || w_l.dims().len() != rank {
            return Err(invalid(
                op,
                format!(
                    "expected {rank}-D input and weights, got {:?} and {:?}",
                    x_l.dims(),
                    w_l.dims()
                ),
            ));
        }
        let x = Nchw::of(op, x_l)?;
        let wd = w_l.dims();
        let w = if N == 1 {
            [wd[0], wd[1], 1, wd[2]]
        } else {
            [wd[0], wd[1], wd[2], wd[3]]
        };
        // Pad the per-axis parameters to (height, width).
        let two = |v: [usize; N], fill: usize| {
            if N == 1 {
                [fill, v[0]]
            } else {
                [v[0], v[N - 1]]
            }
        };
        let mut prob = Problem {
            x,
            w,
            y: [0; 4],
            padding: two(p.padding, 0),
            stride: two(p.stride, 1),
            dilation: two(p.dilation, 1),
            output_padding: two(p.output_padding, 0),
            groups: p.groups,
            transposed,
        };
        prob.y = prob.output_dims().map_err(|reason| invalid(op, reason))?;
        prob.check_sizes(op)?;
        Ok(prob)
    }

    /// Errors unless every size the two paths compute fits: the operands,
    /// the output and the column matrix of one image (the im2col and
    /// col2im products of the paths are bounded by these).
    fn check_sizes(&self, op: &'static str) -> Result<()> {
        let [n, c, h, w] = self.x.sizes();
        let [_, _, kh, kw] = self.w;
        size::numel(op, &self.w)?;
        size::numel(op, &self.y)?;
        size::numel(op, &[n, c, h, w])?;
        size::product(
            op,
            "the forward columns",
            &[c, kh, kw, self.y[2], self.y[3]],
        )?;
        size::product(op, "the transposed columns", &[self.y[1], kh, kw, h, w])?;
        Ok(())
    }

    /// `(N, K, out_h, out_w)`, or why the parameters do not fit.
    fn output_dims(&self) -> std::result::Result<[usize; 4], String> {
        let [n, c, h, w] = self.x.sizes();
        let g = self.groups;
        if g == 0 || self.stride.contains(&0) || self.dilation.contains(&0) {
            return Err(format!(
                "groups {g}, stride {:?} and dilation {:?} must be at least 1",
                self.stride, self.dilation
            ));
        }
        let overflow = || {
            format!(
                "weights {:?}, groups {g}, padding {:?}, stride {:?}, dilation {:?} and output padding {:?} overflow",
                self.w, self.padding, self.stride, self.dilation, self.output_padding
            )
        };
        let (in_ch, k) = if self.transposed {
            (self.w[0], self.w[1].checked_mul(g).ok_or_else(overflow)?)
        } else {
            (self.w[1].checked_mul(g).ok_or_else(overflow)?, self.w[0])
        };
        if in_ch != c || k % g != 0 || c % g != 0 {
            return Err(format!(
                "{} weights {:?} with {g} group(s) do not fit an input of {c} channels",
                if self.transposed {
                    "transposed"
                } else {
                    "forward"
                },
                self.w
            ));
        }
        let mut out = [0; 2];
        for (d, size) in [h, w].into_iter().enumerate() {
            let reach = self.dilation[d]
                .checked_mul(self.w[2 + d].max(1) - 1)
                .and_then(|r| r.checked_add(1))
                .ok_or_else(overflow)?;
            let padding = self.padding[d].checked_mul(2).ok_or_else(overflow)?;
            out[d] = if self.transposed {
                if self.output_padding[d] >= self.stride[d].max(self.dilation[d]) {
                    return Err(format!(
                        "output padding {:?} must be smaller than the stride {:?} or the dilation {:?}",
                        self.output_padding, self.stride, self.dilation
                    ));
                }
                let full = (size.max(1) - 1)
                    .checked_mul(self.stride[d])
                    .and_then(|s| s.checked_add(reach))
                    .and_then(|s| s.checked_add(self.output_padding[d]))
                    .ok_or_else(overflow)?;
                full.checked_sub(padding)
                    .filter(|&o| o > 0)
                    .ok_or_else(|| format!("padding {:?} leaves no output", self.padding))?
            } else {
                let padded = size.checked_add(padding).ok_or_else(overflow)?;
                if padded < reach {
                    return Err(format!(
                        "the kernel {:?} with dilation {:?} does not fit the padded input ({h}, {w}) + 2 * {:?}",
                        [self.w[2], self.w[3]],
                        self.dilation,
                        self.padding
                    ));
                }
                (padded - reach) / self.stride[d] + 1
            };
        }
        Ok([n, k, out[0], out[1]])
    }

    /// Elements of the output (checked by `check_sizes`).
    pub(crate) fn y_len(&self) -> usize {
        self.y.iter().product()
    }
}

/// Runs `prob` on the chosen path into a new contiguous storage.
fn run(
    op: &'static str,
    prob: &Problem,
    x: &HipStorage,
    x_l: &Layout,
    w: &HipStorage,
    w_l: &Layout,
    path: ConvPath,
) -> Result<HipStorage> {
    x.check_device(w, op)?;
    x.check_dtype(w, op)?;
    crate::dtype::check(x.dtype(), op)?;
    if !crate::dtype::FLOATS.contains(&x.dtype()) {
        return Err(candle_core::Error::UnsupportedDTypeForOp(x.dtype(), op).bt());
    }
    let device = x.device();
    // SAFETY: both paths write every output element (or fail).
    let mut y = unsafe { device.alloc_storage(x.dtype(), prob.y_len()) }?;
    if prob.y_len() == 0 {
        return Ok(y);
    }
    if prob.x.numel() == 0 || size::numel(op, w_l.dims())? == 0 {
        // Sums of no terms.
        let mut all = y.view_all_mut();
        device
            .stream()
            .memset_zeros(&mut all)
            .map_err(crate::error::hip)?;
        return Ok(y);
    }
    let key = Refused::key(x.dtype(), prob);
    let use_miopen = match path {
        ConvPath::Gemm => false,
        ConvPath::Miopen => true,
        ConvPath::Auto => {
            miopen::applies(x.dtype(), device) && !device.miopen_refused().contains(&key)
        }
    };
    if use_miopen {
        match miopen::run(op, prob, x, x_l, w, w_l, &mut y)? {
            Ok(()) => return Ok(y),
            Err(e) if path == ConvPath::Auto && matches!(e, hip_safe::Error::Dnn(_)) => {
                tracing::warn!(
                    op,
                    configuration = ?key,
                    error = %e,
                    "MIOpen cannot run this convolution: it and its repeats on this device \
                     run through im2col + GEMM"
                );
                device.miopen_refused().insert(key);
            }
            Err(e) => return Err(crate::error::hip(e)),
        }
    }
    gemm::run(op, prob, x, x_l, w, w_l, &mut y)?;
    Ok(y)
}

/// The convolution configurations MIOpen failed on one device: with
/// `ConvPath::Auto` they run through im2col + GEMM from then on, without
/// asking MIOpen again (each failed Find costs time and a log line).
#[derive(Default)]
pub(crate) struct Refused(Mutex<HashSet<ConvKey>>);

/// What MIOpen sees of a convolution (its operands are made dense).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ConvKey {
    dtype: DType,
    x: [usize; 4],
    w: [usize; 4],
    padding: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    output_padding: [usize; 2],
    groups: usize,
    transposed: bool,
}

impl Refused {
    fn key(dtype: DType, prob: &Problem) -> ConvKey {
        ConvKey {
            dtype,
            x: prob.x.sizes(),
            w: prob.w,
            padding: prob.padding,
            stride: prob.stride,
            dilation: prob.dilation,
            output_padding: prob.output_padding,
            groups: prob.groups,
            transposed: prob.transposed,
        }
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<ConvKey>> {
        // A set of plain keys stays valid whatever a panicking holder did.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn contains(&self, key: &ConvKey) -> bool {
        self.set().contains(key)
    }

    fn insert(&self, key: ConvKey) {
        self.set().insert(key);
    }
}

/// 2-D convolution (cross-correlation) of `x: (N, C, H, W)` with
/// `w: (K, C / groups, kh, kw)`, giving `(N, K, out_h, out_w)`.
pub fn conv2d(
    x: &HipStorage,
    x_layout: &Layout,
    w: &HipStorage,
    w_layout: &Layout,
    params: &ConvParams<2>,
    path: ConvPath,
) -> candle_core::Result<HipStorage> {
    let prob = Problem::new("conv2d", x_layout, w_layout, params, false)?;
    run("conv2d", &prob, x, x_layout, w, w_layout, path)
}

/// 1-D convolution of `x: (N, C, L)` with `w: (K, C / groups, k)`, giving
/// `(N, K, out_l)`.
pub fn conv1d(
    x: &HipStorage,
    x_layout: &Layout,
    w: &HipStorage,
    w_layout: &Layout,
    params: &ConvParams<1>,
    path: ConvPath,
) -> candle_core::Result<HipStorage> {
    let prob = Problem::new("conv1d", x_layout, w_layout, params, false)?;
    run("conv1d", &prob, x, x_layout, w, w_layout, path)
}

/// 2-D transposed convolution of `x: (N, C, H, W)` with
/// `w: (C, K / groups, kh, kw)`, giving `(N, K, out_h, out_w)` with
/// `out = (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1`.
pub fn conv_transpose2d(
    x: &HipStorage,
    x_layout: &Layout,
    w: &HipStorage,
    w_layout: &Layout,
    params: &ConvParams<2>,
    path: ConvPath,
) -> candle_core::Result<HipStorage> {
    let prob = Problem::new("conv_transpose2d", x_layout, w_layout, params, true)?;
    run("conv_transpose2d", &prob, x, x_layout, w, w_layout, path)
}

/// 1-D transposed convolution of `x: (N, C, L)` with `w: (C, K / groups, k)`.
pub fn conv_transpose1d(
    x: &HipStorage,
    x_layout: &Layout,
    w: &HipStorage,
    w_layout: &Layout,
    params: &ConvParams<1>,
    path: ConvPath,
) -> candle_core::Result<HipStorage> {
    let prob = Problem::new("conv_transpose1d", x_layout, w_layout, params, true)?;
    run("conv_transpose1d", &prob, x, x_layout, w, w_layout, path)
}
