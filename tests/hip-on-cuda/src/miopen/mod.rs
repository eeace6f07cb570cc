//! MIOpen on cuDNN: handles, version and status strings here; descriptors in
//! [`descriptor`], the cuDNN side in [`cudnn`], the convolutions in [`conv`].
//!
//! A `miopenHandle_t` is a boxed [`Handle`] owning a cuDNN handle created on
//! the calling thread's current HIP device, plus the results of the Find
//! calls made on it.

mod conv;
mod cudnn;
mod descriptor;

pub(crate) use conv::{
    miopenConvolutionBackwardData, miopenConvolutionBackwardDataGetWorkSpaceSize,
    miopenConvolutionForward, miopenConvolutionForwardGetWorkSpaceSize,
    miopenFindConvolutionBackwardDataAlgorithm, miopenFindConvolutionForwardAlgorithm,
};
pub(crate) use descriptor::{
    miopenCreateConvolutionDescriptor, miopenCreateTensorDescriptor,
    miopenDestroyConvolutionDescriptor, miopenDestroyTensorDescriptor,
    miopenGetConvolutionNdForwardOutputDim, miopenInitConvolutionNdDescriptor,
    miopenSetConvolutionGroupCount, miopenSetTensorDescriptor,
    miopenSetTransposeConvNdOutputPadding,
};

use std::collections::HashMap;
use std::ffi::{CStr, c_char};

use cudarc::cudnn::sys as dnn;
use miopen_sys::{miopenAcceleratorQueue_t, miopenHandle_t, miopenStatus_t};

use crate::ffi::{FfiReturn, Status, non_null, write_out};
use cudnn::{Op, dnn_check};
use descriptor::{ConvDesc, TensorDesc};

pub(crate) type MiopenResult<T = ()> = Result<T, miopenStatus_t>;

impl FfiReturn for miopenStatus_t {
    fn panicked() -> Self {
        miopenStatus_t::miopenStatusInternalError
    }
}

impl Status for miopenStatus_t {
    const SUCCESS: Self = miopenStatus_t::miopenStatusSuccess;
}

/// A convolution problem as Find saw it (cuDNN orientation).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct FindKey {
    op: Op,
    input: TensorDesc,
    filter: TensorDesc,
    output: TensorDesc,
    conv: ConvDesc,
}

/// One MIOpen handle.
pub(crate) struct Handle {
    cudnn: dnn::cudnnHandle_t,
    stream: miopenAcceleratorQueue_t,
    /// Per problem: (MIOpen algorithm family, cuDNN algorithm) from Find.
    finds: HashMap<FindKey, Vec<(u32, u32)>>,
}

/// The handle behind a `miopenHandle_t`, with the HIP current device's
/// context made current for the cuDNN call that follows.
///
/// # Safety
/// `handle` must be null or a live handle from [`miopenCreate`], not used
/// concurrently from another thread (MIOpen requires that too).
unsafe fn handle<'a>(handle: miopenHandle_t) -> MiopenResult<&'a mut Handle> {
    non_null(handle, miopenStatus_t::miopenStatusBadParm)?;
    ensure_device()?;
    // SAFETY: per the contract.
    Ok(unsafe { &mut *handle.cast::<Handle>() })
}

fn ensure_device() -> MiopenResult {
    crate::hip::context::ensure_current().map_err(|_| miopenStatus_t::miopenStatusNotInitialized)
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

/// `miopenCreate`: a cuDNN handle on the current device, on the null stream.
pub(crate) unsafe fn miopenCreate(out: *mut miopenHandle_t) -> MiopenResult {
    non_null(out, miopenStatus_t::miopenStatusBadParm)?;
    // SAFETY: probing for the library has no preconditions.
    if !unsafe { dnn::is_culib_present() } {
        eprintln!(
            "hip-on-cuda: libcudnn could not be loaded; install cuDNN 9 or add it to LD_LIBRARY_PATH"
        );
        return Err(miopenStatus_t::miopenStatusNotInitialized);
    }
    ensure_device()?;
    let mut cudnn = std::ptr::null_mut();
    // SAFETY: valid out-pointer; a context is current.
    dnn_check(unsafe { dnn::cudnnCreate(&mut cudnn) })?;
    let boxed = Box::new(Handle {
        cudnn,
        stream: std::ptr::null_mut(),
        finds: HashMap::new(),
    });
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe {
        write_out(
            out,
            Box::into_raw(boxed).cast(),
            miopenStatus_t::miopenStatusBadParm,
        )
    }
}

/// `miopenDestroy`.
pub(crate) unsafe fn miopenDestroy(h: miopenHandle_t) -> MiopenResult {
    non_null(h, miopenStatus_t::miopenStatusBadParm)?;
    // SAFETY: a live handle, destroyed once.
    let boxed = unsafe { Box::from_raw(h.cast::<Handle>()) };
    ensure_device()?;
    // SAFETY: the cuDNN handle is not used afterwards.
    dnn_check(unsafe { dnn::cudnnDestroy(boxed.cudnn) })
}

/// `miopenSetStream`: later calls run on `stream`.
pub(crate) unsafe fn miopenSetStream(
    h: miopenHandle_t,
    stream: miopenAcceleratorQueue_t,
) -> MiopenResult {
    // SAFETY: the caller passes a live handle.
    let h = unsafe { handle(h) }?;
    // SAFETY: HIP streams are CUDA streams; the caller passes a valid one.
    dnn_check(unsafe { dnn::cudnnSetStream(h.cudnn, stream.cast()) })?;
    h.stream = stream;
    Ok(())
}

/// `miopenGetStream`.
pub(crate) unsafe fn miopenGetStream(
    h: miopenHandle_t,
    stream: *mut miopenAcceleratorQueue_t,
) -> MiopenResult {
    // SAFETY: the caller passes a live handle.
    let h = unsafe { handle(h) }?;
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(stream, h.stream, miopenStatus_t::miopenStatusBadParm) }
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
