//! MIOpen tensor and convolution descriptors: plain host-side values (boxed
//! behind the C handles) and the output-shape arithmetic.

use std::ffi::c_int;

use miopen_sys::{
    miopenConvolutionDescriptor_t, miopenConvolutionMode_t, miopenDataType_t, miopenStatus_t,
    miopenTensorDescriptor_t,
};

use super::MiopenResult;
use crate::ffi::{non_null, write_out};

const BAD_PARM: miopenStatus_t = miopenStatus_t::miopenStatusBadParm;

/// The most tensor dimensions MIOpen accepts.
const MAX_DIMS: usize = 8;

/// A tensor descriptor: data type, dimensions and strides in elements.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub(crate) struct TensorDesc {
    pub(crate) dtype: u32,
    pub(crate) dims: Vec<c_int>,
    pub(crate) strides: Vec<c_int>,
}

/// Row-major packed strides of `dims`.
pub(crate) fn packed_strides(dims: &[c_int]) -> Vec<c_int> {
    let mut strides = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    strides
}

/// A convolution descriptor.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct ConvDesc {
    pub(crate) mode: miopenConvolutionMode_t,
    pub(crate) pads: Vec<c_int>,
    pub(crate) strides: Vec<c_int>,
    pub(crate) dilations: Vec<c_int>,
    pub(crate) groups: c_int,
    /// Output padding of transposed convolutions (zeros otherwise).
    pub(crate) output_padding: Vec<c_int>,
}

impl Default for ConvDesc {
    fn default() -> Self {
        Self {
            mode: miopenConvolutionMode_t::miopenConvolution,
            pads: vec![0; 2],
            strides: vec![1; 2],
            dilations: vec![1; 2],
            groups: 1,
            output_padding: vec![0; 2],
        }
    }
}

impl ConvDesc {
    /// Number of spatial dimensions.
    pub(crate) fn spatial(&self) -> usize {
        self.pads.len()
    }

    /// The output dimensions for input `x` and weights `w`, checked the way
    /// MIOpen checks them. Convolution: `w` is `[K, C/groups, k...]`, the
    /// output has K channels. Transpose: `w` is `[C, K/groups, k...]` for an
    /// input of C channels, the output has K channels.
    pub(crate) fn output_dims(&self, x: &TensorDesc, w: &TensorDesc) -> MiopenResult<Vec<c_int>> {
        let s = self.spatial();
        if x.dims.len() != s + 2 || w.dims.len() != s + 2 || self.groups < 1 {
            return Err(BAD_PARM);
        }
        let (n, c) = (x.dims[0], x.dims[1]);
        let g = self.groups;
        let channels = match self.mode {
            miopenConvolutionMode_t::miopenConvolution => {
                if c != w.dims[1] * g || w.dims[0] % g != 0 {
                    return Err(BAD_PARM);
                }
                w.dims[0]
            }
            _ => {
                if c != w.dims[0] || c % g != 0 {
                    return Err(BAD_PARM);
                }
                w.dims[1] * g
            }
        };
        let mut out = vec![n, channels];
        for i in 0..s {
            let (input, kernel) = (x.dims[i + 2], w.dims[i + 2]);
            let (p, st, d) = (self.pads[i], self.strides[i], self.dilations[i]);
            let reach = d * (kernel - 1) + 1;
            let size = match self.mode {
                miopenConvolutionMode_t::miopenConvolution if input + 2 * p < reach => 0,
                miopenConvolutionMode_t::miopenConvolution => (input + 2 * p - reach) / st + 1,
                _ => (input - 1) * st - 2 * p + reach + self.output_padding[i],
            };
            if size <= 0 {
                return Err(BAD_PARM);
            }
            out.push(size);
        }
        Ok(out)
    }
}

/// The descriptor behind a tensor handle.
///
/// # Safety
/// `desc` must be null or a live handle from `miopenCreateTensorDescriptor`.
pub(crate) unsafe fn tensor<'a>(
    desc: miopenTensorDescriptor_t,
) -> MiopenResult<&'a mut TensorDesc> {
    non_null(desc, BAD_PARM)?;
    // SAFETY: per the contract.
    Ok(unsafe { &mut *desc.cast::<TensorDesc>() })
}

/// The descriptor behind a convolution handle.
///
/// # Safety
/// `desc` must be null or a live handle from
/// `miopenCreateConvolutionDescriptor`.
pub(crate) unsafe fn convolution<'a>(
    desc: miopenConvolutionDescriptor_t,
) -> MiopenResult<&'a mut ConvDesc> {
    non_null(desc, BAD_PARM)?;
    // SAFETY: per the contract.
    Ok(unsafe { &mut *desc.cast::<ConvDesc>() })
}

/// Reads `len` ints from a C array.
///
/// # Safety
/// `ptr` must be null or valid for `len` reads.
unsafe fn ints(ptr: *const c_int, len: usize) -> MiopenResult<Vec<c_int>> {
    non_null(ptr, BAD_PARM)?;
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec())
}

/// `miopenCreateTensorDescriptor`.
pub(crate) unsafe fn miopenCreateTensorDescriptor(
    desc: *mut miopenTensorDescriptor_t,
) -> MiopenResult {
    non_null(desc, BAD_PARM)?;
    let boxed = Box::new(TensorDesc::default());
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(desc, Box::into_raw(boxed).cast(), BAD_PARM) }
}

/// `miopenSetTensorDescriptor`: 1–8 positive dimensions; null strides mean
/// packed. Any MIOpen data type may be described (convolutions support
/// half, float, bfloat16 and double).
pub(crate) unsafe fn miopenSetTensorDescriptor(
    desc: miopenTensorDescriptor_t,
    data_type: miopenDataType_t,
    nb_dims: c_int,
    dims: *const c_int,
    strides: *const c_int,
) -> MiopenResult {
    // SAFETY: the caller passes a live descriptor.
    let desc = unsafe { tensor(desc) }?;
    let n = usize::try_from(nb_dims).map_err(|_| BAD_PARM)?;
    if n == 0 || n > MAX_DIMS || data_type.0 > miopenDataType_t::miopenInt64.0 {
        return Err(BAD_PARM);
    }
    // SAFETY: the caller passes `nb_dims` dimensions (and strides).
    let dims = unsafe { ints(dims, n) }?;
    let strides = if strides.is_null() {
        packed_strides(&dims)
    } else {
        // SAFETY: as above.
        unsafe { ints(strides, n) }?
    };
    if dims.iter().any(|&d| d <= 0) || strides.iter().any(|&s| s <= 0) {
        return Err(BAD_PARM);
    }
    *desc = TensorDesc {
        dtype: data_type.0,
        dims,
        strides,
    };
    Ok(())
}

/// `miopenDestroyTensorDescriptor`.
pub(crate) unsafe fn miopenDestroyTensorDescriptor(desc: miopenTensorDescriptor_t) -> MiopenResult {
    non_null(desc, BAD_PARM)?;
    // SAFETY: a live handle, destroyed once.
    drop(unsafe { Box::from_raw(desc.cast::<TensorDesc>()) });
    Ok(())
}

/// `miopenCreateConvolutionDescriptor`: a 2-D cross-correlation with no
/// padding, unit strides and dilations, one group.
pub(crate) unsafe fn miopenCreateConvolutionDescriptor(
    desc: *mut miopenConvolutionDescriptor_t,
) -> MiopenResult {
    non_null(desc, BAD_PARM)?;
    let boxed = Box::new(ConvDesc::default());
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(desc, Box::into_raw(boxed).cast(), BAD_PARM) }
}

/// `miopenInitConvolutionNdDescriptor`: 1–3 spatial dimensions, mode
/// `miopenConvolution` or `miopenTranspose` (the deprecated group and
/// depthwise modes are not supported: use the group count).
pub(crate) unsafe fn miopenInitConvolutionNdDescriptor(
    desc: miopenConvolutionDescriptor_t,
    spatial_dim: c_int,
    pads: *const c_int,
    strides: *const c_int,
    dilations: *const c_int,
    mode: miopenConvolutionMode_t,
) -> MiopenResult {
    // SAFETY: the caller passes a live descriptor.
    let desc = unsafe { convolution(desc) }?;
    let s = usize::try_from(spatial_dim).map_err(|_| BAD_PARM)?;
    if !(1..=3).contains(&s) {
        return Err(BAD_PARM);
    }
    match mode {
        miopenConvolutionMode_t::miopenConvolution | miopenConvolutionMode_t::miopenTranspose => {}
        miopenConvolutionMode_t::miopenGroupConv | miopenConvolutionMode_t::miopenDepthwise => {
            return Err(miopenStatus_t::miopenStatusNotImplemented);
        }
        _ => return Err(BAD_PARM),
    }
    // SAFETY: the caller passes `spatial_dim` values in each array.
    let (pads, strides, dilations) =
        unsafe { (ints(pads, s)?, ints(strides, s)?, ints(dilations, s)?) };
    if pads.iter().any(|&p| p < 0) || strides.iter().chain(&dilations).any(|&v| v < 1) {
        return Err(BAD_PARM);
    }
    *desc = ConvDesc {
        mode,
        pads,
        strides,
        dilations,
        groups: desc.groups,
        output_padding: vec![0; s],
    };
    Ok(())
}

/// `miopenSetConvolutionGroupCount`.
pub(crate) unsafe fn miopenSetConvolutionGroupCount(
    desc: miopenConvolutionDescriptor_t,
    group_count: c_int,
) -> MiopenResult {
    // SAFETY: the caller passes a live descriptor.
    let desc = unsafe { convolution(desc) }?;
    if group_count < 1 {
        return Err(BAD_PARM);
    }
    desc.groups = group_count;
    Ok(())
}

/// `miopenSetTransposeConvNdOutputPadding`.
pub(crate) unsafe fn miopenSetTransposeConvNdOutputPadding(
    desc: miopenConvolutionDescriptor_t,
    spatial_dim: c_int,
    adj: *const c_int,
) -> MiopenResult {
    // SAFETY: the caller passes a live descriptor.
    let desc = unsafe { convolution(desc) }?;
    if usize::try_from(spatial_dim).ok() != Some(desc.spatial()) {
        return Err(BAD_PARM);
    }
    // SAFETY: the caller passes `spatial_dim` values.
    let padding = unsafe { ints(adj, desc.spatial()) }?;
    if padding.iter().any(|&p| p < 0) {
        return Err(BAD_PARM);
    }
    desc.output_padding = padding;
    Ok(())
}

/// `miopenDestroyConvolutionDescriptor`.
pub(crate) unsafe fn miopenDestroyConvolutionDescriptor(
    desc: miopenConvolutionDescriptor_t,
) -> MiopenResult {
    non_null(desc, BAD_PARM)?;
    // SAFETY: a live handle, destroyed once.
    drop(unsafe { Box::from_raw(desc.cast::<ConvDesc>()) });
    Ok(())
}

/// `miopenGetConvolutionNdForwardOutputDim`.
pub(crate) unsafe fn miopenGetConvolutionNdForwardOutputDim(
    conv_desc: miopenConvolutionDescriptor_t,
    input: miopenTensorDescriptor_t,
    filter: miopenTensorDescriptor_t,
    n_dim: *mut c_int,
    output_dims: *mut c_int,
) -> MiopenResult {
    non_null(output_dims, BAD_PARM)?;
    // SAFETY: the caller passes live descriptors.
    let (conv, x, w) = unsafe { (convolution(conv_desc)?, tensor(input)?, tensor(filter)?) };
    let dims = conv.output_dims(x, w)?;
    let count = c_int::try_from(dims.len()).map_err(|_| BAD_PARM)?;
    // SAFETY: the caller passes room for spatial + 2 dimensions.
    unsafe {
        write_out(n_dim, count, BAD_PARM)?;
        std::ptr::copy_nonoverlapping(dims.as_ptr(), output_dims, dims.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor_of(dims: &[c_int]) -> TensorDesc {
        TensorDesc {
            dtype: 1,
            dims: dims.to_vec(),
            strides: packed_strides(dims),
        }
    }

    #[test]
    fn packed_strides_are_row_major() {
        assert_eq!(packed_strides(&[2, 3, 4, 5]), [60, 20, 5, 1]);
        let t = tensor_of(&[1, 2]);
        assert_eq!(t.strides, packed_strides(&t.dims));
    }

    #[test]
    fn convolution_output_shapes() {
        let conv = ConvDesc {
            pads: vec![1, 0],
            strides: vec![2, 1],
            dilations: vec![1, 2],
            ..ConvDesc::default()
        };
        let x = tensor_of(&[2, 4, 9, 10]);
        let w = tensor_of(&[6, 4, 3, 3]);
        // H: (9 + 2 - 3) / 2 + 1 = 5; W: (10 - 5) / 1 + 1 = 6.
        assert_eq!(conv.output_dims(&x, &w), Ok(vec![2, 6, 5, 6]));
        let grouped = ConvDesc {
            groups: 2,
            ..conv.clone()
        };
        assert_eq!(
            grouped.output_dims(&x, &tensor_of(&[6, 2, 3, 3])),
            Ok(vec![2, 6, 5, 6])
        );
        assert_eq!(
            conv.output_dims(&x, &tensor_of(&[6, 3, 3, 3])),
            Err(BAD_PARM)
        );
        assert_eq!(conv.output_dims(&tensor_of(&[2, 4, 9]), &w), Err(BAD_PARM));
    }

    #[test]
    fn transposed_output_shapes() {
        let conv = ConvDesc {
            mode: miopenConvolutionMode_t::miopenTranspose,
            pads: vec![1],
            strides: vec![2],
            dilations: vec![1],
            groups: 1,
            output_padding: vec![1],
        };
        // (5 - 1) * 2 - 2 + 3 + 1 = 10 with 3 output channels.
        let x = tensor_of(&[1, 4, 5]);
        let w = tensor_of(&[4, 3, 3]);
        assert_eq!(conv.output_dims(&x, &w), Ok(vec![1, 3, 10]));
        assert_eq!(conv.output_dims(&x, &tensor_of(&[3, 3, 3])), Err(BAD_PARM));
    }
}
