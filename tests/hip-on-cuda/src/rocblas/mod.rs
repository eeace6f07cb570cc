//! rocBLAS on cuBLAS: handles, streams, pointer mode, status strings and the
//! version; the GEMMs are in [`gemm`].
//!
//! A `rocblas_handle` is a boxed [`Handle`] owning a cuBLAS handle created
//! on the calling thread's current HIP device, in `CUBLAS_DEFAULT_MATH` so
//! that FP32 GEMMs are never downgraded to TF32.

mod gemm;

pub(crate) use gemm::{rocblas_gemm_ex, rocblas_gemm_strided_batched_ex};

use std::ffi::{CStr, c_char};

use cudarc::cublas::sys::{self as cublas, cublasHandle_t, cublasStatus_t};
use hip_sys::hipStream_t;
use rocblas_sys::{rocblas_handle, rocblas_pointer_mode, rocblas_status};

use crate::ffi::{FfiReturn, Status, copy_c_string, non_null, write_out};

pub(crate) type BlasResult<T = ()> = Result<T, rocblas_status>;

impl FfiReturn for rocblas_status {
    fn panicked() -> Self {
        rocblas_status::rocblas_status_internal_error
    }
}

impl Status for rocblas_status {
    const SUCCESS: Self = rocblas_status::rocblas_status_success;
}

/// The rocBLAS status for a cuBLAS status.
pub(crate) fn blas(status: cublasStatus_t) -> BlasResult {
    use cublasStatus_t as C;
    Err(match status {
        C::CUBLAS_STATUS_SUCCESS => return Ok(()),
        C::CUBLAS_STATUS_NOT_INITIALIZED => rocblas_status::rocblas_status_invalid_handle,
        C::CUBLAS_STATUS_ALLOC_FAILED => rocblas_status::rocblas_status_memory_error,
        C::CUBLAS_STATUS_INVALID_VALUE => rocblas_status::rocblas_status_invalid_value,
        C::CUBLAS_STATUS_ARCH_MISMATCH => rocblas_status::rocblas_status_arch_mismatch,
        C::CUBLAS_STATUS_NOT_SUPPORTED => rocblas_status::rocblas_status_not_implemented,
        _ => rocblas_status::rocblas_status_internal_error,
    })
}

/// One rocBLAS handle.
pub(crate) struct Handle {
    pub(crate) cublas: cublasHandle_t,
    pub(crate) stream: hipStream_t,
    pub(crate) pointer_mode: rocblas_pointer_mode,
}

/// The handle behind a `rocblas_handle`.
///
/// # Safety
/// `handle` must be null or a live handle from [`rocblas_create_handle`],
/// not used concurrently from another thread (rocBLAS requires that too).
pub(crate) unsafe fn handle<'a>(handle: rocblas_handle) -> BlasResult<&'a mut Handle> {
    non_null(handle, rocblas_status::rocblas_status_invalid_handle)?;
    // SAFETY: per the contract.
    Ok(unsafe { &mut *handle.cast::<Handle>() })
}

/// Binds the HIP current device's context (cuBLAS works in it).
pub(crate) fn ensure_device() -> BlasResult {
    crate::hip::context::ensure_current().map_err(|_| rocblas_status::rocblas_status_internal_error)
}

/// `rocblas_create_handle`: a cuBLAS handle on the current device.
pub(crate) unsafe fn rocblas_create_handle(out: *mut rocblas_handle) -> BlasResult {
    non_null(out, rocblas_status::rocblas_status_invalid_pointer)?;
    // SAFETY: probing for the library has no preconditions.
    if !unsafe { cublas::is_culib_present() } {
        eprintln!(
            "hip-on-cuda: libcublas could not be loaded; add CUDA's lib64 directory to LD_LIBRARY_PATH"
        );
        return Err(rocblas_status::rocblas_status_internal_error);
    }
    ensure_device()?;
    let mut cublas_handle = std::ptr::null_mut();
    // SAFETY: valid out-pointer; a context is current.
    blas(unsafe { cublas::cublasCreate_v2(&mut cublas_handle) })?;
    // SAFETY: a freshly created handle.
    let math = unsafe {
        cublas::cublasSetMathMode(cublas_handle, cublas::cublasMath_t::CUBLAS_DEFAULT_MATH)
    };
    if let Err(status) = blas(math) {
        // SAFETY: the handle is not used afterwards.
        let _ = unsafe { cublas::cublasDestroy_v2(cublas_handle) };
        return Err(status);
    }
    let boxed = Box::new(Handle {
        cublas: cublas_handle,
        stream: std::ptr::null_mut(),
        pointer_mode: rocblas_pointer_mode::rocblas_pointer_mode_host,
    });
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe {
        write_out(
            out,
            Box::into_raw(boxed).cast(),
            rocblas_status::rocblas_status_invalid_pointer,
        )
    }
}

/// `rocblas_destroy_handle`.
pub(crate) unsafe fn rocblas_destroy_handle(h: rocblas_handle) -> BlasResult {
    non_null(h, rocblas_status::rocblas_status_invalid_handle)?;
    // SAFETY: a live handle, destroyed once.
    let boxed = unsafe { Box::from_raw(h.cast::<Handle>()) };
    ensure_device()?;
    // SAFETY: the cuBLAS handle is not used afterwards.
    blas(unsafe { cublas::cublasDestroy_v2(boxed.cublas) })
}

/// `rocblas_set_stream`: later calls run on `stream`.
pub(crate) unsafe fn rocblas_set_stream(h: rocblas_handle, stream: hipStream_t) -> BlasResult {
    // SAFETY: the caller passes a live handle.
    let h = unsafe { handle(h) }?;
    // SAFETY: HIP streams are CUDA streams; the caller passes a valid one.
    blas(unsafe { cublas::cublasSetStream_v2(h.cublas, stream.cast()) })?;
    h.stream = stream;
    Ok(())
}

/// `rocblas_get_stream`.
pub(crate) unsafe fn rocblas_get_stream(h: rocblas_handle, stream: *mut hipStream_t) -> BlasResult {
    // SAFETY: the caller passes a live handle.
    let h = unsafe { handle(h) }?;
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe {
        write_out(
            stream,
            h.stream,
            rocblas_status::rocblas_status_invalid_pointer,
        )
    }
}

/// `rocblas_set_pointer_mode`: host (0) or device (1) scalars.
pub(crate) unsafe fn rocblas_set_pointer_mode(
    h: rocblas_handle,
    pointer_mode: rocblas_pointer_mode,
) -> BlasResult {
    // SAFETY: the caller passes a live handle.
    let h = unsafe { handle(h) }?;
    let mode = match pointer_mode {
        rocblas_pointer_mode::rocblas_pointer_mode_host => {
            cublas::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST
        }
        rocblas_pointer_mode::rocblas_pointer_mode_device => {
            cublas::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE
        }
        _ => return Err(rocblas_status::rocblas_status_invalid_value),
    };
    // SAFETY: a live cuBLAS handle.
    blas(unsafe { cublas::cublasSetPointerMode_v2(h.cublas, mode) })?;
    h.pointer_mode = pointer_mode;
    Ok(())
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

/// The version this shim reports: rocBLAS 4.4 (ROCm 6.4) on cuBLAS.
const VERSION: &[u8] = b"4.4.0-hip-on-cuda";

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
    fn cublas_statuses_map_to_rocblas() {
        assert_eq!(blas(cublasStatus_t::CUBLAS_STATUS_SUCCESS), Ok(()));
        assert_eq!(
            blas(cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED),
            Err(rocblas_status::rocblas_status_not_implemented)
        );
        assert_eq!(
            blas(cublasStatus_t::CUBLAS_STATUS_EXECUTION_FAILED),
            Err(rocblas_status::rocblas_status_internal_error)
        );
    }

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
