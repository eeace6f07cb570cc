//! Every constant the host shares with the kernel sources, in one place.
//!
//! Each one mirrors a `#define` of a source in `candle-hip-kernels`; the
//! test below reads every such `#define` and fails when a side changes
//! alone (a silent mismatch would corrupt results, not fail to compile).

use candle_core::DType;

/// `CH_MAX_DIMS` (common.h): dimensions a strided kernel takes after merging.
pub(crate) const MAX_DIMS: usize = 8;
/// `CH_REDUCE_MAX_DIMS` (reduce.hip): kept and reduced dimensions (each,
/// after merging) a reduction kernel takes; a source with more is reduced
/// from a contiguous copy.
pub(crate) const REDUCE_MAX_DIMS: usize = 4;
/// `CH_MAX_OPERANDS` (common.h): strided inputs of an element-wise kernel.
pub(crate) const MAX_OPERANDS: usize = 3;
/// `CH_ELEM_BLOCK` (common.h): threads per block of element-wise and
/// indexing kernels.
pub(crate) const ELEM_BLOCK: u32 = 256;
/// `CH_REDUCE_MAX_BLOCK` (common.h): the largest reduction block.
pub(crate) const REDUCE_MAX_BLOCK: u32 = 1024;
/// `CH_VEC_BYTES` (common.h): width of the vectorised loads and stores.
pub(crate) const VEC_BYTES: usize = 16;
/// `CH_UNROLL` (common.h): work items each thread of an element-wise loop
/// handles per step.
pub(crate) const UNROLL: u32 = 4;
/// `CH_REDUCE_STATE_BYTES` (common.h): bytes reserved per partial
/// reduction state.
pub(crate) const REDUCE_STATE_BYTES: usize = 16;
/// `CH_ROW_CACHE_BYTES` (common.h): accumulator bytes a row kernel's
/// thread keeps in registers (f32 accumulators for f16/bf16/f32, f64 for f64).
pub(crate) const ROW_CACHE_BYTES: usize = 64;
/// `CH_OWNER_COLS` (indexing.hip): columns of a destination row each
/// thread of `index_add_rows_*` keeps.
pub(crate) const OWNER_COLS: u64 = 4;
/// `CH_TILE_ROW_BYTES` (indexing.hip): bytes of one destination tile row of
/// the `*_tiles` kernels (the tile's columns).
pub(crate) const TILE_ROW_BYTES: u64 = 32;
/// `CH_TILE_ROWS` (indexing.hip): destination rows of one tile of the
/// `*_tiles` kernels.
pub(crate) const TILE_ROWS: u64 = 1024;
/// `CH_TILE_ID_PAST` (cast.hip): the u32 index `tile_ids_*` writes for an
/// index no tile form's destination reaches (negative or too large).
pub(crate) const TILE_ID_PAST: u64 = 0xffff_fffe;
/// `CH_SORT_RUN` (argsort.hip): positions of a row each thread of the
/// in-shared-memory sort holds in registers.
pub(crate) const SORT_RUN: usize = 4;
/// `CH_RAND_PER_BLOCK` (random.hip): values one Philox block yields from
/// 24-bit uniforms (f16, bf16, f32).
pub(crate) const RAND_PER_BLOCK: u64 = 4;
/// `CH_RAND_PER_BLOCK_F64` (random.hip): values one Philox block yields
/// from 53-bit uniforms (f64).
pub(crate) const RAND_PER_BLOCK_F64: u64 = 2;

/// `CH_DTYPE_<dtype>` (common.h): the code of `dtype` in kernels that take
/// a dtype as an argument, or `None` for candle's dtypes without kernels.
pub(crate) fn dtype_code(dtype: DType) -> Option<u32> {
    let code = match dtype {
        DType::U8 => 1,
        DType::U32 => 2,
        DType::I16 => 3,
        DType::I32 => 4,
        DType::I64 => 5,
        DType::F16 => 6,
        DType::BF16 => 7,
        DType::F32 => 8,
        DType::F64 => 9,
        DType::F8E4M3 => 10,
        _ => return None,
    };
    Some(code)
}

#[cfg(test)]
mod tests {
    use candle_hip_kernels::{ARGSORT, CAST, COMMON_HEADER, INDEXING, RANDOM, REDUCE, Source};

    use super::*;
    use crate::kernel::info::ReduceMode;

    #[test]
    fn every_mirrored_constant_matches_its_source() {
        let mirrors: &[(Source, &str, u64)] = &[
            (COMMON_HEADER, "CH_MAX_DIMS", MAX_DIMS as u64),
            (COMMON_HEADER, "CH_MAX_OPERANDS", MAX_OPERANDS as u64),
            (COMMON_HEADER, "CH_ELEM_BLOCK", ELEM_BLOCK.into()),
            (
                COMMON_HEADER,
                "CH_REDUCE_MAX_BLOCK",
                REDUCE_MAX_BLOCK.into(),
            ),
            (COMMON_HEADER, "CH_VEC_BYTES", VEC_BYTES as u64),
            (COMMON_HEADER, "CH_UNROLL", UNROLL.into()),
            (
                COMMON_HEADER,
                "CH_REDUCE_STATE_BYTES",
                REDUCE_STATE_BYTES as u64,
            ),
            (COMMON_HEADER, "CH_ROW_CACHE_BYTES", ROW_CACHE_BYTES as u64),
            (INDEXING, "CH_OWNER_COLS", OWNER_COLS),
            (INDEXING, "CH_TILE_ROW_BYTES", TILE_ROW_BYTES),
            (INDEXING, "CH_TILE_ROWS", TILE_ROWS),
            (CAST, "CH_TILE_ID_PAST", TILE_ID_PAST),
            (ARGSORT, "CH_SORT_RUN", SORT_RUN as u64),
            (RANDOM, "CH_RAND_PER_BLOCK", RAND_PER_BLOCK),
            (RANDOM, "CH_RAND_PER_BLOCK_F64", RAND_PER_BLOCK_F64),
            (REDUCE, "CH_REDUCE_MAX_DIMS", REDUCE_MAX_DIMS as u64),
            (REDUCE, "CH_REDUCE_ROWS", ReduceMode::Rows as u64),
            (REDUCE, "CH_REDUCE_COLS", ReduceMode::Cols as u64),
            (
                REDUCE,
                "CH_REDUCE_FINISH_BLOCK",
                ReduceMode::FinishBlock as u64,
            ),
            (
                REDUCE,
                "CH_REDUCE_FINISH_THREAD",
                ReduceMode::FinishThread as u64,
            ),
            (
                REDUCE,
                "CH_REDUCE_COLS_PACKED",
                ReduceMode::ColsPacked as u64,
            ),
        ];
        let dtypes = crate::dtype::NUMERIC.map(|d| {
            let code = dtype_code(d).expect("every dtype with arithmetic has a code");
            (
                COMMON_HEADER,
                format!("CH_DTYPE_{}", d.as_str()),
                u64::from(code),
            )
        });
        let mirrors = mirrors
            .iter()
            .map(|&(source, name, value)| (source, name.to_string(), value))
            .chain(dtypes);
        for (source, name, value) in mirrors {
            let text = value.to_string();
            assert_eq!(
                source.define(&name),
                Some(text.as_str()),
                "{name} in {source:?}"
            );
        }
    }
}
