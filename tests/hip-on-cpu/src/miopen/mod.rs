//! MIOpen on the host: handles that remember their stream, the shared
//! descriptors, and the convolutions as reference loops ([`conv`]).

#[path = "../../../shim-common/miopen_common.rs"]
mod common;
mod conv;
#[path = "../../../shim-common/miopen_descriptor.rs"]
mod descriptor;

pub(crate) use common::{MiopenResult, miopenGetErrorString, miopenGetVersion};
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

use miopen_sys::{miopenAcceleratorQueue_t, miopenHandle_t, miopenStatus_t};

use crate::ffi::{non_null, write_out};

/// One MIOpen handle.
struct Handle {
    stream: miopenAcceleratorQueue_t,
}

/// The handle behind a `miopenHandle_t`.
///
/// # Safety
/// `h` must be null or a live handle from [`miopenCreate`].
unsafe fn handle<'a>(h: miopenHandle_t) -> MiopenResult<&'a mut Handle> {
    non_null(h, miopenStatus_t::miopenStatusBadParm)?;
    // SAFETY: per the contract.
    Ok(unsafe { &mut *h.cast::<Handle>() })
}

/// `miopenCreate`.
pub(crate) unsafe fn miopenCreate(out: *mut miopenHandle_t) -> MiopenResult {
    non_null(out, miopenStatus_t::miopenStatusBadParm)?;
    let boxed = Box::new(Handle {
        stream: std::ptr::null_mut(),
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
    drop(unsafe { Box::from_raw(h.cast::<Handle>()) });
    Ok(())
}

/// `miopenSetStream`: remembered (work runs at the call, or is recorded
/// when the stream captures).
pub(crate) unsafe fn miopenSetStream(
    h: miopenHandle_t,
    stream: miopenAcceleratorQueue_t,
) -> MiopenResult {
    // SAFETY: the caller passes a live handle.
    unsafe { handle(h) }?.stream = stream;
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
