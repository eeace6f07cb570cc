// Matrix-vector products for decoding one token: y = x · Wᵀ for one row x,
// with W stored (n, k) row-major, as candle-nn's Linear passes its weight.
// For f16, bf16, f32 and f64:
//
//   gemv_<dtype>(const T* x, const T* w, T* y, ch_u32 n, ch_u32 k,
//                ch_u64 w_stride)
//   gemv_split_<dtype>(const T* x, const T* w, T* y, ch_u32 n, ch_u32 k,
//                      ch_u64 w_stride, ch_u32 split)
//     y[j] = sum over i < k of x[i] * w[j * w_stride + i], for j < n
//
// gemv_*: one wave per output. gemv_split_*: `split` consecutive waves per
// output (S: 2, 4, 8 or 16), for few outputs of long rows, which leave most
// of a device's waves idle at one wave each.
//
// The S * wave lanes of an output's waves stream W's row j in 16-byte packs,
// lane g of the group (g = wave of the group * wave size + lane) taking
// packs g, g + S * wave, g + 2 * S * wave, ... with CH_GEMV_UNROLL of them
// in flight: each load instruction of a wave reads wave-size consecutive
// packs, and the group sweeps the row front to back together. Each pack is
// multiplied with the same pack of x (which every wave reads, so it stays in
// cache), and each wave sums its lanes. With S > 1 the first wave of the
// group then adds the S wave sums in wave order through shared memory, so
// the result does not change from run to run (it may differ in rounding
// between values of S). Sums run in f32 (f64 for f64), each output is
// rounded once. The host picks S (candle-hip/src/ops/gemv.rs).
//
// Launch: blocks of whole waves, a multiple of S waves per block (S = 1 for
// gemv_*) and at most CH_REDUCE_MAX_BLOCK threads, one output per S waves
// (gridDim.x = ceil(n / (waves per block / S))). The host guarantees: k a
// multiple of the pack size (16 bytes of T), x, w and w_stride aligned to 16
// bytes, and for gemv_split_* S one of 2, 4, 8, 16.

#include "common.h"

#define CH_GEMV_UNROLL 4
#define CH_GEMV_MAX_SPLIT 16

template <typename T, int S>
__device__ __forceinline__ void gemv(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                     ch_u32 n, ch_u32 k, ch_u64 w_stride) {
  typedef typename Num<T>::acc A;
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  const int U = CH_GEMV_UNROLL;
  typedef Pack<T, V> P;
  // One partial sum per wave of the block (S > 1 only).
  __shared__ A partial[CH_MAX_WAVES];
  const ch_u32 lane = threadIdx.x % CANDLE_HIP_WAVE;
  const ch_u32 wave = threadIdx.x / CANDLE_HIP_WAVE;
  const ch_u32 part = wave % S;  // this wave's place in its group
  const ch_u64 j = (ch_u64)blockIdx.x * (blockDim.x / CANDLE_HIP_WAVE / S) + wave / S;
  // One wave per output: the whole wave leaves together, the reduction
  // below stays converged. Several: groups past the last output (in the
  // last block) load nothing but stay for the block's barrier; whole groups
  // are live or not, so every reduction stays converged.
  if (S == 1 && j >= n) return;
  const bool live = j < n;
  const P* wrow = reinterpret_cast<const P*>(w + (live ? j : 0) * w_stride);
  const P* xv = reinterpret_cast<const P*>(x);
  const ch_u32 packs = live ? k / V : 0;
  A acc = (A)0;
  auto fma_pack = [&](const P& wp, ch_u32 p) {
    const P xp = xv[p];
#pragma unroll
    for (int v = 0; v < V; ++v) acc += Num<T>::to_acc(wp.v[v]) * Num<T>::to_acc(xp.v[v]);
  };
  // packs < 2^31 (two or more elements per pack) and U * stride <= 2^12:
  // p never wraps in 32 bits.
  const ch_u32 stride = S * CANDLE_HIP_WAVE;
  ch_u32 p = part * CANDLE_HIP_WAVE + lane;
  for (; p + (U - 1) * stride < packs; p += U * stride) {
    P wp[U];
#pragma unroll
    for (int u = 0; u < U; ++u) wp[u] = wrow[p + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) fma_pack(wp[u], p + u * stride);
  }
  // Fewer than U packs are left to this lane.
  if (S == 1) {
    for (; p < packs; p += stride) fma_pack(wrow[p], p);
  } else {
    // Split rows leave each lane only a few steps: the last packs are all
    // loaded before any is used.
    P wp[U - 1];
#pragma unroll
    for (int u = 0; u < U - 1; ++u)
      if (p + u * stride < packs) wp[u] = wrow[p + u * stride];
#pragma unroll
    for (int u = 0; u < U - 1; ++u)
      if (p + u * stride < packs) fma_pack(wp[u], p + u * stride);
  }

  typename AccSum<A>::State s;
  s.v = acc;
  s = wave_reduce<AccSum<A> >(s);
  if (S == 1) {
    if (lane == 0) y[j] = Num<T>::from_acc(s.v);
    return;
  }
  // Every thread of the block reaches the barrier (S is the kernel's).
  if (lane == 0) partial[wave] = s.v;
  __syncthreads();
  if (live && part == 0 && lane == 0) {
    A sum = partial[wave];
#pragma unroll
    for (int q = 1; q < S; ++q) sum += partial[wave + q];
    y[j] = Num<T>::from_acc(sum);
  }
}

#define GEMV(NAME, OP, TYPE)                                                                       \
  extern "C" __global__ void NAME##_##TYPE(const ch_##TYPE* x, const ch_##TYPE* w, ch_##TYPE* y,   \
                                           ch_u32 n, ch_u32 k, ch_u64 w_stride) {                  \
    gemv<ch_##TYPE, 1>(x, w, y, n, k, w_stride);                                                   \
  }

// `split` is the same for the whole launch, so every block takes one branch
// (CH_GEMV_MAX_SPLIT is its last case).
#define GEMV_SPLIT(NAME, OP, TYPE)                                                                 \
  extern "C" __global__ void NAME##_##TYPE(const ch_##TYPE* x, const ch_##TYPE* w, ch_##TYPE* y,   \
                                           ch_u32 n, ch_u32 k, ch_u64 w_stride, ch_u32 split) {    \
    switch (split) {                                                                               \
      case 2:                                                                                      \
        gemv<ch_##TYPE, 2>(x, w, y, n, k, w_stride);                                               \
        break;                                                                                     \
      case 4:                                                                                      \
        gemv<ch_##TYPE, 4>(x, w, y, n, k, w_stride);                                               \
        break;                                                                                     \
      case 8:                                                                                      \
        gemv<ch_##TYPE, 8>(x, w, y, n, k, w_stride);                                               \
        break;                                                                                     \
      case 16:                                                                                     \
        gemv<ch_##TYPE, 16>(x, w, y, n, k, w_stride);                                              \
        break;                                                                                     \
      default: /* not a split the host passes: nothing is read or written */                      \
        break;                                                                                     \
    }                                                                                              \
  }

CH_FLOATS(GEMV, gemv, unused)
CH_FLOATS(GEMV_SPLIT, gemv_split, unused)
