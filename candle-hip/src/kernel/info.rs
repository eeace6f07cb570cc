//! Kernel argument structs, mirrored from the kernel sources, and the layout
//! arithmetic that fills them: merging dimensions that are contiguous in
//! every operand, and splitting a layout into kept and reduced dimensions.
//!
//! The structs are passed to kernels by value, so strided kernels need no
//! device-side copy of dims and strides.

use hip_safe::DeviceRepr;

use crate::error::{HipBackendError, Result};
use crate::kernel::header::{MAX_DIMS, MAX_OPERANDS, REDUCE_MAX_DIMS};
use crate::size;

/// Dimensions after merging, outermost first, with each operand's strides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Merged {
    /// Sizes, outermost first; size-1 dimensions are dropped.
    pub(crate) dims: Vec<usize>,
    /// `strides[k][d]`: stride of operand `k` along `dims[d]`.
    pub(crate) strides: Vec<Vec<usize>>,
}

impl Merged {
    /// Whether every operand walks memory contiguously (or there is at most
    /// one element).
    pub(crate) fn is_contiguous(&self) -> bool {
        match self.dims.len() {
            0 => true,
            1 => self.strides.iter().all(|s| s[0] == 1),
            _ => false,
        }
    }
}

/// Merges adjacent dimensions that every operand traverses as one (the
/// outer stride equals the inner stride times the inner size) and drops
/// size-1 dimensions. The row-major order of the elements is unchanged.
pub(crate) fn merge_dims(dims: &[usize], strides: &[&[usize]]) -> Merged {
    let mut out = Merged {
        dims: Vec::with_capacity(dims.len()),
        strides: vec![Vec::with_capacity(dims.len()); strides.len()],
    };
    for d in (0..dims.len()).rev() {
        let size = dims[d];
        if size == 1 {
            continue;
        }
        if let Some(inner) = out.dims.last_mut() {
            // Sizes or strides whose products overflow are never merged
            // (merging only saves work; the caller reports such layouts).
            let merged_size = inner.checked_mul(size);
            let mergeable = strides.iter().zip(&out.strides).all(|(s, merged)| {
                merged
                    .last()
                    .and_then(|&m| m.checked_mul(*inner))
                    .is_some_and(|outer| s[d] == outer)
            });
            if let (Some(merged_size), true) = (merged_size, mergeable) {
                *inner = merged_size;
                continue;
            }
        }
        out.dims.push(size);
        for (merged, s) in out.strides.iter_mut().zip(strides) {
            merged.push(s[d]);
        }
    }
    out.dims.reverse();
    for s in &mut out.strides {
        s.reverse();
    }
    out
}

/// A size or stride as the kernels take it (usize is at most 64 bits on
/// every supported target).
pub(crate) fn to_u64(v: usize) -> u64 {
    v as u64
}

fn too_many(op: &'static str, rank: usize, max: usize, shape: &[usize]) -> candle_core::Error {
    HipBackendError::TooManyDims {
        op,
        rank,
        max,
        shape: shape.to_vec(),
    }
    .into()
}

/// The sizes and strides of the dimensions of a source that `reduce` keeps
/// (`keep`) or reduces (not `keep`), in dimension order.
fn pick_dims(
    dims: &[usize],
    strides: &[usize],
    reduce: &[usize],
    keep: bool,
) -> (Vec<usize>, Vec<usize>) {
    (0..dims.len())
        .filter(|d| reduce.contains(d) != keep)
        .map(|d| (dims[d], strides[d]))
        .unzip()
}

/// `ElemInfo` of `kernels/common.h`: the shape shared by the operands of an
/// element-wise kernel and each operand's strides.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ElemInfo {
    /// Elements of the shape.
    pub(crate) numel: u64,
    /// 0 when every operand is contiguous, else the merged rank.
    pub(crate) rank: u32,
    /// Strided layouts: 1 when the innermost dimension moves in packs (see
    /// [`ElemInfo::with_inner_packs`]).
    pub(crate) inner_vec: u32,
    /// Merged sizes, outermost first.
    pub(crate) dims: [u64; MAX_DIMS],
    /// `strides[k][d]` of operand `k`.
    pub(crate) strides: [[u64; MAX_DIMS]; MAX_OPERANDS],
}

// SAFETY: `#[repr(C)]` with only u64/u32 fields in the order of the C struct
// (8 + 4 + 4 bytes, then u64 arrays): no padding, every bit pattern valid.
unsafe impl DeviceRepr for ElemInfo {}
const _: () = assert!(std::mem::size_of::<ElemInfo>() == 16 + 8 * MAX_DIMS * (1 + MAX_OPERANDS));

impl ElemInfo {
    /// The info for operands of shape `dims` with the given strides (in
    /// elements, relative to each operand's first element).
    pub(crate) fn new(op: &'static str, dims: &[usize], strides: &[&[usize]]) -> Result<ElemInfo> {
        if strides.len() > MAX_OPERANDS || strides.iter().any(|s| s.len() != dims.len()) {
            return Err(crate::error::invalid(
                op,
                format!(
                    "{} operands with strides {strides:?} for shape {dims:?}",
                    strides.len()
                ),
            ));
        }
        let merged = merge_dims(dims, strides);
        let mut info = ElemInfo {
            numel: to_u64(size::numel(op, dims)?),
            rank: 0,
            inner_vec: 0,
            dims: [0; MAX_DIMS],
            strides: [[0; MAX_DIMS]; MAX_OPERANDS],
        };
        if merged.is_contiguous() {
            return Ok(info);
        }
        let rank = merged.dims.len();
        if rank > MAX_DIMS {
            return Err(too_many(op, rank, MAX_DIMS, dims));
        }
        info.rank = rank as u32;
        for (d, &size) in merged.dims.iter().enumerate() {
            info.dims[d] = to_u64(size);
        }
        for (k, s) in merged.strides.iter().enumerate() {
            for (d, &stride) in s.iter().enumerate() {
                info.strides[k][d] = to_u64(stride);
            }
        }
        Ok(info)
    }

    /// Whether every operand is contiguous.
    pub(crate) fn is_contiguous(&self) -> bool {
        self.rank == 0
    }

    /// Marks a strided layout whose innermost dimension can move in packs of
    /// `per_pack` elements (`operands` strided inputs): the dimension's size
    /// is a multiple of the pack, every operand's inner stride is 0
    /// (broadcast) or 1, and operands with inner stride 1 have outer strides
    /// that are multiples of the pack, so every pack starts aligned (given
    /// aligned pointers, which the kernel checks).
    pub(crate) fn with_inner_packs(mut self, operands: usize, per_pack: usize) -> ElemInfo {
        let rank = self.rank as usize;
        if rank == 0 || per_pack <= 1 {
            return self;
        }
        let p = per_pack as u64;
        let inner = rank - 1;
        let fits = self.dims[inner].is_multiple_of(p)
            && self.strides[..operands].iter().all(|s| match s[inner] {
                0 => true,
                1 => s[..inner].iter().all(|&outer| outer.is_multiple_of(p)),
                _ => false,
            });
        self.inner_vec = u32::from(fits);
        self
    }

    /// The merged dimension with stride 1 in operand 0 that lies before the
    /// innermost one, when the innermost one is strided: such a copy is a
    /// (batched) transpose of the plane of the two dimensions.
    pub(crate) fn transposed_dim(&self) -> Option<usize> {
        let rank = self.rank as usize;
        if rank < 2 || self.strides[0][rank - 1] == 1 {
            return None;
        }
        (0..rank - 1).find(|&d| self.strides[0][d] == 1)
    }
}

/// `ReduceInfo` of `kernels/reduce.hip`: kept dimensions (output order) and
/// reduced dimensions of the source, each merged.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReduceInfo {
    /// Number of outputs (product of the kept sizes).
    pub(crate) num_out: u64,
    /// Elements reduced into each output.
    pub(crate) red_size: u64,
    /// Merged kept rank.
    pub(crate) out_rank: u32,
    /// Merged reduced rank.
    pub(crate) red_rank: u32,
    /// How the kernel splits the work ([`ReduceMode`] as u32).
    pub(crate) mode: u32,
    /// COLS mode: adjacent outputs per block; COLS_PACKED: adjacent packs.
    pub(crate) tile: u32,
    /// Chunks the reduced elements of each output are cut into (>= 1).
    pub(crate) split: u64,
    /// Reduced positions per chunk.
    pub(crate) chunk: u64,
    pub(crate) out_dims: [u64; REDUCE_MAX_DIMS],
    pub(crate) out_strides: [u64; REDUCE_MAX_DIMS],
    pub(crate) red_dims: [u64; REDUCE_MAX_DIMS],
    pub(crate) red_strides: [u64; REDUCE_MAX_DIMS],
}

// SAFETY: `#[repr(C)]`, u64 and u32 fields in the C order (2 x 8, 4 x 4,
// 2 x 8, then u64 arrays): no padding, every bit pattern valid.
unsafe impl DeviceRepr for ReduceInfo {}
const _: () = assert!(std::mem::size_of::<ReduceInfo>() == 48 + 4 * 8 * REDUCE_MAX_DIMS);

/// `CH_REDUCE_*` of `kernels/reduce.hip`: the work split of a reduction launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum ReduceMode {
    /// A block per (output, chunk), threads over the reduced positions.
    Rows = 0,
    /// A block per (tile of adjacent outputs, chunk), threads over both
    /// (a thread per output when the tile is the whole block).
    Cols = 1,
    /// Partial states combined with a block per output.
    FinishBlock = 2,
    /// Partial states combined with a thread per output.
    FinishThread = 3,
    /// A block per (tile of adjacent packs of outputs, chunk): each thread
    /// owns a 16-byte pack of adjacent outputs. Runs in the `reduce_cols_*`
    /// kernels.
    ColsPacked = 4,
}

impl ReduceInfo {
    /// Splits a source of shape `dims` and `strides` into the dimensions
    /// kept (in order; they give the row-major order of the output) and the
    /// dimensions in `reduce` (reduced in increasing dimension order; the
    /// position an argmin/argmax reports counts in that order). Errors past
    /// [`REDUCE_MAX_DIMS`] kept or reduced dimensions after merging (see
    /// [`ReduceInfo::merged_ranks`]).
    pub(crate) fn new(
        op: &'static str,
        dims: &[usize],
        strides: &[usize],
        reduce: &[usize],
    ) -> Result<ReduceInfo> {
        if let Some(&bad) = reduce.iter().find(|&&d| d >= dims.len()) {
            return Err(crate::error::invalid(
                op,
                format!("reduced dimension {bad} of a rank-{} tensor", dims.len()),
            ));
        }
        let (out_dims, out_strides) = pick_dims(dims, strides, reduce, true);
        let (red_dims, red_strides) = pick_dims(dims, strides, reduce, false);
        let out = merge_dims(&out_dims, &[&out_strides]);
        let red = merge_dims(&red_dims, &[&red_strides]);
        if out.dims.len() > REDUCE_MAX_DIMS {
            return Err(too_many(op, out.dims.len(), REDUCE_MAX_DIMS, dims));
        }
        if red.dims.len() > REDUCE_MAX_DIMS {
            return Err(too_many(op, red.dims.len(), REDUCE_MAX_DIMS, dims));
        }
        size::numel(op, dims)?;
        let red_size = to_u64(size::product(op, "the reduced dimensions", &red_dims)?);
        let mut info = ReduceInfo {
            num_out: to_u64(size::product(op, "the kept dimensions", &out_dims)?),
            red_size,
            out_rank: out.dims.len() as u32,
            red_rank: red.dims.len() as u32,
            mode: ReduceMode::Cols as u32,
            tile: 1,
            split: 1,
            chunk: red_size,
            out_dims: [0; REDUCE_MAX_DIMS],
            out_strides: [0; REDUCE_MAX_DIMS],
            red_dims: [0; REDUCE_MAX_DIMS],
            red_strides: [0; REDUCE_MAX_DIMS],
        };
        for (d, (&size, &stride)) in out.dims.iter().zip(&out.strides[0]).enumerate() {
            info.out_dims[d] = to_u64(size);
            info.out_strides[d] = to_u64(stride);
        }
        for (d, (&size, &stride)) in red.dims.iter().zip(&red.strides[0]).enumerate() {
            info.red_dims[d] = to_u64(size);
            info.red_strides[d] = to_u64(stride);
        }
        Ok(info)
    }

    /// The kept and the reduced dimensions of a source (as [`ReduceInfo::new`]
    /// splits it; `reduce` holds valid dimensions) after merging. A
    /// contiguous source of rank `2 * REDUCE_MAX_DIMS` or less never has more
    /// than [`REDUCE_MAX_DIMS`] of either: each run of adjacent kept (or
    /// reduced) dimensions merges into one.
    pub(crate) fn merged_ranks(
        dims: &[usize],
        strides: &[usize],
        reduce: &[usize],
    ) -> (usize, usize) {
        let merged = |keep| {
            let (d, s) = pick_dims(dims, strides, reduce, keep);
            merge_dims(&d, &[&s]).dims.len()
        };
        (merged(true), merged(false))
    }

    /// Whether a source has more kept or reduced dimensions, after merging,
    /// than the kernels take ([`REDUCE_MAX_DIMS`]; [`ReduceInfo::new`]
    /// refuses it).
    pub(crate) fn exceeds_kernels(dims: &[usize], strides: &[usize], reduce: &[usize]) -> bool {
        let (kept, reduced) = ReduceInfo::merged_ranks(dims, strides, reduce);
        kept.max(reduced) > REDUCE_MAX_DIMS
    }

    /// Whether consecutive reduced positions are adjacent in memory (the
    /// innermost reduced stride is 1).
    pub(crate) fn inner_contiguous(&self) -> bool {
        self.red_rank == 0 || self.red_strides[self.red_rank as usize - 1] == 1
    }

    /// The packs of `vec` adjacent outputs COLS_PACKED cuts the outputs
    /// into, when it applies: one reduced dimension whose stride, like every
    /// outer output stride, is a multiple of `vec`, and an innermost output
    /// dimension of stride 1 and at least `vec` outputs. Each row of that
    /// dimension is cut from the aligned element at or before its start,
    /// `head` elements before it (the view's start offset modulo `vec`).
    pub(crate) fn column_packs(&self, vec: u64, head: u64) -> Option<u64> {
        if vec < 2 || self.red_rank != 1 || self.out_rank == 0 {
            return None;
        }
        let last = self.out_rank as usize - 1;
        let width = self.out_dims[last];
        let packed = self.out_strides[last] == 1
            && width >= vec
            && self.red_strides[0].is_multiple_of(vec)
            && self.out_strides[..last]
                .iter()
                .all(|s| s.is_multiple_of(vec));
        packed.then(|| self.num_out / width * (head % vec + width).div_ceil(vec))
    }
}

/// `IndexInfo` of `kernels/indexing.hip`: sizes around the indexed dimension.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IndexInfo {
    /// Product of the dimensions before `dim`.
    pub(crate) left: u64,
    /// Product of the dimensions after `dim`.
    pub(crate) right: u64,
    /// Source size along `dim`.
    pub(crate) src_dim: u64,
    /// Destination size along `dim`.
    pub(crate) dst_dim: u64,
    /// Number of indices along `dim`.
    pub(crate) ids_dim: u64,
    /// index_select: distance between consecutive indices.
    pub(crate) ids_stride: u64,
    /// gather: product of the source dimensions after `dim`.
    pub(crate) src_right: u64,
    /// Device address of the fault word an index past its dimension is
    /// reported in (0: none).
    pub(crate) fault: u64,
    /// The code such an index stores there.
    pub(crate) fault_code: u64,
    /// 1 when the indices are i64, 0 when they are u32.
    pub(crate) wide_ids: u64,
}

// SAFETY: `#[repr(C)]` of ten u64: no padding, every bit pattern valid.
unsafe impl DeviceRepr for IndexInfo {}
const _: () = assert!(std::mem::size_of::<IndexInfo>() == 10 * 8);

/// `(product of dims[..dim], dims[dim], product of dims[dim + 1..])`, for
/// `dim < dims.len()` (callers check it).
pub(crate) fn split_at_dim(
    op: &'static str,
    dims: &[usize],
    dim: usize,
) -> Result<(usize, usize, usize)> {
    size::numel(op, dims)?;
    let at = dims
        .get(dim)
        .copied()
        .ok_or_else(|| crate::error::invalid(op, format!("dimension {dim} of shape {dims:?}")))?;
    let left = size::product(op, "the leading dimensions", &dims[..dim])?;
    let right = size::product(op, "the trailing dimensions", &dims[dim + 1..])?;
    Ok((left, at, right))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
        let mut s = vec![1; dims.len()];
        for d in (0..dims.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * dims[d + 1];
        }
        s
    }

    #[test]
    fn contiguous_operands_merge_to_nothing() {
        let dims = [2, 3, 4];
        let s = contiguous_strides(&dims);
        let m = merge_dims(&dims, &[&s, &s]);
        assert_eq!(m.dims, [24]);
        assert!(m.is_contiguous());
        let info = ElemInfo::new("t", &dims, &[&s, &s]).unwrap();
        assert!(info.is_contiguous());
        assert_eq!(info.numel, 24);
    }

    #[test]
    fn size_one_dims_are_dropped() {
        let m = merge_dims(&[1, 5, 1], &[&[99, 1, 7]]);
        assert_eq!(m.dims, [5]);
        assert!(m.is_contiguous());
        let m = merge_dims(&[1, 1], &[&[0, 0]]);
        assert!(m.dims.is_empty() && m.is_contiguous());
    }

    #[test]
    fn transposes_and_broadcasts_stay_strided() {
        // A transposed (3, 4) matrix: strides (1, 3).
        let m = merge_dims(&[4, 3], &[&[1, 4]]);
        assert_eq!(m.dims, [4, 3]);
        assert!(!m.is_contiguous());
        // (2, 3, 4) + (4,) broadcast: the bias has strides (0, 0, 1).
        let m = merge_dims(&[2, 3, 4], &[&[12, 4, 1], &[0, 0, 1]]);
        assert_eq!(m.dims, [6, 4]);
        assert_eq!(m.strides, [vec![4, 1], vec![0, 1]]);
        // A scalar broadcast over a contiguous tensor: one dimension, stride 0.
        let m = merge_dims(&[2, 3], &[&[3, 1], &[0, 0]]);
        assert_eq!(m.dims, [6]);
        assert_eq!(m.strides, [vec![1], vec![0]]);
        assert!(!m.is_contiguous());
        let info = ElemInfo::new("t", &[2, 3], &[&[3, 1], &[0, 0]]).unwrap();
        assert_eq!((info.rank, info.dims[0], info.strides[1][0]), (1, 6, 0));
    }

    #[test]
    fn a_column_slice_keeps_its_row_stride() {
        // Columns 2..5 of a (4, 10) matrix.
        let m = merge_dims(&[4, 3], &[&[10, 1]]);
        assert_eq!(m.dims, [4, 3]);
        assert_eq!(m.strides, [vec![10, 1]]);
        let info = ElemInfo::new("t", &[4, 3], &[&[10, 1]]).unwrap();
        assert_eq!(info.rank, 2);
        assert_eq!(&info.dims[..2], &[4, 3]);
        assert_eq!(&info.strides[0][..2], &[10, 1]);
    }

    #[test]
    fn inner_packs_need_aligned_rows_and_unit_or_zero_inner_strides() {
        let packs = |dims: &[usize], strides: &[&[usize]]| {
            ElemInfo::new("t", dims, strides)
                .unwrap()
                .with_inner_packs(strides.len(), 4)
                .inner_vec
        };
        // Row broadcast (bias add) and column broadcast (per-row scale).
        assert_eq!(packs(&[8, 16], &[&[16, 1], &[0, 1]]), 1);
        assert_eq!(packs(&[8, 16], &[&[16, 1], &[1, 0]]), 1);
        // Inner-contiguous permutation (B, S, H, D) -> (B, H, S, D).
        assert_eq!(packs(&[2, 4, 3, 8], &[&[96, 8, 32, 1]]), 1);
        // Rows not a multiple of the pack, misaligned row starts, transposes.
        assert_eq!(packs(&[8, 6], &[&[6, 1], &[0, 1]]), 0);
        assert_eq!(packs(&[8, 16], &[&[18, 1]]), 0);
        assert_eq!(packs(&[8, 16], &[&[1, 8]]), 0);
        // Contiguous operands need no inner packs; single elements never.
        assert_eq!(packs(&[8, 16], &[&[16, 1]]), 0);
        let info = ElemInfo::new("t", &[8, 16], &[&[16, 1], &[0, 1]]).unwrap();
        assert_eq!(info.with_inner_packs(2, 1).inner_vec, 0);
    }

    #[test]
    fn transposed_dims_have_stride_one_before_the_last() {
        let t =
            |dims: &[usize], s: &[usize]| ElemInfo::new("t", dims, &[s]).unwrap().transposed_dim();
        assert_eq!(t(&[6, 4], &[1, 6]), Some(0));
        assert_eq!(t(&[2, 5, 4], &[20, 1, 5]), Some(1));
        assert_eq!(t(&[4, 6], &[12, 2]), None);
        assert_eq!(t(&[4, 6], &[10, 1]), None);
    }

    #[test]
    fn reduced_views_merge_by_runs_of_kept_and_reduced_dims() {
        // Contiguous rank 8 reduced over alternate dims: four runs each.
        let dims = [2, 3, 2, 3, 2, 3, 2, 3];
        let s = contiguous_strides(&dims);
        assert_eq!(ReduceInfo::merged_ranks(&dims, &s, &[1, 3, 5, 7]), (4, 4));
        assert!(ReduceInfo::new("t", &dims, &s, &[1, 3, 5, 7]).is_ok());
        // Reduced over the first two: one run each.
        assert_eq!(ReduceInfo::merged_ranks(&dims, &s, &[0, 1]), (1, 1));
        // The same tensor with its dims reversed: nothing merges, and the
        // six kept dims are past what the kernels take.
        let rev: Vec<usize> = s.iter().rev().copied().collect();
        let rdims: Vec<usize> = dims.iter().rev().copied().collect();
        assert_eq!(ReduceInfo::merged_ranks(&rdims, &rev, &[0, 1]), (6, 2));
        let err = ReduceInfo::new("t", &rdims, &rev, &[0, 1])
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 4"), "{err}");
    }

    #[test]
    fn too_many_dims_is_an_error_not_a_panic() {
        // Every other dimension of a rank-18 tensor is strided: 9 remain.
        let dims = vec![2; 18];
        let mut strides = contiguous_strides(&dims);
        for s in strides.iter_mut().step_by(2) {
            *s *= 2;
        }
        let m = merge_dims(&dims, &[&strides]);
        assert!(m.dims.len() > MAX_DIMS);
        let err = ElemInfo::new("t", &dims, &[&strides])
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 8"), "{err}");
        assert!(ElemInfo::new("t", &[2], &[&[1], &[1], &[1], &[1]]).is_err());
        assert!(ElemInfo::new("t", &[2, 2], &[&[1]]).is_err());
    }

    #[test]
    fn overflowing_products_never_merge_or_wrap() {
        // Strides whose merge product would wrap stay separate dimensions.
        let m = merge_dims(&[4, 1 << 62], &[&[1, 8]]);
        assert_eq!(m.dims, vec![4, 1 << 62]);
        let m = merge_dims(&[1 << 33, 1 << 33], &[&[1 << 33, 1]]);
        assert_eq!(m.dims.len(), 2);
        // Broadcast shapes whose element count wraps are errors.
        let err = ElemInfo::new("affine", &[1 << 32, 1 << 32], &[&[0, 0]])
            .unwrap_err()
            .to_string();
        assert!(err.contains("affine") && err.contains("overflows"), "{err}");
        assert!(ReduceInfo::new("sum", &[1 << 32, 1 << 32], &[0, 0], &[1]).is_err());
        assert!(split_at_dim("gather", &[1 << 40, 0, 1 << 40], 1).is_err());
        assert_eq!(split_at_dim("t", &[2, 3, 4], 1).unwrap(), (2, 3, 4));
        assert!(split_at_dim("t", &[2, 3], 2).is_err());
    }

    #[test]
    fn reduce_over_the_last_dim() {
        let info = ReduceInfo::new("sum", &[4, 5, 6], &[30, 6, 1], &[2]).unwrap();
        assert_eq!((info.num_out, info.red_size), (20, 6));
        assert_eq!((info.out_rank, info.red_rank), (1, 1));
        assert_eq!((info.out_dims[0], info.out_strides[0]), (20, 6));
        assert_eq!((info.red_dims[0], info.red_strides[0]), (6, 1));
        assert!(info.inner_contiguous());
    }

    #[test]
    fn reduce_over_a_middle_dim_and_several_dims() {
        let info = ReduceInfo::new("sum", &[4, 5, 6], &[30, 6, 1], &[1]).unwrap();
        assert_eq!((info.num_out, info.red_size), (24, 5));
        assert_eq!(info.out_rank, 2);
        assert_eq!(&info.out_dims[..2], &[4, 6]);
        assert_eq!(&info.out_strides[..2], &[30, 1]);
        assert_eq!((info.red_dims[0], info.red_strides[0]), (5, 6));
        assert!(!info.inner_contiguous());

        let info = ReduceInfo::new("sum", &[4, 5, 6], &[30, 6, 1], &[0, 2]).unwrap();
        assert_eq!((info.num_out, info.red_size), (5, 24));
        assert_eq!(info.red_rank, 2);
        assert_eq!(&info.red_dims[..2], &[4, 6]);
        assert_eq!(&info.red_strides[..2], &[30, 1]);

        let info = ReduceInfo::new("sum", &[4, 5, 6], &[30, 6, 1], &[0, 1, 2]).unwrap();
        assert_eq!(
            (info.num_out, info.red_size, info.out_rank, info.red_rank),
            (1, 120, 0, 1)
        );
        assert!(info.inner_contiguous());
    }

    #[test]
    fn reduce_over_a_transposed_source() {
        // (6, 4) view of a (4, 6) contiguous matrix, reduced over dim 1.
        let info = ReduceInfo::new("max", &[6, 4], &[1, 6], &[1]).unwrap();
        assert_eq!((info.num_out, info.red_size), (6, 4));
        assert_eq!((info.out_dims[0], info.out_strides[0]), (6, 1));
        assert_eq!((info.red_dims[0], info.red_strides[0]), (4, 6));
        assert!(ReduceInfo::new("max", &[6, 4], &[1, 6], &[2]).is_err());
    }

    #[test]
    fn column_packs_need_aligned_strides_and_unit_output_stride() {
        // (300, 8192) over dim 0: 2048 packs of 4 f32, 2049 from offset 1.
        let info = ReduceInfo::new("sum", &[300, 8192], &[8192, 1], &[0]).unwrap();
        assert_eq!(info.column_packs(4, 0), Some(2048));
        assert_eq!(info.column_packs(4, 5), Some(2049));
        assert_eq!(info.column_packs(1, 0), None);
        // (3, 40, 50) over dim 1 within rows of 52: 3 rows of 13 packs
        // (14 from offset 3: 3 + 50 elements).
        let info = ReduceInfo::new("sum", &[3, 40, 50], &[2080, 52, 1], &[1]).unwrap();
        assert_eq!(info.column_packs(4, 0), Some(39));
        assert_eq!(info.column_packs(4, 3), Some(42));
        // A reduced stride or an outer output stride off the pack grid.
        assert_eq!(info.column_packs(8, 0), None);
        let info = ReduceInfo::new("sum", &[3, 40, 48], &[1922, 48, 1], &[1]).unwrap();
        assert_eq!(info.column_packs(4, 0), None);
        // Rows narrower than a pack, strided outputs, two reduced dims.
        let info = ReduceInfo::new("sum", &[100, 2], &[4, 1], &[0]).unwrap();
        assert_eq!(info.column_packs(4, 0), None);
        let info = ReduceInfo::new("sum", &[6, 4], &[2, 12], &[1]).unwrap();
        assert_eq!(info.column_packs(2, 0), None);
        // A transposed matrix over its last dim: adjacent outputs.
        let info = ReduceInfo::new("sum", &[6, 4], &[1, 6], &[1]).unwrap();
        assert_eq!(info.column_packs(2, 0), Some(3));
        let info = ReduceInfo::new("sum", &[4, 5, 8], &[40, 8, 1], &[0, 1]).unwrap();
        assert_eq!(info.column_packs(4, 0), Some(2));
        let info = ReduceInfo::new("sum", &[4, 5, 8], &[48, 8, 1], &[0, 1]).unwrap();
        assert_eq!(info.column_packs(4, 0), None);
    }

    #[test]
    fn split_around_a_dim() {
        assert_eq!(split_at_dim("t", &[2, 3, 4], 0).unwrap(), (1, 2, 12));
        assert_eq!(split_at_dim("t", &[2, 3, 4], 1).unwrap(), (2, 3, 4));
        assert_eq!(split_at_dim("t", &[2, 3, 4], 2).unwrap(), (6, 4, 1));
    }
}
