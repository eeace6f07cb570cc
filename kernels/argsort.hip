// Argsort along the last dimension of a contiguous tensor
// (Tensor::arg_sort_last_dim), for every dtype: a bitonic sort of the row's
// indices, padded to a power of two. Output u32 indices.
//
// The order is total, so the result is unique and equals a stable sort:
// values ascending (argsort_asc_*) or descending (argsort_desc_*), equal
// values by increasing index, NaN after every number (in both directions),
// padding after everything.
//
// Two launch shapes, chosen by the host from the padded length P:
// - argsort_{asc,desc}_<dtype>(const T* src, ch_u32* dst, ch_u64 rows,
//   ch_u32 cols, ch_u32 padded): one block per row (grid-stride), the whole
//   network in P * 4 bytes of dynamic shared memory, any blockDim.x up to
//   CH_REDUCE_MAX_BLOCK;
// - rows too long for shared memory: one
//   argsort_step_{asc,desc}_<dtype>(const T* src, ch_u32* idx, ch_u64 rows,
//   ch_u32 cols, ch_u32 padded, ch_u32 k, ch_u32 j) launch per network stage
//   (k = 2, 4, ..., P; j = k/2, ..., 1) sorts a rows x P index matrix in
//   global memory (one thread per compared pair, grid-stride, any block
//   size); the first stage (k = 2) also initialises it to 0..P-1 per row.
//   The host then copies the first `cols` indices of each row out.

#include "common.h"

template <typename T, bool F = Num<T>::is_float>
struct SortKey;

template <typename T>
struct SortKey<T, true> {
  typedef typename Num<T>::acc K;
  __device__ __forceinline__ static K key(T v) { return Num<T>::to_acc(v); }
  __device__ __forceinline__ static bool is_nan(K k) { return k != k; }
};

template <typename T>
struct SortKey<T, false> {
  typedef T K;
  __device__ __forceinline__ static K key(T v) { return v; }
  __device__ __forceinline__ static bool is_nan(K) { return false; }
};

// Whether index a comes before index b in the final order of `row`.
template <typename T, bool ASC>
struct SortOrder {
  typedef SortKey<T> S;
  const T* row;
  ch_u32 cols;

  __device__ __forceinline__ bool before(ch_u32 a, ch_u32 b) const {
    const bool pad_a = a >= cols, pad_b = b >= cols;
    if (pad_a || pad_b) return !pad_a || (pad_b && a < b);
    const typename S::K va = S::key(row[a]), vb = S::key(row[b]);
    const bool nan_a = S::is_nan(va), nan_b = S::is_nan(vb);
    if (nan_a || nan_b) return !nan_a || (nan_b && a < b);
    if (ASC ? va < vb : vb < va) return true;
    if (ASC ? vb < va : va < vb) return false;
    return a < b;
  }
};

// Compare-exchange of pair t (0 <= t < P/2) of stage (k, j) on one row.
template <typename Order>
__device__ __forceinline__ void bitonic_pair(const Order& order, ch_u32* idx, ch_u32 t, ch_u32 k, ch_u32 j) {
  const ch_u32 i = ((t & ~(j - 1)) << 1) | (t & (j - 1));
  const ch_u32 l = i | j;
  const ch_u32 a = idx[i], b = idx[l];
  const bool up = (i & k) == 0;
  if (up ? order.before(b, a) : order.before(a, b)) {
    idx[i] = b;
    idx[l] = a;
  }
}

template <typename T, bool ASC>
__device__ __forceinline__ void argsort_shared(const T* src, ch_u32* dst, ch_u64 rows, ch_u32 cols, ch_u32 padded) {
  extern __shared__ ch_u32 idx[];
  for (ch_u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const SortOrder<T, ASC> order = {src + r * cols, cols};
    for (ch_u32 i = threadIdx.x; i < padded; i += blockDim.x) idx[i] = i;
    __syncthreads();
    for (ch_u32 k = 2; k <= padded; k <<= 1) {
      for (ch_u32 j = k >> 1; j > 0; j >>= 1) {
        for (ch_u32 t = threadIdx.x; t < padded / 2; t += blockDim.x) bitonic_pair(order, idx, t, k, j);
        __syncthreads();
      }
    }
    for (ch_u32 i = threadIdx.x; i < cols; i += blockDim.x) dst[r * cols + i] = idx[i];
    __syncthreads();
  }
}

template <typename T, bool ASC>
__device__ __forceinline__ void argsort_step(const T* src, ch_u32* idx, ch_u64 rows, ch_u32 cols, ch_u32 padded,
                                             ch_u32 k, ch_u32 j) {
  const ch_u32 half = padded / 2;
  const ch_u64 pairs = rows * half;
  for (ch_u64 q = global_thread(); q < pairs; q += global_threads()) {
    ch_u64 t;
    const ch_u64 r = divmod(q, half, t);
    const SortOrder<T, ASC> order = {src + r * cols, cols};
    ch_u32* row = idx + r * padded;
    if (k == 2) {
      // The first stage: nothing has written this pair yet.
      row[2 * t] = (ch_u32)(2 * t);
      row[2 * t + 1] = (ch_u32)(2 * t + 1);
    }
    bitonic_pair(order, row, (ch_u32)t, k, j);
  }
}

#define CH_ARGSORT_KERNEL(NAME, ASC, TY)                                                         \
  extern "C" __global__ void __launch_bounds__(CH_REDUCE_MAX_BLOCK)                             \
      NAME##_##TY(const ch_##TY* src, ch_u32* dst, ch_u64 rows, ch_u32 cols, ch_u32 padded) {   \
    argsort_shared<ch_##TY, ASC>(src, dst, rows, cols, padded);                                 \
  }

#define CH_ARGSORT_STEP_KERNEL(NAME, ASC, TY)                                                         \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                        \
      NAME##_##TY(const ch_##TY* src, ch_u32* idx, ch_u64 rows, ch_u32 cols, ch_u32 padded, ch_u32 k, \
                  ch_u32 j) {                                                                        \
    argsort_step<ch_##TY, ASC>(src, idx, rows, cols, padded, k, j);                                  \
  }

CH_ALL(CH_ARGSORT_KERNEL, argsort_asc, true)
CH_ALL(CH_ARGSORT_KERNEL, argsort_desc, false)
CH_ALL(CH_ARGSORT_STEP_KERNEL, argsort_step_asc, true)
CH_ALL(CH_ARGSORT_STEP_KERNEL, argsort_step_desc, false)
