// Dtype conversions between every pair of u8, u32, i16, i32, i64, f16, bf16,
// f32, f64, f8e4m3: cast_<src>_<dst>, e.g. cast_f32_bf16; widen_ids_<I>
// (u8, i16, i32): index tensors as i64 for the indexing kernels; and
// tile_ids_<I> (u8, i16, i32, i64): index tensors as u32 for the tile forms
// of scatter, scatter_add and index_add.
//
// Signature: (const ElemInfo info, const Src* in, Dst* out), `in` contiguous
// (info.rank == 0: the host copies a strided view to a contiguous one first,
// see map_contiguous in common.h).
// Semantics are Rust's `as` (see Cast in common.h): float -> int saturates
// (NaN -> 0), int -> int wraps, everything else rounds to nearest even;
// f8e4m3 rounds and saturates as the float8 crate does.

#include "common.h"

template <typename D>
struct CastFn {
  template <typename S>
  __device__ __forceinline__ D operator()(S v) const { return cast_to<D>(v); }
};

#define CH_CAST_KERNEL(NAME, S, D)                                           \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                \
      NAME##_##S##_##D(const ElemInfo info, const ch_##S* in, ch_##D* out) { \
    map_contiguous(info, out, CastFn<ch_##D>(), In<ch_##S, 0>{in});          \
  }

#define CH_CAST_FROM(S) CH_NUMERIC(CH_CAST_KERNEL, cast, S)

CH_CAST_FROM(u8)
CH_CAST_FROM(u32)
CH_CAST_FROM(i16)
CH_CAST_FROM(i32)
CH_CAST_FROM(i64)
CH_CAST_FROM(f16)
CH_CAST_FROM(bf16)
CH_CAST_FROM(f32)
CH_CAST_FROM(f64)
CH_CAST_FROM(f8e4m3)

// Index values widened to i64 with candle's "no index" marker kept: the
// maximum of the narrow type becomes i64's maximum (every other value,
// negative ones included, converts as `as` does).
template <typename I>
struct WidenIdFn {
  __device__ __forceinline__ ch_i64 operator()(I v) const {
    return v == Num<I>::max_value ? Num<ch_i64>::max_value : (ch_i64)v;
  }
};

#define CH_WIDEN_IDS_KERNEL(NAME, OP, TY)                                \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)            \
      NAME##_##TY(const ElemInfo info, const ch_##TY* in, ch_i64* out) { \
    map_contiguous(info, out, OP<ch_##TY>(), In<ch_##TY, 0>{in});        \
  }

CH_EACH(CH_WIDEN_IDS_KERNEL, widen_ids, WidenIdFn, u8)
CH_NARROW_INTS(CH_WIDEN_IDS_KERNEL, widen_ids, WidenIdFn)

// An index that no tile form's destination reaches: tile forms serve
// destination dimensions of at most a few thousand rows (the host's
// plan::MAX_TILE_RANGES ranges of CH_TILE_ROWS), and u32's maximum is the
// "no index" marker.
#define CH_TILE_ID_PAST 4294967294

// Index values as u32 for the tile forms, which read no other index dtype
// (one dtype halves the code of their unrolled walks): the marker (the
// type's maximum) becomes u32's, a value outside [0, CH_TILE_ID_PAST)
// becomes CH_TILE_ID_PAST, so that the kernel still reports it as past the
// destination.
template <typename I>
struct TileIdFn {
  __device__ __forceinline__ ch_u32 operator()(I v) const {
    if (v == Num<I>::max_value) return Num<ch_u32>::max_value;
    const ch_i64 w = (ch_i64)v;
    return w >= 0 && w < (ch_i64)CH_TILE_ID_PAST ? (ch_u32)w : CH_TILE_ID_PAST;
  }
};

#define CH_TILE_IDS_KERNEL(NAME, OP, TY)                                 \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)            \
      NAME##_##TY(const ElemInfo info, const ch_##TY* in, ch_u32* out) { \
    map_contiguous(info, out, OP<ch_##TY>(), In<ch_##TY, 0>{in});        \
  }

CH_EACH(CH_TILE_IDS_KERNEL, tile_ids, TileIdFn, u8)
CH_NARROW_INTS(CH_TILE_IDS_KERNEL, tile_ids, TileIdFn)
CH_EACH(CH_TILE_IDS_KERNEL, tile_ids, TileIdFn, i64)
