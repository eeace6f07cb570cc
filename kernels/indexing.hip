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
// scatter, scatter_add and index_add apply the updates of each destination
// element in increasing index order, so duplicate indices resolve exactly as
// on the CPU (last write wins, sums in index order), without atomics. Two
// forms (the host picks the kernel):
// - per column (scatter, scatter_add, index_add): a thread owns one
//   (left, right) column and walks the
//   indices in order, a batch at a time: the batch's indices and values are
//   loaded together (the next batch's while the current one is applied), the
//   destination elements of the batch too, and an update whose position
//   appeared earlier in the batch starts from that earlier result;
// - per destination row (index_add_rows): a block owns destination row
//   (left, p) over a tile of columns, keeps it in registers, scans all
//   indices in order and adds every source row whose index is p. Used when
//   there are too few columns to fill the device.

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
  unrolled_loop<CH_UNROLL, U>(
      info.left * info.ids_dim * right,
      [&](ch_u64 o) {
        ch_u64 r, i, pos;
        const ch_u64 l = divmod(divmod(o, right, r), info.ids_dim, i);
        return index_ok(ids[i * info.ids_stride], info.src_dim, pos) ? src[(l * info.src_dim + pos) * right + r]
                                                                     : zero_bits<U>();
      },
      [&](ch_u64 o, const U& v) { out[o] = v; });
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
  unrolled_loop<CH_UNROLL, T>(
      info.left * info.ids_dim * info.right,
      [&](ch_u64 o) {
        ch_u64 r, i, pos;
        const ch_u64 l = divmod(divmod(o, info.right, r), info.ids_dim, i);
        return index_ok(ids[o], info.src_dim, pos) ? src[(l * info.src_dim + pos) * info.src_right + r]
                                                   : zero_bits<T>();
      },
      [&](ch_u64 o, const T& v) { out[o] = v; });
}

// Updates of one batch of a column walk.
template <typename T, int B>
struct UpdateBatch {
  ch_u64 pos[B];
  T val[B];
  bool ok[B];

  // Loads updates u0 .. u0 + B - 1 (see column_updates).
  template <typename Load>
  __device__ __forceinline__ void load(ch_u64 u0, const Load& get) {
#pragma unroll
    for (int b = 0; b < B; ++b) ok[b] = get(u0 + b, pos[b], val[b]);
  }

  // Applies the batch in order: the destination elements are loaded
  // together, an update whose position appeared earlier in the batch starts
  // from that earlier result, and the stores go out in order.
  template <bool Add>
  __device__ __forceinline__ void apply(T* dcol, ch_u64 stride) {
    if (Add) {
      T old[B];
#pragma unroll
      for (int b = 0; b < B; ++b) old[b] = ok[b] ? dcol[pos[b] * stride] : val[b];
#pragma unroll
      for (int b = 0; b < B; ++b) {
        T base = old[b];
#pragma unroll
        for (int a = 0; a < b; ++a) {
          if (ok[a] && pos[a] == pos[b]) base = val[a];
        }
        val[b] = Accumulate<T>::add(base, val[b]);
      }
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (ok[b]) dcol[pos[b] * stride] = val[b];
    }
  }
};

// Applies the updates u < count of one destination column in order: update u
// goes to dcol[pos * stride] when get(u, pos, val) returns true. Add: the
// element becomes element + val (rounded to T after each update, as on the
// CPU); otherwise it becomes val. Two batches alternate, the next one loading
// while the current one is applied, so `get` must only read memory the
// column's stores do not write.
template <bool Add, int B, typename T, typename Load>
__device__ __forceinline__ void column_updates(ch_u64 count, T* dcol, ch_u64 stride, const Load& get) {
  const ch_u64 full = count / B * B;
  UpdateBatch<T, B> even, odd;
  if (full > 0) even.load(0, get);
  for (ch_u64 u = 0; u < full; u += 2 * B) {
    if (u + B < full) odd.load(u + B, get);
    even.template apply<Add>(dcol, stride);
    if (u + B >= full) break;
    if (u + 2 * B < full) even.load(u + 2 * B, get);
    odd.template apply<Add>(dcol, stride);
  }
  for (ch_u64 u = full; u < count; ++u) {
    ch_u64 pos;
    T v;
    if (!get(u, pos, v)) continue;
    T& d = dcol[pos * stride];
    d = Add ? Accumulate<T>::add(d, v) : v;
  }
}

// Updates per batch of a column walk (two batches live in registers).
#define CH_SCATTER_BATCH 8

// Update i of scatter's column starting at element `first` of ids and src.
template <typename I, typename T>
struct ScatterUpdates {
  const I* ids;
  const T* src;
  ch_u64 first, right, dst_dim;
  __device__ __forceinline__ bool operator()(ch_u64 i, ch_u64& pos, T& v) const {
    const ch_u64 k = first + i * right;
    v = src[k];
    return index_ok(ids[k], dst_dim, pos);
  }
};

// Update i of index_add's column `scol` (every column shares the 1-D ids).
template <typename I, typename T>
struct IndexAddUpdates {
  const I* ids;
  const T* scol;
  ch_u64 right, dst_dim;
  __device__ __forceinline__ bool operator()(ch_u64 i, ch_u64& pos, T& v) const {
    v = scol[i * right];
    return index_ok(ids[i], dst_dim, pos);
  }
};

// dst[l, ids[l, i, r], r] = (or +=) src[l, i, r]; ids and src have shape
// [left, ids_dim, right]. One thread per (l, r) column.
template <bool Add, typename I, typename T>
__device__ __forceinline__ void scatter_body(const IndexInfo& info, const I* ids, const T* src, T* dst) {
  const ch_u64 columns = info.left * info.right;
  for (ch_u64 c = global_thread(); c < columns; c += global_threads()) {
    ch_u64 r;
    const ch_u64 l = divmod(c, info.right, r);
    const ScatterUpdates<I, T> get = {ids, src, l * info.ids_dim * info.right + r, info.right, info.dst_dim};
    column_updates<Add, CH_SCATTER_BATCH>(info.ids_dim, dst + l * info.dst_dim * info.right + r, info.right, get);
  }
}

// index_add per column: dst[l, ids[i], r] += src[l, i, r] for i < ids_dim (= src_dim).
template <typename I, typename T>
__device__ __forceinline__ void index_add_body(const IndexInfo& info, const I* ids, const T* src, T* dst) {
  const ch_u64 columns = info.left * info.right;
  for (ch_u64 c = global_thread(); c < columns; c += global_threads()) {
    ch_u64 r;
    const ch_u64 l = divmod(c, info.right, r);
    const IndexAddUpdates<I, T> get = {ids, src + l * info.src_dim * info.right + r, info.right, info.dst_dim};
    column_updates<true, CH_SCATTER_BATCH>(info.ids_dim, dst + l * info.dst_dim * info.right + r, info.right, get);
  }
}

// Destination columns each thread keeps in registers in the per-row form.
#define CH_OWNER_COLS 4

// index_add per destination row (see the top of the file). blockDim.x is a
// whole number of waves, at most CH_ELEM_BLOCK. Every lane of a wave runs the
// __ballot (converged): hits of CH_ELEM_BLOCK indices become one 64-bit mask
// per wave, read back in order by every thread.
template <typename I, typename T>
__device__ __forceinline__ void index_add_rows_body(const IndexInfo& info, const I* ids, const T* src, T* dst) {
  __shared__ ch_u64 masks[(CH_ELEM_BLOCK + CANDLE_HIP_WAVE - 1) / CANDLE_HIP_WAVE];
  const ch_u64 block = blockDim.x;
  const ch_u64 span = block * CH_OWNER_COLS;
  const ch_u64 tiles = (info.right + span - 1) / span;
  const ch_u64 items = info.left * info.dst_dim * tiles;
  const ch_u64 n = info.ids_dim;
  const int waves = (int)(block / CANDLE_HIP_WAVE);
  const int lane = (int)(threadIdx.x % CANDLE_HIP_WAVE);
  const int wave = (int)(threadIdx.x / CANDLE_HIP_WAVE);
  for (ch_u64 item = blockIdx.x; item < items; item += gridDim.x) {
    ch_u64 tile, p;
    const ch_u64 l = divmod(divmod(item, tiles, tile), info.dst_dim, p);
    T* drow = dst + (l * info.dst_dim + p) * info.right;
    const T* srows = src + l * info.src_dim * info.right;
    const ch_u64 c0 = tile * span + threadIdx.x;
    T acc[CH_OWNER_COLS];
#pragma unroll
    for (int m = 0; m < CH_OWNER_COLS; ++m) {
      const ch_u64 c = c0 + m * block;
      acc[m] = c < info.right ? drow[c] : zero_bits<T>();
    }
    I id = threadIdx.x < n ? ids[threadIdx.x] : Num<I>::max_value;
    for (ch_u64 base = 0; base < n; base += block) {
      ch_u64 pos;
      const bool hit = index_ok(id, info.dst_dim, pos) && pos == p;
      const ch_u64 mask = __ballot(hit);
      const ch_u64 ahead = base + block + threadIdx.x;
      id = ahead < n ? ids[ahead] : Num<I>::max_value;
      if (lane == 0) masks[wave] = mask;
      __syncthreads();
      for (int w = 0; w < waves; ++w) {
        ch_u64 bits = masks[w];
        while (bits != 0) {
          const ch_u64 bit = (ch_u64)__popcll((bits & (0ull - bits)) - 1);
          bits &= bits - 1;
          const T* srow = srows + (base + (ch_u64)w * CANDLE_HIP_WAVE + bit) * info.right;
#pragma unroll
          for (int m = 0; m < CH_OWNER_COLS; ++m) {
            const ch_u64 c = c0 + m * block;
            if (c < info.right) acc[m] = Accumulate<T>::add(acc[m], srow[c]);
          }
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int m = 0; m < CH_OWNER_COLS; ++m) {
      const ch_u64 c = c0 + m * block;
      if (c < info.right) drow[c] = acc[m];
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

// index_add_<I>_<T> walks columns, index_add_rows_<I>_<T> owns destination rows.
#define CH_INDEX_ADD_KERNEL(NAME, I, TY)                                                            \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                       \
      NAME##_##I##_##TY(const IndexInfo info, const ch_##I* ids, const ch_##TY* src, ch_##TY* dst) { \
    NAME##_body(info, ids, src, dst);                                                               \
  }

#define CH_INDEX_FAMILIES(I)                   \
  CH_ALL(CH_READ_KERNEL, index_select, I)      \
  CH_ALL(CH_READ_KERNEL, gather, I)            \
  CH_ALL(CH_SCATTER_SET, scatter, I)           \
  CH_ALL(CH_SCATTER_ADD, scatter_add, I)       \
  CH_ALL(CH_INDEX_ADD_KERNEL, index_add, I)     \
  CH_ALL(CH_INDEX_ADD_KERNEL, index_add_rows, I)

CH_INDEX_FAMILIES(u8)
CH_INDEX_FAMILIES(u32)
CH_INDEX_FAMILIES(i64)
