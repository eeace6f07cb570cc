//! HIP status codes: the CUDA → HIP translation table, names and messages,
//! and the per-thread last error of `hipGetLastError`.

use std::cell::Cell;
use std::ffi::c_char;

use cudarc::driver::sys::CUresult;
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

/// Converts a CUDA driver result into a HIP result.
pub(crate) fn cu(result: CUresult) -> HipResult {
    match hip_error_of(result) {
        hipError_t::hipSuccess => Ok(()),
        err => Err(err),
    }
}

/// The HIP status for a CUDA driver status; anything not listed is
/// `hipErrorUnknown`.
pub(crate) fn hip_error_of(result: CUresult) -> hipError_t {
    use CUresult as C;
    match result {
        C::CUDA_SUCCESS => hipError_t::hipSuccess,
        C::CUDA_ERROR_INVALID_VALUE => hipError_t::hipErrorInvalidValue,
        C::CUDA_ERROR_OUT_OF_MEMORY => hipError_t::hipErrorOutOfMemory,
        C::CUDA_ERROR_NOT_INITIALIZED => hipError_t::hipErrorNotInitialized,
        C::CUDA_ERROR_DEINITIALIZED => hipError_t::hipErrorDeinitialized,
        C::CUDA_ERROR_PROFILER_DISABLED => hipError_t::hipErrorProfilerDisabled,
        C::CUDA_ERROR_PROFILER_NOT_INITIALIZED => hipError_t::hipErrorProfilerNotInitialized,
        C::CUDA_ERROR_PROFILER_ALREADY_STARTED => hipError_t::hipErrorProfilerAlreadyStarted,
        C::CUDA_ERROR_PROFILER_ALREADY_STOPPED => hipError_t::hipErrorProfilerAlreadyStopped,
        C::CUDA_ERROR_STUB_LIBRARY | C::CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER => {
            hipError_t::hipErrorInsufficientDriver
        }
        C::CUDA_ERROR_NO_DEVICE | C::CUDA_ERROR_DEVICE_UNAVAILABLE => hipError_t::hipErrorNoDevice,
        C::CUDA_ERROR_INVALID_DEVICE => hipError_t::hipErrorInvalidDevice,
        C::CUDA_ERROR_INVALID_IMAGE => hipError_t::hipErrorInvalidImage,
        C::CUDA_ERROR_INVALID_CONTEXT => hipError_t::hipErrorInvalidContext,
        C::CUDA_ERROR_CONTEXT_ALREADY_CURRENT => hipError_t::hipErrorContextAlreadyCurrent,
        C::CUDA_ERROR_MAP_FAILED => hipError_t::hipErrorMapFailed,
        C::CUDA_ERROR_UNMAP_FAILED => hipError_t::hipErrorUnmapFailed,
        C::CUDA_ERROR_ARRAY_IS_MAPPED => hipError_t::hipErrorArrayIsMapped,
        C::CUDA_ERROR_ALREADY_MAPPED => hipError_t::hipErrorAlreadyMapped,
        C::CUDA_ERROR_NO_BINARY_FOR_GPU => hipError_t::hipErrorNoBinaryForGpu,
        C::CUDA_ERROR_ALREADY_ACQUIRED => hipError_t::hipErrorAlreadyAcquired,
        C::CUDA_ERROR_NOT_MAPPED => hipError_t::hipErrorNotMapped,
        C::CUDA_ERROR_NOT_MAPPED_AS_ARRAY => hipError_t::hipErrorNotMappedAsArray,
        C::CUDA_ERROR_NOT_MAPPED_AS_POINTER => hipError_t::hipErrorNotMappedAsPointer,
        C::CUDA_ERROR_ECC_UNCORRECTABLE => hipError_t::hipErrorECCNotCorrectable,
        C::CUDA_ERROR_UNSUPPORTED_LIMIT => hipError_t::hipErrorUnsupportedLimit,
        C::CUDA_ERROR_CONTEXT_ALREADY_IN_USE => hipError_t::hipErrorContextAlreadyInUse,
        C::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => hipError_t::hipErrorPeerAccessUnsupported,
        C::CUDA_ERROR_INVALID_PTX | C::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => {
            hipError_t::hipErrorInvalidKernelFile
        }
        C::CUDA_ERROR_INVALID_GRAPHICS_CONTEXT => hipError_t::hipErrorInvalidGraphicsContext,
        C::CUDA_ERROR_INVALID_SOURCE => hipError_t::hipErrorInvalidSource,
        C::CUDA_ERROR_FILE_NOT_FOUND => hipError_t::hipErrorFileNotFound,
        C::CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND => {
            hipError_t::hipErrorSharedObjectSymbolNotFound
        }
        C::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED => hipError_t::hipErrorSharedObjectInitFailed,
        C::CUDA_ERROR_OPERATING_SYSTEM => hipError_t::hipErrorOperatingSystem,
        C::CUDA_ERROR_INVALID_HANDLE => hipError_t::hipErrorInvalidHandle,
        C::CUDA_ERROR_ILLEGAL_STATE => hipError_t::hipErrorIllegalState,
        C::CUDA_ERROR_NOT_FOUND => hipError_t::hipErrorNotFound,
        C::CUDA_ERROR_NOT_READY => hipError_t::hipErrorNotReady,
        C::CUDA_ERROR_ILLEGAL_ADDRESS => hipError_t::hipErrorIllegalAddress,
        C::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => hipError_t::hipErrorLaunchOutOfResources,
        C::CUDA_ERROR_LAUNCH_TIMEOUT => hipError_t::hipErrorLaunchTimeOut,
        C::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => hipError_t::hipErrorPeerAccessAlreadyEnabled,
        C::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED => hipError_t::hipErrorPeerAccessNotEnabled,
        C::CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE => hipError_t::hipErrorSetOnActiveProcess,
        C::CUDA_ERROR_CONTEXT_IS_DESTROYED => hipError_t::hipErrorContextIsDestroyed,
        C::CUDA_ERROR_ASSERT => hipError_t::hipErrorAssert,
        C::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED => {
            hipError_t::hipErrorHostMemoryAlreadyRegistered
        }
        C::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED => hipError_t::hipErrorHostMemoryNotRegistered,
        C::CUDA_ERROR_LAUNCH_FAILED
        | C::CUDA_ERROR_HARDWARE_STACK_ERROR
        | C::CUDA_ERROR_ILLEGAL_INSTRUCTION
        | C::CUDA_ERROR_MISALIGNED_ADDRESS
        | C::CUDA_ERROR_INVALID_ADDRESS_SPACE
        | C::CUDA_ERROR_INVALID_PC => hipError_t::hipErrorLaunchFailure,
        C::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE => hipError_t::hipErrorCooperativeLaunchTooLarge,
        C::CUDA_ERROR_NOT_SUPPORTED => hipError_t::hipErrorNotSupported,
        C::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED => hipError_t::hipErrorStreamCaptureUnsupported,
        C::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED => hipError_t::hipErrorStreamCaptureInvalidated,
        C::CUDA_ERROR_STREAM_CAPTURE_MERGE => hipError_t::hipErrorStreamCaptureMerge,
        C::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED => hipError_t::hipErrorStreamCaptureUnmatched,
        C::CUDA_ERROR_STREAM_CAPTURE_UNJOINED => hipError_t::hipErrorStreamCaptureUnjoined,
        C::CUDA_ERROR_STREAM_CAPTURE_ISOLATION => hipError_t::hipErrorStreamCaptureIsolation,
        C::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT => hipError_t::hipErrorStreamCaptureImplicit,
        C::CUDA_ERROR_CAPTURED_EVENT => hipError_t::hipErrorCapturedEvent,
        C::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD => hipError_t::hipErrorStreamCaptureWrongThread,
        C::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE => hipError_t::hipErrorGraphExecUpdateFailure,
        _ => hipError_t::hipErrorUnknown,
    }
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
    fn common_codes_keep_their_numbers() {
        for (cuda, hip) in [
            (CUresult::CUDA_SUCCESS, 0),
            (CUresult::CUDA_ERROR_INVALID_VALUE, 1),
            (CUresult::CUDA_ERROR_OUT_OF_MEMORY, 2),
            (CUresult::CUDA_ERROR_NO_DEVICE, 100),
            (CUresult::CUDA_ERROR_INVALID_DEVICE, 101),
            (CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU, 209),
            (CUresult::CUDA_ERROR_NOT_FOUND, 500),
            (CUresult::CUDA_ERROR_NOT_READY, 600),
            (CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, 700),
            (CUresult::CUDA_ERROR_LAUNCH_FAILED, 719),
            (CUresult::CUDA_ERROR_UNKNOWN, 999),
        ] {
            assert_eq!(hip_error_of(cuda).0, hip, "{cuda:?}");
        }
        assert_eq!(
            hip_error_of(CUresult::CUDA_ERROR_MPS_CONNECTION_FAILED),
            hipError_t::hipErrorUnknown
        );
    }

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
