//! `rocblas_gemm_ex` and `rocblas_gemm_strided_batched_ex` on
//! `cublasGemmEx` / `cublasGemmStridedBatchedEx`.
//!
//! Mapping: operation none/transpose/conjugate-transpose (111/112/113) →
//! `CUBLAS_OP_N/T/C`; data types f16/f32/f64/bf16 (150/151/152/168) →
//! `CUDA_R_16F/32F/64F/16BF`; compute f32 → `CUBLAS_COMPUTE_32F` (never the
//! TF32 variants), f64 → `CUBLAS_COMPUTE_64F`, f16 → `CUBLAS_COMPUTE_16F`.
//! Other rocBLAS data types are `rocblas_status_not_implemented`; numbers
//! that are no rocBLAS enum value at all are `rocblas_status_invalid_value`.
//!
//! cuBLAS has no separate output matrix: it computes `C = αAB + βC` in
//! place. rocBLAS computes `D = αAB + βC`. When D is not C (another pointer,
//! leading dimension or batch stride), C is first copied into D on the
//! handle's stream (skipped when β is a host zero) and cuBLAS then runs in
//! place on D. The `solution_index` and the AMD-specific `flags` are ignored
//! (cuBLAS chooses its own kernels).

use std::ffi::c_void;

use cudarc::cublas::sys::{self as cublas, cublasComputeType_t, cublasOperation_t, cudaDataType};
use cudarc::driver::sys as cu_sys;
use rocblas_sys::{
    rocblas_datatype, rocblas_handle, rocblas_operation, rocblas_pointer_mode, rocblas_status,
};

use super::{BlasResult, Handle, blas, ensure_device, handle};

#[path = "../../../shim-common/rocblas_gemm_args.rs"]
mod args;

use args::Problem;
pub(crate) use args::{rocblas_gemm_ex, rocblas_gemm_strided_batched_ex};

/// The operations and data types cuBLAS is given for a problem.
fn check_types(p: &Problem) -> BlasResult {
    operation(p.trans_a)?;
    operation(p.trans_b)?;
    for m in [p.a, p.b, p.c, p.d] {
        data_type(m.ty)?;
    }
    compute_type(p.compute).map(|_| ())
}

const INVALID_VALUE: rocblas_status = rocblas_status::rocblas_status_invalid_value;
const INVALID_SIZE: rocblas_status = rocblas_status::rocblas_status_invalid_size;
const INVALID_POINTER: rocblas_status = rocblas_status::rocblas_status_invalid_pointer;
const NOT_IMPLEMENTED: rocblas_status = rocblas_status::rocblas_status_not_implemented;

fn operation(op: rocblas_operation) -> BlasResult<cublasOperation_t> {
    match op {
        rocblas_operation::rocblas_operation_none => Ok(cublasOperation_t::CUBLAS_OP_N),
        rocblas_operation::rocblas_operation_transpose => Ok(cublasOperation_t::CUBLAS_OP_T),
        rocblas_operation::rocblas_operation_conjugate_transpose => {
            Ok(cublasOperation_t::CUBLAS_OP_C)
        }
        _ => Err(INVALID_VALUE),
    }
}

/// The CUDA data type and element size of a rocBLAS data type.
fn data_type(ty: rocblas_datatype) -> BlasResult<(cudaDataType, usize)> {
    use rocblas_datatype as R;
    match ty {
        R::rocblas_datatype_f16_r => Ok((cudaDataType::CUDA_R_16F, 2)),
        R::rocblas_datatype_f32_r => Ok((cudaDataType::CUDA_R_32F, 4)),
        R::rocblas_datatype_f64_r => Ok((cudaDataType::CUDA_R_64F, 8)),
        R::rocblas_datatype_bf16_r => Ok((cudaDataType::CUDA_R_16BF, 2)),
        other => Err(unsupported_type(other)),
    }
}

/// The cuBLAS compute type of a rocBLAS compute data type.
fn compute_type(ty: rocblas_datatype) -> BlasResult<cublasComputeType_t> {
    use rocblas_datatype as R;
    match ty {
        R::rocblas_datatype_f32_r => Ok(cublasComputeType_t::CUBLAS_COMPUTE_32F),
        R::rocblas_datatype_f64_r => Ok(cublasComputeType_t::CUBLAS_COMPUTE_64F),
        R::rocblas_datatype_f16_r => Ok(cublasComputeType_t::CUBLAS_COMPUTE_16F),
        other => Err(unsupported_type(other)),
    }
}

/// A real rocBLAS type we do not map is "not implemented"; a number that is
/// no rocBLAS type is an invalid value.
fn unsupported_type(ty: rocblas_datatype) -> rocblas_status {
    let known = (150..=155).contains(&ty.0) || (160..=171).contains(&ty.0);
    if known {
        NOT_IMPLEMENTED
    } else {
        INVALID_VALUE
    }
}

/// Whether the scalar `beta` of compute type `compute` is a host zero.
///
/// # Safety
/// `beta` must point to one scalar of the compute type.
unsafe fn is_host_zero(beta: *const c_void, compute: cublasComputeType_t) -> bool {
    // SAFETY: the caller guarantees the scalar's type.
    unsafe {
        match compute {
            cublasComputeType_t::CUBLAS_COMPUTE_64F => beta.cast::<f64>().read_unaligned() == 0.0,
            cublasComputeType_t::CUBLAS_COMPUTE_16F => {
                beta.cast::<u16>().read_unaligned() & 0x7fff == 0
            }
            _ => beta.cast::<f32>().read_unaligned() == 0.0,
        }
    }
}

/// Whether D is exactly C (cuBLAS's in-place form): same pointer, leading
/// dimension and batch stride.
fn d_is_c(p: &Problem) -> bool {
    let (c, d) = (p.c, p.d);
    c.ptr == d.ptr && c.ld == d.ld && c.stride == d.stride
}

/// Copies the m×n matrix C into D for every batch, on the handle's stream.
fn copy_c_into_d(h: &Handle, p: &Problem) -> BlasResult {
    if p.c.ptr.is_null() {
        return Err(INVALID_POINTER);
    }
    let (_, size) = data_type(p.c.ty)?;
    let to_usize = |v: i64| usize::try_from(v).map_err(|_| INVALID_SIZE);
    let (m, n) = (to_usize(p.m.into())?, to_usize(p.n.into())?);
    let (ldc, ldd) = (to_usize(p.c.ld.into())?, to_usize(p.d.ld.into())?);
    // `rocblas_gemm_ex` is a batch of one with zero strides.
    for batch in 0..i64::from(p.batch_count) {
        let offset = |stride: i64| -> BlasResult<u64> {
            let elems = stride.checked_mul(batch).ok_or(INVALID_SIZE)?;
            let bytes = elems.checked_mul(size as i64).ok_or(INVALID_SIZE)?;
            u64::try_from(bytes).map_err(|_| INVALID_SIZE)
        };
        let copy = cu_sys::CUDA_MEMCPY2D {
            srcMemoryType: cu_sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcDevice: p.c.ptr as u64 + offset(p.c.stride)?,
            srcPitch: ldc * size,
            dstMemoryType: cu_sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstDevice: p.d.ptr as u64 + offset(p.d.stride)?,
            dstPitch: ldd * size,
            WidthInBytes: m * size,
            Height: n,
            srcXInBytes: 0,
            srcY: 0,
            srcHost: std::ptr::null(),
            srcArray: std::ptr::null_mut(),
            dstXInBytes: 0,
            dstY: 0,
            dstHost: std::ptr::null_mut(),
            dstArray: std::ptr::null_mut(),
        };
        // SAFETY: both matrices are device memory of the validated shapes;
        // HIP streams are CUDA streams.
        let status = unsafe { cu_sys::cuMemcpy2DAsync_v2(&copy, h.stream.cast()) };
        if status != cu_sys::CUresult::CUDA_SUCCESS {
            return Err(rocblas_status::rocblas_status_internal_error);
        }
    }
    Ok(())
}

/// Runs a validated GEMM problem.
///
/// # Safety
/// The matrices and scalars must be valid for the problem's shapes.
unsafe fn run(h: rocblas_handle, p: &Problem) -> BlasResult {
    // SAFETY: the caller passes a live handle.
    let h = unsafe { handle(h) }?;
    if !p.validate(check_types)? {
        return Ok(());
    }
    let compute = compute_type(p.compute)?;
    ensure_device()?;
    let host_scalars = h.pointer_mode == rocblas_pointer_mode::rocblas_pointer_mode_host;
    // SAFETY: a host-mode beta points to one scalar of the compute type.
    let beta_is_zero = host_scalars && unsafe { is_host_zero(p.beta, compute) };
    if !d_is_c(p) && !beta_is_zero {
        copy_c_into_d(h, p)?;
    }
    let (op_a, op_b) = (operation(p.trans_a)?, operation(p.trans_b)?);
    let (ty_a, ty_b, ty_d) = (
        data_type(p.a.ty)?.0,
        data_type(p.b.ty)?.0,
        data_type(p.d.ty)?.0,
    );
    let d = p.d.ptr.cast_mut();
    let algo = cublas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    // SAFETY: validated sizes; the caller guarantees the memory.
    blas(unsafe {
        if p.batched {
            cublas::cublasGemmStridedBatchedEx(
                h.cublas,
                op_a,
                op_b,
                p.m,
                p.n,
                p.k,
                p.alpha,
                p.a.ptr,
                ty_a,
                p.a.ld,
                p.a.stride,
                p.b.ptr,
                ty_b,
                p.b.ld,
                p.b.stride,
                p.beta,
                d,
                ty_d,
                p.d.ld,
                p.d.stride,
                p.batch_count,
                compute,
                algo,
            )
        } else {
            cublas::cublasGemmEx(
                h.cublas, op_a, op_b, p.m, p.n, p.k, p.alpha, p.a.ptr, ty_a, p.a.ld, p.b.ptr, ty_b,
                p.b.ld, p.beta, d, ty_d, p.d.ld, compute, algo,
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::args::Matrix;
    use super::*;
    use rocblas_sys::rocblas_gemm_algo;

    fn problem() -> Problem {
        let dummy = 0x1000 as *const c_void;
        let f32_r = rocblas_datatype::rocblas_datatype_f32_r;
        let matrix = |ld| Matrix {
            ptr: dummy,
            ty: f32_r,
            ld,
            stride: 0,
        };
        Problem {
            trans_a: rocblas_operation::rocblas_operation_none,
            trans_b: rocblas_operation::rocblas_operation_transpose,
            m: 4,
            n: 3,
            k: 2,
            alpha: dummy,
            a: matrix(4),
            b: matrix(3),
            beta: dummy,
            c: matrix(4),
            d: matrix(4),
            batch_count: 1,
            compute: f32_r,
            algo: rocblas_gemm_algo::rocblas_gemm_algo_standard,
            flags: 0,
            batched: false,
        }
    }

    #[test]
    fn enums_map_to_cublas() {
        assert_eq!(
            operation(rocblas_operation(112)),
            Ok(cublasOperation_t::CUBLAS_OP_T)
        );
        assert_eq!(operation(rocblas_operation(5)), Err(INVALID_VALUE));
        assert_eq!(
            data_type(rocblas_datatype(168)),
            Ok((cudaDataType::CUDA_R_16BF, 2))
        );
        assert_eq!(data_type(rocblas_datatype(154)), Err(NOT_IMPLEMENTED));
        assert_eq!(data_type(rocblas_datatype(999)), Err(INVALID_VALUE));
        assert_eq!(
            compute_type(rocblas_datatype(151)),
            Ok(cublasComputeType_t::CUBLAS_COMPUTE_32F)
        );
    }

    #[test]
    fn problems_are_validated_like_rocblas() {
        assert_eq!(problem().validate(check_types), Ok(true));
        assert!(d_is_c(&problem()));
        let mut p = problem();
        p.a.ld = 3;
        assert_eq!(p.validate(check_types), Err(INVALID_SIZE));
        let mut p = problem();
        p.n = 0;
        assert_eq!(p.validate(check_types), Ok(false));
        let mut p = problem();
        p.trans_a = rocblas_operation(7);
        assert_eq!(p.validate(check_types), Err(INVALID_VALUE));
        let mut p = problem();
        p.flags = 0x1000;
        assert_eq!(p.validate(check_types), Err(INVALID_VALUE));
        let mut p = problem();
        p.beta = std::ptr::null();
        assert_eq!(p.validate(check_types), Err(INVALID_POINTER));
        let mut p = problem();
        p.d.ld = 8;
        assert!(!d_is_c(&p));
    }

    #[test]
    fn zero_beta_is_detected_per_compute_type() {
        let zero32 = 0.0_f32;
        let one64 = 1.0_f64;
        let neg_zero16: u16 = 0x8000;
        // SAFETY: each pointer refers to a scalar of the named type.
        unsafe {
            let c32 = cublasComputeType_t::CUBLAS_COMPUTE_32F;
            assert!(is_host_zero((&raw const zero32).cast(), c32));
            let c64 = cublasComputeType_t::CUBLAS_COMPUTE_64F;
            assert!(!is_host_zero((&raw const one64).cast(), c64));
            let c16 = cublasComputeType_t::CUBLAS_COMPUTE_16F;
            assert!(is_host_zero((&raw const neg_zero16).cast(), c16));
        }
    }
}
