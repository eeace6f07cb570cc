// Indexing kernels: index_select, gather, scatter, scatter_add, index_add,
// named <op>_<value dtype>, e.g. index_select_bf16. The indices are u32 or
// i64 (IndexInfo::wide_ids; the host widens u8, i16 and i32 ones to i64
// first: widen_ids_* in cast.hip), one kernel serving both; the tile forms
// (below) read u32 indices only.
//
// Every tensor is viewed as [left, <dim>, right] around the indexed dimension
// (the host checks contiguity where Candle requires it). An index equal to the
// maximum of its dtype is Candle's "no index" marker: it selects zeros and is
// skipped by the writing ops. Indices past the dimension (Candle's CPU backend
// reports an error) are treated the same way, so no kernel ever reads or
// writes out of bounds, and are reported: the kernel stores the op's code in
// the fault word IndexInfo::fault points to, and the host turns it into an
// error at its next synchronisation.
//
// scatter, scatter_add and index_add apply the updates of each destination
// element in increasing index order, so duplicate indices resolve exactly as
// on the CPU (last write wins, sums in index order), without atomics. Three
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
//   there are too few columns to fill the device;
// - per destination tile (scatter_tiles, scatter_add_tiles,
//   index_add_tiles): a one-wave block keeps a tile of the destination (up to
//   CH_TILE_ROWS rows of CH_TILE_ROW_BYTES) in shared memory and walks the
//   indices of the tile's columns in order, so that each update is a
//   shared-memory round trip instead of a global one (see tile_walk). Used
//   when the destination dimension needs few tiles. Its indices are u32
//   only (NarrowIds; the host converts the others with tile_ids_* in
//   cast.hip): its walk is unrolled, and a second index dtype would double
//   the code of every load.

#include "common.h"

// Mirrored by `IndexInfo` in candle-hip/src/kernel/info.rs.
struct IndexInfo {
  ch_u64 left;        // product of the dimensions before `dim`
  ch_u64 right;       // product of the dimensions after `dim`
  ch_u64 src_dim;     // source size along `dim`
  ch_u64 dst_dim;     // destination size along `dim`
  ch_u64 ids_dim;     // number of indices along `dim`
  ch_u64 ids_stride;  // index_select: distance between consecutive indices
  ch_u64 src_right;   // gather: product of the source dimensions after `dim`
  ch_u64 fault;       // device address of the u32 fault word (0: none)
  ch_u64 fault_code;  // the value an out-of-range index stores there
  ch_u64 wide_ids;    // 1: the indices are i64, 0: u32
};

// An index as the kernels see it: a u32 one, or an i64 one's bits (negative
// ones wrap past every dimension), with the "no index" marker of either
// dtype mapped to CH_NO_ID (i64's marker itself, no u32 value).
#define CH_NO_ID 0x7fffffffffffffffull

// u32 indices: ids[k] is index k as above.
struct NarrowIds {
  const ch_u32* p;
  __device__ __forceinline__ ch_u64 operator[](ch_u64 k) const {
    const ch_u32 id = p[k];
    return id == 0xffffffffu ? CH_NO_ID : id;
  }
};

// The indices of an op, of either dtype: ids[k] is index k as above.
struct Ids {
  const void* p;
  bool wide;
  __device__ __forceinline__ ch_u64 operator[](ch_u64 k) const {
    if (wide) return (ch_u64) reinterpret_cast<const ch_i64*>(p)[k];
    return NarrowIds{reinterpret_cast<const ch_u32*>(p)}[k];
  }
};

// Where an index past its dimension is recorded (several threads may store
// the same code; the host only tests for a non-zero word).
struct Fault {
  ch_u64 word, code;
  __device__ __forceinline__ void report() const {
    if (word != 0) *reinterpret_cast<volatile ch_u32*>(word) = (ch_u32)code;
  }
};

__device__ __forceinline__ Fault fault_of(const IndexInfo& info) { return {info.fault, info.fault_code}; }

// Whether `id` selects a position below `size`; the position goes to `pos`.
// An index past the dimension that is not the marker is reported.
__device__ __forceinline__ bool index_ok(Fault fault, ch_u64 id, ch_u64 size, ch_u64& pos) {
  pos = id;
  if (id == CH_NO_ID) return false;
  if (pos < size) return true;
  fault.report();
  return false;
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
template <typename U>
__device__ __forceinline__ void index_select_units(const IndexInfo& info, ch_u64 right, const Ids ids,
                                                   const U* src, U* out) {
  unrolled_loop<CH_UNROLL, U>(
      info.left * info.ids_dim * right,
      [&](ch_u64 o) {
        ch_u64 r, i, pos;
        const ch_u64 l = divmod(divmod(o, right, r), info.ids_dim, i);
        return index_ok(fault_of(info), ids[i * info.ids_stride], info.src_dim, pos) ? src[(l * info.src_dim + pos) * right + r]
                                                                           : zero_bits<U>();
      },
      [&](ch_u64 o, const U& v) { out[o] = v; });
}

template <typename T>
__device__ __forceinline__ void index_select_body(const IndexInfo& info, const Ids ids, const T* src, T* out) {
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
template <typename T>
__device__ __forceinline__ void gather_body(const IndexInfo& info, const Ids ids, const T* src, T* out) {
  unrolled_loop<CH_UNROLL, T>(
      info.left * info.ids_dim * info.right,
      [&](ch_u64 o) {
        ch_u64 r, i, pos;
        const ch_u64 l = divmod(divmod(o, info.right, r), info.ids_dim, i);
        return index_ok(fault_of(info), ids[o], info.src_dim, pos) ? src[(l * info.src_dim + pos) * info.src_right + r]
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
template <typename T>
struct ScatterUpdates {
  Ids ids;
  const T* src;
  ch_u64 first, right, dst_dim;
  Fault fault;
  __device__ __forceinline__ bool operator()(ch_u64 i, ch_u64& pos, T& v) const {
    const ch_u64 k = first + i * right;
    v = src[k];
    return index_ok(fault, ids[k], dst_dim, pos);
  }
};

// Update i of index_add's column `scol` (every column shares the 1-D ids).
template <typename T>
struct IndexAddUpdates {
  Ids ids;
  const T* scol;
  ch_u64 right, dst_dim;
  Fault fault;
  __device__ __forceinline__ bool operator()(ch_u64 i, ch_u64& pos, T& v) const {
    v = scol[i * right];
    return index_ok(fault, ids[i], dst_dim, pos);
  }
};

// dst[l, ids[l, i, r], r] = (or +=) src[l, i, r]; ids and src have shape
// [left, ids_dim, right]. One thread per (l, r) column.
template <bool Add, typename T>
__device__ __forceinline__ void scatter_body(const IndexInfo& info, const Ids ids, const T* src, T* dst) {
  const ch_u64 columns = info.left * info.right;
  for (ch_u64 c = global_thread(); c < columns; c += global_threads()) {
    ch_u64 r;
    const ch_u64 l = divmod(c, info.right, r);
    const ScatterUpdates<T> get = {ids, src, l * info.ids_dim * info.right + r, info.right, info.dst_dim,
                                      fault_of(info)};
    column_updates<Add, CH_SCATTER_BATCH>(info.ids_dim, dst + l * info.dst_dim * info.right + r, info.right, get);
  }
}

// index_add per column: dst[l, ids[i], r] += src[l, i, r] for i < ids_dim (= src_dim).
template <typename T>
__device__ __forceinline__ void index_add_body(const IndexInfo& info, const Ids ids, const T* src, T* dst) {
  const ch_u64 columns = info.left * info.right;
  for (ch_u64 c = global_thread(); c < columns; c += global_threads()) {
    ch_u64 r;
    const ch_u64 l = divmod(c, info.right, r);
    const IndexAddUpdates<T> get = {ids, src + l * info.src_dim * info.right + r, info.right, info.dst_dim,
                                       fault_of(info)};
    column_updates<true, CH_SCATTER_BATCH>(info.ids_dim, dst + l * info.dst_dim * info.right + r, info.right, get);
  }
}

// Destination columns each thread keeps in registers in the per-row form.
#define CH_OWNER_COLS 4

// index_add per destination row (see the top of the file). blockDim.x is a
// whole number of waves, at most CH_ELEM_BLOCK. Every lane of a wave runs the
// __ballot (converged): hits of CH_ELEM_BLOCK indices become one 64-bit mask
// per wave, read back in order by every thread.
template <typename T>
__device__ __forceinline__ void index_add_rows_body(const IndexInfo& info, const Ids ids, const T* src, T* dst) {
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
    ch_u64 id = threadIdx.x < n ? ids[threadIdx.x] : CH_NO_ID;
    for (ch_u64 base = 0; base < n; base += block) {
      ch_u64 pos;
      const bool hit = index_ok(fault_of(info), id, info.dst_dim, pos) && pos == p;
      const ch_u64 mask = __ballot(hit);
      const ch_u64 ahead = base + block + threadIdx.x;
      id = ahead < n ? ids[ahead] : CH_NO_ID;
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

// ---------------------------------------------------------------------------
// Destination tiles in shared memory.

// Bytes of one tile row: the tile's CH_TILE_ROW_BYTES / sizeof(T) adjacent
// columns, a whole 32-byte memory sector of every source and destination row.
#define CH_TILE_ROW_BYTES 32
// Destination rows of one tile (a power of two; with the row bytes, the
// block's static shared memory: 32 KiB).
#define CH_TILE_ROWS 1024
// Updates a thread applies per shared-memory round trip.
#define CH_TILE_BATCH 4
// Updates of a column that one unrolled step of the walk covers: the loads of
// the next step's updates are in flight while this step's are applied.
#define CH_TILE_STEP 64
// Most loads per thread in flight in the walk (bounds its registers).
#define CH_TILE_MAX_LOADS 16
// Tile position of an update that falls outside the tile.
#define CH_TILE_NONE 0xffffffffu

// Lane layout of the tile form for value type T: lane = group * cols + col.
// The `groups` lanes of a column share the column's loads (each loads one
// update of every `groups` consecutive ones and shuffles hand them round)
// and split the tile's rows: group g applies the updates of rows congruent
// to g modulo `groups`, so every tile element has exactly one owner and
// the lanes of a wave hit distinct banks.
template <typename T>
struct TileLanes {
  static const int cols = CH_TILE_ROW_BYTES / (int)sizeof(T);
  static const int groups = CANDLE_HIP_WAVE / cols;
  // Loads in flight per thread and updates per unrolled walk step.
  static const int loads = CH_TILE_STEP / groups < CH_TILE_MAX_LOADS ? CH_TILE_STEP / groups : CH_TILE_MAX_LOADS;
  static const int step = loads * groups;
  static_assert(cols >= 1 && cols <= CANDLE_HIP_WAVE, "a tile row fits one wave");
  static_assert(sizeof(T) <= 2 * sizeof(int), "values move as at most two words");
  static_assert(step % CH_TILE_BATCH == 0, "walk steps are whole batches");
};

// Copies the first `rows` rows of a tile between shared memory and the
// destination (rows `stride` units apart) in units U, UPR units per tile
// row, of which the first `used` exist in the destination. Each thread
// moves CH_UNROLL units at a time, their loads issued together (a unit past
// the end loads the last one again and is not stored).
template <bool ToShared, int UPR, typename U>
__device__ __forceinline__ void tile_copy(U* tile, U* drows, ch_u64 stride, int rows, int used) {
  const int total = rows * UPR;
  for (int e0 = 0; e0 < total; e0 += CANDLE_HIP_WAVE * CH_UNROLL) {
    U tmp[CH_UNROLL];
#pragma unroll
    for (int k = 0; k < CH_UNROLL; ++k) {
      int e = e0 + k * CANDLE_HIP_WAVE + (int)threadIdx.x;
      e = e < total ? e : total - 1;
      const int j = e % UPR < used ? e % UPR : used - 1;
      tmp[k] = ToShared ? drows[(ch_u64)(e / UPR) * stride + j] : tile[e];
    }
#pragma unroll
    for (int k = 0; k < CH_UNROLL; ++k) {
      const int e = e0 + k * CANDLE_HIP_WAVE + (int)threadIdx.x;
      if (e < total && e % UPR < used) {
        if (ToShared) {
          tile[e] = tmp[k];
        } else {
          drows[(ch_u64)(e / UPR) * stride + e % UPR] = tmp[k];
        }
      }
    }
  }
}

// Tile copy in 16-byte packs where the tile spans whole rows of packs,
// element by element otherwise.
template <bool ToShared, typename T>
__device__ __forceinline__ void tile_move(T* tile, T* drows, ch_u64 right, int rows, int used) {
  const int C = TileLanes<T>::cols;
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  typedef Pack<T, V> P;
  if (used == C && right % V == 0 && is_aligned<V>(drows)) {
    tile_copy<ToShared, C / V>(reinterpret_cast<P*>(tile), reinterpret_cast<P*>(drows), right / V, rows, C / V);
  } else {
    tile_copy<ToShared, C>(tile, drows, right, rows, used);
  }
}

// How many tile rows from p0 on an index can select: positions below
// dst_dim, at most CH_TILE_ROWS, never the "no index" marker CH_NO_ID (so
// excluding it only shortens the span).
__device__ __forceinline__ ch_u64 tile_span(ch_u64 dst_dim, ch_u64 p0) {
  if (p0 >= CH_NO_ID) return 0;
  ch_u64 span = dst_dim - p0;
  if (span > CH_TILE_ROWS) span = CH_TILE_ROWS;
  return span < CH_NO_ID - p0 ? span : CH_NO_ID - p0;
}

// Tile row of index `id` (the tile starts at p0 and spans `span` rows, see
// tile_span), or CH_TILE_NONE; ids below p0 (negative i64 ones too) wrap
// past the span.
__device__ __forceinline__ ch_u32 tile_row(ch_u64 id, ch_u64 p0, ch_u64 span) {
  const ch_u64 row = id - p0;
  return row < span ? (ch_u32)row : CH_TILE_NONE;
}

// Applies updates j < CH_TILE_BATCH of one column in order: key[j] is the
// tile row for this lane's updates, a value >= CH_TILE_ROWS for the others
// (distinct from every tile row). Add: the rows are read together and an
// update whose row appeared earlier in the batch starts from that earlier
// result.
template <bool Add, typename T>
__device__ __forceinline__ void tile_batch(T* tcol, const ch_u32 (&key)[CH_TILE_BATCH], T (&val)[CH_TILE_BATCH]) {
  const int C = TileLanes<T>::cols;
  if (Add) {
    T old[CH_TILE_BATCH];
#pragma unroll
    for (int j = 0; j < CH_TILE_BATCH; ++j) old[j] = key[j] < CH_TILE_ROWS ? tcol[key[j] * C] : val[j];
#pragma unroll
    for (int j = 0; j < CH_TILE_BATCH; ++j) {
      T base = old[j];
#pragma unroll
      for (int a = 0; a < j; ++a) {
        if (key[a] == key[j]) base = val[a];
      }
      val[j] = Accumulate<T>::add(base, val[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < CH_TILE_BATCH; ++j) {
    if (key[j] < CH_TILE_ROWS) tcol[key[j] * C] = val[j];
  }
}

// The loads of one lane's walk, in order: update `next` of the column (of
// `n`; none past it) at `sp` and index `ik` of `ids`, then every `g`-th one.
// The walks of the first row range (`check`) report indices past the
// destination.
template <typename T>
struct TileLoads {
  Fault fault;
  ch_u64 dst_dim;
  bool check;
  NarrowIds ids;
  ch_u64 ik;
  const T* sp;
  ch_u64 next, n, s_step, i_step, g;
  __device__ __forceinline__ void load(ch_u64& id, T& val) {
    const bool ok = next < n;
    id = ok ? ids[ik] : CH_NO_ID;
    val = ok ? *sp : zero_bits<T>();
    ch_u64 pos;
    if (check && ok) index_ok(fault, id, dst_dim, pos);
    next += g;
    sp += s_step;
    ik += i_step;
  }
};

// Walks the n updates of the wave's columns in order, applying those of
// tile rows [p0, p0 + span) to the tile (see TileLanes). Update s of the
// lane's column: value src[first + s * right], index ids[ColumnIds ? first +
// s * right : s]; `col_ok`: whether the lane's column exists. Every lane
// runs every step (the shuffles need the whole wave).
template <bool Add, bool ColumnIds, typename T>
__device__ __forceinline__ void tile_walk(const IndexInfo& info, const NarrowIds ids, const T* src, T* tile, ch_u64 first,
                                          bool col_ok, ch_u64 p0, ch_u64 span) {
  typedef TileLanes<T> L;
  const int C = L::cols, G = L::groups, D = L::loads, B = CH_TILE_BATCH;
  const int lane = (int)threadIdx.x;
  const int col = lane % C, group = lane / C;
  T* tcol = tile + col;
  const ch_u64 k = first + (ch_u64)group * info.right;
  const ch_u64 s_step = G * info.right;
  TileLoads<T> loads = {fault_of(info),
                        info.dst_dim,
                        p0 == 0,
                        ids,
                        ColumnIds ? k : (ch_u64)group,
                        src + k,
                           (ch_u64)group,
                           col_ok ? info.ids_dim : 0,
                           s_step,
                           ColumnIds ? s_step : (ch_u64)G,
                           (ch_u64)G};
  // Slot r holds update s0 + r * G + group of the walk step starting at s0.
  ch_u64 id[D];
  T val[D];
#pragma unroll
  for (int r = 0; r < D; ++r) loads.load(id[r], val[r]);
  for (ch_u64 s0 = 0; s0 < info.ids_dim; s0 += L::step) {
    ch_u32 row[D];
#pragma unroll
    for (int b = 0; b < L::step / B; ++b) {
      ch_u32 key[B];
      T v[B];
#pragma unroll
      for (int j = 0; j < B; ++j) {
        const int t = b * B + j;
        const int r = t / G;
        if (t % G == 0) row[r] = tile_row(id[r], p0, span);
        const int from = (t % G) * C + col;
        const ch_u32 p = G == 1 ? row[r] : (ch_u32)__shfl((int)row[r], from, CANDLE_HIP_WAVE);
        v[j] = G == 1 ? val[r] : shfl_from(val[r], from);
        // CH_TILE_NONE may pass as this lane's (for the last group): it
        // stays >= CH_TILE_ROWS, so it is neither applied nor equal to a row.
        key[j] = (int)(p % G) == group ? p : CH_TILE_NONE - (ch_u32)(j + 1);
      }
      tile_batch<Add>(tcol, key, v);
#pragma unroll
      for (int r = 0; r < D; ++r) {
        if ((r * G + G - 1) / B == b) loads.load(id[r], val[r]);
      }
    }
  }
}

// Tile form of scatter (ColumnIds: ids shaped like src) and index_add (1-D
// ids): one block of one wave per (left, column tile, row range), the row
// ranges of a column tile adjacent so that their reads of ids and src meet
// in the cache. blockDim.x == CANDLE_HIP_WAVE.
template <bool Add, bool ColumnIds, typename T>
__device__ __forceinline__ void tiles_body(const IndexInfo& info, const NarrowIds ids, const T* src, T* dst) {
  __shared__ ch_u64 words[CH_TILE_ROWS * CH_TILE_ROW_BYTES / sizeof(ch_u64)];
  T* tile = reinterpret_cast<T*>(words);
  const ch_u64 C = TileLanes<T>::cols;
  const ch_u64 tiles = (info.right + C - 1) / C;
  const ch_u64 ranges = (info.dst_dim + CH_TILE_ROWS - 1) / CH_TILE_ROWS;
  const ch_u64 items = info.left * tiles * ranges;
  for (ch_u64 item = blockIdx.x; item < items; item += gridDim.x) {
    ch_u64 range, t;
    const ch_u64 l = divmod(divmod(item, ranges, range), tiles, t);
    const ch_u64 p0 = range * CH_TILE_ROWS, c0 = t * C;
    const ch_u64 rest = info.dst_dim - p0;
    const int rows = rest < CH_TILE_ROWS ? (int)rest : CH_TILE_ROWS;
    const int used = info.right - c0 < C ? (int)(info.right - c0) : (int)C;
    T* drows = dst + (l * info.dst_dim + p0) * info.right + c0;
    tile_move<true>(tile, drows, info.right, rows, used);
    __syncthreads();
    const ch_u64 col = threadIdx.x % C;
    const ch_u64 first = l * info.ids_dim * info.right + c0 + col;
    tile_walk<Add, ColumnIds>(info, ids, src, tile, first, col < (ch_u64)used, p0, tile_span(info.dst_dim, p0));
    __syncthreads();
    tile_move<false>(tile, drows, info.right, rows, used);
    __syncthreads();
  }
}

// Kernel NAME_TY: (const IndexInfo info, const void* ids, const T* src,
// T* dst) running BODY(info, IDS, src, dst), IDS the indices' view (Ids,
// NarrowIds) made of `ids` and `info`.
#define CH_INDEXING_KERNEL(NAME, TY, BOUND, BODY, IDS)                                                     \
  extern "C" __global__ void __launch_bounds__(BOUND)                                                      \
      NAME##_##TY(const IndexInfo info, const void* ids, const ch_##TY* src, ch_##TY* dst) {               \
    BODY(info, IDS, src, dst);                                                                             \
  }
// The indices of every form but the tile form, u32 or i64.
#define CH_ANY_IDS (Ids{ids, info.wide_ids != 0})
// The tile form's u32 indices.
#define CH_U32_IDS (NarrowIds{reinterpret_cast<const ch_u32*>(ids)})

#define CH_READ_KERNEL(NAME, _, TY) CH_INDEXING_KERNEL(NAME, TY, CH_ELEM_BLOCK, NAME##_body, CH_ANY_IDS)
#define CH_SCATTER_SET(NAME, _, TY) CH_INDEXING_KERNEL(NAME, TY, CH_ELEM_BLOCK, scatter_body<false>, CH_ANY_IDS)
#define CH_SCATTER_ADD(NAME, _, TY) CH_INDEXING_KERNEL(NAME, TY, CH_ELEM_BLOCK, scatter_body<true>, CH_ANY_IDS)
// index_add_<T> walks columns, index_add_rows_<T> owns destination rows.
#define CH_INDEX_ADD_KERNEL(NAME, _, TY) CH_INDEXING_KERNEL(NAME, TY, CH_ELEM_BLOCK, NAME##_body, CH_ANY_IDS)
// *_tiles_<T>: the tile form (one wave per block).
#define CH_SCATTER_SET_TILES(NAME, _, TY) CH_INDEXING_KERNEL(NAME, TY, CANDLE_HIP_WAVE, (tiles_body<false, true>), CH_U32_IDS)
#define CH_SCATTER_ADD_TILES(NAME, _, TY) CH_INDEXING_KERNEL(NAME, TY, CANDLE_HIP_WAVE, (tiles_body<true, true>), CH_U32_IDS)
#define CH_INDEX_ADD_TILES(NAME, _, TY) CH_INDEXING_KERNEL(NAME, TY, CANDLE_HIP_WAVE, (tiles_body<true, false>), CH_U32_IDS)

// The adding kernels (scatter_add, index_add) add i16 and i32 as i64;
// f8e4m3 keeps kernels of its own, because candle rounds its sum after
// every addition.

// Parts (each compiled per group of dtypes as a unit of its own): 1 reads,
// 2 column walks, 3 to 5 one tile family each (the largest kernels).
#if CH_PART(1)
CH_CARRIERS(CH_READ_KERNEL, index_select, _)
CH_CARRIERS(CH_READ_KERNEL, gather, _)
#endif
#if CH_PART(2)
CH_CARRIERS(CH_SCATTER_SET, scatter, _)
CH_CORE_AND_F8(CH_SCATTER_ADD, scatter_add, _)
CH_CORE_AND_F8(CH_INDEX_ADD_KERNEL, index_add, _)
CH_CORE_AND_F8(CH_INDEX_ADD_KERNEL, index_add_rows, _)
#endif
#if CH_PART(3)
CH_CARRIERS(CH_SCATTER_SET_TILES, scatter_tiles, _)
#endif
#if CH_PART(4)
CH_CORE_AND_F8(CH_SCATTER_ADD_TILES, scatter_add_tiles, _)
#endif
#if CH_PART(5)
CH_CORE_AND_F8(CH_INDEX_ADD_TILES, index_add_tiles, _)
#endif
