// Reductions over any set of dimensions: reduce_<op>_<dtype> with op one of
// sum, min, max (output dtype = input dtype) and argmin, argmax (output u32).
//
// Signature: (const ReduceInfo info, const T* src, Out* dst). The host splits
// the source layout into the kept dimensions (out_*, their order is the order
// of the contiguous output) and the reduced ones (red_*); `src` points at the
// first element of the source view.
//
// Two launch shapes, chosen by the host (per_thread):
// - 0: one block per output, the block's threads stride over the reduced
//   elements (16-byte loads when they are contiguous), then a block reduction;
// - 1: one thread per output looping over its reduced elements (short
//   reductions, and reductions over non-innermost dimensions where adjacent
//   threads read adjacent memory).
//
// Semantics follow Candle's CPU backend: f16/bf16 sum in f32 (Candle sums in
// the half type, so results differ by rounding); integer sums wrap; min/max
// and argmin/argmax pick the first extremum in reduction order, skip NaN
// unless the first element is NaN (then the result is that NaN, index 0).

#include "common.h"

// Mirrored by `ReduceInfo` in candle-hip/src/info.rs.
struct ReduceInfo {
  ch_u64 num_out;
  ch_u64 red_size;
  ch_u32 out_rank;
  ch_u32 red_rank;
  ch_u32 per_thread;
  ch_u32 pad;
  ch_u64 out_dims[CH_MAX_DIMS];
  ch_u64 out_strides[CH_MAX_DIMS];
  ch_u64 red_dims[CH_MAX_DIMS];
  ch_u64 red_strides[CH_MAX_DIMS];
};

// Sum: floats accumulate in f32/f64, integers in their wrapping unsigned type.
template <typename T, bool F = Num<T>::is_float>
struct SumTraits;

template <typename T>
struct SumTraits<T, true> {
  typedef typename Num<T>::acc A;
  __device__ __forceinline__ static A load(T v) { return Num<T>::to_acc(v); }
  __device__ __forceinline__ static T store(A a) { return Num<T>::from_acc(a); }
};

template <typename T>
struct SumTraits<T, false> {
  typedef typename Num<T>::wide A;
  __device__ __forceinline__ static A load(T v) { return (A)v; }
  __device__ __forceinline__ static T store(A a) { return (T)a; }
};

template <typename T>
struct SumR {
  typedef typename SumTraits<T>::A A;
  typedef T Out;
  struct State {
    A s;
  };
  __device__ __forceinline__ static State identity() {
    State st;
    st.s = (A)0;
    return st;
  }
  __device__ __forceinline__ static State push(State st, T v, ch_u64) {
    st.s += SumTraits<T>::load(v);
    return st;
  }
  __device__ __forceinline__ static State combine(State a, State b) {
    a.s += b.s;
    return a;
  }
  __device__ __forceinline__ static Out finish(State st) { return SumTraits<T>::store(st.s); }
};

// The type values are compared in: exact promotion for floats.
template <typename T, bool F = Num<T>::is_float>
struct KeyOf;

template <typename T>
struct KeyOf<T, true> {
  typedef typename Num<T>::acc K;
  __device__ __forceinline__ static K key(T v) { return Num<T>::to_acc(v); }
  __device__ __forceinline__ static T value(K k) { return Num<T>::from_acc(k); }
};

template <typename T>
struct KeyOf<T, false> {
  typedef T K;
  __device__ __forceinline__ static K key(T v) { return v; }
  __device__ __forceinline__ static T value(K k) { return k; }
};

#define CH_NO_INDEX 0xffffffffu

// Min/max with the position of the winner. The order used by combine is
// total: empty < ordinary values (by value, then lower index) < NaN at index 0,
// so the result does not depend on how the work was split.
template <typename T, bool IsMax>
struct ExtremumBase {
  typedef typename KeyOf<T>::K K;
  struct State {
    K v;
    ch_u32 i;
  };
  __device__ __forceinline__ static State identity() {
    State st;
    st.v = (K)0;
    st.i = CH_NO_INDEX;
    return st;
  }
  __device__ __forceinline__ static bool better(K a, K b) { return IsMax ? a > b : a < b; }
  __device__ __forceinline__ static State combine(State a, State b) {
    if (a.i == CH_NO_INDEX) return b;
    if (b.i == CH_NO_INDEX) return a;
    if (a.v != a.v) return a;
    if (b.v != b.v) return b;
    if (better(a.v, b.v)) return a;
    if (better(b.v, a.v)) return b;
    return a.i <= b.i ? a : b;
  }
  __device__ __forceinline__ static State push(State st, T x, ch_u64 j) {
    State c;
    c.v = KeyOf<T>::key(x);
    c.i = (ch_u32)j;
    if (c.v != c.v && j != 0) return st;
    return combine(st, c);
  }
};

template <typename T, bool IsMax>
struct ExtremumR : ExtremumBase<T, IsMax> {
  typedef T Out;
  __device__ __forceinline__ static Out finish(typename ExtremumBase<T, IsMax>::State st) {
    return KeyOf<T>::value(st.v);
  }
};

template <typename T, bool IsMax>
struct ArgExtremumR : ExtremumBase<T, IsMax> {
  typedef ch_u32 Out;
  __device__ __forceinline__ static Out finish(typename ExtremumBase<T, IsMax>::State st) { return st.i; }
};

// This thread's share of a contiguous run of n elements (block mode).
template <typename R, typename T>
__device__ __forceinline__ typename R::State reduce_contiguous(const T* row, ch_u64 n, typename R::State st) {
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  const ch_u64 misaligned = (reinterpret_cast<ch_u64>(row) / sizeof(T)) % V;
  ch_u64 head = misaligned == 0 ? 0 : V - misaligned;
  if (head > n) head = n;
  for (ch_u64 j = threadIdx.x; j < head; j += blockDim.x) st = R::push(st, row[j], j);
  const ch_u64 nv = (n - head) / V;
  const Pack<T, V>* packs = reinterpret_cast<const Pack<T, V>*>(row + head);
  for (ch_u64 p = threadIdx.x; p < nv; p += blockDim.x) {
    const Pack<T, V> pk = packs[p];
#pragma unroll
    for (int k = 0; k < V; ++k) st = R::push(st, pk.v[k], head + p * V + k);
  }
  for (ch_u64 j = head + nv * V + threadIdx.x; j < n; j += blockDim.x) st = R::push(st, row[j], j);
  return st;
}

template <typename R, typename T>
__device__ __forceinline__ void reduce_body(const ReduceInfo& info, const T* src, typename R::Out* dst) {
  __shared__ typename R::State scratch[CH_MAX_WAVES];
  const ch_u64 n = info.red_size;
  if (info.per_thread) {
    for (ch_u64 o = global_thread(); o < info.num_out; o += global_threads()) {
      const T* base = src + strided_offset(o, info.out_rank, info.out_dims, info.out_strides);
      typename R::State st = R::identity();
      for (ch_u64 j = 0; j < n; ++j)
        st = R::push(st, base[strided_offset(j, info.red_rank, info.red_dims, info.red_strides)], j);
      dst[o] = R::finish(st);
    }
    return;
  }
  const bool contiguous = info.red_rank == 1 && info.red_strides[0] == 1;
  for (ch_u64 o = blockIdx.x; o < info.num_out; o += gridDim.x) {
    const T* base = src + strided_offset(o, info.out_rank, info.out_dims, info.out_strides);
    typename R::State st = R::identity();
    if (contiguous) {
      st = reduce_contiguous<R>(base, n, st);
    } else {
      for (ch_u64 j = threadIdx.x; j < n; j += blockDim.x)
        st = R::push(st, base[strided_offset(j, info.red_rank, info.red_dims, info.red_strides)], j);
    }
    st = block_reduce<R>(st, scratch);
    if (threadIdx.x == 0) dst[o] = R::finish(st);
  }
}

template <typename T>
struct MinR : ExtremumR<T, false> {};
template <typename T>
struct MaxR : ExtremumR<T, true> {};
template <typename T>
struct ArgMinR : ArgExtremumR<T, false> {};
template <typename T>
struct ArgMaxR : ArgExtremumR<T, true> {};

#define CH_REDUCE_KERNEL(NAME, R, TY)                                                      \
  extern "C" __global__ void __launch_bounds__(CH_REDUCE_MAX_BLOCK)                        \
      NAME##_##TY(const ReduceInfo info, const ch_##TY* src, R<ch_##TY>::Out* dst) {       \
    reduce_body<R<ch_##TY> >(info, src, dst);                                              \
  }

CH_ALL(CH_REDUCE_KERNEL, reduce_sum, SumR)
CH_ALL(CH_REDUCE_KERNEL, reduce_min, MinR)
CH_ALL(CH_REDUCE_KERNEL, reduce_max, MaxR)
CH_ALL(CH_REDUCE_KERNEL, reduce_argmin, ArgMinR)
CH_ALL(CH_REDUCE_KERNEL, reduce_argmax, ArgMaxR)
