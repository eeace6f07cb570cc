//! How a reduction runs: the mode of `reduce.hip`, the split of each
//! output's positions into chunks, and the launch shapes (pure functions of
//! the problem and the device).

use hip_safe::LaunchConfig;

use crate::kernel::grid::{THREADS_PER_CU, grid_stride, linear, per_pack};
use crate::kernel::header::{ELEM_BLOCK, REDUCE_MAX_BLOCK};
use crate::kernel::info::{ReduceInfo, ReduceMode};

/// Reductions of at most this many elements per output use one thread per output.
const SMALL_REDUCTION: u64 = 16;

/// Elements per thread a ROWS block is sized for (the block is the next power
/// of two of `n / ELEMS_PER_THREAD` threads, so each thread handles between
/// half this and this): enough work per thread that the block's final
/// reduction is a small part of it, and blocks small enough that several
/// share a compute unit and overlap their loads with each other's final
/// reductions (a much smaller count makes one large block per unit, which
/// leaves the unit idle during its final reduction; PERF_NOTES.md).
const ELEMS_PER_THREAD: u64 = 128;

/// Reduced elements each thread of a split ROWS chunk handles at least.
/// Split ROWS blocks have at most `ELEM_BLOCK` threads: the chunk size is
/// free, and a 1024-thread block of a kernel above 32 registers per thread
/// (most reduce_* kernels) fills only half of an NVIDIA unit.
const ROWS_CHUNK_PER_THREAD: u64 = 64;

/// Reduced positions each thread of a split COLS chunk handles at least.
const COLS_CHUNK_PER_THREAD: u64 = 16;

/// Adjacent outputs of a COLS block, adjacent packs of a COLS_PACKED block
/// (a divisor of `ELEM_BLOCK`).
const COLS_TILE: u64 = 32;

/// COLS_PACKED launches threads for 1 / this of the device's resident
/// threads: each has 64 bytes in flight (4 packs; 2 of 8 or more elements),
/// so that matches the bytes in flight of the element path's two device-fulls
/// of f32 threads (4 loads of 4 bytes), with a quarter of the chunks for the
/// finish launch to combine.
const PACKED_FILL_DIVISOR: u64 = 2;

/// Most blocks of a block-per-output reduction (the blocks loop beyond).
const MAX_REDUCE_GRID: u64 = 1 << 20;

/// One launch of a reduction: its info (mode recorded) and shape.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReduceLaunch {
    pub(crate) info: ReduceInfo,
    pub(crate) cfg: LaunchConfig,
}

/// How a reduction runs: one launch, or a launch writing `split` partial
/// states per output and a second one combining them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReducePlan {
    pub(crate) main: ReduceLaunch,
    pub(crate) finish: Option<ReduceLaunch>,
}

impl ReducePlan {
    /// Partial states the main launch writes (0 without a finish launch).
    pub(crate) fn partials(&self) -> u64 {
        if self.finish.is_some() {
            self.main.info.num_out * self.main.info.split
        } else {
            0
        }
    }
}

/// Cuts `n` reduced positions into chunks: at most `wanted` of them and at
/// least `min_chunk` positions each (rounded to a multiple of `align`);
/// returns (split, chunk). Nothing to reduce (`n` = 0) is one empty chunk.
fn chunks(n: u64, wanted: u64, min_chunk: u64, align: u64) -> (u64, u64) {
    let split = wanted.min(n / min_chunk.max(1)).max(1);
    let chunk = n.div_ceil(split).next_multiple_of(align.max(1)).max(1);
    (n.div_ceil(chunk).max(1), chunk)
}

/// Chooses how a reduction runs (see the modes in `kernels/reduce.hip`):
/// - outputs adjacent in memory over one reduced dimension on the pack grid
///   ([`ReduceInfo::column_packs`]): COLS_PACKED, tiles of adjacent packs
///   (a thread per pack for short reductions);
/// - at most `SMALL_REDUCTION` elements per output: COLS with a thread per
///   output;
/// - reduced positions adjacent in memory: ROWS, a block per output;
/// - otherwise COLS: blocks over tiles of adjacent outputs;
///
/// and when that leaves too few blocks to fill the device, each output's
/// positions are cut into chunks whose partial states a FINISH launch
/// combines. `offset` is the source view's start offset in elements.
pub(crate) fn reduction(
    mut info: ReduceInfo,
    elem_bytes: usize,
    offset: u64,
    wave_size: u32,
    compute_units: u32,
) -> ReducePlan {
    let n = info.red_size;
    let outs = info.num_out;
    let resident = u64::from(compute_units.max(1)) * THREADS_PER_CU;
    let fill = resident * 2;
    let wave = u64::from(wave_size.clamp(1, REDUCE_MAX_BLOCK));
    let block = u64::from(ELEM_BLOCK);
    let vec = per_pack(elem_bytes) as u64;
    let main = if let Some(packs) = info.column_packs(vec, offset) {
        let tile = if n <= SMALL_REDUCTION {
            block
        } else {
            COLS_TILE.min(packs.next_power_of_two())
        };
        let tiles = packs.div_ceil(tile);
        let wanted = (resident / PACKED_FILL_DIVISOR)
            .div_ceil(block)
            .div_ceil(tiles);
        let min_chunk = block / tile * COLS_CHUNK_PER_THREAD;
        (info.split, info.chunk) = chunks(n, wanted, min_chunk, 1);
        info.mode = ReduceMode::ColsPacked as u32;
        info.tile = tile as u32;
        ReduceLaunch {
            info,
            cfg: linear((tiles * info.split).min(MAX_REDUCE_GRID), ELEM_BLOCK),
        }
    } else if n <= SMALL_REDUCTION {
        info.mode = ReduceMode::Cols as u32;
        info.tile = ELEM_BLOCK;
        info.chunk = n;
        ReduceLaunch {
            info,
            cfg: linear(outs.div_ceil(block), ELEM_BLOCK),
        }
    } else if info.inner_contiguous() {
        let mut threads = n
            .div_ceil(ELEMS_PER_THREAD)
            .next_power_of_two()
            .clamp(wave, u64::from(REDUCE_MAX_BLOCK));
        if threads * outs < fill {
            // The outputs get split: chunks of the element-wise block size.
            threads = threads.min(block);
        }
        let wanted = fill.div_ceil(threads).div_ceil(outs);
        (info.split, info.chunk) = chunks(n, wanted, threads * ROWS_CHUNK_PER_THREAD, vec);
        info.mode = ReduceMode::Rows as u32;
        ReduceLaunch {
            info,
            cfg: linear((outs * info.split).min(MAX_REDUCE_GRID), threads as u32),
        }
    } else {
        let tile = COLS_TILE.min(outs.next_power_of_two());
        let tiles = outs.div_ceil(tile);
        let wanted = fill.div_ceil(block).div_ceil(tiles);
        (info.split, info.chunk) = chunks(n, wanted, block / tile * COLS_CHUNK_PER_THREAD, 1);
        info.mode = ReduceMode::Cols as u32;
        info.tile = tile as u32;
        ReduceLaunch {
            info,
            cfg: linear((tiles * info.split).min(MAX_REDUCE_GRID), ELEM_BLOCK),
        }
    };
    let finish = (main.info.split > 1).then(|| {
        let mut info = main.info;
        let split = info.split;
        if outs >= u64::from(compute_units.max(1)) * COLS_TILE {
            info.mode = ReduceMode::FinishThread as u32;
            ReduceLaunch {
                info,
                cfg: grid_stride(outs, compute_units),
            }
        } else {
            info.mode = ReduceMode::FinishBlock as u32;
            let threads = split
                .next_power_of_two()
                .clamp(wave, u64::from(REDUCE_MAX_BLOCK));
            ReduceLaunch {
                info,
                cfg: linear(outs.min(MAX_REDUCE_GRID), threads as u32),
            }
        }
    });
    ReducePlan { main, finish }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(dims: &[usize], strides: &[usize], reduce: &[usize], wave: u32) -> ReducePlan {
        plan_at(dims, strides, reduce, wave, 4, 0)
    }

    fn plan_at(
        dims: &[usize],
        strides: &[usize],
        reduce: &[usize],
        wave: u32,
        elem_bytes: usize,
        offset: u64,
    ) -> ReducePlan {
        let info = ReduceInfo::new("t", dims, strides, reduce).unwrap();
        reduction(info, elem_bytes, offset, wave, 100)
    }

    fn mode(p: &ReducePlan) -> u32 {
        p.main.info.mode
    }

    #[test]
    fn empty_reductions_plan_one_empty_chunk() {
        // A sum over a dimension of size 0, in every mode.
        for (dims, strides, reduce) in [
            (&[0usize, 8][..], &[8usize, 1][..], &[0usize][..]),
            (&[8, 0], &[1, 8], &[1]),
            (&[3, 0, 64], &[0, 64, 1], &[1]),
            (&[0], &[1], &[0]),
        ] {
            for bytes in [1, 2, 4, 8] {
                let p = plan_at(dims, strides, reduce, 32, bytes, 0);
                assert_eq!(p.main.info.red_size, 0, "{dims:?}");
                assert_eq!(p.main.info.split, 1, "{dims:?}");
                assert!(p.finish.is_none(), "{dims:?}");
            }
        }
        assert_eq!(chunks(0, 7, 16, 4), (1, 1));
    }

    #[test]
    fn long_rows_get_a_block_each() {
        let p = plan(&[8192, 32000], &[32000, 1], &[1], 64);
        assert_eq!(mode(&p), ReduceMode::Rows as u32);
        assert_eq!(p.main.info.split, 1);
        assert!(p.finish.is_none());
        assert_eq!(p.main.cfg.grid_dim.0, 8192);
        // 32000 / 128 = 250 -> 256 threads of 125 elements each.
        assert_eq!(p.main.cfg.block_dim.0, 256);
        let p = plan(&[10, 100], &[100, 1], &[1], 64);
        assert_eq!(p.main.cfg.block_dim.0, 64);
        let p = plan(&[10, 100], &[100, 1], &[1], 32);
        assert_eq!(p.main.cfg.block_dim.0, 32);
        let p = plan(&[10, 1000], &[1000, 1], &[1], 32);
        assert_eq!(p.main.cfg.block_dim.0, 32);
        let p = plan(&[1000, 1 << 20], &[1 << 20, 1], &[1], 32);
        assert_eq!(p.main.cfg.block_dim.0, 1024);
        assert_eq!(p.main.info.split, 1);
        // Few long rows are split into chunks of ELEM_BLOCK-thread blocks.
        let p = plan(&[10, 1 << 20], &[1 << 20, 1], &[1], 32);
        assert_eq!(p.main.cfg.block_dim.0, ELEM_BLOCK);
        assert!(p.main.info.split > 1);
    }

    #[test]
    fn few_long_rows_are_split_and_finished() {
        // Sum of all 2^26 elements: one output, 2 x 2048 x 100 threads of
        // 124 elements each.
        let p = plan(&[8192, 8192], &[8192, 1], &[0, 1], 32);
        assert_eq!(mode(&p), ReduceMode::Rows as u32);
        let info = p.main.info;
        assert_eq!(p.main.cfg.block_dim.0, ELEM_BLOCK);
        assert_eq!((info.split, info.chunk), (1600, 41944));
        assert!(info.chunk * info.split >= info.red_size);
        assert!(info.chunk * (info.split - 1) < info.red_size);
        assert_eq!(p.main.cfg.grid_dim.0 as u64, info.split);
        let finish = p.finish.unwrap();
        assert_eq!(finish.info.mode, ReduceMode::FinishBlock as u32);
        assert_eq!(finish.cfg.grid_dim.0, 1);
        assert_eq!(finish.cfg.block_dim.0, REDUCE_MAX_BLOCK);
        assert_eq!(p.partials(), info.split);
    }

    #[test]
    fn reductions_over_outer_dims_pack_adjacent_outputs() {
        // Sum over dim 0 of (8192, 8192) f32: 2048 packs of 4 outputs in
        // tiles of 32, 7 chunks of 1171 rows for half of 100 units of threads.
        let p = plan(&[8192, 8192], &[8192, 1], &[0], 32);
        let info = p.main.info;
        assert_eq!(mode(&p), ReduceMode::ColsPacked as u32);
        assert_eq!(info.tile, 32);
        assert_eq!((info.split, info.chunk), (7, 1171));
        assert_eq!(p.main.cfg.block_dim.0, ELEM_BLOCK);
        assert_eq!(p.main.cfg.grid_dim.0, 64 * 7);
        assert_eq!(p.finish.unwrap().info.mode, ReduceMode::FinishThread as u32);
        // A view starting 3 elements past a pack boundary: a pack more per row.
        let p = plan_at(&[100, 8192], &[8192, 1], &[0], 32, 4, 3);
        assert_eq!(mode(&p), ReduceMode::ColsPacked as u32);
        assert_eq!(p.main.cfg.grid_dim.0 as u64, 65 * p.main.info.split);
        // u8: packs of 16; rows of 8200 are not on that grid.
        let p = plan_at(&[100, 8192], &[8192, 1], &[0], 32, 1, 0);
        assert_eq!(mode(&p), ReduceMode::ColsPacked as u32);
        let p = plan_at(&[100, 8200], &[8200, 1], &[0], 32, 1, 0);
        assert_eq!(mode(&p), ReduceMode::Cols as u32);
        // Few outputs: a narrow tile of packs, the rest split.
        let p = plan(&[100_000, 4], &[4, 1], &[0], 64);
        assert_eq!(mode(&p), ReduceMode::ColsPacked as u32);
        assert_eq!(p.main.info.tile, 1);
        assert!(p.main.info.split > 1);
        assert_eq!(p.finish.unwrap().info.mode, ReduceMode::FinishBlock as u32);
        // Short reductions: a thread per pack.
        let p = plan(&[8, 4096], &[4096, 1], &[0], 32);
        assert_eq!(mode(&p), ReduceMode::ColsPacked as u32);
        assert_eq!((p.main.info.tile, p.main.info.split), (ELEM_BLOCK, 1));
        assert_eq!(p.main.cfg.grid_dim.0, 4);
    }

    #[test]
    fn other_reductions_over_outer_dims_tile_the_outputs() {
        // Rows of 8190 f32 are not on the pack grid: element tiles.
        let p = plan(&[8192, 8190], &[8190, 1], &[0], 32);
        let info = p.main.info;
        assert_eq!(mode(&p), ReduceMode::Cols as u32);
        assert_eq!(info.tile, 32);
        assert!(info.split > 1);
        assert_eq!(p.main.cfg.block_dim.0, ELEM_BLOCK);
        assert_eq!(
            p.main.cfg.grid_dim.0 as u64,
            8190u64.div_ceil(32) * info.split
        );
        assert_eq!(p.finish.unwrap().info.mode, ReduceMode::FinishThread as u32);
        // Few outputs: a narrow tile.
        let p = plan(&[100_000, 3], &[3, 1], &[0], 64);
        assert_eq!(mode(&p), ReduceMode::Cols as u32);
        assert_eq!(p.main.info.tile, 4);
        // A transposed source reduced over its (strided) last dim: packed
        // when the reduced stride is on the pack grid.
        let p = plan(&[6000, 400], &[1, 6000], &[1], 64);
        assert_eq!(mode(&p), ReduceMode::ColsPacked as u32);
        let p = plan(&[5999, 400], &[1, 5999], &[1], 64);
        assert_eq!(mode(&p), ReduceMode::Cols as u32);
        // Reduced positions with an inner contiguous run stay block-per-output.
        let p = plan(&[40, 5, 60], &[300, 60, 1], &[0, 2], 64);
        assert_eq!(mode(&p), ReduceMode::Rows as u32);
    }

    #[test]
    fn short_reductions_get_a_thread_each() {
        let p = plan(&[100_000, 8], &[8, 1], &[1], 64);
        assert_eq!(mode(&p), ReduceMode::Cols as u32);
        assert_eq!(p.main.info.tile, ELEM_BLOCK);
        assert_eq!((p.main.info.split, p.main.info.chunk), (1, 8));
        assert_eq!(p.main.cfg.block_dim.0, ELEM_BLOCK);
        assert_eq!(p.main.cfg.grid_dim.0, 100_000u32.div_ceil(ELEM_BLOCK));
        assert!(p.finish.is_none());
    }

    #[test]
    fn block_sizes_are_whole_waves() {
        let tiled = [ReduceMode::Cols as u32, ReduceMode::ColsPacked as u32];
        for wave in [32, 64] {
            for red in [17, 100, 513, 5000, 1 << 20] {
                for dims in [[3, red], [red, 3], [red, 64]] {
                    let strides = [dims[1], 1];
                    for reduce in [[0], [1]] {
                        let p = plan(&dims, &strides, &reduce, wave);
                        for l in [Some(p.main), p.finish].into_iter().flatten() {
                            assert_eq!(l.cfg.block_dim.0 % wave, 0, "{dims:?} {reduce:?}");
                            assert!(l.cfg.block_dim.0 <= REDUCE_MAX_BLOCK);
                            if tiled.contains(&l.info.mode) {
                                assert_eq!(l.cfg.block_dim.0, ELEM_BLOCK);
                                assert_eq!(ELEM_BLOCK % l.info.tile, 0);
                            }
                        }
                    }
                }
            }
        }
    }
}
