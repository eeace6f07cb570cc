//! How scatter, scatter_add and index_add apply their updates (column
//! walks, a block per destination row, or shared-memory destination tiles)
//! and the launch shape of each form.

use hip_safe::LaunchConfig;

use crate::kernel::catalogue::{self as cat, Family};
use crate::kernel::grid::{THREADS_PER_CU, linear};
use crate::kernel::header::{ELEM_BLOCK, OWNER_COLS, TILE_ID_PAST, TILE_ROW_BYTES, TILE_ROWS};
use crate::kernel::info::IndexInfo;

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
    linear(columns.div_ceil(threads), threads as u32)
}

/// The sizes of a scatter, scatter_add or index_add: the kernel's `info`
/// (`ids_dim` updates per column of `left * right` columns into `dst_dim`
/// destination rows) and the bytes of one value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Updates {
    pub(crate) info: IndexInfo,
    pub(crate) elem_bytes: usize,
}

/// The kernel families of one update op, a family per form it has.
pub(crate) struct UpdateFamilies {
    /// `<family>_*`: a walk per column.
    pub(crate) columns: &'static Family,
    /// `index_add_rows_*`: a block per destination row (index_add only).
    pub(crate) rows: Option<&'static Family>,
    /// `<family>_tiles_*`: shared-memory destination tiles.
    pub(crate) tiles: &'static Family,
}

/// scatter's kernels (it has no per-row form).
pub(crate) const SCATTER: UpdateFamilies = UpdateFamilies {
    columns: &cat::SCATTER,
    rows: None,
    tiles: &cat::SCATTER_TILES,
};

/// scatter_add's kernels.
pub(crate) const SCATTER_ADD: UpdateFamilies = UpdateFamilies {
    columns: &cat::SCATTER_ADD,
    rows: None,
    tiles: &cat::SCATTER_ADD_TILES,
};

/// index_add's kernels.
pub(crate) const INDEX_ADD: UpdateFamilies = UpdateFamilies {
    columns: &cat::INDEX_ADD,
    rows: Some(&cat::INDEX_ADD_ROWS),
    tiles: &cat::INDEX_ADD_TILES,
};

impl UpdateFamilies {
    /// The family and launch shape that apply `u`: tiles where they fit and
    /// either fill the device (a block per compute unit at least) or the
    /// per-row form does not apply; then rows (index_add only, see
    /// [`index_add_rows`]); otherwise a walk per column.
    pub(crate) fn choose(
        &self,
        u: Updates,
        wave_size: u32,
        compute_units: u32,
    ) -> (&'static Family, LaunchConfig) {
        let tiles = update_tiles(u, wave_size);
        let rows = self
            .rows
            .and_then(|family| Some((family, index_add_rows(u, wave_size, compute_units)?)));
        match (tiles, rows) {
            (Some(t), r) if r.is_none() || t.grid_dim.0 >= compute_units => (self.tiles, t),
            (_, Some(r)) => r,
            _ => {
                let columns = u.info.left * u.info.right;
                (
                    self.columns,
                    column_walks(columns, wave_size, compute_units),
                )
            }
        }
    }
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
    let IndexInfo {
        left,
        right,
        dst_dim,
        ids_dim: ids,
        ..
    } = u.info;
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
        .then(|| linear(blocks, threads as u32))
}

/// Most row ranges of the tile form: every range reads all indices and
/// source values again.
const MAX_TILE_RANGES: u64 = 4;

// The tile forms read u32 indices (`tile_ids_*` converts the others): the
// value standing for a negative or too large index must lie past every
// destination they serve.
const _: () = assert!(MAX_TILE_RANGES * TILE_ROWS < TILE_ID_PAST);

/// The tile form loads and stores whole tiles: it takes at least one update
/// per this many destination rows.
const TILE_ROWS_PER_UPDATE: u64 = 8;

/// The launch shape of the tile form (`*_tiles_*` in
/// `kernels/indexing.hip`): a one-wave block per (left, tile of columns,
/// range of `TILE_ROWS` rows). `None` where another form does better: more
/// than `MAX_TILE_RANGES` ranges, fewer columns than half a tile row, or
/// too few updates to pay for moving whole tiles.
pub(crate) fn update_tiles(u: Updates, wave_size: u32) -> Option<LaunchConfig> {
    let info = &u.info;
    let cols = TILE_ROW_BYTES / (u.elem_bytes as u64).clamp(1, TILE_ROW_BYTES);
    let ranges = info.dst_dim.div_ceil(TILE_ROWS);
    let fits = ranges <= MAX_TILE_RANGES
        && info.right >= cols.div_ceil(2)
        && info.dst_dim <= info.ids_dim.saturating_mul(TILE_ROWS_PER_UPDATE);
    fits.then(|| linear(info.left * info.right.div_ceil(cols) * ranges, wave_size))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn updates(left: u64, right: u64, dst_dim: u64, ids: u64, elem_bytes: usize) -> Updates {
        let info = IndexInfo {
            left,
            right,
            dst_dim,
            ids_dim: ids,
            ..IndexInfo::default()
        };
        Updates { info, elem_bytes }
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
        let (family, _) = SCATTER.choose(updates(1, 4096, 5000, 8192, 4), 32, 132);
        assert_eq!(family.name, "scatter");
    }

    #[test]
    fn index_add_takes_tiles_when_they_fill_the_device() {
        let (family, c) = INDEX_ADD.choose(updates(1, 4096, 1024, 8192, 4), 32, 132);
        assert_eq!((family.name, c.grid_dim.0), ("index_add_tiles", 512));
        // 8 tiles cannot fill 132 units: a block per destination row, for
        // index_add; scatter has no per-row form.
        let few_tiles = updates(1, 64, 16, 100_000, 4);
        assert_eq!(
            INDEX_ADD.choose(few_tiles, 32, 132).0.name,
            "index_add_rows"
        );
        assert_eq!(
            SCATTER_ADD.choose(few_tiles, 32, 132).0.name,
            "scatter_add_tiles"
        );
        let (family, _) = INDEX_ADD.choose(updates(1 << 20, 1, 64, 64, 4), 32, 132);
        assert_eq!(family.name, "index_add");
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
