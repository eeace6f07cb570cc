//! The parts of rocBLAS every shim shares: the status type at the C
//! boundary, status names, and the version strings (the including module
//! defines `VERSION`).

use std::ffi::{CStr, c_char};

use rocblas_sys::rocblas_status;

use super::VERSION;
use crate::ffi::{FfiReturn, Status, copy_c_string, non_null, write_out};

/// The result type of the rocBLAS implementations.
pub(crate) type BlasResult<T = ()> = Result<T, rocblas_status>;

impl FfiReturn for rocblas_status {
    fn panicked() -> Self {
        rocblas_status::rocblas_status_internal_error
    }
}

impl Status for rocblas_status {
    const SUCCESS: Self = rocblas_status::rocblas_status_success;
}

/// `rocblas_status_to_string`: a static name.
pub(crate) unsafe fn rocblas_status_to_string(status: rocblas_status) -> *const c_char {
    use rocblas_status as S;
    let text: &CStr = match status {
        S::rocblas_status_success => c"rocblas_status_success",
        S::rocblas_status_invalid_handle => c"rocblas_status_invalid_handle",
        S::rocblas_status_not_implemented => c"rocblas_status_not_implemented",
        S::rocblas_status_invalid_pointer => c"rocblas_status_invalid_pointer",
        S::rocblas_status_invalid_size => c"rocblas_status_invalid_size",
        S::rocblas_status_memory_error => c"rocblas_status_memory_error",
        S::rocblas_status_internal_error => c"rocblas_status_internal_error",
        S::rocblas_status_perf_degraded => c"rocblas_status_perf_degraded",
        S::rocblas_status_size_query_mismatch => c"rocblas_status_size_query_mismatch",
        S::rocblas_status_size_increased => c"rocblas_status_size_increased",
        S::rocblas_status_size_unchanged => c"rocblas_status_size_unchanged",
        S::rocblas_status_invalid_value => c"rocblas_status_invalid_value",
        S::rocblas_status_continue => c"rocblas_status_continue",
        S::rocblas_status_check_numerics_fail => c"rocblas_status_check_numerics_fail",
        S::rocblas_status_excluded_from_build => c"rocblas_status_excluded_from_build",
        S::rocblas_status_arch_mismatch => c"rocblas_status_arch_mismatch",
        _ => c"Invalid status",
    };
    text.as_ptr()
}

/// `rocblas_get_version_string_size`: length including the NUL.
pub(crate) unsafe fn rocblas_get_version_string_size(len: *mut usize) -> BlasResult {
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe {
        write_out(
            len,
            VERSION.len() + 1,
            rocblas_status::rocblas_status_invalid_pointer,
        )
    }
}

/// `rocblas_get_version_string`: copies the version if `len` has room.
pub(crate) unsafe fn rocblas_get_version_string(buf: *mut c_char, len: usize) -> BlasResult {
    non_null(buf, rocblas_status::rocblas_status_invalid_pointer)?;
    if len < VERSION.len() + 1 {
        return Err(rocblas_status::rocblas_status_invalid_size);
    }
    // SAFETY: `buf` has room for `len` bytes, checked against the length.
    unsafe { copy_c_string(VERSION, buf) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_and_status_strings() {
        let mut size = 0;
        let mut buf = [0 as c_char; 64];
        // SAFETY: valid buffers of the sizes passed.
        unsafe {
            assert_eq!(rocblas_get_version_string_size(&mut size), Ok(()));
            assert_eq!(
                rocblas_get_version_string(buf.as_mut_ptr(), 4),
                Err(rocblas_status::rocblas_status_invalid_size)
            );
            assert_eq!(rocblas_get_version_string(buf.as_mut_ptr(), size), Ok(()));
            assert_eq!(CStr::from_ptr(buf.as_ptr()).to_bytes(), VERSION);
            let text = CStr::from_ptr(rocblas_status_to_string(rocblas_status(11)));
            assert_eq!(text, c"rocblas_status_invalid_value");
            let text = CStr::from_ptr(rocblas_status_to_string(rocblas_status(77)));
            assert_eq!(text, c"Invalid status");
        }
    }
}
