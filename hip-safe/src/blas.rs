//! [`Blas`]: rocBLAS matrix multiplication, validated before the call.
//!
//! Matrices are column-major, as in BLAS: element `(i, j)` of a matrix with
//! leading dimension `ld` is at `i + j * ld`. Both entry points use
//! `rocblas_gemm_ex` / `rocblas_gemm_strided_batched_ex` with the output
//! written in place (`D == C`); half-precision types accumulate in `f32`.

use std::fmt;
use std::sync::Mutex;

use half::{bf16, f16};
use rocblas_sys::{
    RocblasApi, rocblas_datatype, rocblas_gemm_algo, rocblas_handle, rocblas_int,
    rocblas_operation, rocblas_pointer_mode, rocblas_stride,
};

use crate::buffer::{DevicePtr, DevicePtrMut};
use crate::error::{BlasError, Result};
use crate::repr::DeviceRepr;
use crate::result::{CheckStatus, out_ptr};
use crate::stream::Stream;

/// Whether an operand is used as stored or transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transpose {
    /// `op(X) = X`.
    No,
    /// `op(X) = Xᵀ`.
    Yes,
}

impl Transpose {
    fn raw(self) -> rocblas_operation {
        match self {
            Transpose::No => rocblas_operation::rocblas_operation_none,
            Transpose::Yes => rocblas_operation::rocblas_operation_transpose,
        }
    }

    fn letter(self) -> char {
        match self {
            Transpose::No => 'N',
            Transpose::Yes => 'T',
        }
    }
}

/// `C = alpha * op(A) * op(B) + beta * C` with `op(A)` of shape `m × k`,
/// `op(B)` of shape `k × n` and `C` of shape `m × n`, column-major.
///
/// `S` is the scalar type of `alpha`/`beta`: `f32` for `f32`, `f16` and
/// `bf16` matrices, `f64` for `f64` (see [`GemmType::Scalar`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmConfig<S> {
    /// How A is used.
    pub transa: Transpose,
    /// How B is used.
    pub transb: Transpose,
    /// Rows of `op(A)` and C.
    pub m: usize,
    /// Columns of `op(B)` and C.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product.
    pub alpha: S,
    /// Leading dimension of A as stored.
    pub lda: usize,
    /// Leading dimension of B as stored.
    pub ldb: usize,
    /// Scale of the previous C.
    pub beta: S,
    /// Leading dimension of C.
    pub ldc: usize,
}

/// `batch_size` independent GEMMs whose operands start `stride_*` elements
/// apart (a stride of 0 reuses one A or B for every batch).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StridedBatchedConfig<S> {
    /// The shape shared by every batch.
    pub gemm: GemmConfig<S>,
    /// Number of GEMMs.
    pub batch_size: usize,
    /// Elements between consecutive A matrices.
    pub stride_a: usize,
    /// Elements between consecutive B matrices.
    pub stride_b: usize,
    /// Elements between consecutive C matrices (they must not overlap).
    pub stride_c: usize,
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// Element types rocBLAS multiplies here: `f32`, `f64`, `f16`, `bf16`.
pub trait GemmType: DeviceRepr + sealed::Sealed {
    /// The type of `alpha` and `beta` (the compute type).
    type Scalar: Copy + fmt::Debug;
    /// rocBLAS's name for the element type.
    const DATATYPE: rocblas_datatype;
    /// rocBLAS's name for the compute type.
    const COMPUTE: rocblas_datatype;
    /// Short name for messages.
    const NAME: &'static str;
}

macro_rules! gemm_type {
    ($t:ty, $scalar:ty, $data:ident, $compute:ident, $name:literal) => {
        impl GemmType for $t {
            type Scalar = $scalar;
            const DATATYPE: rocblas_datatype = rocblas_datatype::$data;
            const COMPUTE: rocblas_datatype = rocblas_datatype::$compute;
            const NAME: &'static str = $name;
        }
    };
}

gemm_type!(
    f32,
    f32,
    rocblas_datatype_f32_r,
    rocblas_datatype_f32_r,
    "f32"
);
gemm_type!(
    f64,
    f64,
    rocblas_datatype_f64_r,
    rocblas_datatype_f64_r,
    "f64"
);
gemm_type!(
    f16,
    f32,
    rocblas_datatype_f16_r,
    rocblas_datatype_f32_r,
    "f16"
);
gemm_type!(
    bf16,
    f32,
    rocblas_datatype_bf16_r,
    rocblas_datatype_f32_r,
    "bf16"
);

/// A rocBLAS handle bound to one stream.
///
/// The handle is used under a mutex, so one `Blas` may be shared between
/// threads (rocBLAS handles must not be used concurrently).
///
/// ```no_run
/// use hip_safe::{Blas, Device, GemmConfig, Transpose};
/// let stream = Device::new(0)?.new_stream()?;
/// let blas = Blas::new(&stream)?;
/// // 2x2 column-major: A = [[1, 2], [3, 4]] is stored as [1, 3, 2, 4].
/// let a = stream.clone_htod(&[1.0f32, 3.0, 2.0, 4.0])?;
/// let b = stream.clone_htod(&[1.0f32, 0.0, 0.0, 1.0])?;
/// let mut c = stream.alloc_zeros::<f32>(4)?;
/// let cfg = GemmConfig {
///     transa: Transpose::No, transb: Transpose::No,
///     m: 2, n: 2, k: 2, alpha: 1.0, lda: 2, ldb: 2, beta: 0.0, ldc: 2,
/// };
/// blas.gemm(cfg, &a, &b, &mut c)?;
/// assert_eq!(stream.clone_dtoh(&c)?, vec![1.0, 3.0, 2.0, 4.0]);
/// # Ok::<(), hip_safe::Error>(())
/// ```
pub struct Blas {
    api: &'static RocblasApi,
    handle: Mutex<RawHandle>,
    stream: Stream,
}

struct RawHandle(rocblas_handle);

// SAFETY: the rocBLAS handle is not tied to the creating thread; it is only
// used while holding the mutex, so it is never used concurrently.
unsafe impl Send for RawHandle {}

impl fmt::Debug for Blas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blas")
            .field("stream", &self.stream)
            .finish()
    }
}

impl Blas {
    /// Creates a rocBLAS handle on `stream`'s device and binds it to `stream`.
    pub fn new(stream: &Stream) -> Result<Blas> {
        let api = rocblas_sys::rocblas()?;
        stream.bind()?;
        let raw = out_ptr("rocblas_create_handle", |raw| {
            // SAFETY: valid out-pointer.
            unsafe { api.rocblas_create_handle(raw) }
        })?;
        let blas = Blas {
            api,
            handle: Mutex::new(RawHandle(raw)),
            stream: stream.clone(),
        };
        // SAFETY: live handle and stream (the stream outlives the handle:
        // `blas` holds a clone of it).
        unsafe { api.rocblas_set_stream(raw, stream.raw()) }.check("rocblas_set_stream")?;
        // SAFETY: live handle; alpha and beta are passed as host pointers.
        unsafe {
            api.rocblas_set_pointer_mode(raw, rocblas_pointer_mode::rocblas_pointer_mode_host)
        }
        .check("rocblas_set_pointer_mode(host)")?;
        Ok(blas)
    }

    /// The stream the handle queues work on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// `C = alpha * op(A) * op(B) + beta * C` (see [`GemmConfig`]).
    pub fn gemm<T: GemmType>(
        &self,
        cfg: GemmConfig<T::Scalar>,
        a: &impl DevicePtr<T>,
        b: &impl DevicePtr<T>,
        c: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        let batched = StridedBatchedConfig {
            gemm: cfg,
            batch_size: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        };
        self.run::<T>(&batched, a, b, c, false)
    }

    /// `batch_size` GEMMs in one call (see [`StridedBatchedConfig`]).
    pub fn gemm_strided_batched<T: GemmType>(
        &self,
        cfg: StridedBatchedConfig<T::Scalar>,
        a: &impl DevicePtr<T>,
        b: &impl DevicePtr<T>,
        c: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        self.run::<T>(&cfg, a, b, c, true)
    }

    fn run<T: GemmType>(
        &self,
        cfg: &StridedBatchedConfig<T::Scalar>,
        a: &impl DevicePtr<T>,
        b: &impl DevicePtr<T>,
        c: &mut impl DevicePtrMut<T>,
        batched: bool,
    ) -> Result<()> {
        let op = describe::<T>(cfg, batched);
        let dims = validate(cfg, a.len(), b.len(), c.len()).map_err(|reason| {
            BlasError::InvalidArgument {
                op: op.clone(),
                reason,
            }
        })?;
        for s in [a.stream(), b.stream(), c.stream()] {
            if s.device() != self.stream.device() {
                return Err(BlasError::InvalidArgument {
                    op,
                    reason: format!(
                        "an operand lives on device {}, the handle on device {}",
                        s.device().ordinal(),
                        self.stream.device().ordinal()
                    ),
                }
                .into());
            }
            self.stream.join(s)?;
        }
        if dims.is_empty() {
            return Ok(());
        }
        self.stream.bind()?;
        let handle = self
            .handle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (alpha, beta) = (
            &cfg.gemm.alpha as *const T::Scalar,
            &cfg.gemm.beta as *const T::Scalar,
        );
        let c_ptr = c.device_ptr_mut();
        let g = &cfg.gemm;
        let algo = rocblas_gemm_algo::rocblas_gemm_algo_standard;
        // SAFETY: the handle is live and used under the mutex; the sizes were
        // validated against every buffer's length, so rocBLAS stays inside
        // them; alpha/beta are host pointers of the compute type, valid for
        // the call; C is passed as D (in place).
        unsafe {
            if batched {
                self.api.rocblas_gemm_strided_batched_ex(
                    handle.0,
                    g.transa.raw(),
                    g.transb.raw(),
                    dims.m,
                    dims.n,
                    dims.k,
                    alpha.cast(),
                    a.device_ptr(),
                    T::DATATYPE,
                    dims.lda,
                    dims.stride_a,
                    b.device_ptr(),
                    T::DATATYPE,
                    dims.ldb,
                    dims.stride_b,
                    beta.cast(),
                    c_ptr,
                    T::DATATYPE,
                    dims.ldc,
                    dims.stride_c,
                    c_ptr,
                    T::DATATYPE,
                    dims.ldc,
                    dims.stride_c,
                    dims.batch,
                    T::COMPUTE,
                    algo,
                    0,
                    0,
                )
            } else {
                self.api.rocblas_gemm_ex(
                    handle.0,
                    g.transa.raw(),
                    g.transb.raw(),
                    dims.m,
                    dims.n,
                    dims.k,
                    alpha.cast(),
                    a.device_ptr(),
                    T::DATATYPE,
                    dims.lda,
                    b.device_ptr(),
                    T::DATATYPE,
                    dims.ldb,
                    beta.cast(),
                    c_ptr,
                    T::DATATYPE,
                    dims.ldc,
                    c_ptr,
                    T::DATATYPE,
                    dims.ldc,
                    T::COMPUTE,
                    algo,
                    0,
                    0,
                )
            }
        }
        .check(op)?;
        drop(handle);
        for s in [a.stream(), b.stream(), c.stream()] {
            s.join(&self.stream)?;
        }
        Ok(())
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        let raw = self
            .handle
            .get_mut()
            .map_or_else(|poisoned| poisoned.into_inner().0, |h| h.0);
        let api = self.api;
        self.stream.device().release(|_| {
            // SAFETY: created in `new`, destroyed exactly once here.
            unsafe { api.rocblas_destroy_handle(raw) }
        });
    }
}

/// The rocBLAS integer arguments of a validated call.
#[derive(Debug, PartialEq, Eq)]
struct Dims {
    m: rocblas_int,
    n: rocblas_int,
    k: rocblas_int,
    lda: rocblas_int,
    ldb: rocblas_int,
    ldc: rocblas_int,
    stride_a: rocblas_stride,
    stride_b: rocblas_stride,
    stride_c: rocblas_stride,
    batch: rocblas_int,
}

impl Dims {
    /// Nothing to compute (C has no elements or there are no batches).
    fn is_empty(&self) -> bool {
        self.m == 0 || self.n == 0 || self.batch == 0
    }
}

/// Checks shapes, leading dimensions, strides and buffer lengths, and
/// converts them to rocBLAS's integer types.
fn validate<S>(
    cfg: &StridedBatchedConfig<S>,
    a_len: usize,
    b_len: usize,
    c_len: usize,
) -> std::result::Result<Dims, String> {
    let g = &cfg.gemm;
    // Rows and columns of A, B and C as stored.
    let (a_rows, a_cols) = stored_shape(g.transa, g.m, g.k);
    let (b_rows, b_cols) = stored_shape(g.transb, g.k, g.n);
    let operands = [
        ("A", a_rows, a_cols, g.lda, cfg.stride_a, a_len),
        ("B", b_rows, b_cols, g.ldb, cfg.stride_b, b_len),
        ("C", g.m, g.n, g.ldc, cfg.stride_c, c_len),
    ];
    for (name, rows, cols, ld, stride, len) in operands {
        if ld < rows.max(1) {
            return Err(format!(
                "ld{} = {ld} is smaller than the {rows} rows of {name} as stored",
                name.to_lowercase()
            ));
        }
        let one = span(rows, cols, ld).ok_or_else(|| format!("{name} is too large"))?;
        let needed = if cfg.batch_size == 0 || one == 0 {
            0
        } else {
            stride
                .checked_mul(cfg.batch_size - 1)
                .and_then(|s| s.checked_add(one))
                .ok_or_else(|| format!("{name} with its stride is too large"))?
        };
        if needed > len {
            return Err(format!(
                "{name} ({rows}x{cols}, ld {ld}, stride {stride}, {} batch(es)) needs {needed} elements but the buffer has {len}",
                cfg.batch_size
            ));
        }
    }
    let c_span = span(g.m, g.n, g.ldc).unwrap_or(usize::MAX);
    if cfg.batch_size > 1 && c_span > 0 && cfg.stride_c < c_span {
        return Err(format!(
            "stride_c = {} makes the C matrices of consecutive batches overlap (each spans {c_span} elements)",
            cfg.stride_c
        ));
    }
    let int = |name: &str, v: usize| {
        rocblas_int::try_from(v)
            .map_err(|_| format!("{name} = {v} does not fit rocBLAS's 32-bit int"))
    };
    let stride = |name: &str, v: usize| {
        rocblas_stride::try_from(v)
            .map_err(|_| format!("{name} = {v} does not fit a 64-bit stride"))
    };
    Ok(Dims {
        m: int("m", g.m)?,
        n: int("n", g.n)?,
        k: int("k", g.k)?,
        lda: int("lda", g.lda)?,
        ldb: int("ldb", g.ldb)?,
        ldc: int("ldc", g.ldc)?,
        stride_a: stride("stride_a", cfg.stride_a)?,
        stride_b: stride("stride_b", cfg.stride_b)?,
        stride_c: stride("stride_c", cfg.stride_c)?,
        batch: int("batch_size", cfg.batch_size)?,
    })
}

/// `(rows, cols)` of an operand as stored, given its shape after `op`.
fn stored_shape(t: Transpose, rows: usize, cols: usize) -> (usize, usize) {
    match t {
        Transpose::No => (rows, cols),
        Transpose::Yes => (cols, rows),
    }
}

/// Elements touched by a column-major `rows × cols` matrix with leading
/// dimension `ld`: `ld * (cols - 1) + rows` (0 when empty).
fn span(rows: usize, cols: usize, ld: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    ld.checked_mul(cols - 1)?.checked_add(rows)
}

fn describe<T: GemmType>(cfg: &StridedBatchedConfig<T::Scalar>, batched: bool) -> String {
    let g = &cfg.gemm;
    let base = format!(
        "{}({}, {}{}, m={}, n={}, k={}, lda={}, ldb={}, ldc={}",
        if batched {
            "rocblas_gemm_strided_batched_ex"
        } else {
            "rocblas_gemm_ex"
        },
        T::NAME,
        g.transa.letter(),
        g.transb.letter(),
        g.m,
        g.n,
        g.k,
        g.lda,
        g.ldb,
        g.ldc
    );
    if batched {
        format!(
            "{base}, batch={}, strides a={} b={} c={})",
            cfg.batch_size, cfg.stride_a, cfg.stride_b, cfg.stride_c
        )
    } else {
        format!("{base})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(transa: Transpose, transb: Transpose, m: usize, n: usize, k: usize) -> GemmConfig<f32> {
        let (a_rows, _) = stored_shape(transa, m, k);
        let (b_rows, _) = stored_shape(transb, k, n);
        GemmConfig {
            transa,
            transb,
            m,
            n,
            k,
            alpha: 1.0,
            lda: a_rows.max(1),
            ldb: b_rows.max(1),
            beta: 0.0,
            ldc: m.max(1),
        }
    }

    fn single(g: GemmConfig<f32>) -> StridedBatchedConfig<f32> {
        StridedBatchedConfig {
            gemm: g,
            batch_size: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        }
    }

    #[test]
    fn exact_buffers_pass_for_every_transpose() {
        for ta in [Transpose::No, Transpose::Yes] {
            for tb in [Transpose::No, Transpose::Yes] {
                let d = validate(&single(cfg(ta, tb, 3, 4, 5)), 15, 20, 12).unwrap();
                assert_eq!((d.m, d.n, d.k, d.batch), (3, 4, 5, 1));
                assert!(validate(&single(cfg(ta, tb, 3, 4, 5)), 14, 20, 12).is_err());
                assert!(validate(&single(cfg(ta, tb, 3, 4, 5)), 15, 19, 12).is_err());
                assert!(validate(&single(cfg(ta, tb, 3, 4, 5)), 15, 20, 11).is_err());
            }
        }
    }

    #[test]
    fn leading_dimensions_are_checked() {
        let mut g = cfg(Transpose::No, Transpose::No, 3, 4, 5);
        g.lda = 2;
        let err = validate(&single(g), 100, 100, 100).unwrap_err();
        assert!(err.contains("lda = 2"), "{err}");
        let mut g = cfg(Transpose::Yes, Transpose::No, 3, 4, 5);
        g.lda = 4; // A is stored 5 x 3
        assert!(
            validate(&single(g), 100, 100, 100)
                .unwrap_err()
                .contains("lda")
        );
        let mut g = cfg(Transpose::No, Transpose::No, 3, 4, 5);
        g.ldc = 8; // padded C: needs 8 * 3 + 3 elements
        assert!(validate(&single(g), 15, 20, 27).is_ok());
        assert!(validate(&single(g), 15, 20, 26).is_err());
    }

    #[test]
    fn batches_need_room_and_disjoint_outputs() {
        let b = StridedBatchedConfig {
            gemm: cfg(Transpose::No, Transpose::No, 2, 2, 2),
            batch_size: 3,
            stride_a: 4,
            stride_b: 0,
            stride_c: 4,
        };
        let d = validate(&b, 12, 4, 12).unwrap();
        assert_eq!((d.stride_a, d.stride_b, d.stride_c, d.batch), (4, 0, 4, 3));
        assert!(validate(&b, 11, 4, 12).is_err());
        assert!(validate(&b, 12, 4, 11).is_err());
        let overlapping = StridedBatchedConfig { stride_c: 2, ..b };
        assert!(
            validate(&overlapping, 12, 4, 12)
                .unwrap_err()
                .contains("overlap")
        );
    }

    #[test]
    fn empty_problems_are_valid_and_empty() {
        assert!(
            validate(
                &single(cfg(Transpose::No, Transpose::No, 0, 4, 5)),
                0,
                20,
                0
            )
            .unwrap()
            .is_empty()
        );
        let k0 = validate(
            &single(cfg(Transpose::No, Transpose::No, 3, 4, 0)),
            0,
            0,
            12,
        )
        .unwrap();
        assert!(!k0.is_empty(), "k = 0 still scales C by beta");
        let none = StridedBatchedConfig {
            batch_size: 0,
            ..single(cfg(Transpose::No, Transpose::No, 3, 4, 5))
        };
        assert!(validate(&none, 0, 0, 0).unwrap().is_empty());
    }

    #[test]
    fn sizes_beyond_rocblas_int_are_refused() {
        let g = GemmConfig {
            m: 1 << 31,
            lda: 1 << 31,
            ldc: 1 << 31,
            ..cfg(Transpose::No, Transpose::No, 1, 1, 1)
        };
        let err = validate(&single(g), usize::MAX, usize::MAX, usize::MAX).unwrap_err();
        assert!(err.contains("does not fit"), "{err}");
    }

    #[test]
    fn descriptions_name_dtype_and_shape() {
        let text = describe::<f16>(&single(cfg(Transpose::Yes, Transpose::No, 3, 4, 5)), false);
        assert_eq!(
            text,
            "rocblas_gemm_ex(f16, TN, m=3, n=4, k=5, lda=5, ldb=5, ldc=3)"
        );
        assert_eq!(
            <bf16 as GemmType>::COMPUTE,
            rocblas_datatype::rocblas_datatype_f32_r
        );
        assert_eq!(<f64 as GemmType>::DATATYPE.0, 152);
    }
}
