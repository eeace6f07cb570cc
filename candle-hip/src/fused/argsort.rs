//! Argsort along the last dimension (`argsort.hip`): a bitonic sort
//! of each row's indices, padded to the next power of two `P`.
//!
//! Rows of up to [`shared_sort_max_cols`] elements sort in one launch, one
//! block per row, as (order key, u16 index) pairs in shared memory; stages
//! that compare positions less than `RUN` × wave size apart run in
//! registers (within a thread or between the lanes of a wave), without
//! block barriers. Longer rows (up to
//! 2^31 elements) sort in global memory: a `rows × P` index matrix and one
//! launch per stage of the network (`log2(P) * (log2(P) + 1) / 2` launches,
//! 120 for a 32000-entry vocabulary), then a copy of the first `cols`
//! indices of each row.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use hip_safe::LaunchConfig;

use crate::error::{Result, invalid};
use crate::fused::rows::Rows;
use crate::kernel::catalogue as cat;
use crate::kernel::grid::grid_stride;
use crate::kernel::header::{REDUCE_MAX_BLOCK, SORT_RUN as RUN};
use crate::kernel::launch::to_u32;
use crate::size;
use crate::storage::HipStorage;

const OP: &str = "arg_sort_last_dim";

/// Shared memory one block of the in-shared-memory sort may use (the
/// smallest per-block limit without opt-in among supported GPUs).
const SHARED_SORT_BYTES: usize = 48 * 1024;

/// Shared memory of the in-shared-memory sort of rows padded to `padded`:
/// an order key of the value's size per position (rounded up to 8 bytes),
/// then a u16 index per position.
fn shared_bytes(padded: usize, elem_bytes: usize) -> usize {
    (padded * elem_bytes).next_multiple_of(8) + 2 * padded
}

/// The longest row of `dtype` sorted in shared memory: the largest power of
/// two whose values and indices fit `SHARED_SORT_BYTES` (16384 for u8,
/// 8192 for 2- and 4-byte types, 4096 for 8-byte types).
pub fn shared_sort_max_cols(dtype: DType) -> usize {
    let mut padded = 1usize;
    while shared_bytes(padded * 2, dtype.size_in_bytes()) <= SHARED_SORT_BYTES {
        padded *= 2;
    }
    padded
}

/// The longest row sorted at all (indices are u32, `P` at most 2^31).
const MAX_COLS: usize = 1 << 31;

/// How one row length is sorted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// One launch: `threads` per block, `shared_bytes(padded, ..)` of shared memory.
    Shared { padded: usize, threads: u32 },
    /// One launch per stage on a `rows × padded` index matrix.
    Global { padded: usize },
}

/// How rows of `cols` elements of `dtype` are sorted on a device with waves
/// of `wave` lanes. Shared sorts pad rows to at least `RUN` positions per
/// lane of a wave (register passes need whole waves) and run a thread per
/// `RUN` positions, at most `REDUCE_MAX_BLOCK`.
fn plan(cols: usize, dtype: DType, wave: usize) -> Result<Plan> {
    if cols > MAX_COLS {
        return Err(invalid(
            OP,
            format!("rows of {cols} elements exceed the limit of {MAX_COLS}"),
        ));
    }
    let padded = cols.next_power_of_two();
    if padded <= shared_sort_max_cols(dtype) {
        let padded = padded.max(RUN * wave.next_power_of_two());
        let threads = (padded / RUN).min(REDUCE_MAX_BLOCK as usize) as u32;
        Ok(Plan::Shared { padded, threads })
    } else {
        Ok(Plan::Global { padded })
    }
}

/// The stages `(k, j)` of a bitonic network over `padded` elements, in order.
fn stages(padded: usize) -> impl Iterator<Item = (usize, usize)> {
    std::iter::successors(Some(2), |k| Some(k * 2))
        .take_while(move |&k| k <= padded)
        .flat_map(|k| {
            std::iter::successors(Some(k / 2), |j| Some(j / 2))
                .take_while(|&j| j > 0)
                .map(move |j| (k, j))
        })
}

/// The `u32` indices that sort each row of the last dimension of a
/// contiguous `x`, ascending or descending (`Tensor::arg_sort_last_dim`).
/// Equal values keep their order (a stable sort); NaNs come last.
pub fn arg_sort_last_dim(
    x: &HipStorage,
    layout: &Layout,
    ascending: bool,
) -> candle_core::Result<HipStorage> {
    let rows = Rows::of(OP, layout)?;
    let dtype = x.dtype();
    let (shared_family, step_family) = if ascending {
        (&cat::ARGSORT_ASC, &cat::ARGSORT_STEP_ASC)
    } else {
        (&cat::ARGSORT_DESC, &cat::ARGSORT_STEP_DESC)
    };
    let device = x.device();
    // SAFETY: every index of every row is written below (or an error returned).
    let mut out = unsafe { device.alloc_storage(DType::U32, rows.len()) }?;
    if rows.rows == 0 || rows.cols == 0 {
        return Ok(out);
    }
    let n_rows = rows.rows as u64;
    let cols = to_u32(OP, "the last dimension", rows.cols)?;
    let launcher = device.kernels();
    let src = x.view_range(OP, rows.start, rows.len())?;
    match plan(rows.cols, dtype, launcher.wave_size() as usize)? {
        Plan::Shared { padded, threads } => {
            let kernel = shared_family.kernel(OP, dtype)?;
            let padded32 = padded as u32;
            let cfg = LaunchConfig {
                grid_dim: (rows.rows.min(i32::MAX as usize) as u32, 1, 1),
                block_dim: (threads, 1, 1),
                shared_mem_bytes: shared_bytes(padded, dtype.size_in_bytes()) as u32,
            };
            let dst = out.view_all_mut();
            // SAFETY: argsort_{asc,desc}_T takes (const T* src, u32* dst,
            // u64 rows, u32 cols, u32 padded) with shared_bytes(padded, size of
            // T) bytes of dynamic shared memory; src and dst hold rows x cols
            // elements.
            unsafe { launcher.launch(kernel, cfg, &[&src, &dst, &n_rows, &cols, &padded32]) }?;
        }
        Plan::Global { padded } => {
            let kernel = step_family.kernel(OP, dtype)?;
            let padded32 = to_u32(OP, "the padded row length", padded)?;
            let idx_len = size::mul(OP, "the padded rows", rows.rows, padded)?;
            // SAFETY: the first stage writes every index (argsort.hip).
            let mut idx = unsafe { device.alloc_storage(DType::U32, idx_len) }?;
            let cfg = grid_stride(n_rows * padded as u64 / 2, launcher.compute_units());
            {
                let idx_view = idx.view_all_mut();
                for (k, j) in stages(padded) {
                    let (k, j) = (k as u32, j as u32);
                    // SAFETY: argsort_step_{asc,desc}_T takes (const T* src,
                    // u32* idx, u64 rows, u32 cols, u32 padded, u32 k, u32 j);
                    // src holds rows x cols elements and idx rows x padded.
                    unsafe {
                        launcher.launch(
                            kernel,
                            cfg,
                            &[&src, &idx_view, &n_rows, &cols, &padded32, &k, &j],
                        )
                    }?;
                }
            }
            idx.copy2d(&mut out, rows.rows, rows.cols, padded, rows.cols, 0, 0)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_rows_sort_in_shared_memory() {
        let f32 = DType::F32;
        let shared = |padded, threads| Plan::Shared { padded, threads };
        // Short rows pad to RUN positions per lane of a wave.
        assert_eq!(plan(1, f32, 32).unwrap(), shared(128, 32));
        assert_eq!(plan(5, f32, 64).unwrap(), shared(256, 64));
        assert_eq!(plan(129, f32, 32).unwrap(), shared(256, 64));
        assert_eq!(plan(1000, f32, 64).unwrap(), shared(1024, 256));
        assert_eq!(plan(8192, f32, 32).unwrap(), shared(8192, 1024));
        assert_eq!(plan(8193, f32, 32).unwrap(), Plan::Global { padded: 16384 });
        assert_eq!(
            plan(32000, f32, 64).unwrap(),
            Plan::Global { padded: 32768 }
        );
        assert_eq!(
            plan(8192, DType::F64, 32).unwrap(),
            Plan::Global { padded: 8192 }
        );
        assert!(
            plan(MAX_COLS + 1, f32, 32)
                .unwrap_err()
                .to_string()
                .contains("exceed")
        );
    }

    #[test]
    fn shared_sorts_fit_48_kib_with_aligned_indices() {
        for dtype in crate::dtype::CORE {
            let max = shared_sort_max_cols(dtype);
            assert!(shared_bytes(max, dtype.size_in_bytes()) <= SHARED_SORT_BYTES);
            assert!(max <= 1 << 16, "u16 indices");
        }
        assert_eq!(shared_sort_max_cols(DType::U8), 16384);
        assert_eq!(shared_sort_max_cols(DType::BF16), 8192);
        assert_eq!(shared_sort_max_cols(DType::F32), 8192);
        assert_eq!(shared_sort_max_cols(DType::F64), 4096);
        // One u8 value: the indices start at byte 8.
        assert_eq!(shared_bytes(1, 1), 10);
    }

    #[test]
    fn the_network_has_every_stage_once_in_order() {
        let s: Vec<_> = stages(8).collect();
        assert_eq!(s, vec![(2, 1), (4, 2), (4, 1), (8, 4), (8, 2), (8, 1)]);
        assert_eq!(stages(1).count(), 0);
        assert_eq!(stages(32768).count(), 120);
    }

    /// The kernels' network, run on the host with the kernels' order.
    fn host_sort(v: &[f32], asc: bool) -> Vec<u32> {
        let cols = v.len();
        let padded = cols.next_power_of_two();
        let before = |a: usize, b: usize| -> bool {
            let (pa, pb) = (a >= cols, b >= cols);
            if pa || pb {
                return !pa || (pb && a < b);
            }
            let (x, y) = (v[a], v[b]);
            if x.is_nan() || y.is_nan() {
                return !x.is_nan() || (y.is_nan() && a < b);
            }
            if (asc && x < y) || (!asc && y < x) {
                return true;
            }
            if (asc && y < x) || (!asc && x < y) {
                return false;
            }
            a < b
        };
        let mut idx: Vec<usize> = (0..padded).collect();
        for (k, j) in stages(padded) {
            for t in 0..padded / 2 {
                let i = ((t & !(j - 1)) << 1) | (t & (j - 1));
                let l = i | j;
                let (a, b) = (idx[i], idx[l]);
                let up = i & k == 0;
                if if up { before(b, a) } else { before(a, b) } {
                    idx.swap(i, l);
                }
            }
        }
        idx[..cols].iter().map(|&i| i as u32).collect()
    }

    #[test]
    fn the_network_is_a_stable_sort() {
        for cols in [1, 2, 3, 5, 8, 13, 64, 100] {
            let v: Vec<f32> = (0..cols)
                .map(|i| ((i * 37 + 11) % 7) as f32 - 3.0)
                .collect();
            for asc in [true, false] {
                let mut expect: Vec<u32> = (0..cols as u32).collect();
                // Rust's sort_by is stable, as candle's CPU argsort.
                if asc {
                    expect.sort_by(|&a, &b| v[a as usize].total_cmp(&v[b as usize]));
                } else {
                    expect.sort_by(|&a, &b| v[b as usize].total_cmp(&v[a as usize]));
                }
                assert_eq!(host_sort(&v, asc), expect, "{cols} {asc}");
            }
        }
        assert_eq!(
            host_sort(&[1.0, f32::NAN, 0.0, f32::NAN], true),
            vec![2, 0, 1, 3]
        );
        assert_eq!(host_sort(&[1.0, f32::NAN, 0.0], false), vec![0, 2, 1]);
    }
}
