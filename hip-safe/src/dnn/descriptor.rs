//! Owned MIOpen tensor and convolution descriptors.

use std::ffi::c_int;

use miopen_sys::{
    MiopenApi, miopenConvolutionDescriptor_t, miopenConvolutionMode_t, miopenDataType_t,
    miopenTensorDescriptor_t,
};

use super::config::ConvConfig;
use super::status::check;
use crate::error::Result;

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
        let mut raw: miopenTensorDescriptor_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let status = unsafe { api.miopenCreateTensorDescriptor(&mut raw) };
        check(api, status, || "miopenCreateTensorDescriptor".into())?;
        let desc = TensorDescriptor { api, raw };
        let d = ints(dims);
        let strides = [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1];
        // SAFETY: live descriptor; both arrays hold 4 entries.
        let status =
            unsafe { api.miopenSetTensorDescriptor(raw, dtype, 4, d.as_ptr(), strides.as_ptr()) };
        check(api, status, || {
            format!("miopenSetTensorDescriptor({dims:?})")
        })?;
        Ok(desc)
    }
}

impl ConvDescriptor {
    pub(crate) fn new(api: &'static MiopenApi, cfg: &ConvConfig) -> Result<ConvDescriptor> {
        let mut raw: miopenConvolutionDescriptor_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let status = unsafe { api.miopenCreateConvolutionDescriptor(&mut raw) };
        check(api, status, || "miopenCreateConvolutionDescriptor".into())?;
        let desc = ConvDescriptor { api, raw };
        let (pad, stride, dilation) = (ints(cfg.padding), ints(cfg.stride), ints(cfg.dilation));
        // SAFETY: live descriptor; each array holds `spatialDim` = 2 entries.
        let status = unsafe {
            api.miopenInitConvolutionNdDescriptor(
                raw,
                2,
                pad.as_ptr(),
                stride.as_ptr(),
                dilation.as_ptr(),
                miopenConvolutionMode_t::miopenConvolution,
            )
        };
        check(api, status, || {
            format!(
                "miopenInitConvolutionNdDescriptor(pad {:?}, stride {:?}, dilation {:?})",
                cfg.padding, cfg.stride, cfg.dilation
            )
        })?;
        if cfg.groups > 1 {
            // SAFETY: live descriptor.
            let status = unsafe { api.miopenSetConvolutionGroupCount(raw, ints([cfg.groups])[0]) };
            check(api, status, || {
                format!("miopenSetConvolutionGroupCount({})", cfg.groups)
            })?;
        }
        Ok(desc)
    }
}

impl Drop for TensorDescriptor {
    fn drop(&mut self) {
        // Drop cannot report errors; a failed destroy only leaks host memory.
        // SAFETY: created in `new`, destroyed exactly once.
        let _ = unsafe { self.api.miopenDestroyTensorDescriptor(self.raw) };
    }
}

impl Drop for ConvDescriptor {
    fn drop(&mut self) {
        // Drop cannot report errors; a failed destroy only leaks host memory.
        // SAFETY: created in `new`, destroyed exactly once.
        let _ = unsafe { self.api.miopenDestroyConvolutionDescriptor(self.raw) };
    }
}
