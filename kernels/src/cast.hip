// Dtype conversions between every pair of u8, u32, i64, f16, bf16, f32, f64:
// cast_<src>_<dst>, e.g. cast_f32_bf16.
//
// Signature: (const ElemInfo info, const Src* in, Dst* out).
// Semantics are Rust's `as` (see Cast in common.h): float -> int saturates
// (NaN -> 0), int -> int wraps, everything else rounds to nearest even.

#include "common.h"

template <typename D>
struct CastFn {
  template <typename S>
  __device__ __forceinline__ D operator()(S v) const { return cast_to<D>(v); }
};

#define CH_CAST_KERNEL(S, D)                                                             \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                            \
      cast_##S##_##D(const ElemInfo info, const ch_##S* in, ch_##D* out) {               \
    map_elems(info, out, CastFn<ch_##D>(), In<ch_##S, 0>{in});                           \
  }

#define CH_CAST_FROM(S)                                                                  \
  CH_CAST_KERNEL(S, u8)                                                                  \
  CH_CAST_KERNEL(S, u32)                                                                 \
  CH_CAST_KERNEL(S, i64)                                                                 \
  CH_CAST_KERNEL(S, f16)                                                                 \
  CH_CAST_KERNEL(S, bf16)                                                                \
  CH_CAST_KERNEL(S, f32)                                                                 \
  CH_CAST_KERNEL(S, f64)

CH_CAST_FROM(u8)
CH_CAST_FROM(u32)
CH_CAST_FROM(i64)
CH_CAST_FROM(f16)
CH_CAST_FROM(bf16)
CH_CAST_FROM(f32)
CH_CAST_FROM(f64)
