//! Launch shapes shared by several op families: 1-D grids, grid-stride
//! loops and the unrolled loops of `common.h`. Each op family plans its
//! own launches from these, next to its op code.

use hip_safe::LaunchConfig;

use crate::kernel::header::{ELEM_BLOCK, UNROLL, VEC_BYTES};

/// Grid-stride kernels get at most this many blocks per compute unit: enough
/// to fill every unit several times over; each thread then loops.
pub(crate) const BLOCKS_PER_CU: u64 = 16;

/// Threads a compute unit keeps resident (2048 on NVIDIA's recent GPUs and
/// 2048 to 2560 on CDNA): the unit of "filling the device" below.
pub(crate) const THREADS_PER_CU: u64 = 2048;

/// Most blocks of a 1-D grid on every platform (CUDA's limit for x).
pub(crate) const MAX_GRID: u64 = (1 << 31) - 1;

/// A 1-D launch of `blocks` blocks of `threads` threads (kernels loop over
/// what a capped grid does not cover).
pub(crate) fn linear(blocks: u64, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks.clamp(1, MAX_GRID) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride launch for `work` independent items on a device with
/// `compute_units` units: one item per thread up to the block cap.
pub(crate) fn grid_stride(work: u64, compute_units: u32) -> LaunchConfig {
    let needed = work.div_ceil(u64::from(ELEM_BLOCK)).max(1);
    let cap = u64::from(compute_units.max(1)) * BLOCKS_PER_CU;
    linear(needed.min(cap), ELEM_BLOCK)
}

/// A launch of the unrolled loops (`unrolled_loop` in `kernels/common.h`):
/// every thread takes `UNROLL` of the `work` items, so that each has several
/// memory accesses in flight, and the grid covers all of them at once.
pub(crate) fn unrolled(work: u64) -> LaunchConfig {
    linear(
        work.div_ceil(u64::from(ELEM_BLOCK) * u64::from(UNROLL)),
        ELEM_BLOCK,
    )
}

/// Elements of `elem_bytes` bytes per 16-byte pack.
pub(crate) fn per_pack(elem_bytes: usize) -> usize {
    (VEC_BYTES / elem_bytes.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_stride_covers_small_work_and_caps_large_work() {
        let c = grid_stride(1000, 100);
        assert_eq!((c.grid_dim, c.block_dim), ((4, 1, 1), (ELEM_BLOCK, 1, 1)));
        assert_eq!(grid_stride(0, 100).grid_dim.0, 1);
        assert_eq!(grid_stride(1 << 40, 100).grid_dim.0, 1600);
        assert_eq!(grid_stride(1 << 40, 0).grid_dim.0, 16);
    }

    #[test]
    fn unrolled_grids_cover_every_item_once() {
        assert_eq!(unrolled(0).grid_dim.0, 1);
        assert_eq!(unrolled(1).grid_dim.0, 1);
        let per_block = u64::from(ELEM_BLOCK * UNROLL);
        assert_eq!(unrolled(per_block).grid_dim.0, 1);
        assert_eq!(unrolled(per_block + 1).grid_dim.0, 2);
        assert_eq!(unrolled(1 << 24).grid_dim.0, (1 << 24) / per_block as u32);
        assert_eq!(unrolled(1 << 50).grid_dim.0, MAX_GRID as u32);
    }
}
