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
use crate::parallel;

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
    let (x_space, y_space, taps) = (
        xd[2..].iter().product::<usize>(),
        yd[2..].iter().product::<usize>(),
        wd[2..].iter().product::<usize>(),
    );
    let links = links(&call.conv, &xd[2..], &yd[2..], &wd[2..]);
    // SAFETY: the extents were checked above; the buffers are the caller's.
    let weights = unsafe { read(&call.w, &wd, w, dtype) };
    let (out_t, out_ptr, out_dims) = match call.direction {
        Direction::Gather => (&call.y, y, &yd),
        Direction::Scatter => (&call.x, x, &xd),
    };
    let sums = match call.direction {
        Direction::Gather => {
            // SAFETY: as for the weights.
            let input = unsafe { read(&call.x, &xd, x, dtype) };
            let mut sums = vec![0f64; yd[0] * yd[1] * y_space];
            // One piece per (n, k): Y[n, k, o] = Σ X[n, c, i] · W[k, c, r].
            parallel::for_each_chunk(
                &mut sums,
                y_space,
                y_space * c_per_group * taps,
                |nk, out| {
                    let (n, k) = (nk / yd[1], nk % yd[1]);
                    let first_c = k / k_per_group * c_per_group;
                    for (o, sum) in out.iter_mut().enumerate() {
                        let link = &links[o * taps..(o + 1) * taps];
                        for c in 0..c_per_group {
                            let xs = &input[(n * xd[1] + first_c + c) * x_space..][..x_space];
                            let ws = &weights[(k * c_per_group + c) * taps..][..taps];
                            for (&i, wv) in link.iter().zip(ws) {
                                if i != NO_LINK {
                                    *sum += xs[i] * wv;
                                }
                            }
                        }
                    }
                },
            );
            sums
        }
        Direction::Scatter => {
            // SAFETY: as for the weights.
            let input = unsafe { read(&call.y, &yd, y, dtype) };
            let mut sums = vec![0f64; xd[0] * xd[1] * x_space];
            // One piece per (n, group): X[n, c, i] = Σ Y[n, k, o] · W[k, c, r].
            parallel::for_each_chunk(
                &mut sums,
                c_per_group * x_space,
                k_per_group * y_space * c_per_group * taps,
                |ng, out| {
                    let (n, g) = (ng / groups, ng % groups);
                    for k in g * k_per_group..(g + 1) * k_per_group {
                        let ys = &input[(n * yd[1] + k) * y_space..][..y_space];
                        for (o, yv) in ys.iter().enumerate() {
                            let link = &links[o * taps..(o + 1) * taps];
                            for c in 0..c_per_group {
                                let xs = &mut out[c * x_space..][..x_space];
                                let ws = &weights[(k * c_per_group + c) * taps..][..taps];
                                for (&i, wv) in link.iter().zip(ws) {
                                    if i != NO_LINK {
                                        xs[i] += yv * wv;
                                    }
                                }
                            }
                        }
                    }
                },
            );
            sums
        }
    };
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

/// A tap that reaches outside X (padding).
const NO_LINK: usize = usize::MAX;

/// For each Y position `o` and weight tap `r` (both row-major), the X
/// position `i = o·stride − pad + r·dilation` (row-major), or [`NO_LINK`].
fn links(conv: &ConvDesc, x_space: &[usize], y_space: &[usize], taps: &[usize]) -> Vec<usize> {
    let mut links =
        Vec::with_capacity(y_space.iter().product::<usize>() * taps.iter().product::<usize>());
    for_each_index(y_space, |o| {
        for_each_index(taps, |r| {
            let mut i = 0;
            for s in 0..o.len() {
                let at = (o[s] * conv.strides[s] as usize + r[s] * conv.dilations[s] as usize)
                    .checked_sub(conv.pads[s] as usize);
                match at {
                    Some(at) if at < x_space[s] => i = i * x_space[s] + at,
                    _ => {
                        links.push(NO_LINK);
                        return;
                    }
                }
            }
            links.push(i);
        });
    });
    links
}

/// Every element of `t` (dimensions `dims`) as f64, row-major.
///
/// # Safety
/// `ptr` must hold every element `t`'s dimensions and strides reach.
unsafe fn read(t: &TensorDesc, dims: &[usize], ptr: *const c_void, dtype: u32) -> Vec<f64> {
    let mut values = Vec::with_capacity(dims.iter().product());
    // SAFETY: per the contract.
    for_each_index(dims, |i| {
        values.push(unsafe { load(ptr, dtype, at(t, i[0], i[1], &i[2..])) })
    });
    values
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
