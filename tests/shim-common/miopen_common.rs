//! The parts of MIOpen every shim shares: the status type at the C
//! boundary, the version and the error strings.

use std::ffi::{CStr, c_char};

use miopen_sys::miopenStatus_t;

use crate::ffi::{FfiReturn, Status, non_null, write_out};

/// The result type of the MIOpen implementations.
pub(crate) type MiopenResult<T = ()> = Result<T, miopenStatus_t>;

impl FfiReturn for miopenStatus_t {
    fn panicked() -> Self {
        miopenStatus_t::miopenStatusInternalError
    }
}

impl Status for miopenStatus_t {
    const SUCCESS: Self = miopenStatus_t::miopenStatusSuccess;
}

/// `miopenGetVersion`: MIOpen 3.4.0, the release of ROCm 6.4.
pub(crate) unsafe fn miopenGetVersion(
    major: *mut usize,
    minor: *mut usize,
    patch: *mut usize,
) -> MiopenResult {
    let bad = miopenStatus_t::miopenStatusBadParm;
    non_null(major, bad)?;
    non_null(minor, bad)?;
    non_null(patch, bad)?;
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe {
        write_out(major, 3, bad)?;
        write_out(minor, 4, bad)?;
        write_out(patch, 0, bad)
    }
}

/// `miopenGetErrorString`: a static description.
pub(crate) unsafe fn miopenGetErrorString(error: miopenStatus_t) -> *const c_char {
    use miopenStatus_t as S;
    let text: &CStr = match error {
        S::miopenStatusSuccess => c"miopenStatusSuccess",
        S::miopenStatusNotInitialized => c"miopenStatusNotInitialized",
        S::miopenStatusInvalidValue => c"miopenStatusInvalidValue",
        S::miopenStatusBadParm => c"miopenStatusBadParm",
        S::miopenStatusAllocFailed => c"miopenStatusAllocFailed",
        S::miopenStatusInternalError => c"miopenStatusInternalError",
        S::miopenStatusNotImplemented => c"miopenStatusNotImplemented",
        S::miopenStatusUnknownError => c"miopenStatusUnknownError",
        S::miopenStatusUnsupportedOp => c"miopenStatusUnsupportedOp",
        S::miopenStatusGpuOperationsSkipped => c"miopenStatusGpuOperationsSkipped",
        S::miopenStatusVersionMismatch => c"miopenStatusVersionMismatch",
        _ => c"Unknown error",
    };
    text.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_and_strings() {
        let (mut a, mut b, mut c) = (0, 0, 0);
        // SAFETY: valid out-pointers; the strings are static.
        unsafe {
            assert_eq!(miopenGetVersion(&mut a, &mut b, &mut c), Ok(()));
            assert_eq!(
                CStr::from_ptr(miopenGetErrorString(miopenStatus_t(3))),
                c"miopenStatusBadParm"
            );
            assert_eq!(
                CStr::from_ptr(miopenGetErrorString(miopenStatus_t(42))),
                c"Unknown error"
            );
        }
        assert_eq!((a, b, c), (3, 4, 0));
    }
}
