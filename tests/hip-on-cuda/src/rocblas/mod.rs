//! rocBLAS on cuBLAS: handles, streams, pointer mode, status strings and the
//! version; the GEMMs are in [`gemm`].
//!
//! A `rocblas_handle` is a boxed [`Handle`] owning a cuBLAS handle created
//! on the calling thread's current HIP device, in `CUBLAS_DEFAULT_MATH` so
//! that FP32 GEMMs are never downgraded to TF32.

#[path = "../../../shim-common/rocblas_common.rs"]
mod common;
mod gemm;

pub(crate) use common::{
    BlasResult, rocblas_get_version_string, rocblas_get_version_string_size,
    rocblas_status_to_string,
};

pub(crate) use gemm::{rocblas_gemm_ex, rocblas_gemm_strided_batched_ex};

use cudarc::cublas::sys::{self as cublas, cublasHandle_t, cublasStatus_t};
use hip_sys::hipStream_t;
use rocblas_sys::{rocblas_handle, rocblas_pointer_mode, rocblas_status};

use crate::ffi::{non_null, write_out};

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

/// The version this shim reports: rocBLAS 4.4 (ROCm 6.4) on cuBLAS.
const VERSION: &[u8] = b"4.4.0-hip-on-cuda";

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
}
