//! MIOpen on cuDNN: handles, version and status strings here; descriptors in
//! [`descriptor`], the cuDNN side in [`cudnn`], the convolutions in [`conv`].
//!
//! A `miopenHandle_t` is a boxed [`Handle`] owning a cuDNN handle created on
//! the calling thread's current HIP device, plus the results of the Find
//! calls made on it.

#[path = "../../../shim-common/miopen_common.rs"]
mod common;
mod conv;
mod cudnn;
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

use std::collections::HashMap;

use cudarc::cudnn::sys as dnn;
use miopen_sys::{miopenAcceleratorQueue_t, miopenHandle_t, miopenStatus_t};

use crate::ffi::{non_null, write_out};
use cudnn::{Op, dnn_check};
use descriptor::{ConvDesc, TensorDesc};

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
