//! The arguments of rocBLAS's two GEMM entry points, shared by the shims:
//! one [`Problem`] for `rocblas_gemm_ex` and
//! `rocblas_gemm_strided_batched_ex`, its shape and pointer checks in
//! rocBLAS's order, and the entry points, which hand a problem to the
//! including module's `run`.

use std::ffi::c_void;

use rocblas_sys::{
    rocblas_datatype, rocblas_gemm_algo, rocblas_handle, rocblas_int, rocblas_operation,
    rocblas_status, rocblas_stride,
};

use super::BlasResult;

const INVALID_VALUE: rocblas_status = rocblas_status::rocblas_status_invalid_value;
const INVALID_SIZE: rocblas_status = rocblas_status::rocblas_status_invalid_size;
const INVALID_POINTER: rocblas_status = rocblas_status::rocblas_status_invalid_pointer;
const NOT_IMPLEMENTED: rocblas_status = rocblas_status::rocblas_status_not_implemented;

/// Every rocBLAS `rocblas_gemm_flags` bit (all AMD tuning hints).
const KNOWN_FLAGS: u32 = 0x2 | 0x4 | 0x8 | 0x10 | 0x20;

/// One matrix argument.
#[derive(Clone, Copy)]
pub(crate) struct Matrix {
    pub(crate) ptr: *const c_void,
    pub(crate) ty: rocblas_datatype,
    pub(crate) ld: rocblas_int,
    pub(crate) stride: rocblas_stride,
}

/// A rocBLAS GEMM call's arguments (a batch of 1 for `gemm_ex`).
pub(crate) struct Problem {
    pub(crate) trans_a: rocblas_operation,
    pub(crate) trans_b: rocblas_operation,
    pub(crate) m: rocblas_int,
    pub(crate) n: rocblas_int,
    pub(crate) k: rocblas_int,
    pub(crate) alpha: *const c_void,
    pub(crate) a: Matrix,
    pub(crate) b: Matrix,
    pub(crate) beta: *const c_void,
    pub(crate) c: Matrix,
    pub(crate) d: Matrix,
    pub(crate) batch_count: rocblas_int,
    pub(crate) compute: rocblas_datatype,
    pub(crate) algo: rocblas_gemm_algo,
    pub(crate) flags: u32,
    /// Whether this came from the strided-batched entry point.
    pub(crate) batched: bool,
}

/// Rows of a stored operand: `rows` if not transposed, else `cols`.
pub(crate) fn stored_rows(
    op: rocblas_operation,
    rows: rocblas_int,
    cols: rocblas_int,
) -> rocblas_int {
    if op == rocblas_operation::rocblas_operation_none {
        rows
    } else {
        cols
    }
}

impl Problem {
    /// Checks the arguments in rocBLAS's order (enums, sizes, pointers);
    /// `Ok(false)` means there is nothing to compute.
    /// `types` checks the operations and data types first.
    pub(crate) fn validate(&self, types: impl FnOnce(&Problem) -> BlasResult) -> BlasResult<bool> {
        types(self)?;
        if self.a.ty != self.b.ty || self.c.ty != self.d.ty {
            return Err(NOT_IMPLEMENTED);
        }
        let algos = [
            rocblas_gemm_algo::rocblas_gemm_algo_standard,
            rocblas_gemm_algo::rocblas_gemm_algo_solution_index,
        ];
        if !algos.contains(&self.algo) || self.flags & !KNOWN_FLAGS != 0 {
            return Err(INVALID_VALUE);
        }
        let (m, n, k) = (self.m, self.n, self.k);
        if m < 0 || n < 0 || k < 0 || self.batch_count < 0 {
            return Err(INVALID_SIZE);
        }
        let lda_min = stored_rows(self.trans_a, m, k).max(1);
        let ldb_min = stored_rows(self.trans_b, k, n).max(1);
        if self.a.ld < lda_min
            || self.b.ld < ldb_min
            || self.c.ld < m.max(1)
            || self.d.ld < m.max(1)
        {
            return Err(INVALID_SIZE);
        }
        if m == 0 || n == 0 || self.batch_count == 0 {
            return Ok(false);
        }
        if self.alpha.is_null() || self.beta.is_null() || self.d.ptr.is_null() {
            return Err(INVALID_POINTER);
        }
        if k > 0 && (self.a.ptr.is_null() || self.b.ptr.is_null()) {
            return Err(INVALID_POINTER);
        }
        Ok(true)
    }
}

/// `rocblas_gemm_ex`: `D = α·op(A)·op(B) + β·C`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rocblas_gemm_ex(
    handle: rocblas_handle,
    trans_a: rocblas_operation,
    trans_b: rocblas_operation,
    m: rocblas_int,
    n: rocblas_int,
    k: rocblas_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: rocblas_datatype,
    lda: rocblas_int,
    b: *const c_void,
    b_type: rocblas_datatype,
    ldb: rocblas_int,
    beta: *const c_void,
    c: *const c_void,
    c_type: rocblas_datatype,
    ldc: rocblas_int,
    d: *mut c_void,
    d_type: rocblas_datatype,
    ldd: rocblas_int,
    compute_type: rocblas_datatype,
    algo: rocblas_gemm_algo,
    _solution_index: i32,
    flags: u32,
) -> BlasResult {
    let matrix = |ptr, ty, ld| Matrix {
        ptr,
        ty,
        ld,
        stride: 0,
    };
    let problem = Problem {
        trans_a,
        trans_b,
        m,
        n,
        k,
        alpha,
        a: matrix(a, a_type, lda),
        b: matrix(b, b_type, ldb),
        beta,
        c: matrix(c, c_type, ldc),
        d: matrix(d.cast_const(), d_type, ldd),
        batch_count: 1,
        compute: compute_type,
        algo,
        flags,
        batched: false,
    };
    // SAFETY: forwarded contract.
    unsafe { super::run(handle, &problem) }
}

/// `rocblas_gemm_strided_batched_ex`: `batch_count` GEMMs at fixed strides.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rocblas_gemm_strided_batched_ex(
    handle: rocblas_handle,
    trans_a: rocblas_operation,
    trans_b: rocblas_operation,
    m: rocblas_int,
    n: rocblas_int,
    k: rocblas_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: rocblas_datatype,
    lda: rocblas_int,
    stride_a: rocblas_stride,
    b: *const c_void,
    b_type: rocblas_datatype,
    ldb: rocblas_int,
    stride_b: rocblas_stride,
    beta: *const c_void,
    c: *const c_void,
    c_type: rocblas_datatype,
    ldc: rocblas_int,
    stride_c: rocblas_stride,
    d: *mut c_void,
    d_type: rocblas_datatype,
    ldd: rocblas_int,
    stride_d: rocblas_stride,
    batch_count: rocblas_int,
    compute_type: rocblas_datatype,
    algo: rocblas_gemm_algo,
    _solution_index: i32,
    flags: u32,
) -> BlasResult {
    let problem = Problem {
        trans_a,
        trans_b,
        m,
        n,
        k,
        alpha,
        a: Matrix {
            ptr: a,
            ty: a_type,
            ld: lda,
            stride: stride_a,
        },
        b: Matrix {
            ptr: b,
            ty: b_type,
            ld: ldb,
            stride: stride_b,
        },
        beta,
        c: Matrix {
            ptr: c,
            ty: c_type,
            ld: ldc,
            stride: stride_c,
        },
        d: Matrix {
            ptr: d.cast_const(),
            ty: d_type,
            ld: ldd,
            stride: stride_d,
        },
        batch_count,
        compute: compute_type,
        algo,
        flags,
        batched: true,
    };
    // SAFETY: forwarded contract.
    unsafe { super::run(handle, &problem) }
}
