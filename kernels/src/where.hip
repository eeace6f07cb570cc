// where_cond: out[i] = pred[i] != 0 ? on_true[i] : on_false[i], with
// broadcasting and arbitrary strides: where_<pred dtype>_<value dtype>, e.g.
// where_u8_u32. Predicates are u8, u32, i16, i32 or i64; values one dtype per
// element width (CH_CARRIERS), which the host runs for every dtype of that
// width.
//
// Signature: (const ElemInfo info, const P* pred, const T* on_true,
//             const T* on_false, T* out); operands 0, 1, 2 in that order.

#include "common.h"

struct WhereFn {
  template <typename P, typename T>
  __device__ __forceinline__ T operator()(P p, T t, T f) const { return p != (P)0 ? t : f; }
};

#define CH_WHERE_KERNEL(NAME, P, TY)                                                          \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                 \
      NAME##_##P##_##TY(const ElemInfo info, const ch_##P* pred, const ch_##TY* on_true,      \
                        const ch_##TY* on_false, ch_##TY* out) {                              \
    map_elems(info, out, WhereFn(), In<ch_##P, 0>{pred}, In<ch_##TY, 1>{on_true},            \
              In<ch_##TY, 2>{on_false});                                                      \
  }

CH_CARRIERS(CH_WHERE_KERNEL, where, u8)
CH_CARRIERS(CH_WHERE_KERNEL, where, u32)
CH_CARRIERS(CH_WHERE_KERNEL, where, i16)
CH_CARRIERS(CH_WHERE_KERNEL, where, i32)
CH_CARRIERS(CH_WHERE_KERNEL, where, i64)
