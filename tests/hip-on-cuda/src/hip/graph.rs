//! Stream capture and graphs on CUDA's graph API. HIP graph, graph-exec and
//! node handles are the CUDA handles themselves; the capture modes, capture
//! states and instantiation flags have the same values in both APIs.

use std::ffi::c_ulonglong;

use cudarc::driver::sys as cu_sys;
use hip_sys::{
    hipError_t, hipGraph_t, hipGraphExec_t, hipGraphNode_t, hipStream_t, hipStreamCaptureMode,
    hipStreamCaptureStatus,
};

use super::context::ensure_current;
use super::error::{HipResult, cu};
use super::memory::cu_stream;
use crate::ffi::{non_null, write_out};

const INVALID: hipError_t = hipError_t::hipErrorInvalidValue;

/// `hipGraphInstantiateFlagAutoFreeOnLaunch`, `...Upload`,
/// `...DeviceLaunch`, `...UseNodePriority`: CUDA's bits.
const INSTANTIATE_FLAGS: c_ulonglong = 0x1 | 0x2 | 0x4 | 0x8;

/// `hipStreamBeginCapture`.
pub(crate) unsafe fn hipStreamBeginCapture(
    stream: hipStream_t,
    mode: hipStreamCaptureMode,
) -> HipResult {
    use cu_sys::CUstreamCaptureMode as M;
    let mode = match mode {
        hipStreamCaptureMode::hipStreamCaptureModeGlobal => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
        hipStreamCaptureMode::hipStreamCaptureModeThreadLocal => {
            M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        }
        hipStreamCaptureMode::hipStreamCaptureModeRelaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        _ => return Err(INVALID),
    };
    ensure_current()?;
    // SAFETY: the caller passes a valid stream; the driver refuses the
    // legacy default stream itself.
    cu(unsafe { cu_sys::cuStreamBeginCapture_v2(cu_stream(stream), mode) })
}

/// `hipStreamEndCapture`.
pub(crate) unsafe fn hipStreamEndCapture(stream: hipStream_t, graph: *mut hipGraph_t) -> HipResult {
    non_null(graph, INVALID)?;
    ensure_current()?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: valid stream per the caller; `handle` is a valid out-pointer.
    let ended = cu(unsafe { cu_sys::cuStreamEndCapture(cu_stream(stream), &mut handle) });
    // SAFETY: checked non-null; the caller guarantees validity. An
    // invalidated capture still writes the (null) graph, as HIP does.
    unsafe { write_out(graph, handle.cast(), INVALID) }?;
    ended
}

/// `hipStreamIsCapturing`.
pub(crate) unsafe fn hipStreamIsCapturing(
    stream: hipStream_t,
    status: *mut hipStreamCaptureStatus,
) -> HipResult {
    non_null(status, INVALID)?;
    ensure_current()?;
    let mut state = cu_sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: valid stream per the caller; `state` is a valid out-pointer.
    cu(unsafe { cu_sys::cuStreamIsCapturing(cu_stream(stream), &mut state) })?;
    // SAFETY: checked non-null; the enumerators share their values.
    unsafe { write_out(status, hipStreamCaptureStatus(state as u32), INVALID) }
}

/// `hipGraphInstantiateWithFlags`.
pub(crate) unsafe fn hipGraphInstantiateWithFlags(
    exec: *mut hipGraphExec_t,
    graph: hipGraph_t,
    flags: c_ulonglong,
) -> HipResult {
    non_null(exec, INVALID)?;
    non_null(graph, INVALID)?;
    if flags & !INSTANTIATE_FLAGS != 0 {
        return Err(INVALID);
    }
    ensure_current()?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: `graph` is a graph from hipStreamEndCapture per the caller;
    // `handle` is a valid out-pointer.
    cu(unsafe { cu_sys::cuGraphInstantiateWithFlags(&mut handle, graph.cast(), flags) })?;
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(exec, handle.cast(), INVALID) }
}

/// `hipGraphLaunch`.
pub(crate) unsafe fn hipGraphLaunch(exec: hipGraphExec_t, stream: hipStream_t) -> HipResult {
    non_null(exec, hipError_t::hipErrorInvalidHandle)?;
    ensure_current()?;
    // SAFETY: a live graph exec and a valid stream per the caller.
    cu(unsafe { cu_sys::cuGraphLaunch(exec.cast(), cu_stream(stream)) })
}

/// `hipGraphExecDestroy`.
pub(crate) unsafe fn hipGraphExecDestroy(exec: hipGraphExec_t) -> HipResult {
    non_null(exec, INVALID)?;
    ensure_current()?;
    // SAFETY: a graph exec from hipGraphInstantiateWithFlags per the caller.
    cu(unsafe { cu_sys::cuGraphExecDestroy(exec.cast()) })
}

/// `hipGraphDestroy`.
pub(crate) unsafe fn hipGraphDestroy(graph: hipGraph_t) -> HipResult {
    non_null(graph, INVALID)?;
    ensure_current()?;
    // SAFETY: a graph from hipStreamEndCapture per the caller.
    cu(unsafe { cu_sys::cuGraphDestroy(graph.cast()) })
}

/// `hipGraphGetNodes`: with `nodes` null, the node count; otherwise up to
/// `*count` node handles, and `*count` set as CUDA sets it.
pub(crate) unsafe fn hipGraphGetNodes(
    graph: hipGraph_t,
    nodes: *mut hipGraphNode_t,
    count: *mut usize,
) -> HipResult {
    non_null(graph, INVALID)?;
    non_null(count, INVALID)?;
    ensure_current()?;
    // SAFETY: a live graph per the caller; `count` is valid and `nodes`,
    // when non-null, holds `*count` handles; the handle types coincide.
    cu(unsafe { cu_sys::cuGraphGetNodes(graph.cast(), nodes.cast(), count) })
}
