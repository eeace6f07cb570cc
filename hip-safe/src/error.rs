//! Error types: one per library, and the crate-level [`Error`] that wraps them.
//!
//! Every error carries the operation that failed (with sizes or dtypes where
//! they matter) and, for library failures, the library's numeric code and its
//! own name/message for it.

use std::ffi::{CStr, c_char};
use std::fmt;

use hip_sys::{LoadError, MissingSymbol, hipError_t};

/// The crate-wide result type.
pub type Result<T> = std::result::Result<T, Error>;

/// A failed HIP runtime call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HipError {
    /// The device could not satisfy an allocation (`hipErrorOutOfMemory`).
    #[error("{op}: out of device memory (hipErrorOutOfMemory, code 2)")]
    OutOfMemory {
        /// What was attempted, e.g. `hipMalloc of 1125899906842624 bytes`.
        op: String,
    },
    /// Any other failing status.
    #[error("{op}: {name} (code {code}): {message}")]
    Failed {
        /// What was attempted.
        op: String,
        /// The raw `hipError_t` value.
        code: u32,
        /// The runtime's name for the code (`hipGetErrorName`).
        name: String,
        /// The runtime's description (`hipGetErrorString`).
        message: String,
    },
}

impl HipError {
    /// The raw status code.
    pub fn code(&self) -> hipError_t {
        match self {
            HipError::OutOfMemory { .. } => hipError_t::hipErrorOutOfMemory,
            HipError::Failed { code, .. } => hipError_t(*code),
        }
    }
}

/// A failed hipRTC call or compilation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RtcError {
    /// The source did not compile; `log` is the compiler's full output.
    #[error("hipRTC compilation of `{program}` for {arch} failed (code {code}):\n{log}")]
    Compilation {
        /// The program name given to [`crate::Program::new`].
        program: String,
        /// The target architecture.
        arch: String,
        /// The raw `hiprtcResult`.
        code: u32,
        /// The complete compile log.
        log: String,
    },
    /// The architecture is not one hipRTC can compile for. Checked before
    /// compiling because real hipRTC aborts the process on an unknown arch.
    #[error("architecture `{arch}` is not supported by hipRTC: {reason}")]
    UnsupportedArch {
        /// The rejected architecture name.
        arch: String,
        /// Why it was rejected, with the accepted names.
        reason: String,
    },
    /// Any other failing hipRTC call.
    #[error("{op}: {message} (hiprtcResult {code})")]
    Failed {
        /// What was attempted.
        op: String,
        /// The raw `hiprtcResult`.
        code: u32,
        /// hipRTC's description (`hiprtcGetErrorString`).
        message: String,
    },
}

/// A failed rocBLAS call or an argument rejected before calling rocBLAS.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlasError {
    /// rocBLAS returned an error status.
    #[error("{op}: {message} (rocblas_status {code})")]
    Failed {
        /// What was attempted, with shapes and dtype.
        op: String,
        /// The raw `rocblas_status`.
        code: u32,
        /// rocBLAS's description (`rocblas_status_to_string`).
        message: String,
    },
    /// The shapes, leading dimensions, strides or buffer sizes are inconsistent.
    #[error("{op}: invalid arguments: {reason}")]
    InvalidArgument {
        /// What was attempted, with shapes and dtype.
        op: String,
        /// What is wrong.
        reason: String,
    },
}

/// A failed MIOpen call or an argument rejected before calling MIOpen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnnError {
    /// MIOpen returned an error status.
    #[error("{op}: {message} (miopenStatus {code})")]
    Failed {
        /// What was attempted, with shapes and dtype.
        op: String,
        /// The raw `miopenStatus_t`.
        code: u32,
        /// MIOpen's description (`miopenGetErrorString`).
        message: String,
    },
    /// The shapes or convolution parameters are inconsistent.
    #[error("{op}: invalid arguments: {reason}")]
    InvalidArgument {
        /// What was attempted.
        op: String,
        /// What is wrong.
        reason: String,
    },
}

/// Every error this crate returns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A ROCm library could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The loaded library lacks a function this call needs (an older release).
    #[error(transparent)]
    MissingSymbol(#[from] MissingSymbol),
    /// The HIP runtime failed.
    #[error(transparent)]
    Hip(#[from] HipError),
    /// hipRTC failed.
    #[error(transparent)]
    Rtc(#[from] RtcError),
    /// rocBLAS failed.
    #[error(transparent)]
    Blas(#[from] BlasError),
    /// MIOpen failed.
    #[error(transparent)]
    Dnn(#[from] DnnError),
    /// An argument was rejected before any library call (lengths, ranges,
    /// devices that do not match).
    #[error("{op}: {reason}")]
    InvalidArgument {
        /// What was attempted.
        op: String,
        /// What is wrong.
        reason: String,
    },
}

impl Error {
    /// True when the device ran out of memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::Hip(HipError::OutOfMemory { .. }))
    }

    pub(crate) fn invalid(op: impl fmt::Display, reason: impl fmt::Display) -> Self {
        Error::InvalidArgument {
            op: op.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// Copies a C string returned by a library into an owned `String`; `None`
/// for a null pointer.
///
/// # Safety
/// `ptr` is null or points to a NUL-terminated string that stays valid for
/// the duration of the call.
pub(crate) unsafe fn c_str_to_string(ptr: *const c_char) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    Some(
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Turns a HIP status into `Ok(())` or an error naming `op`; `op` is only
/// formatted on failure.
pub(crate) fn hip_check(
    status: std::result::Result<hipError_t, MissingSymbol>,
    op: impl fmt::Display,
) -> Result<()> {
    let status = status?;
    if status == hipError_t::hipSuccess {
        return Ok(());
    }
    Err(hip_error(status, op).into())
}

/// Builds the [`HipError`] for a failing status, asking the runtime for the
/// code's name and description.
///
/// The failure is also cleared from HIP's per-thread last-error slot: it is
/// reported through this value, and a stale entry there would otherwise make
/// libraries that poll `hipGetLastError` (rocBLAS, MIOpen) fail later on an
/// unrelated call.
pub(crate) fn hip_error(status: hipError_t, op: impl fmt::Display) -> HipError {
    let api = hip_sys::hip().ok();
    if let Some(api) = api {
        // SAFETY: no arguments; only resets the calling thread's error slot.
        let _ = unsafe { api.hipGetLastError() };
    }
    if status == hipError_t::hipErrorOutOfMemory {
        return HipError::OutOfMemory { op: op.to_string() };
    }
    let (name, message) = match api {
        // SAFETY: both functions take any code and return static strings.
        Some(api) => unsafe {
            (
                api.hipGetErrorName(status)
                    .ok()
                    .and_then(|p| c_str_to_string(p)),
                api.hipGetErrorString(status)
                    .ok()
                    .and_then(|p| c_str_to_string(p)),
            )
        },
        None => (None, None),
    };
    HipError::Failed {
        op: op.to_string(),
        code: status.0,
        name: name.unwrap_or_else(|| "unknown hipError_t".to_string()),
        message: message.unwrap_or_else(|| "no description available".to_string()),
    }
}

/// Handles the status of a release call made in `Drop`, which cannot return
/// it: a failure (for example after the device was lost) is deliberately
/// ignored, and HIP's per-thread last-error slot is cleared so that the
/// failure does not surface later through `hipGetLastError` on an unrelated
/// call. Nothing is unwrapped and nothing panics.
pub(crate) fn discard_drop_error(
    api: &hip_sys::HipApi,
    status: std::result::Result<hipError_t, MissingSymbol>,
) {
    if !matches!(status, Ok(hipError_t::hipSuccess)) {
        // SAFETY: no arguments; only resets the calling thread's error slot.
        let _ = unsafe { api.hipGetLastError() };
    }
}

/// The loaded HIP runtime, or the reason it is unavailable.
pub(crate) fn hip_api() -> Result<&'static hip_sys::HipApi> {
    Ok(hip_sys::hip()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_is_its_own_variant() {
        let err = hip_error(hipError_t::hipErrorOutOfMemory, "hipMalloc of 8 bytes");
        assert_eq!(err.code(), hipError_t::hipErrorOutOfMemory);
        let err = Error::from(err);
        assert!(err.is_out_of_memory());
        assert!(err.to_string().contains("hipMalloc of 8 bytes"));
    }

    #[test]
    fn failures_carry_code_and_operation() {
        let err = hip_error(hipError_t::hipErrorInvalidValue, "hipMemcpyAsync");
        let text = err.to_string();
        assert!(text.contains("hipMemcpyAsync"), "{text}");
        assert!(text.contains("code 1"), "{text}");
        assert!(!Error::from(err).is_out_of_memory());
    }

    #[test]
    fn success_is_ok_and_missing_symbol_passes_through() {
        assert!(hip_check(Ok(hipError_t::hipSuccess), "x").is_ok());
        let missing = MissingSymbol {
            symbol: "hipMallocAsync",
            library: "libamdhip64.so.5".into(),
        };
        let err = hip_check(Err(missing.clone()), "x").unwrap_err();
        assert_eq!(err, Error::MissingSymbol(missing));
    }
}
