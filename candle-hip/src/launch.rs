//! Launch shapes (pure functions of the problem and the device) and the one
//! generic path every kernel launch goes through.

use hip_safe::{DeviceView, DeviceViewMut, LaunchConfig};

use crate::device::HipDevice;
use crate::error::{Result, hip};
use crate::info::{
    ELEM_BLOCK, ElemInfo, IndexInfo, REDUCE_MAX_BLOCK, ReduceInfo, ReduceMode, UNROLL, VEC_BYTES,
};
use crate::table::Kernel;

/// Grid-stride kernels get at most this many blocks per compute unit: enough
/// to fill every unit several times over; each thread then loops.
const BLOCKS_PER_CU: u64 = 16;
/// Threads a compute unit keeps resident (2048 on NVIDIA's recent GPUs and
/// 2048 to 2560 on CDNA): the unit of "filling the device" below.
const THREADS_PER_CU: u64 = 2048;
/// Reductions of at most this many elements per output use one thread per output.
const SMALL_REDUCTION: u64 = 16;
/// Elements per thread a ROWS block is sized for (the block is the next power
/// of two of `n / ELEMS_PER_THREAD` threads, so each thread handles between
/// half this and this): enough work per thread that the block's final
/// reduction is a small part of it, and blocks small enough that several
/// share a compute unit and overlap their loads with each other's final
/// reductions (8 made 1024-thread blocks of 4 packs per thread for rows of
/// 32000, one block per unit: max over bf16 ran at 36% of copy bandwidth).
const ELEMS_PER_THREAD: u64 = 128;
/// Reduced elements each thread of a split ROWS chunk handles at least.
/// Split ROWS blocks have at most `ELEM_BLOCK` threads: the chunk size is
/// free, and a 1024-thread block of a kernel above 32 registers per thread
/// (every reduce_* but sum over f32/u32 on sm_90) fills only half of an
/// NVIDIA unit.
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

/// Most blocks of a 1-D grid on every platform (CUDA's limit for x).
const MAX_GRID: u64 = (1 << 31) - 1;

/// A 1-D launch of `blocks` blocks of `threads` threads (kernels loop over
/// what a capped grid does not cover).
fn config(blocks: u64, threads: u32) -> LaunchConfig {
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
    config(needed.min(cap), ELEM_BLOCK)
}

/// A launch of the unrolled loops (`unrolled_loop` in `kernels/common.h`):
/// every thread takes `UNROLL` of the `work` items, so that each has several
/// memory accesses in flight, and the grid covers all of them at once.
pub(crate) fn unrolled(work: u64) -> LaunchConfig {
    config(
        work.div_ceil(u64::from(ELEM_BLOCK) * u64::from(UNROLL)),
        ELEM_BLOCK,
    )
}

/// The launch of an element-wise kernel (`map_elems`, `fill`): contiguous
/// operands take `UNROLL` packs per thread (half as many for packs of 8 or
/// more elements, as `map_elems` does), strided ones a pack or element per
/// thread (the kernel loops over what the grid does not cover).
pub(crate) fn elementwise(info: &ElemInfo, widest: usize) -> LaunchConfig {
    let work = elementwise_work(info, widest);
    let per_thread = if !info.is_contiguous() {
        1
    } else if per_pack(widest) <= 4 {
        UNROLL
    } else {
        UNROLL / 2
    };
    config(
        work.div_ceil(u64::from(ELEM_BLOCK * per_thread)),
        ELEM_BLOCK,
    )
}

/// Work items of an element-wise kernel: 16-byte packs when every operand is
/// contiguous or the innermost dimension moves in packs (`widest` is the
/// largest element size among them), elements otherwise.
pub(crate) fn elementwise_work(info: &ElemInfo, widest: usize) -> u64 {
    if info.is_contiguous() || info.inner_vec != 0 {
        let per_pack = (VEC_BYTES / widest.max(1)).max(1) as u64;
        info.numel.div_ceil(per_pack)
    } else {
        info.numel
    }
}

/// Elements of `elem_bytes` bytes per 16-byte pack.
pub(crate) fn per_pack(elem_bytes: usize) -> usize {
    (VEC_BYTES / elem_bytes.max(1)).max(1)
}

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
            cfg: config((tiles * info.split).min(MAX_REDUCE_GRID), ELEM_BLOCK),
        }
    } else if n <= SMALL_REDUCTION {
        info.mode = ReduceMode::Cols as u32;
        info.tile = ELEM_BLOCK;
        info.chunk = n;
        ReduceLaunch {
            info,
            cfg: config(outs.div_ceil(block), ELEM_BLOCK),
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
            cfg: config((outs * info.split).min(MAX_REDUCE_GRID), threads as u32),
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
            cfg: config((tiles * info.split).min(MAX_REDUCE_GRID), ELEM_BLOCK),
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
                cfg: config(outs.min(MAX_REDUCE_GRID), threads as u32),
            }
        }
    });
    ReducePlan { main, finish }
}

/// Launch shape of a tiled transpose (`transpose_*` in `kernels/copy.hip`):
/// one block of `ELEM_BLOCK` threads per tile, tiles of 64 elements of 1 or
/// 2 bytes and 32 of wider types along each side.
pub(crate) fn transpose(info: &ElemInfo, k: usize, elem_bytes: usize) -> LaunchConfig {
    let edge = if elem_bytes <= 2 { 64 } else { 32 };
    let last = info.rank as usize - 1;
    let (rows, cols) = (info.dims[k], info.dims[last]);
    let planes = info.numel / (rows * cols).max(1);
    config(
        planes * rows.div_ceil(edge) * cols.div_ceil(edge),
        ELEM_BLOCK,
    )
}

/// Threads per block for `columns` independent sequential walks (scatter,
/// index_add per column): few per block when there are few columns, so
/// that they spread over every compute unit; whole waves.
pub(crate) fn column_walks(columns: u64, wave_size: u32, compute_units: u32) -> LaunchConfig {
    let wave = u64::from(wave_size.clamp(1, ELEM_BLOCK));
    let per_cu = columns / u64::from(compute_units.max(1));
    let threads = per_cu
        .max(1)
        .next_power_of_two()
        .clamp(wave, u64::from(ELEM_BLOCK));
    config(columns.div_ceil(threads), threads as u32)
}

/// Columns of a destination row each thread of `index_add_rows_*`
/// keeps (`CH_OWNER_COLS` in `kernels/indexing.hip`).
pub(crate) const OWNER_COLS: u64 = 4;

/// The sizes of a scatter, scatter_add or index_add: `ids` updates per
/// column of `left * right` columns into `dst_dim` destination rows of
/// `elem_bytes`-byte values.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Updates {
    pub(crate) left: u64,
    pub(crate) right: u64,
    pub(crate) dst_dim: u64,
    pub(crate) ids: u64,
    pub(crate) elem_bytes: usize,
}

/// Whether index_add should give each block a destination row (scanning
/// every index once per row and column tile) instead of each thread a
/// column (a sequential walk over every index): per row when the walks are
/// too few to fill the device and the scans cost less than the walks'
/// sequential steps. Returns the launch shape of `index_add_rows_*`.
pub(crate) fn index_add_rows(
    u: Updates,
    wave_size: u32,
    compute_units: u32,
) -> Option<LaunchConfig> {
    let Updates {
        left,
        right,
        dst_dim,
        ids,
        ..
    } = u;
    let cus = u64::from(compute_units.max(1));
    let columns = left * right;
    let wave = u64::from(wave_size.clamp(1, ELEM_BLOCK));
    let threads = right
        .div_ceil(OWNER_COLS)
        .next_multiple_of(wave)
        .clamp(wave, u64::from(ELEM_BLOCK));
    let blocks = left * dst_dim * right.div_ceil(threads * OWNER_COLS);
    // Scan steps of the per-row form, over the blocks resident at once
    // (about 8 per unit), against the sequential steps of the longest walk.
    let resident = cus * (THREADS_PER_CU / threads).clamp(1, 8);
    let row_steps = blocks.div_ceil(resident) * ids.div_ceil(threads);
    let walk_steps = ids * columns.div_ceil(cus * THREADS_PER_CU);
    (columns < cus * THREADS_PER_CU && row_steps < walk_steps)
        .then(|| config(blocks, threads as u32))
}

/// Bytes of one destination tile row of the `*_tiles` kernels
/// (`CH_TILE_ROW_BYTES` in `kernels/indexing.hip`): the tile's columns.
pub(crate) const TILE_ROW_BYTES: u64 = 32;
/// Destination rows of one tile of the `*_tiles` kernels (`CH_TILE_ROWS`).
pub(crate) const TILE_ROWS: u64 = 1024;
/// Most row ranges of the tile form: every range reads all indices and
/// source values again.
const MAX_TILE_RANGES: u64 = 4;
/// The tile form loads and stores whole tiles: it takes at least one update
/// per this many destination rows.
const TILE_ROWS_PER_UPDATE: u64 = 8;

/// How scatter, scatter_add and index_add apply their updates, with the
/// launch shape of the chosen kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UpdateForm {
    /// `<family>_tiles_*`: destination tiles in shared memory.
    Tiles(LaunchConfig),
    /// `index_add_rows_*`: a block per destination row.
    Rows(LaunchConfig),
    /// `<family>_*`: a thread per column walking global memory.
    Columns(LaunchConfig),
}

/// The launch shape of the tile form (`*_tiles_*` in
/// `kernels/indexing.hip`): a one-wave block per (left, tile of columns,
/// range of `TILE_ROWS` rows). `None` where another form does better: more
/// than `MAX_TILE_RANGES` ranges, fewer columns than half a tile row, or
/// too few updates to pay for moving whole tiles.
pub(crate) fn update_tiles(u: Updates, wave_size: u32) -> Option<LaunchConfig> {
    let cols = TILE_ROW_BYTES / (u.elem_bytes as u64).clamp(1, TILE_ROW_BYTES);
    let ranges = u.dst_dim.div_ceil(TILE_ROWS);
    let fits = ranges <= MAX_TILE_RANGES
        && u.right * 2 >= cols
        && u.dst_dim <= u.ids.saturating_mul(TILE_ROWS_PER_UPDATE);
    fits.then(|| config(u.left * u.right.div_ceil(cols) * ranges, wave_size))
}

/// How `u` is applied: tiles where they fit and either fill the device (a
/// block per compute unit at least) or the per-row form does not apply;
/// then (index_add only, `per_row`) rows, see [`index_add_rows`];
/// otherwise a walk per column.
pub(crate) fn update_form(
    u: Updates,
    per_row: bool,
    wave_size: u32,
    compute_units: u32,
) -> UpdateForm {
    let tiles = update_tiles(u, wave_size);
    let rows = per_row
        .then(|| index_add_rows(u, wave_size, compute_units))
        .flatten();
    match (tiles, rows) {
        (Some(t), r) if r.is_none() || t.grid_dim.0 >= compute_units => UpdateForm::Tiles(t),
        (_, Some(r)) => UpdateForm::Rows(r),
        _ => UpdateForm::Columns(column_walks(u.left * u.right, wave_size, compute_units)),
    }
}

/// One kernel argument, in the order of the kernel's parameters.
pub(crate) enum Arg<'a> {
    /// A read-only device pointer (`const T*`).
    In(DeviceView<'a, u8>),
    /// A written device pointer (`T*`).
    Out(DeviceViewMut<'a, u8>),
    /// `const ElemInfo`.
    Elem(ElemInfo),
    /// `const ReduceInfo`.
    Reduce(ReduceInfo),
    /// `const IndexInfo`.
    Index(IndexInfo),
    /// `unsigned long long`.
    U64(u64),
    /// `double`.
    F64(f64),
}

/// Launches `kernel` on the device's stream.
///
/// # Safety
/// `args` must match the kernel's parameter list in number, order and type,
/// and the sizes in them must keep every access of the kernel inside the
/// views passed (the ops modules derive both from the same layouts).
pub(crate) unsafe fn launch(
    device: &HipDevice,
    kernel: Kernel,
    cfg: LaunchConfig,
    args: &[Arg<'_>],
) -> Result<()> {
    let function = device.function(kernel)?;
    let stream = device.stream();
    let mut builder = stream.launch_builder(&function);
    for arg in args {
        match arg {
            Arg::In(v) => builder.arg(v),
            Arg::Out(v) => builder.arg(v),
            Arg::Elem(v) => builder.arg(v),
            Arg::Reduce(v) => builder.arg(v),
            Arg::Index(v) => builder.arg(v),
            Arg::U64(v) => builder.arg(v),
            Arg::F64(v) => builder.arg(v),
        };
    }
    // SAFETY: the caller guarantees that the arguments match the kernel and
    // keep its accesses inside the buffers.
    unsafe { builder.launch(cfg) }.map_err(hip)
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

    #[test]
    fn contiguous_work_counts_packs() {
        let info = ElemInfo::new("t", &[1001], &[&[1]]).unwrap();
        assert_eq!(elementwise_work(&info, 4), 251);
        assert_eq!(elementwise_work(&info, 1), 63);
        assert_eq!(elementwise_work(&info, 8), 501);
        let strided = ElemInfo::new("t", &[4, 3], &[&[1, 4]]).unwrap();
        assert_eq!(elementwise_work(&strided, 4), 12);
        // A row broadcast moves in packs along the rows.
        let bcast = ElemInfo::new("t", &[8, 16], &[&[16, 1], &[0, 1]])
            .unwrap()
            .with_inner_packs(2, 4);
        assert_eq!(elementwise_work(&bcast, 4), 32);
        // 2^26 f32: 2^24 packs, UNROLL per thread; bf16: 2^23 packs of 8,
        // half as many per thread; strided: one per thread.
        let big = ElemInfo::new("t", &[1 << 26], &[&[1]]).unwrap();
        let per_block = ELEM_BLOCK * UNROLL;
        assert_eq!(elementwise(&big, 4).grid_dim.0, (1 << 24) / per_block);
        assert_eq!(elementwise(&big, 2).grid_dim.0, (1 << 23) / (per_block / 2));
        let t = ElemInfo::new("t", &[1 << 13, 1 << 13], &[&[1, 1 << 13]]).unwrap();
        assert_eq!(elementwise(&t, 4).grid_dim.0, (1 << 26) / ELEM_BLOCK);
    }

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

    #[test]
    fn transposes_are_tiled() {
        let info = ElemInfo::new("t", &[8192, 8192], &[&[1, 8192]]).unwrap();
        assert_eq!(info.transposed_dim(), Some(0));
        assert_eq!(transpose(&info, 0, 4).grid_dim.0, 256 * 256);
        assert_eq!(transpose(&info, 0, 2).grid_dim.0, 128 * 128);
        // (4, 33, 65) with dims 1 and 2 swapped: 4 planes of 2 x 3 tiles.
        let info = ElemInfo::new("t", &[4, 65, 33], &[&[2145, 1, 65]]).unwrap();
        assert_eq!(info.transposed_dim(), Some(1));
        assert_eq!(transpose(&info, 1, 4).grid_dim.0, 4 * 3 * 2);
    }

    #[test]
    fn column_walks_spread_over_the_device() {
        let c = column_walks(4096, 32, 128);
        assert_eq!((c.grid_dim.0, c.block_dim.0), (128, 32));
        let c = column_walks(4096, 64, 128);
        assert_eq!((c.grid_dim.0, c.block_dim.0), (64, 64));
        let c = column_walks(1 << 20, 32, 128);
        assert_eq!((c.grid_dim.0, c.block_dim.0), (4096, ELEM_BLOCK));
        assert_eq!(column_walks(0, 32, 128).grid_dim.0, 1);
    }

    /// Reads `#define NAME value` from `kernels/indexing.hip`.
    fn indexing_define(name: &str) -> Option<&'static str> {
        crate::kernels::Source::Indexing
            .code()
            .lines()
            .find_map(|line| {
                line.strip_prefix("#define ")?
                    .strip_prefix(name)?
                    .strip_prefix(' ')
            })
            .map(str::trim)
    }

    #[test]
    fn tile_constants_match_the_kernels() {
        let rows = TILE_ROWS.to_string();
        let row_bytes = TILE_ROW_BYTES.to_string();
        assert_eq!(indexing_define("CH_TILE_ROWS"), Some(rows.as_str()));
        assert_eq!(
            indexing_define("CH_TILE_ROW_BYTES"),
            Some(row_bytes.as_str())
        );
    }

    fn updates(left: u64, right: u64, dst_dim: u64, ids: u64, elem_bytes: usize) -> Updates {
        Updates {
            left,
            right,
            dst_dim,
            ids,
            elem_bytes,
        }
    }

    #[test]
    fn tiles_when_the_destination_needs_few_ranges() {
        // The bench case: 8192 updates of 4096 columns into 1024 rows.
        let c = update_tiles(updates(1, 4096, 1024, 8192, 4), 32).unwrap();
        assert_eq!((c.grid_dim.0, c.block_dim.0), (512, 32));
        let c = update_tiles(updates(1, 4096, 1024, 8192, 8), 64).unwrap();
        assert_eq!((c.grid_dim.0, c.block_dim.0), (1024, 64));
        // Three ranges of 1024 rows per tile of 32 one-byte columns, twice.
        let c = update_tiles(updates(2, 33, 2500, 400, 1), 32).unwrap();
        assert_eq!(c.grid_dim.0, 2 * 2 * 3);
        // Too many ranges, too few columns, too few updates.
        assert!(update_tiles(updates(1, 4096, 5000, 8192, 4), 32).is_none());
        assert!(update_tiles(updates(1000, 3, 64, 64, 4), 32).is_none());
        assert!(update_tiles(updates(1, 4096, 1024, 100, 4), 32).is_none());
        assert!(matches!(
            update_form(updates(1, 4096, 5000, 8192, 4), false, 32, 132),
            UpdateForm::Columns(_)
        ));
    }

    #[test]
    fn index_add_takes_tiles_when_they_fill_the_device() {
        let form = update_form(updates(1, 4096, 1024, 8192, 4), true, 32, 132);
        assert!(matches!(form, UpdateForm::Tiles(c) if c.grid_dim.0 == 512));
        // 8 tiles cannot fill 132 units: a block per destination row, for
        // index_add; scatter has no per-row form.
        let few_tiles = updates(1, 64, 16, 100_000, 4);
        assert!(matches!(
            update_form(few_tiles, true, 32, 132),
            UpdateForm::Rows(_)
        ));
        assert!(matches!(
            update_form(few_tiles, false, 32, 132),
            UpdateForm::Tiles(_)
        ));
        let form = update_form(updates(1 << 20, 1, 64, 64, 4), true, 32, 132);
        assert!(matches!(form, UpdateForm::Columns(_)));
    }

    #[test]
    fn index_add_rows_when_columns_are_few() {
        // 8192 rows of 4096 into 1024: few columns, cheap scans.
        let c = index_add_rows(updates(1, 4096, 1024, 8192, 4), 32, 132).unwrap();
        assert_eq!(c.block_dim.0, ELEM_BLOCK);
        assert_eq!(c.grid_dim.0, 1024 * 4);
        // Along the last dim of a tall matrix: many columns.
        assert!(index_add_rows(updates(1 << 20, 1, 64, 64, 4), 32, 132).is_none());
        // A short row: one wave of threads.
        let c = index_add_rows(updates(1, 64, 16, 100_000, 4), 64, 132).unwrap();
        assert_eq!(c.block_dim.0, 64);
    }
}
