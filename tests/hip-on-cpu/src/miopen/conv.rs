//! MIOpen's convolution calls as reference loops.
//!
//! Every call is one relation between a "wide" tensor X (the convolution's
//! input side), a "narrow" tensor Y (its output side) and the weights W
//! (`[K, C/groups, k...]`): position `o` of Y sees position
//! `i = o·stride − pad + r·dilation` of X through weight tap `r`.
//!
//! | MIOpen call   | mode        | X  | Y  | direction            |
//! |---------------|-------------|----|----|----------------------|
//! | forward       | convolution | x  | y  | gather X into Y      |
//! | forward       | transpose   | y  | x  | scatter Y into X     |
//! | backward data | convolution | dx | dy | scatter Y into X     |
//! | backward data | transpose   | dy | dx | gather X into Y      |
//!
//! Sums are accumulated in f64 and written as `α·sum + β·out` (`out` not
//! read when β = 0), rounding to nearest even. The scalars are f32, or f64
//! for f64 tensors, as in MIOpen. Find reports one algorithm (GEMM), no
//! workspace is needed. On a capturing stream a convolution is checked and
//! recorded instead (see `hip::graph`), its scalars copied at the call.

use std::ffi::{c_int, c_void};

use half::{bf16, f16};
use miopen_sys::{
    miopenConvAlgoPerf_t, miopenConvBwdDataAlgorithm_t, miopenConvFwdAlgorithm_t,
    miopenConvolutionDescriptor_t, miopenConvolutionMode_t, miopenDataType_t as D, miopenHandle_t,
    miopenStatus_t, miopenTensorDescriptor_t,
};

use hip_sys::hipError_t;

use super::descriptor::{ConvDesc, TensorDesc, convolution, tensor};
use super::{MiopenResult, handle};
use crate::ffi::{non_null, write_out};
use crate::hip::graph::record;

const BAD_PARM: miopenStatus_t = miopenStatus_t::miopenStatusBadParm;
const NOT_IMPLEMENTED: miopenStatus_t = miopenStatus_t::miopenStatusNotImplemented;

/// Which side the sums land on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Y[o] = Σ X[i]·W[r].
    Gather,
    /// X[i] = Σ Y[o]·W[r].
    Scatter,
}

/// A convolution call, its descriptors read and checked.
#[derive(Clone)]
struct Call {
    x: TensorDesc,
    y: TensorDesc,
    w: TensorDesc,
    conv: ConvDesc,
    direction: Direction,
}

impl Call {
    /// Reads the descriptors of a call whose first tensor is `a` and whose
    /// result is `b` (`forward`: x → y; else dy → dx).
    ///
    /// # Safety
    /// The handles must be null or live descriptors.
    unsafe fn new(
        forward: bool,
        a: miopenTensorDescriptor_t,
        w: miopenTensorDescriptor_t,
        conv: miopenConvolutionDescriptor_t,
        b: miopenTensorDescriptor_t,
    ) -> MiopenResult<Call> {
        // SAFETY: per the contract.
        let (a, w, conv, b) = unsafe {
            (
                tensor(a)?.clone(),
                tensor(w)?.clone(),
                convolution(conv)?.clone(),
                tensor(b)?.clone(),
            )
        };
        if a.dtype != w.dtype || a.dtype != b.dtype {
            return Err(BAD_PARM);
        }
        if ![
            D::miopenHalf,
            D::miopenFloat,
            D::miopenBFloat16,
            D::miopenDouble,
        ]
        .contains(&D(a.dtype))
        {
            return Err(NOT_IMPLEMENTED);
        }
        let transpose = conv.mode == miopenConvolutionMode_t::miopenTranspose;
        // The output shape the descriptors imply must be the one given.
        let (input, output) = if forward { (&a, &b) } else { (&b, &a) };
        if conv.output_dims(input, &w)? != output.dims {
            return Err(BAD_PARM);
        }
        let (x, y, direction) = match (forward, transpose) {
            (true, false) => (a, b, Direction::Gather),
            (true, true) => (b, a, Direction::Scatter),
            (false, false) => (b, a, Direction::Scatter),
            (false, true) => (a, b, Direction::Gather),
        };
        Ok(Call {
            x,
            y,
            w,
            conv,
            direction,
        })
    }

    /// The element count a tensor's strides reach.
    fn extent(t: &TensorDesc) -> MiopenResult<usize> {
        t.dims
            .iter()
            .zip(&t.strides)
            .try_fold(1usize, |acc, (&d, &s)| {
                let (d, s) = (
                    usize::try_from(d).map_err(|_| BAD_PARM)?,
                    usize::try_from(s).map_err(|_| BAD_PARM)?,
                );
                (d.max(1) - 1)
                    .checked_mul(s)
                    .and_then(|r| acc.checked_add(r))
                    .ok_or(BAD_PARM)
            })
    }
}

/// Element `i` as f64.
///
/// # Safety
/// `ptr` must hold element `i` of `dtype`.
unsafe fn load(ptr: *const c_void, dtype: u32, i: usize) -> f64 {
    // SAFETY: per the contract.
    unsafe {
        match D(dtype) {
            D::miopenHalf => f64::from(*ptr.cast::<f16>().add(i)),
            D::miopenBFloat16 => f64::from(*ptr.cast::<bf16>().add(i)),
            D::miopenDouble => *ptr.cast::<f64>().add(i),
            _ => f64::from(*ptr.cast::<f32>().add(i)),
        }
    }
}

/// Writes element `i`, rounding to nearest even.
///
/// # Safety
/// `ptr` must have room for element `i` of `dtype`.
unsafe fn store(ptr: *mut c_void, dtype: u32, i: usize, v: f64) {
    // SAFETY: per the contract.
    unsafe {
        match D(dtype) {
            D::miopenHalf => *ptr.cast::<f16>().add(i) = f16::from_f64(v),
            D::miopenBFloat16 => *ptr.cast::<bf16>().add(i) = bf16::from_f64(v),
            D::miopenDouble => *ptr.cast::<f64>().add(i) = v,
            _ => *ptr.cast::<f32>().add(i) = v as f32,
        }
    }
}

/// The offset of `(n, c, position...)` in `t`.
fn at(t: &TensorDesc, n: usize, c: usize, pos: &[usize]) -> usize {
    let s = |k: usize| t.strides[k] as usize;
    n * s(0)
        + c * s(1)
        + pos
            .iter()
            .enumerate()
            .map(|(k, p)| p * s(k + 2))
            .sum::<usize>()
}

/// Every index tuple below `dims` (row-major), `f` called with each.
fn for_each_index(dims: &[usize], mut f: impl FnMut(&[usize])) {
    if dims.contains(&0) {
        return;
    }
    let mut idx = vec![0; dims.len()];
    loop {
        f(&idx);
        let mut k = dims.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// Runs a call with scalars `alpha`, `beta` on buffers `x`, `w`, `y` (the
/// roles of [`Call`]).
///
/// # Safety
/// The buffers must hold the tensors the descriptors describe.
unsafe fn run(
    call: &Call,
    alpha: *const c_void,
    beta: *const c_void,
    x: *mut c_void,
    w: *const c_void,
    y: *mut c_void,
) -> MiopenResult {
    non_null(alpha, BAD_PARM)?;
    non_null(beta, BAD_PARM)?;
    let dtype = call.x.dtype;
    // SAFETY: MIOpen's scalars are f64 for f64 tensors, f32 otherwise.
    let (alpha, beta) = unsafe {
        if D(dtype) == D::miopenDouble {
            (*alpha.cast::<f64>(), *beta.cast::<f64>())
        } else {
            (
                f64::from(*alpha.cast::<f32>()),
                f64::from(*beta.cast::<f32>()),
            )
        }
    };
    for t in [&call.x, &call.y, &call.w] {
        Call::extent(t)?;
    }
    let dims = |t: &TensorDesc| t.dims.iter().map(|&d| d as usize).collect::<Vec<_>>();
    let (xd, yd, wd) = (dims(&call.x), dims(&call.y), dims(&call.w));
    let groups = call.conv.groups as usize;
    let (k_per_group, c_per_group) = (yd[1] / groups, wd[1]);
    let (out_t, out_ptr, out_dims) = match call.direction {
        Direction::Gather => (&call.y, y, &yd),
        Direction::Scatter => (&call.x, x, &xd),
    };
    let out_len: usize = out_dims.iter().product();
    let mut sums = vec![0f64; out_len];
    let flat = |d: &[usize], idx: &[usize]| idx.iter().zip(d).fold(0, |acc, (i, n)| acc * n + i);
    let spatial = xd.len() - 2;
    let mut input_pos = vec![0usize; spatial];
    for_each_index(&yd, |yi| {
        let (n, k) = (yi[0], yi[1]);
        let g = k / k_per_group;
        for_each_index(&wd[1..], |wi| {
            let c = g * c_per_group + wi[0];
            for s in 0..spatial {
                let i = (yi[s + 2] * call.conv.strides[s] as usize
                    + wi[s + 1] * call.conv.dilations[s] as usize)
                    .checked_sub(call.conv.pads[s] as usize);
                match i {
                    Some(i) if i < xd[s + 2] => input_pos[s] = i,
                    _ => return,
                }
            }
            let mut w_idx = vec![k];
            w_idx.extend_from_slice(wi);
            // SAFETY: every index is inside its tensor's dimensions, whose
            // strided extent was checked above; the buffers are the caller's.
            unsafe {
                let wv = load(w, dtype, at(&call.w, k, wi[0], &wi[1..]));
                match call.direction {
                    Direction::Gather => {
                        sums[flat(&yd, yi)] += load(x, dtype, at(&call.x, n, c, &input_pos)) * wv;
                    }
                    Direction::Scatter => {
                        let mut xi = vec![n, c];
                        xi.extend_from_slice(&input_pos);
                        sums[flat(&xd, &xi)] += load(y, dtype, at(&call.y, n, k, &yi[2..])) * wv;
                    }
                }
            }
        });
    });
    let mut flat_i = 0;
    for_each_index(out_dims, |oi| {
        let off = at(out_t, oi[0], oi[1], &oi[2..]);
        let mut v = alpha * sums[flat_i];
        if beta != 0.0 {
            // SAFETY: inside the output tensor.
            v += beta * unsafe { load(out_ptr, dtype, off) };
        }
        // SAFETY: inside the output tensor.
        unsafe { store(out_ptr, dtype, off, v) };
        flat_i += 1;
    });
    Ok(())
}

/// Writes the one algorithm Find reports.
///
/// # Safety
/// `returned` and `perf` valid for one write each (or null).
unsafe fn report_one(
    requested: c_int,
    returned: *mut c_int,
    perf: *mut miopenConvAlgoPerf_t,
    forward: bool,
) -> MiopenResult {
    non_null(perf, BAD_PARM)?;
    if requested < 1 {
        return Err(BAD_PARM);
    }
    // SAFETY: an all-zero perf record is valid (algorithm 0 = GEMM).
    let mut result: miopenConvAlgoPerf_t = unsafe { std::mem::zeroed() };
    if forward {
        result.__bindgen_anon_1.fwd_algo = miopenConvFwdAlgorithm_t::miopenConvolutionFwdAlgoGEMM;
    } else {
        result.__bindgen_anon_1.bwd_data_algo =
            miopenConvBwdDataAlgorithm_t::miopenConvolutionBwdDataAlgoGEMM;
    }
    // SAFETY: per the contract.
    unsafe {
        write_out(perf, result, BAD_PARM)?;
        write_out(returned, 1, BAD_PARM)
    }
}

/// `miopenConvolutionForwardGetWorkSpaceSize`: none needed.
pub(crate) unsafe fn miopenConvolutionForwardGetWorkSpaceSize(
    h: miopenHandle_t,
    w_desc: miopenTensorDescriptor_t,
    x_desc: miopenTensorDescriptor_t,
    conv_desc: miopenConvolutionDescriptor_t,
    y_desc: miopenTensorDescriptor_t,
    size: *mut usize,
) -> MiopenResult {
    // SAFETY: the caller passes live handles and descriptors.
    unsafe {
        handle(h)?;
        Call::new(true, x_desc, w_desc, conv_desc, y_desc)?;
        write_out(size, 0, BAD_PARM)
    }
}

/// `miopenConvolutionBackwardDataGetWorkSpaceSize`: none needed.
pub(crate) unsafe fn miopenConvolutionBackwardDataGetWorkSpaceSize(
    h: miopenHandle_t,
    dy_desc: miopenTensorDescriptor_t,
    w_desc: miopenTensorDescriptor_t,
    conv_desc: miopenConvolutionDescriptor_t,
    dx_desc: miopenTensorDescriptor_t,
    size: *mut usize,
) -> MiopenResult {
    // SAFETY: the caller passes live handles and descriptors.
    unsafe {
        handle(h)?;
        Call::new(false, dy_desc, w_desc, conv_desc, dx_desc)?;
        write_out(size, 0, BAD_PARM)
    }
}

/// `miopenFindConvolutionForwardAlgorithm`: checks the call, reports GEMM.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn miopenFindConvolutionForwardAlgorithm(
    h: miopenHandle_t,
    x_desc: miopenTensorDescriptor_t,
    _x: *const c_void,
    w_desc: miopenTensorDescriptor_t,
    _w: *const c_void,
    conv_desc: miopenConvolutionDescriptor_t,
    y_desc: miopenTensorDescriptor_t,
    _y: *mut c_void,
    requested: c_int,
    returned: *mut c_int,
    perf: *mut miopenConvAlgoPerf_t,
    _workspace: *mut c_void,
    _workspace_size: usize,
    _exhaustive: bool,
) -> MiopenResult {
    // SAFETY: the caller passes live handles, descriptors and out-pointers.
    unsafe {
        handle(h)?;
        Call::new(true, x_desc, w_desc, conv_desc, y_desc)?;
        report_one(requested, returned, perf, true)
    }
}

/// `miopenFindConvolutionBackwardDataAlgorithm`: checks the call, reports GEMM.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn miopenFindConvolutionBackwardDataAlgorithm(
    h: miopenHandle_t,
    dy_desc: miopenTensorDescriptor_t,
    _dy: *const c_void,
    w_desc: miopenTensorDescriptor_t,
    _w: *const c_void,
    conv_desc: miopenConvolutionDescriptor_t,
    dx_desc: miopenTensorDescriptor_t,
    _dx: *mut c_void,
    requested: c_int,
    returned: *mut c_int,
    perf: *mut miopenConvAlgoPerf_t,
    _workspace: *mut c_void,
    _workspace_size: usize,
    _exhaustive: bool,
) -> MiopenResult {
    // SAFETY: the caller passes live handles, descriptors and out-pointers.
    unsafe {
        handle(h)?;
        Call::new(false, dy_desc, w_desc, conv_desc, dx_desc)?;
        report_one(requested, returned, perf, false)
    }
}

/// A scalar's bytes (f64, or f32 in the low bytes), copied at the call.
///
/// # Safety
/// `ptr` must point at an f64 when `double`, else at an f32.
unsafe fn scalar(ptr: *const c_void, double: bool) -> u64 {
    let mut value = 0u64;
    let bytes = if double { 8 } else { 4 };
    // SAFETY: per the contract; `value` has room for 8 bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            ptr.cast::<u8>(),
            std::ptr::from_mut(&mut value).cast(),
            bytes,
        )
    };
    value
}

/// Runs a call at once, or records it when the handle's stream captures.
///
/// # Safety
/// As for [`run`]; a recorded call's tensors must stay valid for every
/// replay of its graph.
unsafe fn submit(
    h: miopenHandle_t,
    call: &Call,
    alpha: *const c_void,
    beta: *const c_void,
    x: *mut c_void,
    w: *const c_void,
    y: *mut c_void,
) -> MiopenResult {
    // SAFETY: the caller passes a live handle.
    let stream = unsafe { handle(h) }?.stream;
    non_null(alpha, BAD_PARM)?;
    non_null(beta, BAD_PARM)?;
    let double = D(call.x.dtype) == D::miopenDouble;
    let recorded = record(stream, || {
        for t in [&call.x, &call.y, &call.w] {
            Call::extent(t).map_err(|_| hipError_t::hipErrorInvalidValue)?;
        }
        // SAFETY: the caller's scalars, of the tensors' type.
        let (a, b) = unsafe { (scalar(alpha, double), scalar(beta, double)) };
        let (call, x, w, y) = (call.clone(), x as usize, w as usize, y as usize);
        Ok(move || {
            let (a, b) = (std::ptr::from_ref(&a).cast(), std::ptr::from_ref(&b).cast());
            // SAFETY: the tensors stay valid for every replay (the
            // contract of captured work); the scalars are copies.
            let done = unsafe {
                run(
                    &call,
                    a,
                    b,
                    x as *mut c_void,
                    w as *const c_void,
                    y as *mut c_void,
                )
            };
            done.map_err(|status| {
                eprintln!(
                    "hip-on-cpu: a MIOpen convolution replayed by a graph failed: {status:?}"
                );
                hipError_t::hipErrorLaunchFailure
            })
        })
    });
    match recorded {
        Ok(true) => Ok(()),
        Ok(false) => {
            // SAFETY: per the contract.
            unsafe { run(call, alpha, beta, x, w, y) }
        }
        Err(error) => {
            eprintln!("hip-on-cpu: a MIOpen convolution on a capturing stream failed: {error:?}");
            Err(miopenStatus_t::miopenStatusInternalError)
        }
    }
}

/// `miopenConvolutionForward`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn miopenConvolutionForward(
    h: miopenHandle_t,
    alpha: *const c_void,
    x_desc: miopenTensorDescriptor_t,
    x: *const c_void,
    w_desc: miopenTensorDescriptor_t,
    w: *const c_void,
    conv_desc: miopenConvolutionDescriptor_t,
    _algo: miopenConvFwdAlgorithm_t,
    beta: *const c_void,
    y_desc: miopenTensorDescriptor_t,
    y: *mut c_void,
    _workspace: *mut c_void,
    _workspace_size: usize,
) -> MiopenResult {
    // SAFETY: the caller passes live handles and descriptors, and buffers
    // holding the tensors they describe.
    unsafe {
        handle(h)?;
        let call = Call::new(true, x_desc, w_desc, conv_desc, y_desc)?;
        let (xp, yp) = match call.direction {
            Direction::Gather => (x.cast_mut(), y),
            Direction::Scatter => (y, x.cast_mut()),
        };
        submit(h, &call, alpha, beta, xp, w, yp)
    }
}

/// `miopenConvolutionBackwardData`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn miopenConvolutionBackwardData(
    h: miopenHandle_t,
    alpha: *const c_void,
    dy_desc: miopenTensorDescriptor_t,
    dy: *const c_void,
    w_desc: miopenTensorDescriptor_t,
    w: *const c_void,
    conv_desc: miopenConvolutionDescriptor_t,
    _algo: miopenConvBwdDataAlgorithm_t,
    beta: *const c_void,
    dx_desc: miopenTensorDescriptor_t,
    dx: *mut c_void,
    _workspace: *mut c_void,
    _workspace_size: usize,
) -> MiopenResult {
    // SAFETY: as for the forward call.
    unsafe {
        handle(h)?;
        let call = Call::new(false, dy_desc, w_desc, conv_desc, dx_desc)?;
        let (xp, yp) = match call.direction {
            Direction::Scatter => (dx, dy.cast_mut()),
            Direction::Gather => (dy.cast_mut(), dx),
        };
        submit(h, &call, alpha, beta, xp, w, yp)
    }
}
