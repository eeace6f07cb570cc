//! HIP status codes every shim shares: their names and messages, the
//! per-thread last error of `hipGetLastError`, and the C boundary's
//! handling of `hipError_t`.

use std::cell::Cell;
use std::ffi::c_char;

use hip_sys::hipError_t;

use crate::ffi::{FfiReturn, Status};

/// The result type of the HIP implementations.
pub(crate) type HipResult<T = ()> = Result<T, hipError_t>;

impl FfiReturn for hipError_t {
    fn panicked() -> Self {
        hipError_t::hipErrorUnknown.observe_error();
        hipError_t::hipErrorUnknown
    }
}

impl Status for hipError_t {
    const SUCCESS: Self = hipError_t::hipSuccess;

    fn observe_error(self) {
        // HIP does not record "not ready" (it is a query answer, not an error).
        if self != hipError_t::hipErrorNotReady {
            LAST_ERROR.with(|e| e.set(self));
        }
    }
}

thread_local! {
    /// The last error returned by a HIP call on this thread.
    static LAST_ERROR: Cell<hipError_t> = const { Cell::new(hipError_t::hipSuccess) };
}

/// Returns and clears this thread's last HIP error.
pub(crate) fn take_last_error() -> hipError_t {
    LAST_ERROR.with(|e| e.replace(hipError_t::hipSuccess))
}

/// Name and message of every HIP status this shim can return, plus the
/// other well-known ones.
const MESSAGES: &[(hipError_t, &std::ffi::CStr, &std::ffi::CStr)] = &[
    (hipError_t::hipSuccess, c"hipSuccess", c"no error"),
    (hipError_t::hipErrorInvalidValue, c"hipErrorInvalidValue", c"invalid argument"),
    (hipError_t::hipErrorOutOfMemory, c"hipErrorOutOfMemory", c"out of memory"),
    (hipError_t::hipErrorNotInitialized, c"hipErrorNotInitialized", c"initialization error"),
    (hipError_t::hipErrorDeinitialized, c"hipErrorDeinitialized", c"driver shutting down"),
    (hipError_t::hipErrorProfilerDisabled, c"hipErrorProfilerDisabled", c"profiler disabled"),
    (hipError_t::hipErrorProfilerNotInitialized, c"hipErrorProfilerNotInitialized", c"profiler not initialized"),
    (hipError_t::hipErrorProfilerAlreadyStarted, c"hipErrorProfilerAlreadyStarted", c"profiler already started"),
    (hipError_t::hipErrorProfilerAlreadyStopped, c"hipErrorProfilerAlreadyStopped", c"profiler already stopped"),
    (hipError_t::hipErrorInvalidConfiguration, c"hipErrorInvalidConfiguration", c"invalid configuration argument"),
    (hipError_t::hipErrorInvalidDevicePointer, c"hipErrorInvalidDevicePointer", c"invalid device pointer"),
    (hipError_t::hipErrorInvalidMemcpyDirection, c"hipErrorInvalidMemcpyDirection", c"invalid copy direction for memcpy"),
    (hipError_t::hipErrorInsufficientDriver, c"hipErrorInsufficientDriver", c"driver version is insufficient for runtime version"),
    (hipError_t::hipErrorInvalidDeviceFunction, c"hipErrorInvalidDeviceFunction", c"invalid device function"),
    (hipError_t::hipErrorNoDevice, c"hipErrorNoDevice", c"no ROCm-capable device is detected"),
    (hipError_t::hipErrorInvalidDevice, c"hipErrorInvalidDevice", c"invalid device ordinal"),
    (hipError_t::hipErrorInvalidImage, c"hipErrorInvalidImage", c"device kernel image is invalid"),
    (hipError_t::hipErrorInvalidContext, c"hipErrorInvalidContext", c"invalid device context"),
    (hipError_t::hipErrorContextAlreadyCurrent, c"hipErrorContextAlreadyCurrent", c"context is already current context"),
    (hipError_t::hipErrorMapFailed, c"hipErrorMapFailed", c"mapping of buffer object failed"),
    (hipError_t::hipErrorUnmapFailed, c"hipErrorUnmapFailed", c"unmapping of buffer object failed"),
    (hipError_t::hipErrorArrayIsMapped, c"hipErrorArrayIsMapped", c"array is mapped"),
    (hipError_t::hipErrorAlreadyMapped, c"hipErrorAlreadyMapped", c"resource already mapped"),
    (hipError_t::hipErrorNoBinaryForGpu, c"hipErrorNoBinaryForGpu", c"no kernel image is available for execution on the device"),
    (hipError_t::hipErrorAlreadyAcquired, c"hipErrorAlreadyAcquired", c"resource already acquired"),
    (hipError_t::hipErrorNotMapped, c"hipErrorNotMapped", c"resource not mapped"),
    (hipError_t::hipErrorNotMappedAsArray, c"hipErrorNotMappedAsArray", c"resource not mapped as array"),
    (hipError_t::hipErrorNotMappedAsPointer, c"hipErrorNotMappedAsPointer", c"resource not mapped as pointer"),
    (hipError_t::hipErrorECCNotCorrectable, c"hipErrorECCNotCorrectable", c"uncorrectable ECC error encountered"),
    (hipError_t::hipErrorUnsupportedLimit, c"hipErrorUnsupportedLimit", c"limit is not supported on this architecture"),
    (hipError_t::hipErrorContextAlreadyInUse, c"hipErrorContextAlreadyInUse", c"exclusive-thread device already in use by a different thread"),
    (hipError_t::hipErrorPeerAccessUnsupported, c"hipErrorPeerAccessUnsupported", c"peer access is not supported between these two devices"),
    (hipError_t::hipErrorInvalidKernelFile, c"hipErrorInvalidKernelFile", c"a PTX JIT compilation failed"),
    (hipError_t::hipErrorInvalidGraphicsContext, c"hipErrorInvalidGraphicsContext", c"invalid OpenGL or DirectX context"),
    (hipError_t::hipErrorInvalidSource, c"hipErrorInvalidSource", c"device kernel image is invalid"),
    (hipError_t::hipErrorFileNotFound, c"hipErrorFileNotFound", c"file not found"),
    (hipError_t::hipErrorSharedObjectSymbolNotFound, c"hipErrorSharedObjectSymbolNotFound", c"shared object symbol not found"),
    (hipError_t::hipErrorSharedObjectInitFailed, c"hipErrorSharedObjectInitFailed", c"shared object initialization failed"),
    (hipError_t::hipErrorOperatingSystem, c"hipErrorOperatingSystem", c"OS call failed or operation not supported on this OS"),
    (hipError_t::hipErrorInvalidHandle, c"hipErrorInvalidHandle", c"invalid resource handle"),
    (hipError_t::hipErrorIllegalState, c"hipErrorIllegalState", c"the operation cannot be performed in the present state"),
    (hipError_t::hipErrorNotFound, c"hipErrorNotFound", c"named symbol not found"),
    (hipError_t::hipErrorNotReady, c"hipErrorNotReady", c"device not ready"),
    (hipError_t::hipErrorIllegalAddress, c"hipErrorIllegalAddress", c"an illegal memory access was encountered"),
    (hipError_t::hipErrorLaunchOutOfResources, c"hipErrorLaunchOutOfResources", c"too many resources requested for launch"),
    (hipError_t::hipErrorLaunchTimeOut, c"hipErrorLaunchTimeOut", c"the launch timed out and was terminated"),
    (hipError_t::hipErrorPeerAccessAlreadyEnabled, c"hipErrorPeerAccessAlreadyEnabled", c"peer access is already enabled"),
    (hipError_t::hipErrorPeerAccessNotEnabled, c"hipErrorPeerAccessNotEnabled", c"peer access has not been enabled"),
    (hipError_t::hipErrorSetOnActiveProcess, c"hipErrorSetOnActiveProcess", c"cannot set while device is active in this process"),
    (hipError_t::hipErrorContextIsDestroyed, c"hipErrorContextIsDestroyed", c"context is destroyed"),
    (hipError_t::hipErrorAssert, c"hipErrorAssert", c"device-side assert triggered"),
    (hipError_t::hipErrorHostMemoryAlreadyRegistered, c"hipErrorHostMemoryAlreadyRegistered", c"part or all of the requested memory range is already mapped"),
    (hipError_t::hipErrorHostMemoryNotRegistered, c"hipErrorHostMemoryNotRegistered", c"pointer does not correspond to a registered memory region"),
    (hipError_t::hipErrorLaunchFailure, c"hipErrorLaunchFailure", c"unspecified launch failure"),
    (hipError_t::hipErrorCooperativeLaunchTooLarge, c"hipErrorCooperativeLaunchTooLarge", c"too many blocks in cooperative launch"),
    (hipError_t::hipErrorNotSupported, c"hipErrorNotSupported", c"operation not supported"),
    (hipError_t::hipErrorStreamCaptureUnsupported, c"hipErrorStreamCaptureUnsupported", c"operation not permitted when stream is capturing"),
    (hipError_t::hipErrorStreamCaptureInvalidated, c"hipErrorStreamCaptureInvalidated", c"operation failed due to a previous error during capture"),
    (hipError_t::hipErrorStreamCaptureMerge, c"hipErrorStreamCaptureMerge", c"operation would result in a merge of separate capture sequences"),
    (hipError_t::hipErrorStreamCaptureUnmatched, c"hipErrorStreamCaptureUnmatched", c"capture was not ended in the same stream as it began"),
    (hipError_t::hipErrorStreamCaptureUnjoined, c"hipErrorStreamCaptureUnjoined", c"capturing stream has unjoined work"),
    (hipError_t::hipErrorStreamCaptureIsolation, c"hipErrorStreamCaptureIsolation", c"dependency created on uncaptured work in another stream"),
    (hipError_t::hipErrorStreamCaptureImplicit, c"hipErrorStreamCaptureImplicit", c"operation would make the legacy stream depend on a capturing blocking stream"),
    (hipError_t::hipErrorCapturedEvent, c"hipErrorCapturedEvent", c"operation not permitted on an event last recorded in a capturing stream"),
    (hipError_t::hipErrorStreamCaptureWrongThread, c"hipErrorStreamCaptureWrongThread", c"attempt to terminate a thread-local capture sequence from another thread"),
    (hipError_t::hipErrorGraphExecUpdateFailure, c"hipErrorGraphExecUpdateFailure", c"the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
    (hipError_t::hipErrorUnknown, c"hipErrorUnknown", c"unknown error"),
];

fn describe(status: hipError_t) -> (&'static std::ffi::CStr, &'static std::ffi::CStr) {
    MESSAGES
        .iter()
        .find(|(code, _, _)| *code == status)
        .map_or((c"hipErrorUnknown", c"unknown error"), |(_, name, text)| {
            (*name, *text)
        })
}

/// `hipGetErrorName`: a static name; unknown codes read `hipErrorUnknown`.
pub(crate) unsafe fn hipGetErrorName(status: hipError_t) -> *const c_char {
    describe(status).0.as_ptr()
}

/// `hipGetErrorString`: a static message; unknown codes read `unknown error`.
pub(crate) unsafe fn hipGetErrorString(status: hipError_t) -> *const c_char {
    describe(status).1.as_ptr()
}

/// `hipGetLastError`: returns and resets this thread's last error.
pub(crate) unsafe fn hipGetLastError() -> hipError_t {
    take_last_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_static() {
        let mut codes: Vec<u32> = MESSAGES.iter().map(|(code, _, _)| code.0).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), MESSAGES.len());
        // SAFETY: the returned pointers are static C strings.
        let name = unsafe { std::ffi::CStr::from_ptr(hipGetErrorName(hipError_t(600))) };
        assert_eq!(name, c"hipErrorNotReady");
        // SAFETY: as above.
        let unknown = unsafe { std::ffi::CStr::from_ptr(hipGetErrorString(hipError_t(123_456))) };
        assert_eq!(unknown, c"unknown error");
    }

    #[test]
    fn last_error_is_per_thread_and_reset_on_read() {
        hipError_t::hipErrorInvalidValue.observe_error();
        hipError_t::hipErrorNotReady.observe_error();
        assert_eq!(take_last_error(), hipError_t::hipErrorInvalidValue);
        assert_eq!(take_last_error(), hipError_t::hipSuccess);
        std::thread::spawn(|| assert_eq!(take_last_error(), hipError_t::hipSuccess))
            .join()
            .unwrap();
    }
}
