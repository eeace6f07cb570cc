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
//   network on (order key, u16 index) pairs in roundup(P * sizeof(T), 8) + 2 * P
//   bytes of dynamic shared memory (CH_SORT_SPAN <= P <= 65536: the host
//   pads short rows further), blockDim.x = min(P / CH_SORT_RUN,
//   CH_REDUCE_MAX_BLOCK);
// - rows too long for shared memory: one
//   argsort_step_{asc,desc}_<dtype>(const T* src, ch_u32* idx, ch_u64 rows,
//   ch_u32 cols, ch_u32 padded, ch_u32 k, ch_u32 j) launch per network stage
//   (k = 2, 4, ..., P; j = k/2, ..., 1) sorts a rows x P index matrix in
//   global memory (one thread per compared pair, grid-stride, any block
//   size); the first stage (k = 2) also initialises it to 0..P-1 per row.
//   The host then copies the first `cols` indices of each row out.

#include "common.h"

// Unsigned integers of 1, 2, 4 and 8 bytes: the order keys of T.
template <int BYTES>
struct KeyBits;
template <>
struct KeyBits<1> {
  typedef ch_u8 type;
};
template <>
struct KeyBits<2> {
  typedef ch_u16 type;
};
template <>
struct KeyBits<4> {
  typedef ch_u32 type;
};
template <>
struct KeyBits<8> {
  typedef ch_u64 type;
};

// A value's ascending order key: an unsigned integer of T's size whose
// order is the value order. Floats flip their sign bit (negative ones every
// bit), with -0 taken as +0; `ordered` is false for NaN (no key).
template <typename T, bool F = Num<T>::is_float>
struct OrderKey {
  typedef typename KeyBits<sizeof(T)>::type K;
  static const K SIGN = (K)((K)1 << (8 * sizeof(K) - 1));
  __device__ __forceinline__ static bool ordered(T v, K& k) {
    const typename Num<T>::acc x = Num<T>::to_acc(v);
    if (x != x) return false;
    if (x == 0) {
      k = SIGN;
      return true;
    }
    union {
      T value;
      K bits;
    } u;
    u.value = v;
    k = (u.bits & SIGN) != 0 ? (K)~u.bits : (K)(u.bits | SIGN);
    return true;
  }
};

// Integers: unsigned ones as they are, i64 with its sign bit flipped.
template <typename T>
struct OrderKey<T, false> {
  typedef typename KeyBits<sizeof(T)>::type K;
  __device__ __forceinline__ static bool ordered(T v, K& k) {
    k = (K)v;
    if ((T)-1 < (T)0) k ^= (K)((K)1 << (8 * sizeof(K) - 1));
    return true;
  }
};

// The sort key of element `i` (value v) of a row of `cols` elements: the
// order key (inverted for a descending sort); NaN and padding (i >= cols)
// take the largest key. Keys are compared with the index breaking ties, so
// equal values keep their order, NaN comes after every number and padding
// after everything (its indices are the largest).
template <typename T, bool ASC>
__device__ __forceinline__ typename OrderKey<T>::K sort_key(T v, ch_u32 i, ch_u32 cols) {
  typedef typename OrderKey<T>::K K;
  K k;
  if (i >= cols || !OrderKey<T>::ordered(v, k)) return (K)~(K)0;
  return ASC ? k : (K)~k;
}

// Whether the element with key ka and index a comes before the one with
// key kb and index b.
template <typename K>
__device__ __forceinline__ bool comes_before(K ka, ch_u32 a, K kb, ch_u32 b) {
  return ka < kb || (ka == kb && a < b);
}

// The pair (i, l = i | j) compared by pair t (0 <= t < P/2) of stage (k, j),
// and whether the smaller of the two belongs at i (an ascending run).
__device__ __forceinline__ bool bitonic_positions(ch_u32 t, ch_u32 k, ch_u32 j, ch_u32& i, ch_u32& l) {
  i = ((t & ~(j - 1)) << 1) | (t & (j - 1));
  l = i | j;
  return (i & k) == 0;
}

// Whether the compare-exchange at positions (i, l) of a stage swaps the
// elements a (key ka, at i) and b (key kb, at l): when the one at l belongs
// first in an ascending run (`up`), or the one at i in a descending one.
template <typename K>
__device__ __forceinline__ bool bitonic_swaps(bool up, K ka, ch_u32 a, K kb, ch_u32 b) {
  return up ? comes_before(kb, b, ka, a) : comes_before(ka, a, kb, b);
}

// Positions of a row each thread holds in registers in a register pass
// (mirrored by `SORT_RUN` in candle-hip/src/kernel/header.rs).
#define CH_SORT_RUN 4

// Stages whose distance j is below CH_SORT_SPAN run in registers: j below
// CH_SORT_RUN within a thread, the rest between lanes of one wave.
#define CH_SORT_SPAN (CH_SORT_RUN * CANDLE_HIP_WAVE)

// One element of a row in registers, (key, index) as a single word whose
// order is the order of the pairs (key first, then index): key << 16 | index
// for keys of up to 2 bytes, key << 32 | index for 4-byte keys, so that a
// compare-exchange is one min and one max; 8-byte keys keep a pair.
template <typename K, int BYTES = sizeof(K)>
struct SortWord {
  typedef ch_u32 W;
  __device__ __forceinline__ static W make(K k, ch_u32 i) { return ((W)k << 16) | i; }
  __device__ __forceinline__ static ch_u32 index(W w) { return w & 0xffffu; }
  __device__ __forceinline__ static K key(W w) { return (K)(w >> 16); }
};

template <typename K>
struct SortWord<K, 4> {
  typedef ch_u64 W;
  __device__ __forceinline__ static W make(K k, ch_u32 i) { return ((W)k << 32) | i; }
  __device__ __forceinline__ static ch_u32 index(W w) { return (ch_u32)w; }
  __device__ __forceinline__ static K key(W w) { return (K)(w >> 32); }
};

// An 8-byte key and its index, ordered as a pair.
struct KeyIndex {
  ch_u64 k;
  ch_u32 i;
  __device__ __forceinline__ bool operator<(const KeyIndex& o) const { return comes_before(k, i, o.k, o.i); }
};

template <typename K>
struct SortWord<K, 8> {
  typedef KeyIndex W;
  __device__ __forceinline__ static W make(K k, ch_u32 i) {
    W w;
    w.k = k;
    w.i = i;
    return w;
  }
  __device__ __forceinline__ static ch_u32 index(W w) { return w.i; }
  __device__ __forceinline__ static K key(W w) { return w.k; }
};

template <typename W>
__device__ __forceinline__ W word_min(const W& a, const W& b) {
  return b < a ? b : a;
}

template <typename W>
__device__ __forceinline__ W word_max(const W& a, const W& b) {
  return b < a ? a : b;
}

// Compare-exchange of the thread's words e and e + J (e & J == 0) at row
// positions base + e, base + e + J, in a stage of run length k: the smaller
// first in an ascending run, last in a descending one.
template <int J, typename W>
__device__ __forceinline__ void exchange_in_thread(W (&w)[CH_SORT_RUN], ch_u32 base, ch_u32 k) {
#pragma unroll
  for (int e = 0; e < CH_SORT_RUN; ++e) {
    if ((e & J) != 0) continue;
    const W lo = word_min(w[e], w[e + J]), hi = word_max(w[e], w[e + J]);
    const bool up = ((base + e) & k) == 0;
    w[e] = up ? lo : hi;
    w[e + J] = up ? hi : lo;
  }
}

// Stages (k, j) for k from k_first to k_last (doubling) and j from
// min(k / 2, CH_SORT_SPAN / 2) down to 1, on CH_SORT_RUN consecutive
// positions per group (group g holds positions g * CH_SORT_RUN ...), loaded
// from and stored back to shared memory. blockDim.x is a whole number of
// waves that divides the padded / CH_SORT_RUN groups, so every lane takes
// part in every shuffle and lane partners are groups g ^ (j / CH_SORT_RUN).
template <typename K>
__device__ __forceinline__ void register_pass(K* keys, ch_u16* idx, ch_u32 padded, ch_u32 k_first, ch_u32 k_last) {
  typedef SortWord<K> S;
  typedef typename S::W W;
  const ch_u32 groups = padded / CH_SORT_RUN;
  for (ch_u32 g = threadIdx.x; g < groups; g += blockDim.x) {
    const ch_u32 base = g * CH_SORT_RUN;
    W w[CH_SORT_RUN];
#pragma unroll
    for (int e = 0; e < CH_SORT_RUN; ++e) w[e] = S::make(keys[base + e], idx[base + e]);
    for (ch_u32 k = k_first; k <= k_last; k <<= 1) {
      for (ch_u32 j = (k < CH_SORT_SPAN ? k : CH_SORT_SPAN) >> 1; j >= CH_SORT_RUN; j >>= 1) {
        const ch_u32 lanes = j / CH_SORT_RUN;
        // The lower position of an ascending run or the upper one of a
        // descending run keeps the smaller word.
        const bool keeps_min = ((g & lanes) == 0) == ((base & k) == 0);
#pragma unroll
        for (int e = 0; e < CH_SORT_RUN; ++e) {
          const W other = shfl_xor_state(w[e], (int)lanes);
          w[e] = keeps_min ? word_min(w[e], other) : word_max(w[e], other);
        }
      }
      static_assert(CH_SORT_RUN == 4, "the in-thread stages below are j = 2 and j = 1");
      if (k >= 4) exchange_in_thread<2>(w, base, k);
      exchange_in_thread<1>(w, base, k);
    }
#pragma unroll
    for (int e = 0; e < CH_SORT_RUN; ++e) {
      keys[base + e] = S::key(w[e]);
      idx[base + e] = (ch_u16)S::index(w[e]);
    }
  }
}

// Sorts each row as (key, u16 index) pairs in shared memory (padded >=
// CH_SORT_SPAN): stages with j >= CH_SORT_SPAN compare pairs in shared
// memory between block barriers, the others run in register passes.
template <typename T, bool ASC>
__device__ __forceinline__ void argsort_shared(const T* src, ch_u32* dst, ch_u64 rows, ch_u32 cols, ch_u32 padded) {
  typedef typename OrderKey<T>::K K;
  extern __shared__ ch_u64 pairs_smem[];
  K* keys = reinterpret_cast<K*>(pairs_smem);
  // The indices follow the keys at the next 8-byte boundary.
  ch_u16* idx = reinterpret_cast<ch_u16*>(pairs_smem + (padded * sizeof(K) + 7) / 8);
  for (ch_u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = src + r * cols;
    for (ch_u32 i = threadIdx.x; i < padded; i += blockDim.x) {
      keys[i] = sort_key<T, ASC>(row[i < cols ? i : 0], i, cols);
      idx[i] = (ch_u16)i;
    }
    __syncthreads();
    register_pass(keys, idx, padded, 2, CH_SORT_SPAN);
    __syncthreads();
    for (ch_u32 k = 2 * CH_SORT_SPAN; k <= padded; k <<= 1) {
      for (ch_u32 j = k >> 1; j >= CH_SORT_SPAN; j >>= 1) {
        for (ch_u32 t = threadIdx.x; t < padded / 2; t += blockDim.x) {
          ch_u32 i, l;
          const bool up = bitonic_positions(t, k, j, i, l);
          const K ka = keys[i], kb = keys[l];
          const ch_u32 a = idx[i], b = idx[l];
          if (bitonic_swaps(up, ka, a, kb, b)) {
            keys[i] = kb;
            keys[l] = ka;
            idx[i] = (ch_u16)b;
            idx[l] = (ch_u16)a;
          }
        }
        __syncthreads();
      }
      register_pass(keys, idx, padded, k, k);
      __syncthreads();
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
    const T* values = src + r * cols;
    ch_u32* row = idx + r * padded;
    if (k == 2) {
      // The first stage: nothing has written this pair yet.
      row[2 * t] = (ch_u32)(2 * t);
      row[2 * t + 1] = (ch_u32)(2 * t + 1);
    }
    ch_u32 i, l;
    const bool up = bitonic_positions((ch_u32)t, k, j, i, l);
    const ch_u32 a = row[i], b = row[l];
    const T xa = values[a < cols ? a : 0], xb = values[b < cols ? b : 0];
    if (bitonic_swaps(up, sort_key<T, ASC>(xa, a, cols), a, sort_key<T, ASC>(xb, b, cols), b)) {
      row[i] = b;
      row[l] = a;
    }
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
