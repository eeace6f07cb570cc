//! MIOpen's convolution calls on cuDNN.
//!
//! | MIOpen call     | mode          | cuDNN operation | cuDNN input side | cuDNN output side |
//! |-----------------|---------------|-----------------|------------------|-------------------|
//! | forward         | convolution   | forward         | x                | y                 |
//! | forward         | transpose     | backward data   | y                | x                 |
//! | backward data   | convolution   | backward data   | dx               | dy                |
//! | backward data   | transpose     | forward         | dy               | dx                |
//!
//! (A transposed convolution's forward pass is the backward-data pass of
//! the convolution with the same weights, and the other way round.)
//!
//! Find semantics are kept: `miopenFind*Algorithm` runs cuDNN's Find on the
//! caller's buffers and workspace, reports each algorithm family (GEMM,
//! direct, FFT, Winograd, implicit GEMM) once, fastest first, and records on
//! the handle which cuDNN algorithm each reported family stands for, keyed by
//! the problem. Running a convolution with an algorithm that Find did not
//! report for that problem on that handle fails, as in MIOpen ("was find
//! executed?"). Workspace sizes are the largest any applicable cuDNN
//! algorithm needs, ignoring algorithms that need more than 1 GiB. As in
//! MIOpen, alpha and beta are floats and only α = 1, β = 0 is supported.

use std::ffi::{c_int, c_void};

use miopen_sys::{
    miopenConvAlgoPerf_t, miopenConvBwdDataAlgorithm_t, miopenConvFwdAlgorithm_t,
    miopenConvolutionDescriptor_t, miopenConvolutionMode_t, miopenHandle_t, miopenStatus_t,
    miopenTensorDescriptor_t,
};

use super::cudnn::{Buffers, Op, Problem, family, uses_double_scalars};
use super::descriptor::{convolution, tensor};
use super::{FindKey, Handle, MiopenResult, handle};
use crate::ffi::{non_null, write_out};

const BAD_PARM: miopenStatus_t = miopenStatus_t::miopenStatusBadParm;

/// Algorithms needing a larger workspace are left out of the size queries.
const MAX_WORKSPACE: usize = 1 << 30;

/// The direction of a MIOpen call.
#[derive(Clone, Copy)]
enum Direction {
    Forward,
    BackwardData,
}

/// A MIOpen call resolved to its cuDNN problem.
struct Call {
    key: FindKey,
    problem: Problem,
}

impl Call {
    /// `src` is what the call reads (x, or dy), `dst` what it writes.
    ///
    /// # Safety
    /// The descriptors must be null or live handles.
    unsafe fn new(
        direction: Direction,
        src: miopenTensorDescriptor_t,
        w: miopenTensorDescriptor_t,
        conv: miopenConvolutionDescriptor_t,
        dst: miopenTensorDescriptor_t,
    ) -> MiopenResult<Self> {
        // SAFETY: per the contract.
        let (src, w, conv, dst) =
            unsafe { (tensor(src)?, tensor(w)?, convolution(conv)?, tensor(dst)?) };
        let transpose = match conv.mode {
            miopenConvolutionMode_t::miopenConvolution => false,
            miopenConvolutionMode_t::miopenTranspose => true,
            _ => return Err(miopenStatus_t::miopenStatusNotImplemented),
        };
        let op = match (direction, transpose) {
            (Direction::Forward, false) | (Direction::BackwardData, true) => Op::Forward,
            _ => Op::BackwardData,
        };
        let (input, output) = match op {
            Op::Forward => (src, dst),
            Op::BackwardData => (dst, src),
        };
        let key = FindKey {
            op,
            input: input.clone(),
            filter: w.clone(),
            output: output.clone(),
            conv: conv.clone(),
        };
        let problem = Problem::new(op, input, w, output, conv)?;
        Ok(Self { key, problem })
    }

    /// The cuDNN buffers for the call's read (`src`) and written (`dst`)
    /// tensors.
    fn buffers(
        &self,
        src: *const c_void,
        w: *const c_void,
        dst: *mut c_void,
        workspace: *mut c_void,
        workspace_size: usize,
    ) -> Buffers {
        let (input, output) = match self.problem.op {
            Op::Forward => (src.cast_mut(), dst),
            Op::BackwardData => (dst, src.cast_mut()),
        };
        Buffers {
            input,
            filter: w,
            output,
            workspace,
            workspace_size,
        }
    }
}

/// The workspace a call may need: the largest of the applicable algorithms.
fn workspace_size(h: &Handle, call: &Call) -> MiopenResult<usize> {
    let perfs = call.problem.heuristics(h.cudnn)?;
    Ok(perfs
        .iter()
        .map(|p| p.memory)
        .filter(|&m| m <= MAX_WORKSPACE)
        .max()
        .unwrap_or(0))
}

/// Set (to anything), every Find fails with `miopenStatusBadParm`, as real
/// MIOpen does for configurations it has no solver for: lets GPU tests
/// exercise a backend's fallback path.
const REFUSE_VAR: &str = "HIP_ON_CUDA_MIOPEN_REFUSE";

fn refused_by_request() -> bool {
    std::env::var_os(REFUSE_VAR).is_some()
}

/// Runs Find, records the families on the handle and writes the results.
///
/// # Safety
/// Buffers and output arrays must be valid for the described problem.
unsafe fn find(
    h: &mut Handle,
    call: Call,
    buffers: &Buffers,
    request: c_int,
    returned: *mut c_int,
    results: *mut miopenConvAlgoPerf_t,
    direction: Direction,
) -> MiopenResult {
    non_null(returned, BAD_PARM)?;
    non_null(results, BAD_PARM)?;
    if refused_by_request() {
        return Err(BAD_PARM);
    }
    let request = usize::try_from(request).map_err(|_| BAD_PARM)?;
    if request == 0 {
        return Err(BAD_PARM);
    }
    // SAFETY: per the contract.
    let perfs = unsafe { call.problem.find(h.cudnn, buffers) }?;
    let mut chosen: Vec<(u32, super::cudnn::AlgoPerf)> = Vec::new();
    for perf in perfs {
        let fam = family(call.problem.op, perf.algo);
        if !chosen.iter().any(|(f, _)| *f == fam) {
            chosen.push((fam, perf));
        }
    }
    if chosen.is_empty() {
        return Err(miopenStatus_t::miopenStatusNotImplemented);
    }
    let written = chosen.len().min(request);
    for (i, (fam, perf)) in chosen.iter().take(written).enumerate() {
        let mut out = miopenConvAlgoPerf_t::default();
        match direction {
            Direction::Forward => out.__bindgen_anon_1.fwd_algo = miopenConvFwdAlgorithm_t(*fam),
            Direction::BackwardData => {
                out.__bindgen_anon_1.bwd_data_algo = miopenConvBwdDataAlgorithm_t(*fam)
            }
        }
        out.time = perf.time;
        out.memory = perf.memory;
        // SAFETY: the caller passes room for `request` results.
        unsafe { results.add(i).write(out) };
    }
    h.finds.insert(
        call.key,
        chosen.iter().map(|(fam, perf)| (*fam, perf.algo)).collect(),
    );
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(returned, written as c_int, BAD_PARM) }
}

/// Runs the cuDNN algorithm that Find recorded for `algo` (a MIOpen family).
///
/// # Safety
/// Buffers must be valid for the described problem; alpha and beta null or
/// pointing to floats.
unsafe fn run(
    h: &Handle,
    call: &Call,
    algo: u32,
    alpha: *const c_void,
    beta: *const c_void,
    buffers: &Buffers,
) -> MiopenResult {
    if !alpha.is_null() && !beta.is_null() {
        // SAFETY: MIOpen's scaling factors are host floats.
        let (a, b) = unsafe {
            (
                alpha.cast::<f32>().read_unaligned(),
                beta.cast::<f32>().read_unaligned(),
            )
        };
        if a != 1.0 || b != 0.0 {
            return Err(miopenStatus_t::miopenStatusNotImplemented);
        }
    }
    let Some(&(_, cudnn_algo)) = h
        .finds
        .get(&call.key)
        .and_then(|found| found.iter().find(|(fam, _)| *fam == algo))
    else {
        eprintln!(
            "hip-on-cuda (MIOpen): algorithm {algo} was not reported by a Find for this problem on this handle; was find executed?"
        );
        return Err(miopenStatus_t::miopenStatusUnknownError);
    };
    let (one, zero) = (1.0_f32, 0.0_f32);
    let (one64, zero64) = (1.0_f64, 0.0_f64);
    let (alpha, beta): (*const c_void, *const c_void) = if uses_double_scalars(call.key.input.dtype)
    {
        ((&raw const one64).cast(), (&raw const zero64).cast())
    } else {
        ((&raw const one).cast(), (&raw const zero).cast())
    };
    // SAFETY: per the contract; the scalars live until the call returns.
    unsafe { call.problem.run(h.cudnn, cudnn_algo, alpha, beta, buffers) }
}

/// `miopenConvolutionForwardGetWorkSpaceSize`.
pub(crate) unsafe fn miopenConvolutionForwardGetWorkSpaceSize(
    handle_: miopenHandle_t,
    w_desc: miopenTensorDescriptor_t,
    x_desc: miopenTensorDescriptor_t,
    conv_desc: miopenConvolutionDescriptor_t,
    y_desc: miopenTensorDescriptor_t,
    workspace_size_out: *mut usize,
) -> MiopenResult {
    // SAFETY: the caller passes live handles.
    let (h, call) = unsafe {
        (
            handle(handle_)?,
            Call::new(Direction::Forward, x_desc, w_desc, conv_desc, y_desc)?,
        )
    };
    let size = workspace_size(h, &call)?;
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(workspace_size_out, size, BAD_PARM) }
}

/// `miopenConvolutionBackwardDataGetWorkSpaceSize`.
pub(crate) unsafe fn miopenConvolutionBackwardDataGetWorkSpaceSize(
    handle_: miopenHandle_t,
    dy_desc: miopenTensorDescriptor_t,
    w_desc: miopenTensorDescriptor_t,
    conv_desc: miopenConvolutionDescriptor_t,
    dx_desc: miopenTensorDescriptor_t,
    workspace_size_out: *mut usize,
) -> MiopenResult {
    // SAFETY: the caller passes live handles.
    let (h, call) = unsafe {
        (
            handle(handle_)?,
            Call::new(Direction::BackwardData, dy_desc, w_desc, conv_desc, dx_desc)?,
        )
    };
    let size = workspace_size(h, &call)?;
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(workspace_size_out, size, BAD_PARM) }
}

/// `miopenFindConvolutionForwardAlgorithm` (overwrites `y`).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn miopenFindConvolutionForwardAlgorithm(
    handle_: miopenHandle_t,
    x_desc: miopenTensorDescriptor_t,
    x: *const c_void,
    w_desc: miopenTensorDescriptor_t,
    w: *const c_void,
    conv_desc: miopenConvolutionDescriptor_t,
    y_desc: miopenTensorDescriptor_t,
    y: *mut c_void,
    request_algo_count: c_int,
    returned_algo_count: *mut c_int,
    perf_results: *mut miopenConvAlgoPerf_t,
    workspace: *mut c_void,
    workspace_size: usize,
    _exhaustive_search: bool,
) -> MiopenResult {
    // SAFETY: the caller passes live handles.
    let (h, call) = unsafe {
        (
            handle(handle_)?,
            Call::new(Direction::Forward, x_desc, w_desc, conv_desc, y_desc)?,
        )
    };
    let buffers = call.buffers(x, w, y, workspace, workspace_size);
    // SAFETY: forwarded contract.
    unsafe {
        find(
            h,
            call,
            &buffers,
            request_algo_count,
            returned_algo_count,
            perf_results,
            Direction::Forward,
        )
    }
}

/// `miopenFindConvolutionBackwardDataAlgorithm` (overwrites `dx`).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn miopenFindConvolutionBackwardDataAlgorithm(
    handle_: miopenHandle_t,
    dy_desc: miopenTensorDescriptor_t,
    dy: *const c_void,
    w_desc: miopenTensorDescriptor_t,
    w: *const c_void,
    conv_desc: miopenConvolutionDescriptor_t,
    dx_desc: miopenTensorDescriptor_t,
    dx: *mut c_void,
    request_algo_count: c_int,
    returned_algo_count: *mut c_int,
    perf_results: *mut miopenConvAlgoPerf_t,
    workspace: *mut c_void,
    workspace_size: usize,
    _exhaustive_search: bool,
) -> MiopenResult {
    // SAFETY: the caller passes live handles.
    let (h, call) = unsafe {
        (
            handle(handle_)?,
            Call::new(Direction::BackwardData, dy_desc, w_desc, conv_desc, dx_desc)?,
        )
    };
    let buffers = call.buffers(dy, w, dx, workspace, workspace_size);
    // SAFETY: forwarded contract.
    unsafe {
        find(
            h,
            call,
            &buffers,
            request_algo_count,
            returned_algo_count,
            perf_results,
            Direction::BackwardData,
        )
    }
}

/// `miopenConvolutionForward` with an algorithm from Find.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn miopenConvolutionForward(
    handle_: miopenHandle_t,
    alpha: *const c_void,
    x_desc: miopenTensorDescriptor_t,
    x: *const c_void,
    w_desc: miopenTensorDescriptor_t,
    w: *const c_void,
    conv_desc: miopenConvolutionDescriptor_t,
    algo: miopenConvFwdAlgorithm_t,
    beta: *const c_void,
    y_desc: miopenTensorDescriptor_t,
    y: *mut c_void,
    workspace: *mut c_void,
    workspace_size: usize,
) -> MiopenResult {
    // SAFETY: the caller passes live handles.
    let (h, call) = unsafe {
        (
            handle(handle_)?,
            Call::new(Direction::Forward, x_desc, w_desc, conv_desc, y_desc)?,
        )
    };
    let buffers = call.buffers(x, w, y, workspace, workspace_size);
    // SAFETY: forwarded contract.
    unsafe { run(h, &call, algo.0, alpha, beta, &buffers) }
}

/// `miopenConvolutionBackwardData` with an algorithm from Find.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn miopenConvolutionBackwardData(
    handle_: miopenHandle_t,
    alpha: *const c_void,
    dy_desc: miopenTensorDescriptor_t,
    dy: *const c_void,
    w_desc: miopenTensorDescriptor_t,
    w: *const c_void,
    conv_desc: miopenConvolutionDescriptor_t,
    algo: miopenConvBwdDataAlgorithm_t,
    beta: *const c_void,
    dx_desc: miopenTensorDescriptor_t,
    dx: *mut c_void,
    workspace: *mut c_void,
    workspace_size: usize,
) -> MiopenResult {
    // SAFETY: the caller passes live handles.
    let (h, call) = unsafe {
        (
            handle(handle_)?,
            Call::new(Direction::BackwardData, dy_desc, w_desc, conv_desc, dx_desc)?,
        )
    };
    let buffers = call.buffers(dy, w, dx, workspace, workspace_size);
    // SAFETY: forwarded contract.
    unsafe { run(h, &call, algo.0, alpha, beta, &buffers) }
}
