//! The step from raw FFI calls to [`Result`]s, shared by every library this
//! crate wraps (HIP runtime, hipRTC, rocBLAS, MIOpen).
//!
//! Every function of the `-sys` crates returns [`Call<S>`]: the library's
//! status code `S`, or the symbol the loaded library lacks. Each status type
//! implements [`Status`], which knows which codes mean success and builds
//! the error for the others, with the library's own name and message for
//! the code. A call site is then one expression that carries the call and
//! a description of the operation (formatted only on failure):
//!
//! ```text
//! // SAFETY: ...
//! unsafe { api.hipStreamSynchronize(stream) }.check("hipStreamSynchronize")?;
//! let ptr = out_ptr(format_args!("hipMalloc of {bytes} bytes"), |ptr| {
//!     // SAFETY: ...
//!     unsafe { api.hipMalloc(ptr, bytes) }
//! })?;
//! ```

use std::ffi::{CStr, c_char};
use std::fmt::Display;

use hip_sys::{MissingSymbol, hipError_t, hiprtcResult};
use miopen_sys::miopenStatus_t;
use rccl_sys::ncclResult_t;
use rocblas_sys::rocblas_status;

use crate::error::{BlasError, CommError, DnnError, Error, HipError, Result, RtcError};

/// What every FFI function returns: the library's status code, or the
/// symbol the loaded library does not export.
pub(crate) type Call<S> = std::result::Result<S, MissingSymbol>;

/// A status code of one ROCm library.
pub(crate) trait Status: Copy {
    /// Whether the code reports success (or, for rocBLAS, information only).
    fn is_success(self) -> bool;

    /// The error for this failing code; `op` describes the operation, with
    /// the sizes or values that matter.
    fn error(self, op: impl Display) -> Error;

    /// Leaves nothing behind after a failure that is not reported (a
    /// release call in `Drop`).
    fn forget_failure() {}
}

/// Turns the raw result of an FFI call into this crate's [`Result`].
pub(crate) trait CheckStatus {
    /// `Ok(())` on success; otherwise the missing symbol, or the library's
    /// error for the operation `op`.
    fn check(self, op: impl Display) -> Result<()>;

    /// Drops the outcome of a call whose failure cannot be reported (a
    /// release call in `Drop`: a failure, for example on a lost device,
    /// only leaks the resource). Nothing is unwrapped and nothing panics.
    fn discard(self);
}

impl<S: Status> CheckStatus for Call<S> {
    fn check(self, op: impl Display) -> Result<()> {
        let status = self?;
        if status.is_success() {
            Ok(())
        } else {
            Err(status.error(op))
        }
    }

    fn discard(self) {
        if !matches!(self, Ok(status) if status.is_success()) {
            S::forget_failure();
        }
    }
}

/// Makes an FFI call that writes its result through an out-pointer to a
/// `T::default()` slot, and returns the value written when the call succeeds.
pub(crate) fn out<T: Default, S: Status>(
    op: impl Display,
    call: impl FnOnce(&mut T) -> Call<S>,
) -> Result<T> {
    let mut value = T::default();
    call(&mut value).check(op)?;
    Ok(value)
}

/// [`out`] for calls that create a handle or an allocation: the slot starts
/// as a null pointer.
pub(crate) fn out_ptr<T, S: Status>(
    op: impl Display,
    call: impl FnOnce(&mut *mut T) -> Call<S>,
) -> Result<*mut T> {
    let mut ptr = std::ptr::null_mut();
    call(&mut ptr).check(op)?;
    Ok(ptr)
}

impl Status for hipError_t {
    fn is_success(self) -> bool {
        self == hipError_t::hipSuccess
    }

    fn error(self, op: impl Display) -> Error {
        hip_error(self, op).into()
    }

    fn forget_failure() {
        clear_hip_last_error();
    }
}

/// Resets HIP's per-thread last-error slot.
///
/// A failure this crate reports (or deliberately ignores) must not stay
/// there: libraries that poll `hipGetLastError` (rocBLAS, MIOpen) would
/// otherwise fail later on an unrelated call.
pub(crate) fn clear_hip_last_error() {
    if let Ok(api) = hip_sys::hip() {
        // SAFETY: no arguments; only resets the calling thread's error slot.
        let _ = unsafe { api.hipGetLastError() };
    }
}

/// Builds the [`HipError`] for a failing status, asking the runtime for the
/// code's name and description, and clears the failure from HIP's
/// last-error slot (see [`clear_hip_last_error`]).
fn hip_error(status: hipError_t, op: impl Display) -> HipError {
    clear_hip_last_error();
    if status == hipError_t::hipErrorOutOfMemory {
        return HipError::OutOfMemory { op: op.to_string() };
    }
    let api = hip_sys::hip().ok();
    // SAFETY: both functions take any code and return static strings.
    let (name, message) = unsafe {
        (
            library_text(api.and_then(|api| api.hipGetErrorName(status).ok())),
            library_text(api.and_then(|api| api.hipGetErrorString(status).ok())),
        )
    };
    HipError::Failed {
        op: op.to_string(),
        code: status.0,
        name: name.unwrap_or_else(|| "unknown hipError_t".to_string()),
        message: message.unwrap_or_else(|| "no description available".to_string()),
    }
}

/// rocBLAS statuses that report information, not failure.
const ROCBLAS_NOT_ERRORS: &[rocblas_status] = &[
    rocblas_status::rocblas_status_success,
    rocblas_status::rocblas_status_perf_degraded,
    rocblas_status::rocblas_status_size_query_mismatch,
    rocblas_status::rocblas_status_size_increased,
    rocblas_status::rocblas_status_size_unchanged,
    rocblas_status::rocblas_status_continue,
];

/// [`Status`] for the libraries whose failures are `$error::Failed { op,
/// code, message }`, with the message from the library's own function for
/// the code (`unknown` when there is none); `success` lists the codes that
/// are not failures.
macro_rules! impl_status {
    ($($status:ty => $error:ident {
        success: $success:expr,
        library: $library:path,
        describe: $describe:ident,
        unknown: $unknown:literal $(,)?
    })*) => {$(
        impl Status for $status {
            fn is_success(self) -> bool {
                $success.contains(&self)
            }

            fn error(self, op: impl Display) -> Error {
                let api = $library().ok();
                // SAFETY: the library's message function takes any code and
                // returns a static string (or null).
                let message = unsafe { library_text(api.and_then(|api| api.$describe(self).ok())) };
                $error::Failed {
                    op: op.to_string(),
                    code: self.0,
                    message: message.unwrap_or_else(|| $unknown.into()),
                }
                .into()
            }
        }
    )*};
}

impl_status! {
    hiprtcResult => RtcError {
        success: [hiprtcResult::HIPRTC_SUCCESS],
        library: hip_sys::hiprtc,
        describe: hiprtcGetErrorString,
        unknown: "unknown hiprtcResult",
    }
    rocblas_status => BlasError {
        success: ROCBLAS_NOT_ERRORS,
        library: rocblas_sys::rocblas,
        describe: rocblas_status_to_string,
        unknown: "unknown rocblas_status",
    }
    miopenStatus_t => DnnError {
        success: [miopenStatus_t::miopenStatusSuccess],
        library: miopen_sys::miopen,
        describe: miopenGetErrorString,
        unknown: "unknown miopenStatus_t",
    }
    ncclResult_t => CommError {
        success: [ncclResult_t::ncclSuccess],
        library: rccl_sys::rccl,
        describe: ncclGetErrorString,
        unknown: "unknown ncclResult_t",
    }
}

/// Copies a string returned by a library's message function into an owned
/// `String`; `None` when there is none (no library, no symbol, or null).
///
/// # Safety
/// `text` is `None`, null, or points to a NUL-terminated string that stays
/// valid for the duration of the call.
unsafe fn library_text(text: Option<*const c_char>) -> Option<String> {
    let ptr = text.filter(|p| !p.is_null())?;
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    Some(
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned(),
    )
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
        let err = hipError_t::hipErrorInvalidValue.error("hipMemcpyAsync");
        let text = err.to_string();
        assert!(text.contains("hipMemcpyAsync"), "{text}");
        assert!(text.contains("code 1"), "{text}");
        assert!(!err.is_out_of_memory());
    }

    #[test]
    fn success_is_ok_and_missing_symbol_passes_through() {
        assert!(Call::Ok(hipError_t::hipSuccess).check("x").is_ok());
        let missing = MissingSymbol {
            symbol: "hipMallocAsync",
            library: "libamdhip64.so.5".into(),
        };
        let err = Call::<hipError_t>::Err(missing.clone())
            .check("x")
            .unwrap_err();
        assert_eq!(err, Error::MissingSymbol(missing));
    }

    #[test]
    fn out_params_are_returned_only_on_success() {
        let written = out("write", |v: &mut u32| {
            *v = 7;
            Ok(hipError_t::hipSuccess)
        });
        assert_eq!(written, Ok(7));
        let failed = out("write (failing)", |v: &mut u32| {
            *v = 7;
            Ok(hipError_t::hipErrorInvalidValue)
        });
        let text = failed.unwrap_err().to_string();
        assert!(text.starts_with("write (failing): "), "{text}");
        let ptr = out_ptr("create", |_: &mut *mut u8| Ok(hipError_t::hipSuccess));
        assert_eq!(ptr, Ok(std::ptr::null_mut()));
    }

    #[test]
    fn informational_rocblas_codes_are_not_errors() {
        assert!(rocblas_status::rocblas_status_perf_degraded.is_success());
        assert!(!rocblas_status::rocblas_status_invalid_size.is_success());
        let text = rocblas_status::rocblas_status_invalid_size
            .error("rocblas_gemm_ex(f32)")
            .to_string();
        assert!(text.starts_with("rocblas_gemm_ex(f32): "), "{text}");
        assert!(
            text.ends_with(&format!(
                "(rocblas_status {})",
                rocblas_status::rocblas_status_invalid_size.0
            )),
            "{text}"
        );
    }
}
