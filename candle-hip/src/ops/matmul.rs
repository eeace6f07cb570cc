//! Batched matrix multiplication through rocBLAS (hip-safe's `Blas`), for
//! f32, f64, f16 and bf16 (half types accumulate in f32); one-row products
//! with a row-major weight (decoding one token's linear layers) go to
//! `gemv.hip` instead ([`crate::ops::gemv`]).
//!
//! Candle asks for `C (b × m × n) = A (b × m × k) · B (b × k × n)`, all
//! row-major; C is a new contiguous tensor. BLAS is column-major, and a
//! row-major `m × n` matrix is, byte for byte, the column-major `n × m`
//! matrix Cᵀ. So every call computes `Cᵀ = Bᵀ · Aᵀ`: rocBLAS's first
//! operand is candle's rhs and its second is candle's lhs. Each operand is
//! read in place, never copied: a row-major matrix whose columns are
//! unit-stride is its own transpose in column-major order (`N`), one whose
//! rows are unit-stride is itself in column-major order (`T`), with the
//! other stride as the leading dimension.
//!
//! Accepted layouts: every pattern candle's CUDA backend takes (contiguous,
//! transposed lhs and/or rhs, size-1 dimensions with any stride, batch
//! strides of 0 for broadcast operands), and more: leading dimensions larger
//! than the matrix (narrowed views), and any number of batch dimensions.
//! Batch dimensions that merge into one stride for both operands become one
//! strided-batched call; the others are looped over, one call each. Other
//! layouts (neither dimension unit-stride) are refused with candle's
//! `MatMulUnexpectedStriding` error; make the operand contiguous first.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout, WithDType};
use hip_safe::{GemmConfig, GemmType, StridedBatchedConfig, Transpose};

use crate::error::{Result, hip};
use crate::handles;
use crate::kernel::info::merge_dims;
use crate::ops::gemv;
use crate::size;
use crate::storage::HipStorage;
use crate::typed::{Typed, TypedMut};

const OP: &str = "matmul";

/// How one row-major operand enters the column-major call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Operand {
    /// `No` when the memory, read column-major, is already the transpose.
    pub(crate) trans: Transpose,
    /// The leading dimension as stored.
    pub(crate) ld: usize,
}

/// The operand that gives `Rᵀ` for a row-major `rows × cols` matrix `R`
/// whose elements `(i, j)` lie at `i * row_stride + j * col_stride`, or
/// `None` when neither dimension is unit-stride (a dimension of size 1 has
/// any stride).
pub(crate) fn orient(
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
) -> Option<Operand> {
    // Columns unit-stride: column-major `cols × rows` with ld = row_stride.
    if (col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= cols) {
        let ld = if rows == 1 { cols } else { row_stride };
        return Some(Operand {
            trans: Transpose::No,
            ld,
        });
    }
    // Rows unit-stride: column-major `rows × cols` with ld = col_stride.
    if (row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= rows) {
        let ld = if cols == 1 { rows } else { col_stride };
        return Some(Operand {
            trans: Transpose::Yes,
            ld,
        });
    }
    None
}

/// One strided-batched call: `count` products whose operands start at
/// these element offsets (from each layout's start) and step by the strides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Call {
    /// Offset of rocBLAS's A (candle's rhs).
    pub(crate) a_offset: usize,
    /// Offset of rocBLAS's B (candle's lhs).
    pub(crate) b_offset: usize,
    /// Offset into the output.
    pub(crate) c_offset: usize,
    /// Products in the call.
    pub(crate) count: usize,
    /// Step of A between products.
    pub(crate) stride_a: usize,
    /// Step of B between products.
    pub(crate) stride_b: usize,
}

/// Everything rocBLAS needs for one candle matmul.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// rocBLAS's A: candle's rhs, giving `rhsᵀ` (`n × k`).
    pub(crate) a: Operand,
    /// rocBLAS's B: candle's lhs, giving `lhsᵀ` (`k × m`).
    pub(crate) b: Operand,
    /// Candle's `(m, n, k)`.
    pub(crate) mnk: (usize, usize, usize),
    /// The calls, covering every batch once.
    pub(crate) calls: Vec<Call>,
}

fn unexpected(
    lhs_l: &Layout,
    rhs_l: &Layout,
    bmnk: (usize, usize, usize, usize),
    msg: &'static str,
) -> candle_core::Error {
    candle_core::Error::MatMulUnexpectedStriding(Box::new(
        candle_core::error::MatMulUnexpectedStriding {
            lhs_l: lhs_l.clone(),
            rhs_l: rhs_l.clone(),
            bmnk,
            msg,
        },
    ))
    .bt()
}

/// Checks that the layouts have the shapes `(b, m, n, k)` describes:
/// `(..., m, k)` and `(..., k, n)` with the same batch dimensions, of `b`
/// matrices in all.
fn check_shapes(bmnk: (usize, usize, usize, usize), lhs_l: &Layout, rhs_l: &Layout) -> Result<()> {
    let (b, m, n, k) = bmnk;
    let err = |msg| unexpected(lhs_l, rhs_l, bmnk, msg);
    let (ld, rd) = (lhs_l.dims(), rhs_l.dims());
    let rank = ld.len();
    if rank < 2 || rd.len() != rank || ld[..rank - 2] != rd[..rank - 2] {
        return Err(err("lhs and rhs need the same batch dimensions"));
    }
    if ld[rank - 2..] != [m, k]
        || rd[rank - 2..] != [k, n]
        || size::product(OP, "the batch", &ld[..rank - 2])? != b
    {
        return Err(err("the layouts do not have the shapes of (b, m, n, k)"));
    }
    Ok(())
}

/// Plans `(b, m, n, k)` for these layouts (`lhs`: `… × m × k`, `rhs`:
/// `… × k × n`, the same batch dimensions). The sizes are non-zero.
pub(crate) fn plan(
    bmnk: (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Result<Plan> {
    check_shapes(bmnk, lhs_l, rhs_l)?;
    let (_, m, n, k) = bmnk;
    let err = |msg| unexpected(lhs_l, rhs_l, bmnk, msg);
    let (ld, rank) = (lhs_l.dims(), lhs_l.dims().len());
    let (ls, rs) = (lhs_l.stride(), rhs_l.stride());
    let a = orient(k, n, rs[rank - 2], rs[rank - 1])
        .ok_or_else(|| err("rhs: neither of the last two dimensions is unit-stride"))?;
    let bop = orient(m, k, ls[rank - 2], ls[rank - 1])
        .ok_or_else(|| err("lhs: neither of the last two dimensions is unit-stride"))?;
    Ok(Plan {
        a,
        b: bop,
        mnk: (m, n, k),
        calls: batch_calls(&ld[..rank - 2], &rs[..rank - 2], &ls[..rank - 2], m * n),
    })
}

/// Splits the batch dimensions into calls: the innermost run of dimensions
/// that merge for rhs, lhs and the contiguous output becomes the batch of
/// one call; the dimensions outside it are looped over.
fn batch_calls(dims: &[usize], rhs: &[usize], lhs: &[usize], mn: usize) -> Vec<Call> {
    let mut out = vec![0; dims.len()];
    let mut step = mn;
    for d in (0..dims.len()).rev() {
        out[d] = step;
        step *= dims[d];
    }
    let merged = merge_dims(dims, &[rhs, lhs, &out]);
    let Some((&count, outer)) = merged.dims.split_last() else {
        let single = Call {
            a_offset: 0,
            b_offset: 0,
            c_offset: 0,
            count: 1,
            stride_a: 0,
            stride_b: 0,
        };
        return vec![single];
    };
    let inner = outer.len();
    let s = &merged.strides;
    let groups: usize = outer.iter().product();
    (0..groups)
        .map(|g| {
            // Offsets of outer index g (row-major over the outer dimensions).
            let (mut rest, mut offs) = (g, [0usize; 3]);
            for d in (0..inner).rev() {
                let i = rest % outer[d];
                rest /= outer[d];
                for (o, strides) in offs.iter_mut().zip(s) {
                    *o += i * strides[d];
                }
            }
            Call {
                a_offset: offs[0],
                b_offset: offs[1],
                c_offset: offs[2],
                count,
                stride_a: s[0][inner],
                stride_b: s[1][inner],
            }
        })
        .collect()
}

/// Candle's `BackendStorage::matmul`: a new contiguous `(b, m, n)` storage.
pub(crate) fn matmul(
    lhs: &HipStorage,
    rhs: &HipStorage,
    bmnk: (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Result<HipStorage> {
    let (b, m, n, _) = bmnk;
    check_dtype(lhs.dtype())?;
    let len = size::product(OP, "the output (b, m, n)", &[b, m, n])?;
    // SAFETY: `matmul_into` writes every one of the b * m * n elements.
    let mut out = unsafe { lhs.device().alloc_storage(lhs.dtype(), len) }?;
    matmul_into(lhs, rhs, bmnk, lhs_l, rhs_l, &mut out, 0)?;
    Ok(out)
}

fn check_dtype(dtype: DType) -> Result<()> {
    if matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        Ok(())
    } else {
        Err(candle_core::Error::UnsupportedDTypeForOp(dtype, OP).bt())
    }
}

/// Writes the contiguous `(b, m, n)` product into `out`, from element
/// `out_offset` on.
pub(crate) fn matmul_into(
    lhs: &HipStorage,
    rhs: &HipStorage,
    bmnk: (usize, usize, usize, usize),
    lhs_l: &Layout,
    rhs_l: &Layout,
    out: &mut HipStorage,
    out_offset: usize,
) -> Result<()> {
    lhs.check_device(rhs, OP)?;
    lhs.check_device(out, OP)?;
    lhs.check_dtype(rhs, OP)?;
    lhs.check_dtype(out, OP)?;
    check_dtype(lhs.dtype())?;
    let (b, m, n, k) = bmnk;
    let out_len = size::product(OP, "the output (b, m, n)", &[b, m, n])?;
    // Every offset below lies inside the operands' validated spans.
    lhs.view(OP, lhs_l)?;
    rhs.view(OP, rhs_l)?;
    size::numel(OP, lhs_l.dims())?;
    size::numel(OP, rhs_l.dims())?;
    check_shapes(bmnk, lhs_l, rhs_l)?;
    if out_len == 0 {
        return Ok(());
    }
    if k == 0 {
        // Sums of no terms.
        let mut region = out.view_range_mut(OP, out_offset, out_len)?;
        return lhs.device().stream().memset_zeros(&mut region).map_err(hip);
    }
    if gemv::try_run(lhs, rhs, bmnk, lhs_l, rhs_l, out, out_offset)? {
        return Ok(());
    }
    let plan = plan(bmnk, lhs_l, rhs_l)?;
    let ops = Operands {
        lhs,
        rhs,
        lhs_l,
        rhs_l,
    };
    match lhs.dtype() {
        DType::F32 => ops.run::<f32>(&plan, out, out_offset, 1.0, 0.0),
        DType::F64 => ops.run::<f64>(&plan, out, out_offset, 1.0, 0.0),
        DType::F16 => ops.run::<half::f16>(&plan, out, out_offset, 1.0, 0.0),
        _ => ops.run::<half::bf16>(&plan, out, out_offset, 1.0, 0.0),
    }
}

struct Operands<'a> {
    lhs: &'a HipStorage,
    rhs: &'a HipStorage,
    lhs_l: &'a Layout,
    rhs_l: &'a Layout,
}

impl Operands<'_> {
    fn run<T: GemmType + WithDType>(
        &self,
        plan: &Plan,
        out: &mut HipStorage,
        out_offset: usize,
        alpha: T::Scalar,
        beta: T::Scalar,
    ) -> Result<()> {
        let (m, n, k) = plan.mnk;
        let blas = handles::blas(self.lhs.device())?;
        let tail = |s: &HipStorage, start: usize| s.len().saturating_sub(start);
        for call in &plan.calls {
            let a_start = self.rhs_l.start_offset() + call.a_offset;
            let b_start = self.lhs_l.start_offset() + call.b_offset;
            let a = Typed::<T>::new(OP, self.rhs, a_start, tail(self.rhs, a_start))?;
            let b = Typed::<T>::new(OP, self.lhs, b_start, tail(self.lhs, b_start))?;
            let c_start = size::add(OP, "the output offset", out_offset, call.c_offset)?;
            let c_len = tail(out, c_start);
            let mut c = TypedMut::<T>::new(OP, out, c_start, c_len)?;
            let cfg = StridedBatchedConfig {
                gemm: GemmConfig {
                    transa: plan.a.trans,
                    transb: plan.b.trans,
                    m: n,
                    n: m,
                    k,
                    alpha,
                    lda: plan.a.ld,
                    ldb: plan.b.ld,
                    beta,
                    ldc: n,
                },
                batch_size: call.count,
                stride_a: call.stride_a,
                stride_b: call.stride_b,
                stride_c: m * n,
            };
            blas.gemm_strided_batched::<T>(cfg, &a, &b, &mut c)
                .map_err(hip)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element `(i, j)` of column-major X with leading dimension `ld`,
    /// through `op`.
    fn at(x: &[f64], start: usize, op: Transpose, ld: usize, i: usize, j: usize) -> f64 {
        match op {
            Transpose::No => x[start + i + j * ld],
            Transpose::Yes => x[start + j + i * ld],
        }
    }

    /// Runs `plan` as rocBLAS would (column-major, `C = op(A) op(B)`).
    fn emulate(
        plan: &Plan,
        lhs: &[f64],
        lhs_l: &Layout,
        rhs: &[f64],
        rhs_l: &Layout,
        b: usize,
    ) -> Vec<f64> {
        let (m, n, k) = plan.mnk;
        let mut c = vec![f64::NAN; b * m * n];
        for call in &plan.calls {
            for p in 0..call.count {
                let a0 = rhs_l.start_offset() + call.a_offset + p * call.stride_a;
                let b0 = lhs_l.start_offset() + call.b_offset + p * call.stride_b;
                let c0 = call.c_offset + p * m * n;
                // rocBLAS's (m, n, k) = candle's (n, m, k); ldc = n.
                for i in 0..n {
                    for j in 0..m {
                        let s: f64 = (0..k)
                            .map(|l| {
                                at(rhs, a0, plan.a.trans, plan.a.ld, i, l)
                                    * at(lhs, b0, plan.b.trans, plan.b.ld, l, j)
                            })
                            .sum();
                        c[c0 + i + j * n] = s;
                    }
                }
            }
        }
        c
    }

    /// Row-major product from the layouts directly.
    fn reference(lhs: &[f64], lhs_l: &Layout, rhs: &[f64], rhs_l: &Layout) -> Vec<f64> {
        let offset = |l: &Layout, idx: &[usize]| {
            l.start_offset()
                + idx
                    .iter()
                    .zip(l.stride())
                    .map(|(i, s)| i * s)
                    .sum::<usize>()
        };
        let dims = lhs_l.dims();
        let r = dims.len();
        let (m, k, n) = (dims[r - 2], dims[r - 1], rhs_l.dims()[r - 1]);
        let b: usize = dims[..r - 2].iter().product();
        let mut out = Vec::new();
        for bi in 0..b {
            let mut idx = vec![0; r];
            let mut rest = bi;
            for d in (0..r - 2).rev() {
                idx[d] = rest % dims[d];
                rest /= dims[d];
            }
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0;
                    for l in 0..k {
                        let (mut li, mut ri) = (idx.clone(), idx.clone());
                        (li[r - 2], li[r - 1], ri[r - 2], ri[r - 1]) = (i, l, l, j);
                        s += lhs[offset(lhs_l, &li)] * rhs[offset(rhs_l, &ri)];
                    }
                    out.push(s);
                }
            }
        }
        out
    }

    fn data(len: usize, seed: usize) -> Vec<f64> {
        (0..len)
            .map(|i| ((i * 7 + seed * 13) % 23) as f64 - 11.0)
            .collect()
    }

    fn bmnk(lhs_l: &Layout, rhs_l: &Layout) -> (usize, usize, usize, usize) {
        let d = lhs_l.dims();
        let r = d.len();
        (
            d[..r - 2].iter().product(),
            d[r - 2],
            rhs_l.dims()[r - 1],
            d[r - 1],
        )
    }

    /// Plans and checks the emulated result against the reference.
    fn check(lhs_l: &Layout, rhs_l: &Layout) -> Plan {
        let lhs = data(
            lhs_l.start_offset() + size::span("t", lhs_l.dims(), lhs_l.stride()).unwrap(),
            1,
        );
        let rhs = data(
            rhs_l.start_offset() + size::span("t", rhs_l.dims(), rhs_l.stride()).unwrap(),
            2,
        );
        let size = bmnk(lhs_l, rhs_l);
        let plan = plan(size, lhs_l, rhs_l).unwrap_or_else(|e| panic!("{lhs_l:?} {rhs_l:?}: {e}"));
        assert_eq!(
            emulate(&plan, &lhs, lhs_l, &rhs, rhs_l, size.0),
            reference(&lhs, lhs_l, &rhs, rhs_l),
            "{lhs_l:?} x {rhs_l:?} with {plan:?}"
        );
        plan
    }

    fn c(shape: &[usize]) -> Layout {
        Layout::contiguous(shape)
    }

    #[test]
    fn contiguous_operands_are_read_untransposed() {
        let p = check(&c(&[3, 4]), &c(&[4, 5]));
        assert_eq!(
            p.a,
            Operand {
                trans: Transpose::No,
                ld: 5
            }
        );
        assert_eq!(
            p.b,
            Operand {
                trans: Transpose::No,
                ld: 4
            }
        );
        assert_eq!(p.calls.len(), 1);
    }

    #[test]
    fn transposed_operands_use_the_transpose_flag() {
        let lhs_t = c(&[4, 3]).transpose(0, 1).unwrap();
        let rhs_t = c(&[5, 4]).transpose(0, 1).unwrap();
        let p = check(&lhs_t, &rhs_t);
        assert_eq!(
            p.a,
            Operand {
                trans: Transpose::Yes,
                ld: 4
            }
        );
        assert_eq!(
            p.b,
            Operand {
                trans: Transpose::Yes,
                ld: 3
            }
        );
        check(&lhs_t, &c(&[4, 5]));
        check(&c(&[3, 4]), &rhs_t);
    }

    #[test]
    fn batches_merge_into_one_call() {
        let p = check(&c(&[2, 3, 4, 5]), &c(&[2, 3, 5, 6]));
        assert_eq!(
            p.calls,
            vec![Call {
                a_offset: 0,
                b_offset: 0,
                c_offset: 0,
                count: 6,
                stride_a: 30,
                stride_b: 20
            }]
        );
        // Transposed matrices inside batches.
        let lhs = c(&[2, 3, 5, 4]).transpose(2, 3).unwrap();
        let rhs = c(&[2, 3, 6, 5]).transpose(2, 3).unwrap();
        assert_eq!(check(&lhs, &rhs).calls.len(), 1);
    }

    #[test]
    fn broadcast_batches_have_stride_zero_or_loop() {
        // rhs shared by every batch.
        let rhs = c(&[5, 6]).broadcast_as((4, 5, 6)).unwrap();
        let p = check(&c(&[4, 3, 5]), &rhs);
        assert_eq!(
            (p.calls.len(), p.calls[0].stride_a, p.calls[0].count),
            (1, 0, 4)
        );
        // Broadcast along the outer of two batch dimensions only: candle's
        // CUDA backend refuses this; here it is two calls of three.
        let rhs = c(&[1, 3, 5, 6]).broadcast_as((2, 3, 5, 6)).unwrap();
        let p = check(&c(&[2, 3, 4, 5]), &rhs);
        assert_eq!(p.calls.len(), 2);
        assert_eq!(
            p.calls[1],
            Call {
                a_offset: 0,
                b_offset: 60,
                c_offset: 72,
                count: 3,
                stride_a: 30,
                stride_b: 20
            }
        );
        // Broadcast along the inner batch dimension: it becomes the batch of
        // each call (stride 0) and the outer dimension is looped.
        let lhs = c(&[2, 1, 4, 5]).broadcast_as((2, 3, 4, 5)).unwrap();
        let p = check(&lhs, &c(&[2, 3, 5, 6]));
        assert_eq!(p.calls.len(), 2);
        assert_eq!((p.calls[0].stride_b, p.calls[0].count), (0, 3));
        // Both batch dimensions broadcast: one call with stride 0.
        let lhs = c(&[4, 5]).broadcast_as((2, 3, 4, 5)).unwrap();
        assert_eq!(check(&lhs, &c(&[2, 3, 5, 6])).calls.len(), 1);
    }

    #[test]
    fn narrowed_views_use_a_larger_leading_dimension() {
        let lhs = c(&[3, 10]).narrow(1, 2, 4).unwrap();
        let p = check(&lhs, &c(&[4, 5]));
        assert_eq!(
            p.b,
            Operand {
                trans: Transpose::No,
                ld: 10
            }
        );
        let rhs = c(&[4, 9]).narrow(1, 1, 5).unwrap();
        assert_eq!(check(&c(&[3, 4]), &rhs).a.ld, 9);
        // A batch narrowed out of a larger one (offsets and batch strides).
        let lhs = c(&[5, 3, 4]).narrow(0, 1, 3).unwrap();
        check(&lhs, &c(&[3, 4, 2]));
        let rhs = c(&[3, 4, 7]).narrow(2, 3, 2).unwrap();
        check(&c(&[3, 3, 4]), &rhs);
    }

    #[test]
    fn size_one_dimensions_take_any_stride() {
        // m = 1 (a row vector) and n = 1 (a column), as candle produces them
        // from narrow/transposes of larger tensors.
        check(&Layout::new((1, 4).into(), vec![99, 1], 0), &c(&[4, 5]));
        check(&c(&[3, 4]), &Layout::new((4, 1).into(), vec![1, 77], 0));
        check(&c(&[3, 1]), &Layout::new((1, 5).into(), vec![3, 1], 2));
        check(
            &Layout::new((3, 1).into(), vec![1, 0], 0),
            &Layout::new((1, 5).into(), vec![0, 1], 0),
        );
        check(
            &Layout::new((2, 1, 3).into(), vec![3, 1, 1], 0),
            &Layout::new((2, 3, 1).into(), vec![3, 1, 1], 0),
        );
    }

    #[test]
    fn other_strides_are_refused_with_candles_error() {
        // Every other element of a row: neither dimension unit-stride.
        let lhs = Layout::new((3, 4).into(), vec![8, 2], 0);
        let err = plan((1, 3, 5, 4), &lhs, &c(&[4, 5])).unwrap_err();
        assert!(
            matches!(
                err,
                candle_core::Error::MatMulUnexpectedStriding(_)
                    | candle_core::Error::WithBacktrace { .. }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("lhs"), "{err}");
        let rhs = Layout::new((4, 5).into(), vec![10, 2], 0);
        assert!(
            plan((1, 3, 5, 4), &c(&[3, 4]), &rhs)
                .unwrap_err()
                .to_string()
                .contains("rhs")
        );
        // Rows overlapping (a leading dimension below the row length).
        let rhs = Layout::new((4, 5).into(), vec![3, 1], 0);
        assert!(plan((1, 3, 5, 4), &c(&[3, 4]), &rhs).is_err());
        // Mismatched shapes.
        assert!(plan((2, 3, 5, 4), &c(&[3, 4]), &c(&[4, 5])).is_err());
        assert!(plan((1, 3, 5, 4), &c(&[1, 3, 4]), &c(&[4, 5])).is_err());
    }

    #[test]
    fn every_layout_candle_makes_of_small_tensors_multiplies_right() {
        let mut count = 0;
        for (m, n, k) in [(1, 1, 1), (2, 3, 4), (1, 5, 3), (4, 1, 2), (3, 2, 1)] {
            let lhs_views = [
                c(&[2, m, k]),
                c(&[2, k, m]).transpose(1, 2).unwrap(),
                c(&[m, k]).broadcast_as((2, m, k)).unwrap(),
            ];
            let rhs_views = [
                c(&[2, k, n]),
                c(&[2, n, k]).transpose(1, 2).unwrap(),
                c(&[k, n]).broadcast_as((2, k, n)).unwrap(),
                c(&[k, 2, n]).transpose(0, 1).unwrap(),
            ];
            for l in &lhs_views {
                for r in &rhs_views {
                    check(l, r);
                    count += 1;
                }
            }
        }
        assert_eq!(count, 60);
    }
}
