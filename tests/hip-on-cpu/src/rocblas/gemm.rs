//! `rocblas_gemm_ex` and `rocblas_gemm_strided_batched_ex` as reference
//! loops: `D = α·op(A)·op(B) + β·C` in column-major order, accumulated in
//! the compute type (f32, or f64 for f64), for the type combinations our
//! callers use: all f32; all f64; f16 or bf16 inputs with an output of the
//! same type or f32 and f32 compute. Anything else is
//! `rocblas_status_not_implemented`. As in rocBLAS, C is not read when β
//! is zero, and conjugate-transpose is transpose for real types.

use std::ffi::c_void;

use half::{bf16, f16};
use hip_sys::hipError_t;
use rocblas_sys::{
    rocblas_datatype as T, rocblas_handle, rocblas_operation, rocblas_pointer_mode, rocblas_status,
};

use super::{BlasResult, handle};
use crate::hip::graph::record;
use crate::hip::status::HipResult;

#[path = "../../../shim-common/rocblas_gemm_args.rs"]
mod args;

use args::{Matrix, Problem};
pub(crate) use args::{rocblas_gemm_ex, rocblas_gemm_strided_batched_ex};

const NOT_IMPLEMENTED: rocblas_status = rocblas_status::rocblas_status_not_implemented;
const INVALID_VALUE: rocblas_status = rocblas_status::rocblas_status_invalid_value;
const INVALID_SIZE: rocblas_status = rocblas_status::rocblas_status_invalid_size;

/// The supported `(input, output, compute)` type combinations.
const COMBINATIONS: &[(T, T, T)] = &[
    (
        T::rocblas_datatype_f32_r,
        T::rocblas_datatype_f32_r,
        T::rocblas_datatype_f32_r,
    ),
    (
        T::rocblas_datatype_f64_r,
        T::rocblas_datatype_f64_r,
        T::rocblas_datatype_f64_r,
    ),
    (
        T::rocblas_datatype_f16_r,
        T::rocblas_datatype_f16_r,
        T::rocblas_datatype_f32_r,
    ),
    (
        T::rocblas_datatype_f16_r,
        T::rocblas_datatype_f32_r,
        T::rocblas_datatype_f32_r,
    ),
    (
        T::rocblas_datatype_bf16_r,
        T::rocblas_datatype_bf16_r,
        T::rocblas_datatype_f32_r,
    ),
    (
        T::rocblas_datatype_bf16_r,
        T::rocblas_datatype_f32_r,
        T::rocblas_datatype_f32_r,
    ),
];

fn check_types(p: &Problem) -> BlasResult {
    for op in [p.trans_a, p.trans_b] {
        if !(111..=113).contains(&op.0) {
            return Err(INVALID_VALUE);
        }
    }
    if COMBINATIONS.contains(&(p.a.ty, p.c.ty, p.compute)) {
        Ok(())
    } else {
        Err(NOT_IMPLEMENTED)
    }
}

/// Reads element `i` of a matrix of type `ty` as f64 (exact for every
/// supported type).
///
/// # Safety
/// `ptr` must hold element `i` of type `ty`.
unsafe fn load(ptr: *const c_void, ty: T, i: usize) -> f64 {
    // SAFETY: per the contract.
    unsafe {
        match ty {
            T::rocblas_datatype_f32_r => f64::from(*ptr.cast::<f32>().add(i)),
            T::rocblas_datatype_f64_r => *ptr.cast::<f64>().add(i),
            T::rocblas_datatype_f16_r => f64::from(*ptr.cast::<f16>().add(i)),
            _ => f64::from(*ptr.cast::<bf16>().add(i)),
        }
    }
}

/// Writes element `i`, rounding to nearest even.
///
/// # Safety
/// `ptr` must have room for element `i` of type `ty`.
unsafe fn store(ptr: *mut c_void, ty: T, i: usize, v: f64) {
    // SAFETY: per the contract.
    unsafe {
        match ty {
            T::rocblas_datatype_f32_r => *ptr.cast::<f32>().add(i) = v as f32,
            T::rocblas_datatype_f64_r => *ptr.cast::<f64>().add(i) = v,
            T::rocblas_datatype_f16_r => *ptr.cast::<f16>().add(i) = f16::from_f64(v),
            _ => *ptr.cast::<bf16>().add(i) = bf16::from_f64(v),
        }
    }
}

/// Element offset of `(row, col)` of batch `b` (checked: the arguments
/// come from the caller).
fn offset(m: &Matrix, row: usize, col: usize, b: usize) -> BlasResult<usize> {
    let ld = usize::try_from(m.ld).map_err(|_| INVALID_SIZE)?;
    let stride = if b == 0 {
        0
    } else {
        usize::try_from(m.stride).map_err(|_| INVALID_SIZE)?
    };
    col.checked_mul(ld)
        .and_then(|x| x.checked_add(row))
        .and_then(|x| b.checked_mul(stride).and_then(|s| x.checked_add(s)))
        .ok_or(INVALID_SIZE)
}

/// A scalar of a recorded GEMM.
#[derive(Clone, Copy)]
enum Scalar {
    /// Copied at the call (host pointer mode): the compute type's bytes.
    Value(u64),
    /// Read at each replay (device pointer mode).
    At(usize),
}

/// A GEMM recorded by a stream capture.
struct Recorded {
    problem: Problem,
    alpha: Scalar,
    beta: Scalar,
}

// SAFETY: the pointers name device memory (and, in device pointer mode,
// scalars) that the caller keeps valid for every replay, the contract of
// captured work; a replay only reads the record.
unsafe impl Send for Recorded {}
// SAFETY: as above.
unsafe impl Sync for Recorded {}

impl Recorded {
    /// Records `p`, copying its scalars in host pointer mode.
    ///
    /// # Safety
    /// In host mode the scalars must be readable values of the compute type.
    unsafe fn new(p: &Problem, mode: rocblas_pointer_mode) -> Recorded {
        let bytes = if p.compute == T::rocblas_datatype_f64_r {
            8
        } else {
            4
        };
        let scalar = |ptr: *const c_void| {
            if mode == rocblas_pointer_mode::rocblas_pointer_mode_device {
                return Scalar::At(ptr as usize);
            }
            let mut value = 0u64;
            // SAFETY: per the contract; `value` has room for 8 bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ptr.cast::<u8>(),
                    std::ptr::from_mut(&mut value).cast(),
                    bytes,
                )
            };
            Scalar::Value(value)
        };
        Recorded {
            problem: Problem { ..*p },
            alpha: scalar(p.alpha),
            beta: scalar(p.beta),
        }
    }

    /// Runs the recorded GEMM.
    fn replay(&self) -> HipResult {
        let at = |s: &Scalar| match s {
            Scalar::Value(v) => std::ptr::from_ref(v).cast::<c_void>(),
            Scalar::At(p) => *p as *const c_void,
        };
        let p = Problem {
            alpha: at(&self.alpha),
            beta: at(&self.beta),
            ..self.problem
        };
        let done = p.validate(check_types).and_then(|any| {
            if !any {
                return Ok(());
            }
            // SAFETY: the recorded pointers stay valid for every replay (see
            // the `Send` impl); the scalars point at the record or at device
            // memory.
            unsafe { compute(&p) }
        });
        done.map_err(|status| {
            eprintln!("hip-on-cpu: a rocBLAS GEMM replayed by a graph failed: {status:?}");
            hipError_t::hipErrorLaunchFailure
        })
    }
}

/// Runs a GEMM problem, or records it when the handle's stream captures.
///
/// # Safety
/// The matrices and scalars must be valid for the problem's shapes.
unsafe fn run(h: rocblas_handle, p: &Problem) -> BlasResult {
    // SAFETY: the caller passes a live handle.
    let handle = unsafe { handle(h) }?;
    let (stream, mode) = (handle.stream, handle.pointer_mode);
    if !p.validate(check_types)? {
        return Ok(());
    }
    let recorded = record(stream, || {
        // SAFETY: the caller's scalars, valid per the contract.
        let gemm = unsafe { Recorded::new(p, mode) };
        Ok(move || gemm.replay())
    });
    match recorded {
        Ok(true) => return Ok(()),
        Ok(false) => {}
        Err(error) => {
            eprintln!("hip-on-cpu: a rocBLAS GEMM on a capturing stream failed: {error:?}");
            return Err(rocblas_status::rocblas_status_internal_error);
        }
    }
    // SAFETY: per the contract.
    unsafe { compute(p) }
}

/// Computes a checked GEMM problem.
///
/// # Safety
/// The matrices and scalars must be valid for the problem's shapes.
unsafe fn compute(p: &Problem) -> BlasResult {
    let f64_compute = p.compute == T::rocblas_datatype_f64_r;
    // SAFETY: the scalars are of the compute type.
    let (alpha, beta) = unsafe {
        if f64_compute {
            (*p.alpha.cast::<f64>(), *p.beta.cast::<f64>())
        } else {
            (
                f64::from(*p.alpha.cast::<f32>()),
                f64::from(*p.beta.cast::<f32>()),
            )
        }
    };
    let none = rocblas_operation::rocblas_operation_none;
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let batches = if p.batched { p.batch_count as usize } else { 1 };
    for b in 0..batches {
        // SAFETY (both): inside A and B per the caller's shapes.
        let a_rows = unsafe { vectors(&p.a, m, k, p.trans_a == none, b) }?;
        let b_cols = unsafe { vectors(&p.b, n, k, p.trans_b != none, b) }?;
        // The products of column j of D, f32 sums rounded at each step as
        // an f32 accumulator rounds.
        let mut sums = vec![0f64; m * n];
        crate::parallel::for_each_chunk(&mut sums, m, m * k, |j, column| {
            let b_col = &b_cols[j * k..(j + 1) * k];
            for (i, sum) in column.iter_mut().enumerate() {
                let products = a_rows[i * k..(i + 1) * k]
                    .iter()
                    .zip(b_col)
                    .map(|(x, y)| x * y);
                // Sums start at +0.0 (`Iterator::sum` of f64 starts at -0.0).
                *sum = if f64_compute {
                    products.fold(0f64, |acc, prod| acc + prod)
                } else {
                    f64::from(products.fold(0f32, |acc, prod| acc + prod as f32))
                };
            }
        });
        for j in 0..n {
            for i in 0..m {
                let mut v = alpha * sums[j * m + i];
                if beta != 0.0 {
                    // SAFETY: inside C per the caller's shapes.
                    v += beta * unsafe { load(p.c.ptr, p.c.ty, offset(&p.c, i, j, b)?) };
                }
                if !f64_compute {
                    v = f64::from(v as f32);
                }
                // SAFETY: inside D per the caller's shapes.
                unsafe { store(p.d.ptr.cast_mut(), p.d.ty, offset(&p.d, i, j, b)?, v) };
            }
        }
    }
    Ok(())
}

/// `count` vectors of `len` elements of batch `b` of `mat`, read as f64
/// into one `count x len` row-major array: vector `v` is row `v` of the
/// stored matrix when `along_rows`, else its column `v`.
///
/// # Safety
/// Every element named must be inside the matrix.
unsafe fn vectors(
    mat: &Matrix,
    count: usize,
    len: usize,
    along_rows: bool,
    b: usize,
) -> BlasResult<Vec<f64>> {
    let mut out = Vec::with_capacity(count * len);
    for v in 0..count {
        for l in 0..len {
            let at = if along_rows {
                offset(mat, v, l, b)?
            } else {
                offset(mat, l, v, b)?
            };
            // SAFETY: per the contract.
            out.push(unsafe { load(mat.ptr, mat.ty, at) });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocblas_sys::rocblas_gemm_algo;

    #[test]
    fn gemm_matches_a_host_product_with_transposes_and_batches() {
        let mut h = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { super::super::rocblas_create_handle(&mut h) }.unwrap();
        // A is 2x3 stored transposed (3x2, ld 3); B is 3x2 (ld 3); 2 batches.
        let a: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let b: Vec<f32> = (0..12).map(|v| (v as f32) * 0.5 - 1.0).collect();
        let c = [1.0f32; 8];
        let mut d = [0.0f32; 8];
        let (alpha, beta) = (2.0f32, 0.5f32);
        let t = T::rocblas_datatype_f32_r;
        // SAFETY: every buffer holds the batches of the shapes passed.
        unsafe {
            rocblas_gemm_strided_batched_ex(
                h,
                rocblas_operation::rocblas_operation_transpose,
                rocblas_operation::rocblas_operation_none,
                2,
                2,
                3,
                (&alpha as *const f32).cast(),
                a.as_ptr().cast(),
                t,
                3,
                6,
                b.as_ptr().cast(),
                t,
                3,
                6,
                (&beta as *const f32).cast(),
                c.as_ptr().cast(),
                t,
                2,
                4,
                d.as_mut_ptr().cast(),
                t,
                2,
                4,
                2,
                t,
                rocblas_gemm_algo::rocblas_gemm_algo_standard,
                0,
                0,
            )
        }
        .unwrap();
        for bt in 0..2 {
            for j in 0..2 {
                for i in 0..2 {
                    let dot: f32 = (0..3)
                        .map(|l| a[bt * 6 + i * 3 + l] * b[bt * 6 + j * 3 + l])
                        .sum();
                    assert_eq!(
                        d[bt * 4 + j * 2 + i],
                        alpha * dot + beta,
                        "batch {bt} ({i},{j})"
                    );
                }
            }
        }
        // SAFETY: a live handle.
        unsafe { super::super::rocblas_destroy_handle(h) }.unwrap();
    }
}
