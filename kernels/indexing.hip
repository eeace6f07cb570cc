// Indexing kernels: index_select, gather, scatter, scatter_add, index_add,
// named <op>_<ids dtype>_<value dtype>, e.g. index_select_u32_f16.
//
// Every tensor is viewed as [left, <dim>, right] around the indexed dimension
// (the host checks contiguity where Candle requires it). An index equal to the
// maximum of its dtype is Candle's "no index" marker: it selects zeros and is
// skipped by the writing ops. Indices past the dimension (Candle's CPU backend
// reports an error) are treated the same way, so no kernel ever reads or
// writes out of bounds.
//
// scatter, scatter_add and index_add give each thread one (left, right)
// column and walk the indices in order: duplicate indices resolve exactly as
// on the CPU (last write wins, sums in index order), without atomics.

#include "common.h"

// Mirrored by `IndexInfo` in candle-hip/src/info.rs.
struct IndexInfo {
  ch_u64 left;        // product of the dimensions before `dim`
  ch_u64 right;       // product of the dimensions after `dim`
  ch_u64 src_dim;     // source size along `dim`
  ch_u64 dst_dim;     // destination size along `dim`
  ch_u64 ids_dim;     // number of indices along `dim`
  ch_u64 ids_stride;  // index_select: distance between consecutive indices
  ch_u64 src_right;   // gather: product of the source dimensions after `dim`
};

// Whether `id` selects a position below `size`; the position goes to `pos`.
template <typename I>
__device__ __forceinline__ bool index_ok(I id, ch_u64 size, ch_u64& pos) {
  pos = (ch_u64)id;
  return id != Num<I>::max_value && pos < size;
}

template <typename T, bool F = Num<T>::is_float>
struct Accumulate;

template <typename T>
struct Accumulate<T, true> {
  __device__ __forceinline__ static T add(T a, T b) {
    return Num<T>::from_acc(Num<T>::to_acc(a) + Num<T>::to_acc(b));
  }
};

template <typename T>
struct Accumulate<T, false> {
  __device__ __forceinline__ static T add(T a, T b) { return wrap_add(a, b); }
};

// out[l, i, r] = src[l, ids[i * ids_stride], r] over units U of `right` per row.
template <typename U, typename I>
__device__ __forceinline__ void index_select_units(const IndexInfo& info, ch_u64 right, const I* ids,
                                                   const U* src, U* out) {
  const ch_u64 total = info.left * info.ids_dim * right;
  for (ch_u64 o = global_thread(); o < total; o += global_threads()) {
    ch_u64 r, i, pos;
    const ch_u64 l = divmod(divmod(o, right, r), info.ids_dim, i);
    out[o] = index_ok(ids[i * info.ids_stride], info.src_dim, pos) ? src[(l * info.src_dim + pos) * right + r]
                                                                    : zero_bits<U>();
  }
}

template <typename I, typename T>
__device__ __forceinline__ void index_select_body(const IndexInfo& info, const I* ids, const T* src, T* out) {
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  if (info.right % V == 0 && is_aligned<V>(src) && is_aligned<V>(out)) {
    typedef Pack<T, V> P;
    index_select_units<P>(info, info.right / V, ids, reinterpret_cast<const P*>(src), reinterpret_cast<P*>(out));
  } else {
    index_select_units<T>(info, info.right, ids, src, out);
  }
}

// out[l, i, r] = src[l, ids[l, i, r], r]; ids and out have shape
// [left, ids_dim, right], the source rows hold src_right elements.
template <typename I, typename T>
__device__ __forceinline__ void gather_body(const IndexInfo& info, const I* ids, const T* src, T* out) {
  const ch_u64 total = info.left * info.ids_dim * info.right;
  for (ch_u64 o = global_thread(); o < total; o += global_threads()) {
    ch_u64 r, i, pos;
    const ch_u64 l = divmod(divmod(o, info.right, r), info.ids_dim, i);
    out[o] = index_ok(ids[o], info.src_dim, pos) ? src[(l * info.src_dim + pos) * info.src_right + r] : zero_bits<T>();
  }
}

// dst[l, ids[l, i, r], r] = (or +=) src[l, i, r]; ids and src have shape
// [left, ids_dim, right].
template <bool Add, typename I, typename T>
__device__ __forceinline__ void scatter_body(const IndexInfo& info, const I* ids, const T* src, T* dst) {
  const ch_u64 columns = info.left * info.right;
  for (ch_u64 c = global_thread(); c < columns; c += global_threads()) {
    ch_u64 r;
    const ch_u64 l = divmod(c, info.right, r);
    for (ch_u64 i = 0; i < info.ids_dim; ++i) {
      const ch_u64 k = (l * info.ids_dim + i) * info.right + r;
      ch_u64 pos;
      if (!index_ok(ids[k], info.dst_dim, pos)) continue;
      T& d = dst[(l * info.dst_dim + pos) * info.right + r];
      d = Add ? Accumulate<T>::add(d, src[k]) : src[k];
    }
  }
}

// dst[l, ids[i], r] += src[l, i, r] for i < ids_dim (= src_dim).
template <typename I, typename T>
__device__ __forceinline__ void index_add_body(const IndexInfo& info, const I* ids, const T* src, T* dst) {
  const ch_u64 columns = info.left * info.right;
  for (ch_u64 c = global_thread(); c < columns; c += global_threads()) {
    ch_u64 r;
    const ch_u64 l = divmod(c, info.right, r);
    for (ch_u64 i = 0; i < info.ids_dim; ++i) {
      ch_u64 pos;
      if (!index_ok(ids[i], info.dst_dim, pos)) continue;
      T& d = dst[(l * info.dst_dim + pos) * info.right + r];
      d = Accumulate<T>::add(d, src[(l * info.src_dim + i) * info.right + r]);
    }
  }
}

#define CH_READ_KERNEL(NAME, I, TY)                                                                 \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                       \
      NAME##_##I##_##TY(const IndexInfo info, const ch_##I* ids, const ch_##TY* src, ch_##TY* out) { \
    NAME##_body(info, ids, src, out);                                                               \
  }

#define CH_SCATTER_KERNEL(NAME, I, TY, ADD)                                                         \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                       \
      NAME##_##I##_##TY(const IndexInfo info, const ch_##I* ids, const ch_##TY* src, ch_##TY* dst) { \
    scatter_body<ADD>(info, ids, src, dst);                                                         \
  }
#define CH_SCATTER_SET(NAME, I, TY) CH_SCATTER_KERNEL(NAME, I, TY, false)
#define CH_SCATTER_ADD(NAME, I, TY) CH_SCATTER_KERNEL(NAME, I, TY, true)

#define CH_INDEX_ADD_KERNEL(NAME, I, TY)                                                            \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                       \
      NAME##_##I##_##TY(const IndexInfo info, const ch_##I* ids, const ch_##TY* src, ch_##TY* dst) { \
    index_add_body(info, ids, src, dst);                                                            \
  }

#define CH_INDEX_FAMILIES(I)                   \
  CH_ALL(CH_READ_KERNEL, index_select, I)      \
  CH_ALL(CH_READ_KERNEL, gather, I)            \
  CH_ALL(CH_SCATTER_SET, scatter, I)           \
  CH_ALL(CH_SCATTER_ADD, scatter_add, I)       \
  CH_ALL(CH_INDEX_ADD_KERNEL, index_add, I)

CH_INDEX_FAMILIES(u8)
CH_INDEX_FAMILIES(u32)
CH_INDEX_FAMILIES(i64)
