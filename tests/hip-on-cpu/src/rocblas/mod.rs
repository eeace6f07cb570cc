//! rocBLAS on the host: handles that remember their stream, the status
//! strings and version shared with the NVIDIA platform (`common`), the
//! GEMMs as reference loops ([`gemm`]), and the host arithmetic and
//! threading those loops share with MIOpen's ([`host`]).
//!
//! A `rocblas_handle` is a boxed [`Handle`]. Work runs to completion at the
//! call, whatever the stream; scalars are read from host memory in either
//! pointer mode, since device memory is host memory here. On a capturing
//! stream a GEMM is checked and recorded instead (see `hip::graph`): its
//! scalars are copied at the call in host pointer mode and read at each
//! replay in device pointer mode, as rocBLAS does.

#[path = "../../../shim-common/rocblas_common.rs"]
mod common;
mod gemm;

pub(crate) use common::{
    BlasResult, rocblas_get_version_string, rocblas_get_version_string_size,
    rocblas_status_to_string,
};
pub(crate) use gemm::{rocblas_gemm_ex, rocblas_gemm_strided_batched_ex};

use hip_sys::hipStream_t;
use rocblas_sys::{rocblas_handle, rocblas_pointer_mode, rocblas_status};

use crate::ffi::{non_null, write_out};

/// The version this shim reports: rocBLAS 4.4 (ROCm 6.4) as reference loops
/// on the host.
const VERSION: &[u8] = b"4.4.0-hip-on-cpu";

/// One rocBLAS handle.
struct Handle {
    /// The stream set by `rocblas_set_stream` (work on a capturing stream
    /// is recorded).
    stream: hipStream_t,
    /// The pointer mode set by `rocblas_set_pointer_mode` (host by
    /// default): when a captured GEMM reads its scalars.
    pointer_mode: rocblas_pointer_mode,
}

/// The handle behind a `rocblas_handle`.
///
/// # Safety
/// `handle` must be null or a live handle from [`rocblas_create_handle`],
/// not used concurrently from another thread (rocBLAS requires that too).
unsafe fn handle<'a>(handle: rocblas_handle) -> BlasResult<&'a mut Handle> {
    non_null(handle, rocblas_status::rocblas_status_invalid_handle)?;
    // SAFETY: per the contract.
    Ok(unsafe { &mut *handle.cast::<Handle>() })
}

/// `rocblas_create_handle`: a handle on the null stream.
pub(crate) unsafe fn rocblas_create_handle(out: *mut rocblas_handle) -> BlasResult {
    non_null(out, rocblas_status::rocblas_status_invalid_pointer)?;
    let boxed = Box::new(Handle {
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
    // SAFETY: a live handle from `rocblas_create_handle`, destroyed once.
    drop(unsafe { Box::from_raw(h.cast::<Handle>()) });
    Ok(())
}

/// `rocblas_set_stream`: remembered for `rocblas_get_stream` and stream
/// capture (work runs at the call, which is a valid schedule of any
/// stream).
pub(crate) unsafe fn rocblas_set_stream(h: rocblas_handle, stream: hipStream_t) -> BlasResult {
    // SAFETY: the caller passes a live handle.
    unsafe { handle(h) }?.stream = stream;
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

/// `rocblas_set_pointer_mode`: host (0) or device (1) scalars; both are
/// host memory here, so both are read the same way.
pub(crate) unsafe fn rocblas_set_pointer_mode(
    h: rocblas_handle,
    pointer_mode: rocblas_pointer_mode,
) -> BlasResult {
    // SAFETY: the caller passes a live handle.
    let h = unsafe { handle(h) }?;
    match pointer_mode {
        rocblas_pointer_mode::rocblas_pointer_mode_host
        | rocblas_pointer_mode::rocblas_pointer_mode_device => {
            h.pointer_mode = pointer_mode;
            Ok(())
        }
        _ => Err(rocblas_status::rocblas_status_invalid_value),
    }
}
