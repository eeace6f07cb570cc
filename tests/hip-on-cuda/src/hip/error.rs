//! The CUDA → HIP status translation (names, messages and the last error
//! are in the shared `status` module).

use cudarc::driver::sys::CUresult;
use hip_sys::hipError_t;

pub(crate) use super::status::HipResult;

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
}
