// Matrix-vector products for decoding one token: y = x · Wᵀ for one row x,
// with W stored (n, k) row-major, as candle-nn's Linear passes its weight.
// For f16, bf16, f32 and f64:
//
//   gemv_<dtype>(const T* x, const T* w, T* y, ch_u32 n, ch_u32 k,
//                ch_u64 w_stride)
//     y[j] = sum over i < k of x[i] * w[j * w_stride + i], for j < n
//
// Each wave computes one output y[j]: its lanes stream W's row j in 16-byte
// packs (CH_GEMV_UNROLL of them in flight per lane), multiply each with the
// same pack of x (which every wave reads, so it stays in cache), and the wave
// sums its lanes. Sums run in f32 (f64 for f64), each output is rounded once.
//
// Launch: blocks of whole waves, one output per wave (gridDim.x = ceil(n /
// waves per block)). The host guarantees: k a multiple of the pack size
// (16 bytes of T), x, w and w_stride aligned to 16 bytes.

#include "common.h"

#define CH_GEMV_UNROLL 4

template <typename T>
__device__ __forceinline__ void gemv(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                     ch_u32 n, ch_u32 k, ch_u64 w_stride) {
  typedef typename Num<T>::acc A;
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  const int U = CH_GEMV_UNROLL;
  typedef Pack<T, V> P;
  const ch_u32 lane = threadIdx.x % CANDLE_HIP_WAVE;
  const ch_u64 j = (ch_u64)blockIdx.x * (blockDim.x / CANDLE_HIP_WAVE) + threadIdx.x / CANDLE_HIP_WAVE;
  // The whole wave leaves together: the reduction below stays converged.
  if (j >= n) return;
  const P* wrow = reinterpret_cast<const P*>(w + j * w_stride);
  const P* xv = reinterpret_cast<const P*>(x);
  const ch_u32 packs = k / V;
  A acc = (A)0;
  auto fma_pack = [&](const P& wp, ch_u32 p) {
    const P xp = xv[p];
#pragma unroll
    for (int v = 0; v < V; ++v) acc += Num<T>::to_acc(wp.v[v]) * Num<T>::to_acc(xp.v[v]);
  };
  const ch_u32 step = CANDLE_HIP_WAVE * U;
  ch_u32 p = lane;
  for (; p + (U - 1) * CANDLE_HIP_WAVE < packs; p += step) {
    P wp[U];
#pragma unroll
    for (int u = 0; u < U; ++u) wp[u] = wrow[p + u * CANDLE_HIP_WAVE];
#pragma unroll
    for (int u = 0; u < U; ++u) fma_pack(wp[u], p + u * CANDLE_HIP_WAVE);
  }
  for (; p < packs; p += CANDLE_HIP_WAVE) fma_pack(wrow[p], p);

  typename AccSum<A>::State s;
  s.v = acc;
  s = wave_reduce<AccSum<A> >(s);
  if (lane == 0) y[j] = Num<T>::from_acc(s.v);
}

#define GEMV(NAME, OP, TYPE)                                                                       \
  extern "C" __global__ void NAME##_##TYPE(const ch_##TYPE* x, const ch_##TYPE* w, ch_##TYPE* y,   \
                                           ch_u32 n, ch_u32 k, ch_u64 w_stride) {                  \
    gemv<ch_##TYPE>(x, w, y, n, k, w_stride);                                                      \
  }

CH_FLOATS(GEMV, gemv, unused)
