//! The cuDNN side of the MIOpen convolutions: descriptors built from ours,
//! the two cuDNN operations we use and their algorithms.
//!
//! cuDNN wants at least 4-D tensors: a 1-D convolution (3-D tensors) gets a
//! trailing unit dimension, with padding 0, stride 1 and dilation 1. Weights
//! become a filter descriptor and must be packed. The convolution is always
//! `CUDNN_CROSS_CORRELATION` (MIOpen's convolution); FP32 and FP64 use
//! `CUDNN_FMA_MATH` so that TF32 is never used; FP16 and BF16 use
//! `CUDNN_TENSOR_OP_MATH`, which permits tensor cores (as MIOpen uses AMD's
//! matrix cores, and as PyTorch configures cuDNN for half types).

use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;

use cudarc::cudnn::sys::{self as dnn, cudnnDataType_t, cudnnMathType_t, cudnnStatus_t};
use miopen_sys::{miopenDataType_t, miopenStatus_t};

use super::MiopenResult;
use super::descriptor::{ConvDesc, TensorDesc, packed_strides};

/// The MIOpen status for a cuDNN status (cuDNN 9 groups its codes by
/// thousands: bad parameter 2xxx, not supported 3xxx, internal 4xxx, ...).
pub(crate) fn dnn_check(status: cudnnStatus_t) -> MiopenResult {
    use cudnnStatus_t as S;
    let code = status as u32;
    Err(match status {
        S::CUDNN_STATUS_SUCCESS => return Ok(()),
        S::CUDNN_STATUS_NOT_INITIALIZED => miopenStatus_t::miopenStatusNotInitialized,
        S::CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH
        | S::CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH => {
            miopenStatus_t::miopenStatusVersionMismatch
        }
        S::CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED
        | S::CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED => {
            miopenStatus_t::miopenStatusAllocFailed
        }
        _ if (2000..3000).contains(&code) => miopenStatus_t::miopenStatusBadParm,
        _ if (3000..4000).contains(&code) => miopenStatus_t::miopenStatusNotImplemented,
        _ if (4000..5000).contains(&code) => miopenStatus_t::miopenStatusInternalError,
        _ => miopenStatus_t::miopenStatusUnknownError,
    })
}

/// The cuDNN data type of a MIOpen one; other types are not implemented.
fn data_type(dtype: u32) -> MiopenResult<cudnnDataType_t> {
    match miopenDataType_t(dtype) {
        miopenDataType_t::miopenHalf => Ok(cudnnDataType_t::CUDNN_DATA_HALF),
        miopenDataType_t::miopenFloat => Ok(cudnnDataType_t::CUDNN_DATA_FLOAT),
        miopenDataType_t::miopenBFloat16 => Ok(cudnnDataType_t::CUDNN_DATA_BFLOAT16),
        miopenDataType_t::miopenDouble => Ok(cudnnDataType_t::CUDNN_DATA_DOUBLE),
        _ => Err(miopenStatus_t::miopenStatusNotImplemented),
    }
}

/// Whether scalars (alpha, beta) are doubles for this data type.
pub(crate) fn uses_double_scalars(dtype: u32) -> bool {
    miopenDataType_t(dtype) == miopenDataType_t::miopenDouble
}

/// The math type used for (and expected from) every algorithm.
fn math_type(dtype: u32) -> cudnnMathType_t {
    match miopenDataType_t(dtype) {
        miopenDataType_t::miopenHalf | miopenDataType_t::miopenBFloat16 => {
            cudnnMathType_t::CUDNN_TENSOR_OP_MATH
        }
        _ => cudnnMathType_t::CUDNN_FMA_MATH,
    }
}

/// Pads dims/strides to at least 4 entries with unit trailing dimensions.
fn at_least_4d(dims: &[c_int], strides: &[c_int]) -> (Vec<c_int>, Vec<c_int>) {
    let (mut dims, mut strides) = (dims.to_vec(), strides.to_vec());
    while dims.len() < 4 {
        dims.push(1);
        strides.push(1);
    }
    (dims, strides)
}

/// Generates an owning wrapper of a cuDNN descriptor type.
macro_rules! owned_descriptor {
    ($name:ident, $raw:ty, $create:ident, $destroy:ident) => {
        /// An owned cuDNN descriptor, destroyed on drop.
        pub(crate) struct $name(pub(crate) $raw);

        impl $name {
            fn new() -> MiopenResult<Self> {
                let mut raw = std::ptr::null_mut();
                // SAFETY: valid out-pointer.
                dnn_check(unsafe { dnn::$create(&mut raw) })?;
                Ok(Self(raw))
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: created by `new`, destroyed once.
                let _ = unsafe { dnn::$destroy(self.0) };
            }
        }
    };
}

owned_descriptor!(
    Tensor,
    dnn::cudnnTensorDescriptor_t,
    cudnnCreateTensorDescriptor,
    cudnnDestroyTensorDescriptor
);
owned_descriptor!(
    Filter,
    dnn::cudnnFilterDescriptor_t,
    cudnnCreateFilterDescriptor,
    cudnnDestroyFilterDescriptor
);
owned_descriptor!(
    Convolution,
    dnn::cudnnConvolutionDescriptor_t,
    cudnnCreateConvolutionDescriptor,
    cudnnDestroyConvolutionDescriptor
);

impl Tensor {
    fn of(desc: &TensorDesc) -> MiopenResult<Self> {
        let ty = data_type(desc.dtype)?;
        let (dims, strides) = at_least_4d(&desc.dims, &desc.strides);
        let t = Self::new()?;
        let n = c_int::try_from(dims.len()).map_err(|_| miopenStatus_t::miopenStatusBadParm)?;
        // SAFETY: both arrays hold `n` values.
        dnn_check(unsafe {
            dnn::cudnnSetTensorNdDescriptor(t.0, ty, n, dims.as_ptr(), strides.as_ptr())
        })?;
        Ok(t)
    }
}

impl Filter {
    fn of(desc: &TensorDesc) -> MiopenResult<Self> {
        if desc.strides != packed_strides(&desc.dims) {
            return Err(miopenStatus_t::miopenStatusNotImplemented);
        }
        let ty = data_type(desc.dtype)?;
        let (dims, _) = at_least_4d(&desc.dims, &desc.strides);
        let f = Self::new()?;
        let n = c_int::try_from(dims.len()).map_err(|_| miopenStatus_t::miopenStatusBadParm)?;
        // SAFETY: `dims` holds `n` values.
        dnn_check(unsafe {
            dnn::cudnnSetFilterNdDescriptor(
                f.0,
                ty,
                dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                n,
                dims.as_ptr(),
            )
        })?;
        Ok(f)
    }
}

impl Convolution {
    fn of(desc: &ConvDesc, dtype: u32) -> MiopenResult<Self> {
        let mut pads = desc.pads.clone();
        let mut strides = desc.strides.clone();
        let mut dilations = desc.dilations.clone();
        while pads.len() < 2 {
            pads.push(0);
            strides.push(1);
            dilations.push(1);
        }
        let compute = if uses_double_scalars(dtype) {
            cudnnDataType_t::CUDNN_DATA_DOUBLE
        } else {
            cudnnDataType_t::CUDNN_DATA_FLOAT
        };
        let c = Self::new()?;
        let n = c_int::try_from(pads.len()).map_err(|_| miopenStatus_t::miopenStatusBadParm)?;
        // SAFETY: the arrays hold `n` values each.
        dnn_check(unsafe {
            dnn::cudnnSetConvolutionNdDescriptor(
                c.0,
                n,
                pads.as_ptr(),
                strides.as_ptr(),
                dilations.as_ptr(),
                dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                compute,
            )
        })?;
        // SAFETY: a valid convolution descriptor.
        dnn_check(unsafe { dnn::cudnnSetConvolutionGroupCount(c.0, desc.groups) })?;
        // SAFETY: as above.
        dnn_check(unsafe { dnn::cudnnSetConvolutionMathType(c.0, math_type(dtype)) })?;
        Ok(c)
    }
}

/// The cuDNN operation a MIOpen call becomes.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Op {
    /// `cudnnConvolutionForward`: reads the input side, writes the output side.
    Forward,
    /// `cudnnConvolutionBackwardData`: reads the output side, writes the
    /// input side.
    BackwardData,
}

/// One cuDNN convolution problem in cuDNN's orientation: `input` has C
/// channels, `output` K, the filter is `[K, C/groups, k...]`.
pub(crate) struct Problem {
    pub(crate) op: Op,
    input: Tensor,
    filter: Filter,
    output: Tensor,
    conv: Convolution,
    math: cudnnMathType_t,
}

impl Problem {
    /// Builds the cuDNN descriptors.
    pub(crate) fn new(
        op: Op,
        input: &TensorDesc,
        filter: &TensorDesc,
        output: &TensorDesc,
        conv: &ConvDesc,
    ) -> MiopenResult<Self> {
        if input.dtype != filter.dtype || input.dtype != output.dtype {
            return Err(miopenStatus_t::miopenStatusBadParm);
        }
        Ok(Self {
            op,
            input: Tensor::of(input)?,
            filter: Filter::of(filter)?,
            output: Tensor::of(output)?,
            conv: Convolution::of(conv, input.dtype)?,
            math: math_type(input.dtype),
        })
    }
}

/// One algorithm result, as cuDNN reports it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AlgoPerf {
    /// The cuDNN algorithm number of the problem's operation.
    pub(crate) algo: u32,
    /// Milliseconds (0 for heuristics).
    pub(crate) time: f32,
    /// Workspace bytes.
    pub(crate) memory: usize,
}

/// Number of algorithms of each operation (`*_ALGO_COUNT`).
const FWD_ALGOS: usize = 8;
const BWD_DATA_ALGOS: usize = 6;

/// Reads cuDNN's perf structs field by field as integers, so that a value
/// this binding's enums do not know is skipped rather than undefined
/// behaviour; keeps the successful results (for FP32/FP64 only those in FMA
/// math, so that nothing reported may use TF32).
///
/// # Safety
/// `results[..count]` must have been written by cuDNN; `T` must be one of
/// cuDNN's perf structs (fields algo, status, time, memory, determinism,
/// mathType in that order).
unsafe fn read_perfs<T>(
    results: &[MaybeUninit<T>],
    count: c_int,
    math: cudnnMathType_t,
) -> Vec<AlgoPerf> {
    #[repr(C)]
    struct Raw {
        algo: u32,
        status: u32,
        time: f32,
        memory: usize,
        determinism: u32,
        math: u32,
        reserved: [c_int; 3],
    }
    const _: () = assert!(size_of::<Raw>() == size_of::<dnn::cudnnConvolutionFwdAlgoPerf_t>());
    const _: () = assert!(size_of::<Raw>() == size_of::<dnn::cudnnConvolutionBwdDataAlgoPerf_t>());
    let count = usize::try_from(count).unwrap_or(0).min(results.len());
    results[..count]
        .iter()
        // SAFETY: written by cuDNN, same layout as `Raw` (checked above).
        .map(|r| unsafe { r.as_ptr().cast::<Raw>().read() })
        .filter(|r| r.status == cudnnStatus_t::CUDNN_STATUS_SUCCESS as u32)
        .filter(|r| math != cudnnMathType_t::CUDNN_FMA_MATH || r.math == math as u32)
        .map(|r| AlgoPerf {
            algo: r.algo,
            time: r.time,
            memory: r.memory,
        })
        .collect()
}

fn fwd_algo(algo: u32) -> MiopenResult<dnn::cudnnConvolutionFwdAlgo_t> {
    use dnn::cudnnConvolutionFwdAlgo_t as A;
    const ALL: [A; FWD_ALGOS] = [
        A::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        A::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        A::CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
        A::CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
        A::CUDNN_CONVOLUTION_FWD_ALGO_FFT,
        A::CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
        A::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
        A::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
    ];
    ALL.into_iter()
        .find(|a| *a as u32 == algo)
        .ok_or(miopenStatus_t::miopenStatusBadParm)
}

fn bwd_data_algo(algo: u32) -> MiopenResult<dnn::cudnnConvolutionBwdDataAlgo_t> {
    use dnn::cudnnConvolutionBwdDataAlgo_t as A;
    const ALL: [A; BWD_DATA_ALGOS] = [
        A::CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
        A::CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
        A::CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
        A::CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
        A::CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
        A::CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
    ];
    ALL.into_iter()
        .find(|a| *a as u32 == algo)
        .ok_or(miopenStatus_t::miopenStatusBadParm)
}

/// The MIOpen algorithm family (the same numbers in MIOpen's forward and
/// backward-data enums: GEMM 0, Direct 1, FFT 2, Winograd 3, implicit GEMM
/// 5) a cuDNN algorithm is reported as.
pub(crate) fn family(op: Op, algo: u32) -> u32 {
    const GEMM: u32 = 0;
    const DIRECT: u32 = 1;
    const FFT: u32 = 2;
    const WINOGRAD: u32 = 3;
    const IMPLICIT_GEMM: u32 = 5;
    match (op, algo) {
        (Op::Forward, 0 | 1) => IMPLICIT_GEMM,
        (Op::Forward, 2) => GEMM,
        (Op::Forward, 3) => DIRECT,
        (Op::Forward, 4 | 5) => FFT,
        (Op::Forward, _) => WINOGRAD,
        (Op::BackwardData, 0) => GEMM,
        (Op::BackwardData, 1) => IMPLICIT_GEMM,
        (Op::BackwardData, 2 | 3) => FFT,
        (Op::BackwardData, _) => WINOGRAD,
    }
}

/// The device buffers of one call: the input side, the filter, the output
/// side (one of the sides is written, per the operation) and the workspace.
pub(crate) struct Buffers {
    pub(crate) input: *mut c_void,
    pub(crate) filter: *const c_void,
    pub(crate) output: *mut c_void,
    pub(crate) workspace: *mut c_void,
    pub(crate) workspace_size: usize,
}

impl Problem {
    /// cuDNN's heuristic list of applicable algorithms with their workspace
    /// sizes.
    pub(crate) fn heuristics(&self, handle: dnn::cudnnHandle_t) -> MiopenResult<Vec<AlgoPerf>> {
        let mut count = 0;
        match self.op {
            Op::Forward => {
                let mut results =
                    [MaybeUninit::<dnn::cudnnConvolutionFwdAlgoPerf_t>::uninit(); FWD_ALGOS];
                // SAFETY: room for FWD_ALGOS results; valid descriptors.
                dnn_check(unsafe {
                    dnn::cudnnGetConvolutionForwardAlgorithm_v7(
                        handle,
                        self.input.0,
                        self.filter.0,
                        self.conv.0,
                        self.output.0,
                        FWD_ALGOS as c_int,
                        &mut count,
                        results.as_mut_ptr().cast(),
                    )
                })?;
                // SAFETY: cuDNN wrote `count` results.
                Ok(unsafe { read_perfs(&results, count, self.math) })
            }
            Op::BackwardData => {
                let mut results = [MaybeUninit::<dnn::cudnnConvolutionBwdDataAlgoPerf_t>::uninit();
                    BWD_DATA_ALGOS];
                // SAFETY: room for BWD_DATA_ALGOS results; valid descriptors.
                dnn_check(unsafe {
                    dnn::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                        handle,
                        self.filter.0,
                        self.output.0,
                        self.conv.0,
                        self.input.0,
                        BWD_DATA_ALGOS as c_int,
                        &mut count,
                        results.as_mut_ptr().cast(),
                    )
                })?;
                // SAFETY: cuDNN wrote `count` results.
                Ok(unsafe { read_perfs(&results, count, self.math) })
            }
        }
    }

    /// Runs every algorithm that fits the workspace and returns them fastest
    /// first (this overwrites the written side, as MIOpen's Find does).
    ///
    /// # Safety
    /// The buffers must be device memory of the described shapes.
    pub(crate) unsafe fn find(
        &self,
        handle: dnn::cudnnHandle_t,
        b: &Buffers,
    ) -> MiopenResult<Vec<AlgoPerf>> {
        let mut count = 0;
        match self.op {
            Op::Forward => {
                let mut results =
                    [MaybeUninit::<dnn::cudnnConvolutionFwdAlgoPerf_t>::uninit(); FWD_ALGOS];
                // SAFETY: per the contract; room for FWD_ALGOS results.
                dnn_check(unsafe {
                    dnn::cudnnFindConvolutionForwardAlgorithmEx(
                        handle,
                        self.input.0,
                        b.input,
                        self.filter.0,
                        b.filter,
                        self.conv.0,
                        self.output.0,
                        b.output,
                        FWD_ALGOS as c_int,
                        &mut count,
                        results.as_mut_ptr().cast(),
                        b.workspace,
                        b.workspace_size,
                    )
                })?;
                // SAFETY: cuDNN wrote `count` results.
                Ok(unsafe { read_perfs(&results, count, self.math) })
            }
            Op::BackwardData => {
                let mut results = [MaybeUninit::<dnn::cudnnConvolutionBwdDataAlgoPerf_t>::uninit();
                    BWD_DATA_ALGOS];
                // SAFETY: per the contract; room for BWD_DATA_ALGOS results.
                dnn_check(unsafe {
                    dnn::cudnnFindConvolutionBackwardDataAlgorithmEx(
                        handle,
                        self.filter.0,
                        b.filter,
                        self.output.0,
                        b.output,
                        self.conv.0,
                        self.input.0,
                        b.input,
                        BWD_DATA_ALGOS as c_int,
                        &mut count,
                        results.as_mut_ptr().cast(),
                        b.workspace,
                        b.workspace_size,
                    )
                })?;
                // SAFETY: cuDNN wrote `count` results.
                Ok(unsafe { read_perfs(&results, count, self.math) })
            }
        }
    }

    /// Runs cuDNN algorithm `algo` with scalars `alpha`, `beta` (host
    /// pointers of the data type's scalar type).
    ///
    /// # Safety
    /// The buffers must be device memory of the described shapes.
    pub(crate) unsafe fn run(
        &self,
        handle: dnn::cudnnHandle_t,
        algo: u32,
        alpha: *const c_void,
        beta: *const c_void,
        b: &Buffers,
    ) -> MiopenResult {
        match self.op {
            Op::Forward => {
                let algo = fwd_algo(algo)?;
                // SAFETY: per the contract.
                dnn_check(unsafe {
                    dnn::cudnnConvolutionForward(
                        handle,
                        alpha,
                        self.input.0,
                        b.input,
                        self.filter.0,
                        b.filter,
                        self.conv.0,
                        algo,
                        b.workspace,
                        b.workspace_size,
                        beta,
                        self.output.0,
                        b.output,
                    )
                })
            }
            Op::BackwardData => {
                let algo = bwd_data_algo(algo)?;
                // SAFETY: per the contract.
                dnn_check(unsafe {
                    dnn::cudnnConvolutionBackwardData(
                        handle,
                        alpha,
                        self.filter.0,
                        b.filter,
                        self.output.0,
                        b.output,
                        self.conv.0,
                        algo,
                        b.workspace,
                        b.workspace_size,
                        beta,
                        self.input.0,
                        b.input,
                    )
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_by_class() {
        assert_eq!(dnn_check(cudnnStatus_t::CUDNN_STATUS_SUCCESS), Ok(()));
        assert_eq!(
            dnn_check(cudnnStatus_t::CUDNN_STATUS_BAD_PARAM_NULL_POINTER),
            Err(miopenStatus_t::miopenStatusBadParm)
        );
        assert_eq!(
            dnn_check(cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED_LAYOUT),
            Err(miopenStatus_t::miopenStatusNotImplemented)
        );
        assert_eq!(
            dnn_check(cudnnStatus_t::CUDNN_STATUS_EXECUTION_FAILED),
            Err(miopenStatus_t::miopenStatusUnknownError)
        );
    }

    #[test]
    fn algorithms_round_trip_and_have_families() {
        for algo in 0..FWD_ALGOS as u32 {
            assert_eq!(fwd_algo(algo).unwrap() as u32, algo);
            assert!([0, 1, 2, 3, 5].contains(&family(Op::Forward, algo)));
        }
        for algo in 0..BWD_DATA_ALGOS as u32 {
            assert_eq!(bwd_data_algo(algo).unwrap() as u32, algo);
        }
        assert!(fwd_algo(8).is_err());
        assert_eq!(family(Op::Forward, 1), 5);
        assert_eq!(family(Op::BackwardData, 4), 3);
    }

    #[test]
    fn types_and_math() {
        assert_eq!(data_type(1), Ok(cudnnDataType_t::CUDNN_DATA_FLOAT));
        assert_eq!(data_type(5), Ok(cudnnDataType_t::CUDNN_DATA_BFLOAT16));
        assert_eq!(
            data_type(3),
            Err(miopenStatus_t::miopenStatusNotImplemented)
        );
        assert_eq!(math_type(1), cudnnMathType_t::CUDNN_FMA_MATH);
        assert_eq!(math_type(0), cudnnMathType_t::CUDNN_TENSOR_OP_MATH);
        assert_eq!(
            at_least_4d(&[2, 3, 5], &[15, 5, 1]),
            (vec![2, 3, 5, 1], vec![15, 5, 1, 1])
        );
    }
}
