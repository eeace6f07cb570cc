//! Owned MIOpen tensor and convolution descriptors.

use std::ffi::c_int;

use miopen_sys::{
    MiopenApi, miopenConvolutionDescriptor_t, miopenConvolutionMode_t, miopenDataType_t,
    miopenTensorDescriptor_t,
};

use super::config::ConvConfig;
use crate::error::Result;
use crate::result::{CheckStatus, out_ptr};

/// A 4-D contiguous (NCHW) tensor descriptor, destroyed on drop.
pub(crate) struct TensorDescriptor {
    api: &'static MiopenApi,
    pub(crate) raw: miopenTensorDescriptor_t,
}

/// A 2-D cross-correlation descriptor, destroyed on drop.
pub(crate) struct ConvDescriptor {
    api: &'static MiopenApi,
    pub(crate) raw: miopenConvolutionDescriptor_t,
}

// SAFETY: descriptors are host-side parameter objects owned by exactly one
// value; MIOpen reads them during calls, which the owner serialises.
unsafe impl Send for TensorDescriptor {}
// SAFETY: shared access only passes the handle to MIOpen calls that read it.
unsafe impl Sync for TensorDescriptor {}
// SAFETY: as for TensorDescriptor.
unsafe impl Send for ConvDescriptor {}
// SAFETY: as for TensorDescriptor.
unsafe impl Sync for ConvDescriptor {}

/// `dims` as `c_int`s; the caller has validated that they fit.
fn ints<const N: usize>(dims: [usize; N]) -> [c_int; N] {
    dims.map(|d| c_int::try_from(d).unwrap_or(c_int::MAX))
}

impl TensorDescriptor {
    pub(crate) fn new(
        api: &'static MiopenApi,
        dtype: miopenDataType_t,
        dims: [usize; 4],
    ) -> Result<TensorDescriptor> {
        let raw = out_ptr("miopenCreateTensorDescriptor", |raw| {
            // SAFETY: valid out-pointer.
            unsafe { api.miopenCreateTensorDescriptor(raw) }
        })?;
        let desc = TensorDescriptor { api, raw };
        let d = ints(dims);
        let strides = [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1];
        // SAFETY: live descriptor; both arrays hold 4 entries.
        unsafe { api.miopenSetTensorDescriptor(raw, dtype, 4, d.as_ptr(), strides.as_ptr()) }
            .check(format_args!("miopenSetTensorDescriptor({dims:?})"))?;
        Ok(desc)
    }
}

impl ConvDescriptor {
    pub(crate) fn new(api: &'static MiopenApi, cfg: &ConvConfig) -> Result<ConvDescriptor> {
        let raw = out_ptr("miopenCreateConvolutionDescriptor", |raw| {
            // SAFETY: valid out-pointer.
            unsafe { api.miopenCreateConvolutionDescriptor(raw) }
        })?;
        let desc = ConvDescriptor { api, raw };
        let (pad, stride, dilation) = (ints(cfg.padding), ints(cfg.stride), ints(cfg.dilation));
        // SAFETY: live descriptor; each array holds `spatialDim` = 2 entries.
        unsafe {
            api.miopenInitConvolutionNdDescriptor(
                raw,
                2,
                pad.as_ptr(),
                stride.as_ptr(),
                dilation.as_ptr(),
                miopenConvolutionMode_t::miopenConvolution,
            )
        }
        .check(format_args!(
            "miopenInitConvolutionNdDescriptor(pad {:?}, stride {:?}, dilation {:?})",
            cfg.padding, cfg.stride, cfg.dilation
        ))?;
        if cfg.groups > 1 {
            // SAFETY: live descriptor.
            unsafe { api.miopenSetConvolutionGroupCount(raw, ints([cfg.groups])[0]) }.check(
                format_args!("miopenSetConvolutionGroupCount({})", cfg.groups),
            )?;
        }
        Ok(desc)
    }
}

impl Drop for TensorDescriptor {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed exactly once.
        unsafe { self.api.miopenDestroyTensorDescriptor(self.raw) }.discard();
    }
}

impl Drop for ConvDescriptor {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed exactly once.
        unsafe { self.api.miopenDestroyConvolutionDescriptor(self.raw) }.discard();
    }
}
