//! Streams, events and host callbacks. HIP stream and event handles are the
//! CUDA handles themselves; the flag values of both APIs coincide, and the
//! AMD-only flags are accepted and ignored.

use std::ffi::{c_uint, c_void};

use cudarc::driver::sys as cu_sys;
use hip_sys::{hipError_t, hipEvent_t, hipHostFn_t, hipStream_t};

use super::context::ensure_current;
use super::error::{HipResult, cu};
use super::memory::cu_stream;
use crate::ffi::{non_null, write_out};

const INVALID: hipError_t = hipError_t::hipErrorInvalidValue;

/// `hipStreamNonBlocking`, the only stream flag.
const STREAM_NON_BLOCKING: c_uint = 0x1;
/// `hipEventBlockingSync`, `hipEventDisableTiming`, `hipEventInterprocess`:
/// the same bits in CUDA.
const EVENT_CUDA_FLAGS: c_uint = 0x1 | 0x2 | 0x4;
/// `hipEventDisableSystemFence`, `hipEventReleaseToDevice`,
/// `hipEventReleaseToSystem`: AMD memory-fence scopes, no CUDA counterpart.
const EVENT_AMD_FLAGS: c_uint = 0x2000_0000 | 0x4000_0000 | 0x8000_0000;

/// The null stream and `hipStreamPerThread` (2) are not destroyable.
fn is_special_stream(stream: hipStream_t) -> bool {
    (stream as usize) < 3
}

/// `hipStreamCreateWithFlags`: a stream on the current device.
pub(crate) unsafe fn hipStreamCreateWithFlags(
    stream: *mut hipStream_t,
    flags: c_uint,
) -> HipResult {
    non_null(stream, INVALID)?;
    if flags & !STREAM_NON_BLOCKING != 0 {
        return Err(INVALID);
    }
    ensure_current()?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: `handle` is a valid out-pointer; the flag values coincide.
    cu(unsafe { cu_sys::cuStreamCreate(&mut handle, flags) })?;
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(stream, handle.cast(), INVALID) }
}

/// `hipStreamDestroy`.
pub(crate) unsafe fn hipStreamDestroy(stream: hipStream_t) -> HipResult {
    if is_special_stream(stream) {
        return Err(hipError_t::hipErrorInvalidHandle);
    }
    ensure_current()?;
    // SAFETY: the caller passes a stream from hipStreamCreateWithFlags.
    cu(unsafe { cu_sys::cuStreamDestroy_v2(cu_stream(stream)) })
}

/// `hipStreamSynchronize`.
pub(crate) unsafe fn hipStreamSynchronize(stream: hipStream_t) -> HipResult {
    ensure_current()?;
    // SAFETY: the caller passes a valid stream (null is the default stream).
    cu(unsafe { cu_sys::cuStreamSynchronize(cu_stream(stream)) })
}

/// `hipStreamQuery`: `hipErrorNotReady` (600) while work is pending.
pub(crate) unsafe fn hipStreamQuery(stream: hipStream_t) -> HipResult {
    ensure_current()?;
    // SAFETY: as above.
    cu(unsafe { cu_sys::cuStreamQuery(cu_stream(stream)) })
}

/// `hipStreamWaitEvent`: `flags` must be 0.
pub(crate) unsafe fn hipStreamWaitEvent(
    stream: hipStream_t,
    event: hipEvent_t,
    flags: c_uint,
) -> HipResult {
    non_null(event, hipError_t::hipErrorInvalidHandle)?;
    if flags != 0 {
        return Err(INVALID);
    }
    ensure_current()?;
    // SAFETY: the caller passes a valid stream and event.
    cu(unsafe { cu_sys::cuStreamWaitEvent(cu_stream(stream), event.cast(), 0) })
}

/// `hipLaunchHostFunc`: runs `fn_(user_data)` on a driver thread once the
/// stream's earlier work is done.
pub(crate) unsafe fn hipLaunchHostFunc(
    stream: hipStream_t,
    fn_: hipHostFn_t,
    user_data: *mut c_void,
) -> HipResult {
    if fn_.is_none() {
        return Err(INVALID);
    }
    ensure_current()?;
    // SAFETY: `hipHostFn_t` and `CUhostFn` are the same C function pointer
    // type; the caller guarantees the callback and data stay valid.
    cu(unsafe { cu_sys::cuLaunchHostFunc(cu_stream(stream), fn_, user_data) })
}

/// `hipEventCreateWithFlags`.
pub(crate) unsafe fn hipEventCreateWithFlags(event: *mut hipEvent_t, flags: c_uint) -> HipResult {
    non_null(event, INVALID)?;
    if flags & !(EVENT_CUDA_FLAGS | EVENT_AMD_FLAGS) != 0 {
        return Err(INVALID);
    }
    ensure_current()?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: `handle` is a valid out-pointer; the flag bits coincide.
    cu(unsafe { cu_sys::cuEventCreate(&mut handle, flags & EVENT_CUDA_FLAGS) })?;
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(event, handle.cast(), INVALID) }
}

/// `hipEventDestroy`.
pub(crate) unsafe fn hipEventDestroy(event: hipEvent_t) -> HipResult {
    non_null(event, hipError_t::hipErrorInvalidHandle)?;
    ensure_current()?;
    // SAFETY: the caller passes an event from hipEventCreateWithFlags.
    cu(unsafe { cu_sys::cuEventDestroy_v2(event.cast()) })
}

/// `hipEventRecord`.
pub(crate) unsafe fn hipEventRecord(event: hipEvent_t, stream: hipStream_t) -> HipResult {
    non_null(event, hipError_t::hipErrorInvalidHandle)?;
    ensure_current()?;
    // SAFETY: the caller passes a valid event and stream.
    cu(unsafe { cu_sys::cuEventRecord(event.cast(), cu_stream(stream)) })
}

/// `hipEventSynchronize`.
pub(crate) unsafe fn hipEventSynchronize(event: hipEvent_t) -> HipResult {
    non_null(event, hipError_t::hipErrorInvalidHandle)?;
    ensure_current()?;
    // SAFETY: the caller passes a valid event.
    cu(unsafe { cu_sys::cuEventSynchronize(event.cast()) })
}

/// `hipEventQuery`: `hipErrorNotReady` (600) while pending.
pub(crate) unsafe fn hipEventQuery(event: hipEvent_t) -> HipResult {
    non_null(event, hipError_t::hipErrorInvalidHandle)?;
    ensure_current()?;
    // SAFETY: the caller passes a valid event.
    cu(unsafe { cu_sys::cuEventQuery(event.cast()) })
}

/// `hipEventElapsedTime`: milliseconds between two recorded events.
pub(crate) unsafe fn hipEventElapsedTime(
    ms: *mut f32,
    start: hipEvent_t,
    stop: hipEvent_t,
) -> HipResult {
    non_null(ms, INVALID)?;
    non_null(start, hipError_t::hipErrorInvalidHandle)?;
    non_null(stop, hipError_t::hipErrorInvalidHandle)?;
    ensure_current()?;
    let mut value = 0.0;
    // SAFETY: `value` is a valid out-pointer; the events are the caller's.
    cu(unsafe { cu_sys::cuEventElapsedTime_v2(&mut value, start.cast(), stop.cast()) })?;
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(ms, value, INVALID) }
}
