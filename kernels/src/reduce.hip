// Reductions over any set of dimensions: reduce_<op>_<dtype> with op one of
// sum, minmax (min or max; output dtype = input dtype) and argminmax (argmin
// or argmax; output u32), for u8, u32, i64, f16, bf16, f32 and f64. The host
// reduces i16 and i32 as i64 and f8e4m3 as f32 (dtypes that hold them
// exactly; a sum's result converted back wraps or rounds as theirs would), so
// that kernels of their own do not add to the compile time.
//
// Signature: (const ReduceInfo info, const T* src, Out* dst, State* work),
// and for minmax and argminmax a last `ch_u32 largest`: 1 for max/argmax, 0
// for min/argmin.
// The host splits the source layout into the kept dimensions (out_*, their
// order is the order of the contiguous output) and the reduced ones (red_*);
// `src` points at the first element of the source view. When the reduced
// elements of each output are cut into `split` > 1 chunks, the first launch
// writes one partial state per (output, chunk) to `work` (chunk-major:
// work[chunk * num_out + output], so that adjacent outputs' partials are
// adjacent) and a second launch of the same kernel in a FINISH mode combines
// them into dst; with split == 1, `work` is unused (may be null).
//
// Modes, chosen by the host (candle-hip/src/ops/reduce/plan.rs):
// - ROWS: one block per (output, chunk); the block's threads stride over the
//   chunk (16-byte loads when the reduced elements are contiguous), then a
//   block reduction. For reduced elements with an innermost stride of 1.
// - COLS: a block holds `tile` adjacent outputs x (blockDim / tile) groups of
//   reduced positions; adjacent threads read adjacent outputs (coalesced when
//   the outputs are adjacent in memory), the groups are combined through
//   shared memory. For reductions over non-innermost dimensions, and with
//   tile = blockDim (a thread per output) for short reductions.
// - COLS_PACKED: COLS where each thread owns a 16-byte pack of V adjacent
//   outputs (V independent states), so a wave reads whole 16-byte packs of
//   a row per reduced position. For one reduced dimension whose stride, like
//   every outer output stride, is a multiple of V, and outputs adjacent in
//   memory (innermost output stride 1); `tile` counts threads. The rows of
//   outputs are cut into packs from the aligned address at or before their
//   start, so the first and last pack of a row may be partial (masked loads).
// - FINISH_BLOCK / FINISH_THREAD: combine the `split` partial states of each
//   output with a block / a thread per output.
//
// Semantics follow Candle's CPU backend: f16/bf16 (and f8e4m3, reduced as
// f32) sum in f32 (Candle sums in the narrow type, rounding every partial
// sum, so results differ by rounding); integer sums wrap; min/max
// and argmin/argmax pick the first extremum in reduction order, skip NaN
// unless the first element is NaN (then the result is that NaN, index 0).

#include "common.h"

// Kept and reduced dimensions (each, after merging) a reduction takes: the
// host reduces a strided source with more from a contiguous copy (at most
// half of CH_MAX_DIMS of each), and a longer contiguous one in two passes
// (ops/reduce/mod.rs). Four instead of eight halve the index math that
// every kernel carries (its compile time and registers).
#define CH_REDUCE_MAX_DIMS 4
#define CH_REDUCE_ROWS 0
#define CH_REDUCE_COLS 1
#define CH_REDUCE_FINISH_BLOCK 2
#define CH_REDUCE_FINISH_THREAD 3
#define CH_REDUCE_COLS_PACKED 4

// Mirrored by `ReduceInfo` in candle-hip/src/kernel/info.rs.
struct ReduceInfo {
  ch_u64 num_out;
  ch_u64 red_size;
  ch_u32 out_rank;
  ch_u32 red_rank;
  ch_u32 mode;   // CH_REDUCE_*
  ch_u32 tile;   // COLS / COLS_PACKED: outputs / packs per block (divides blockDim.x)
  ch_u64 split;  // chunks per output (>= 1)
  ch_u64 chunk;  // reduced positions per chunk (the last may be shorter)
  ch_u64 out_dims[CH_REDUCE_MAX_DIMS];
  ch_u64 out_strides[CH_REDUCE_MAX_DIMS];
  ch_u64 red_dims[CH_REDUCE_MAX_DIMS];
  ch_u64 red_strides[CH_REDUCE_MAX_DIMS];
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

// A reduction R is an object (empty, or the direction of a min/max) whose
// push, run_push, run_first and finish the kernels call on it; identity,
// combine, run_identity and run_seal are static.
//
// How reduce_contiguous folds its packs (the "run" hooks): every position
// pushed exactly, in order, into states that start empty.
template <typename Base, typename T>
struct ExactRun : Base {
  typedef typename Base::State State;
  __device__ __forceinline__ static State run_identity() { return Base::identity(); }
  __device__ __forceinline__ State run_push(State st, T x, ch_u64 j) const { return this->push(st, x, j); }
  // A lane state, once its pushes are done, ready for combine.
  __device__ __forceinline__ static State run_seal(State st) { return st; }
  // Called with the run's first element when the run starts at position 0.
  __device__ __forceinline__ State run_first(State st, T) const { return st; }
};

template <typename T>
struct SumBase {
  typedef typename SumTraits<T>::A A;
  typedef T Out;
  static const int LANES = 1;
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

template <typename T>
struct SumR : ExactRun<SumBase<T>, T> {};

// Min and max share their kernels: values are compared as keys whose
// largest is the wanted extremum: the values themselves for max, in the
// reverse order for min (floats negated, integers complemented, which
// reverses the order of signed and unsigned integers alike). The order is
// its own inverse, which turns the winning key back into its value.
template <typename K, bool F = Num<K>::is_float>
struct KeyOrder;

template <typename K>
struct KeyOrder<K, true> {
  K sign;
  __device__ __forceinline__ static KeyOrder of(ch_u32 largest) { return {largest ? (K)1 : (K)-1}; }
  __device__ __forceinline__ K operator()(K k) const { return k * sign; }
};

template <typename K>
struct KeyOrder<K, false> {
  K mask;
  __device__ __forceinline__ static KeyOrder of(ch_u32 largest) { return {largest ? (K)0 : (K)~(K)0}; }
  __device__ __forceinline__ K operator()(K k) const { return (K)(k ^ mask); }
};

#define CH_NO_INDEX 0xffffffffu

// The largest key with the position of the winner. The order used by
// combine is total: empty < ordinary keys (by key, then lower index) < NaN
// at index 0, so the result does not depend on how the work was split.
template <typename T>
struct ExtremumBase {
  typedef typename KeyOf<T>::K K;
  static const int LANES = 4;
  struct State {
    K v;
    ch_u32 i;
  };
  KeyOrder<K> order;
  __device__ __forceinline__ static State identity() {
    State st;
    st.v = (K)0;
    st.i = CH_NO_INDEX;
    return st;
  }
  __device__ __forceinline__ static bool better(K a, K b) { return a > b; }
  __device__ __forceinline__ static State combine(State a, State b) {
    if (a.i == CH_NO_INDEX) return b;
    if (b.i == CH_NO_INDEX) return a;
    if (a.v != a.v) return a;
    if (b.v != b.v) return b;
    if (better(a.v, b.v)) return a;
    if (better(b.v, a.v)) return b;
    return a.i <= b.i ? a : b;
  }
  // Positions reach one state in increasing order, so an ordinary value
  // replaces the state only when strictly better; an empty state takes any
  // value but a NaN past position 0, and nothing beats a NaN at position 0.
  __device__ __forceinline__ State push(State st, T x, ch_u64 j) const {
    const K v = order(KeyOf<T>::key(x));
    const bool take = st.i == CH_NO_INDEX ? (v == v || j == 0) : better(v, st.v);
    if (take) {
      st.v = v;
      st.i = (ch_u32)j;
    }
    return st;
  }
};

__device__ __forceinline__ float ch_larger(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double ch_larger(double a, double b) { return fmax(a, b); }

// Run hooks of a value-only min/max: integers push exactly.
template <typename T, bool F = Num<T>::is_float>
struct ValueRun : ExactRun<ExtremumBase<T>, T> {};

// Floats: the lanes fold keys with fmax (one instruction, NaN skipped)
// instead of the ordered push (several dependent compares and
// selects per element, which made the reduction compute-bound).
// A lane starts at NaN, the fold's neutral value, and run_seal makes it an
// ordinary state, or an empty one if it saw only NaNs, which never win past
// position 0. The NaN that does win, at position 0, reaches the result
// through run_first. Only the value is returned, so the placeholder index
// of a lane matters for nothing but ties of equal values (-0 and +0 may come
// out either way).
template <typename T>
struct ValueRun<T, true> : ExtremumBase<T> {
  typedef ExtremumBase<T> B;
  typedef typename B::State State;
  typedef typename B::K K;
  __device__ __forceinline__ static State run_identity() {
    ch_f32_bits nan;
    nan.u = 0x7fc00000u;
    State st;
    st.v = (K)nan.f;
    st.i = 0;
    return st;
  }
  __device__ __forceinline__ State run_push(State st, T x, ch_u64) const {
    st.v = ch_larger(st.v, this->order(KeyOf<T>::key(x)));
    return st;
  }
  __device__ __forceinline__ static State run_seal(State st) { return st.v == st.v ? st : B::identity(); }
  __device__ __forceinline__ State run_first(State st, T x) const { return this->push(st, x, 0); }
};

// Min or max: reduce_minmax_<dtype>.
template <typename T>
struct MinMaxR : ValueRun<T> {
  typedef T Out;
  __device__ __forceinline__ static MinMaxR of(ch_u32 largest) {
    MinMaxR r;
    r.order = KeyOrder<typename KeyOf<T>::K>::of(largest);
    return r;
  }
  __device__ __forceinline__ Out finish(typename ExtremumBase<T>::State st) const {
    return KeyOf<T>::value(this->order(st.v));
  }
};

// Run hooks of an arg-reduction: exact pushes; for f8e4m3 (16 elements
// per pack, whose per-element position checks made these kernels spill 98
// vector registers on gfx942), lanes that skip every NaN and leave the one
// at position 0 to run_first, as the float min/max lanes do.
template <typename T, bool F8 = sizeof(T) == 1 && Num<T>::is_float>
struct ArgRun : ExactRun<ExtremumBase<T>, T> {};

template <typename T>
struct ArgRun<T, true> : ExtremumBase<T> {
  typedef ExtremumBase<T> B;
  typedef typename B::State State;
  __device__ __forceinline__ static State run_identity() { return B::identity(); }
  __device__ __forceinline__ State run_push(State st, T x, ch_u64 j) const {
    const typename B::K v = this->order(KeyOf<T>::key(x));
    if (st.i == CH_NO_INDEX ? v == v : B::better(v, st.v)) {
      st.v = v;
      st.i = (ch_u32)j;
    }
    return st;
  }
  __device__ __forceinline__ static State run_seal(State st) { return st; }
  __device__ __forceinline__ State run_first(State st, T x) const { return this->push(st, x, 0); }
};

// Argmin or argmax: reduce_argminmax_<dtype>.
template <typename T>
struct ArgMinMaxR : ArgRun<T> {
  // Two (value, index) lanes: with four, the f16/bf16 arg-reductions
  // spilled 3 vector registers each on gfx942 (wave64, 1024-thread blocks).
  static const int LANES = 2;
  typedef ch_u32 Out;
  __device__ __forceinline__ static ArgMinMaxR of(ch_u32 largest) {
    ArgMinMaxR r;
    r.order = KeyOrder<typename KeyOf<T>::K>::of(largest);
    return r;
  }
  __device__ __forceinline__ static Out finish(typename ExtremumBase<T>::State st) { return st.i; }
};

// Packs of a contiguous run each thread loads before folding them in.
#define CH_REDUCE_PACKS 2

// This thread's share of the contiguous run row[0..n), whose positions in
// reduction order start at j0 (block-strided packs, CH_REDUCE_PACKS loads in
// flight, one for 1-byte elements, whose packs are 16 pushes each). The
// packs fold into `R::LANES` independent partial states (at
// most one per element of a pack; element k goes to state k % lanes), so
// that several push chains run side by side: a min/max push is a chain of
// compares and selects on its state (one state made max over bf16
// latency-bound), a sum one add, cheaper than the registers more states
// take. combine is order-independent, so folding the lanes at the end gives
// the same result.
template <typename R, typename T>
__device__ __forceinline__ typename R::State reduce_contiguous(const R& r, const T* row, ch_u64 n, ch_u64 j0,
                                                               typename R::State st) {
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  const int U = V <= 8 ? CH_REDUCE_PACKS : 1;
  const int L = V < R::LANES ? V : R::LANES;
  typedef Pack<T, V> P;
  const ch_u64 block = blockDim.x;
  const ch_u64 misaligned = (reinterpret_cast<ch_u64>(row) / sizeof(T)) % V;
  ch_u64 head = misaligned == 0 ? 0 : V - misaligned;
  if (head > n) head = n;
  for (ch_u64 j = threadIdx.x; j < head; j += block) st = r.push(st, row[j], j0 + j);
  const ch_u64 nv = (n - head) / V;
  const P* packs = reinterpret_cast<const P*>(row + head);
  const ch_u64 first = j0 + head;
  if (first == 0 && nv > 0 && threadIdx.x == 0) st = r.run_first(st, packs[0].v[0]);
  typename R::State lane[L];
#pragma unroll
  for (int l = 0; l < L; ++l) lane[l] = R::run_identity();
  ch_u64 p = threadIdx.x;
  for (; p + (U - 1) * block < nv; p += U * block) {
    P pk[U];
#pragma unroll
    for (int u = 0; u < U; ++u) pk[u] = packs[p + u * block];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int k = 0; k < V; ++k) lane[k % L] = r.run_push(lane[k % L], pk[u].v[k], first + (p + u * block) * V + k);
    }
  }
  for (; p < nv; p += block) {
    const P pk = packs[p];
#pragma unroll
    for (int k = 0; k < V; ++k) lane[k % L] = r.run_push(lane[k % L], pk.v[k], first + p * V + k);
  }
#pragma unroll
  for (int l = 0; l < L; ++l) st = R::combine(st, R::run_seal(lane[l]));
  for (ch_u64 j = head + nv * V + threadIdx.x; j < n; j += block) st = r.push(st, row[j], j0 + j);
  return st;
}

// Offset of reduced position j from its output's first element.
__device__ __forceinline__ ch_u64 red_offset(const ReduceInfo& info, ch_u64 j) {
  return strided_offset<CH_REDUCE_MAX_DIMS>(j, info.red_rank, info.red_dims, info.red_strides);
}

__device__ __forceinline__ ch_u64 out_offset(const ReduceInfo& info, ch_u64 o) {
  return strided_offset<CH_REDUCE_MAX_DIMS>(o, info.out_rank, info.out_dims, info.out_strides);
}

// The result of chunk c of output o: the output itself, or a partial state.
template <typename R>
__device__ __forceinline__ void emit(const R& r, const ReduceInfo& info, ch_u64 o, ch_u64 c, typename R::State st,
                                     typename R::Out* dst, typename R::State* work) {
  if (info.split == 1) {
    dst[o] = r.finish(st);
  } else {
    work[c * info.num_out + o] = st;
  }
}

template <typename R, typename T>
__device__ __forceinline__ void reduce_rows(const R& r, const ReduceInfo& info, const T* src, typename R::Out* dst,
                                            typename R::State* work) {
  __shared__ typename R::State scratch[CH_MAX_WAVES];
  const ch_u64 n = info.red_size;
  const bool contiguous = info.red_rank == 1 && info.red_strides[0] == 1;
  const ch_u64 items = info.num_out * info.split;
  for (ch_u64 b = blockIdx.x; b < items; b += gridDim.x) {
    ch_u64 c;
    const ch_u64 o = divmod(b, info.split, c);
    const ch_u64 start = c * info.chunk;
    const ch_u64 end = n - start < info.chunk ? n : start + info.chunk;
    const T* base = src + out_offset(info, o);
    typename R::State st = R::identity();
    if (contiguous) {
      st = reduce_contiguous(r, base + start, end - start, start, st);
    } else {
      for (ch_u64 j = start + threadIdx.x; j < end; j += blockDim.x) st = r.push(st, base[red_offset(info, j)], j);
    }
    st = block_reduce<R>(st, scratch);
    if (threadIdx.x == 0) emit(r, info, o, c, st, dst, work);
  }
}

// COLS_PACKED's shared scratch: CH_REDUCE_STATE_BYTES per thread, so one
// pass of combine_groups moves PER of each thread's states.
template <typename R>
struct ColsScratch {
  static const int PER = CH_REDUCE_STATE_BYTES / (int)sizeof(typename R::State);
  static const int STATES = CH_ELEM_BLOCK * PER;
};

// Folds the states of the block's groups (thread = group * tile + column)
// into group 0, column by column: st[k] of a group-0 thread becomes the
// combination of st[k] of every group in increasing group order. Passes of
// PER states per thread go through `part` (CH_ELEM_BLOCK * PER states of
// shared memory). Every thread must call it.
template <typename R, int PER, int S>
__device__ __forceinline__ void combine_groups(typename R::State (&st)[S], typename R::State* part, ch_u32 tile,
                                               ch_u64 groups) {
  const ch_u32 tx = threadIdx.x % tile;
  const bool lead = threadIdx.x < tile;
#pragma unroll
  for (int k0 = 0; k0 < S; k0 += PER) {
    if (!lead) {
#pragma unroll
      for (int kk = 0; kk < PER; ++kk) {
        if (k0 + kk < S) part[threadIdx.x * PER + kk] = st[k0 + kk];
      }
    }
    __syncthreads();
    if (lead) {
      for (ch_u64 g = 1; g < groups; ++g) {
#pragma unroll
        for (int kk = 0; kk < PER; ++kk) {
          if (k0 + kk < S) st[k0 + kk] = R::combine(st[k0 + kk], part[(g * tile + tx) * PER + kk]);
        }
      }
    }
    __syncthreads();
  }
}

// Must be launched with CH_ELEM_BLOCK threads per block.
template <typename R, typename T>
__device__ __forceinline__ void reduce_cols(const R& r, const ReduceInfo& info, const T* src, typename R::Out* dst,
                                            typename R::State* work, typename R::State* part) {
  const ch_u64 n = info.red_size;
  const ch_u32 tile = info.tile;
  const ch_u64 groups = blockDim.x / tile;
  const ch_u32 tx = threadIdx.x % tile;
  const ch_u64 ty = threadIdx.x / tile;
  const ch_u64 tiles = (info.num_out + tile - 1) / tile;
  const ch_u64 items = tiles * info.split;
  for (ch_u64 b = blockIdx.x; b < items; b += gridDim.x) {
    ch_u64 c;
    const ch_u64 o = divmod(b, info.split, c) * tile + tx;
    typename R::State st[1] = {R::identity()};
    if (o < info.num_out) {
      const T* base = src + out_offset(info, o);
      const ch_u64 start = c * info.chunk;
      const ch_u64 end = n - start < info.chunk ? n : start + info.chunk;
      ch_u64 j = start + ty;
      if (info.red_rank == 1) {
        // One reduced dimension: CH_UNROLL loads in flight.
        const ch_u64 stride = info.red_strides[0];
        for (; j + (CH_UNROLL - 1) * groups < end; j += CH_UNROLL * groups) {
          T x[CH_UNROLL];
#pragma unroll
          for (int u = 0; u < CH_UNROLL; ++u) x[u] = base[(j + u * groups) * stride];
#pragma unroll
          for (int u = 0; u < CH_UNROLL; ++u) st[0] = r.push(st[0], x[u], j + u * groups);
        }
      }
      for (; j < end; j += groups) st[0] = r.push(st[0], base[red_offset(info, j)], j);
    }
    combine_groups<R, 1>(st, part, tile, groups);
    if (ty == 0 && o < info.num_out) emit(r, info, o, c, st[0], dst, work);
  }
}

// Lanes [lo, hi) of the V elements at p (a 16-byte aligned address), with
// one wide load when FULL (lo == 0, hi == V); other lanes are zero.
template <bool FULL, typename T, int V>
__device__ __forceinline__ Pack<T, V> load_lanes(const T* p, int lo, int hi) {
  if (FULL) return *reinterpret_cast<const Pack<T, V>*>(p);
  Pack<T, V> r;
#pragma unroll
  for (int k = 0; k < V; ++k) r.v[k] = k >= lo && k < hi ? p[k] : zero_bits<T>();
  return r;
}

// COLS_PACKED's main loop: the pack of lanes [lo, hi) at `lane0` (the
// address of lane 0 at reduced position j) for positions j, j + groups, ...
// while U of them fit before `end`, U loads in flight; j and lane0 are left
// at the first position not done. Lanes outside [lo, hi) fold zeros into
// states that never reach an output.
template <bool FULL, int U, typename R, typename T, int V>
__device__ __forceinline__ void fold_packs(const R& r, typename R::State (&st)[V], const T*& lane0, ch_u64& j,
                                           ch_u64 end, ch_u64 groups, ch_u64 step, int lo, int hi) {
  for (; j + (U - 1) * groups < end; j += U * groups, lane0 += U * step) {
    Pack<T, V> pk[U];
#pragma unroll
    for (int u = 0; u < U; ++u) pk[u] = load_lanes<FULL, T, V>(lane0 + u * step, lo, hi);
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int k = 0; k < V; ++k) st[k] = r.push(st[k], pk[u].v[k], j + u * groups);
    }
  }
}

// COLS_PACKED; must be launched with CH_ELEM_BLOCK threads per block.
template <typename R, typename T>
__device__ __forceinline__ void reduce_cols_packed(const R& r, const ReduceInfo& info, const T* src,
                                                   typename R::Out* dst, typename R::State* work) {
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  // Packs in flight per thread: as map_elems, half as many for packs of 8
  // or more elements (their states take twice the registers), one for
  // packs of 16 (whose unrolled pushes would dominate the compile time).
  const int U = V <= 4 ? CH_UNROLL : V <= 8 ? CH_UNROLL / 2 : 1;
  __shared__ typename R::State part[ColsScratch<R>::STATES];
  const ch_u64 n = info.red_size;
  const ch_u64 stride = info.red_strides[0];
  const ch_u64 width = info.out_dims[info.out_rank - 1];
  // Elements between the aligned address at or before src and src: every
  // row of outputs starts this far past an aligned address.
  const ch_u64 head = (reinterpret_cast<ch_u64>(src) / sizeof(T)) % V;
  const ch_u64 row_packs = (head + width + V - 1) / V;
  const ch_u64 packs = info.num_out / width * row_packs;
  const ch_u32 tile = info.tile;
  const ch_u64 groups = blockDim.x / tile;
  const ch_u32 tx = threadIdx.x % tile;
  const ch_u64 ty = threadIdx.x / tile;
  const ch_u64 items = (packs + tile - 1) / tile * info.split;
  for (ch_u64 b = blockIdx.x; b < items; b += gridDim.x) {
    ch_u64 c;
    const ch_u64 q = divmod(b, info.split, c) * tile + tx;
    typename R::State st[V];
#pragma unroll
    for (int k = 0; k < V; ++k) st[k] = R::identity();
    // Lane k of pack q holds output o0 + k for lo <= k < hi.
    ch_u64 o0 = 0;
    int lo = 0;
    int hi = 0;
    if (q < packs) {
      ch_u64 qi;
      const ch_u64 row = divmod(q, row_packs, qi);
      const ch_u64 first = qi * V;
      lo = qi == 0 ? (int)head : 0;
      hi = head + width - first < (ch_u64)V ? (int)(head + width - first) : V;
      o0 = row * width + first - head;
      const ch_u64 start = c * info.chunk;
      const ch_u64 end = n - start < info.chunk ? n : start + info.chunk;
      const ch_u64 step = groups * stride;
      ch_u64 j = start + ty;
      // Lane 0 of the pack at reduced position j: 16-byte aligned, and
      // before the row's first output when lo > 0 (only lanes from lo on
      // are read).
      const T* lane0 = src + out_offset(info, row * width) + j * stride + first - head;
      if (lo == 0 && hi == V) {
        fold_packs<true, U>(r, st, lane0, j, end, groups, step, lo, hi);
      } else {
        // The partial packs at the ends of a row.
        fold_packs<false, U>(r, st, lane0, j, end, groups, step, lo, hi);
      }
      for (; j < end; j += groups, lane0 += step) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if (k >= lo && k < hi) st[k] = r.push(st[k], lane0[k], j);
        }
      }
    }
    combine_groups<R, ColsScratch<R>::PER>(st, part, tile, groups);
    if (ty == 0) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (k >= lo && k < hi) emit(r, info, o0 + k, c, st[k], dst, work);
      }
    }
  }
}

template <typename R>
__device__ __forceinline__ void reduce_finish(const R& r, const ReduceInfo& info, typename R::Out* dst,
                                              const typename R::State* work) {
  const ch_u64 split = info.split;
  if (info.mode == CH_REDUCE_FINISH_THREAD) {
    for (ch_u64 o = global_thread(); o < info.num_out; o += global_threads()) {
      typename R::State st = R::identity();
      for (ch_u64 c = 0; c < split; ++c) st = R::combine(st, work[c * info.num_out + o]);
      dst[o] = r.finish(st);
    }
    return;
  }
  __shared__ typename R::State scratch[CH_MAX_WAVES];
  for (ch_u64 o = blockIdx.x; o < info.num_out; o += gridDim.x) {
    typename R::State st = R::identity();
    for (ch_u64 c = threadIdx.x; c < split; c += blockDim.x) st = R::combine(st, work[c * info.num_out + o]);
    st = block_reduce<R>(st, scratch);
    if (threadIdx.x == 0) dst[o] = r.finish(st);
  }
}

template <typename R, typename T>
__device__ __forceinline__ void reduce_body(const R& r, const ReduceInfo& info, const T* src, typename R::Out* dst,
                                            typename R::State* work) {
  static_assert(sizeof(typename R::State) <= CH_REDUCE_STATE_BYTES, "partial states fit their slots");
  __shared__ typename R::State part[CH_ELEM_BLOCK];
  switch (info.mode) {
    case CH_REDUCE_ROWS:
      reduce_rows(r, info, src, dst, work);
      break;
    case CH_REDUCE_COLS:
      reduce_cols(r, info, src, dst, work, part);
      break;
    default:
      reduce_finish(r, info, dst, work);
      break;
  }
}

// The parameters of every reduction kernel of R over dtype TY. Min/max
// kernels (MinMaxR, ArgMinMaxR) take a last `ch_u32 largest`, the
// direction, which makes their reduction object; a sum's is empty.
#define CH_REDUCE_PARAMS(R, TY) \
  const ReduceInfo info, const ch_##TY *src, R<ch_##TY>::Out *dst, R<ch_##TY>::State *work

#define CH_REDUCE_KERNEL(NAME, R, TY)                                                                      \
  extern "C" __global__ void __launch_bounds__(CH_REDUCE_MAX_BLOCK) NAME##_##TY(CH_REDUCE_PARAMS(R, TY)) { \
    reduce_body(R<ch_##TY>(), info, src, dst, work);                                                       \
  }
#define CH_DIRECTED_REDUCE_KERNEL(NAME, R, TY)                                                             \
  extern "C" __global__ void __launch_bounds__(CH_REDUCE_MAX_BLOCK)                                        \
      NAME##_##TY(CH_REDUCE_PARAMS(R, TY), const ch_u32 largest) {                                         \
    reduce_body(R<ch_##TY>::of(largest), info, src, dst, work);                                            \
  }

// COLS_PACKED has kernels of its own (reduce_cols_<op>_<dtype>, same
// parameters): its V states per thread would raise the register count of
// every mode if it shared the kernel (reduce_sum_f32 went from 32 to 58
// registers on sm_90, halving the occupancy of its ROWS blocks).
#define CH_REDUCE_PACKED_KERNEL(NAME, R, TY)                                                               \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK) NAME##_##TY(CH_REDUCE_PARAMS(R, TY)) {       \
    reduce_cols_packed(R<ch_##TY>(), info, src, dst, work);                                                \
  }
#define CH_DIRECTED_REDUCE_PACKED_KERNEL(NAME, R, TY)                                                      \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                              \
      NAME##_##TY(CH_REDUCE_PARAMS(R, TY), const ch_u32 largest) {                                         \
    reduce_cols_packed(R<ch_##TY>::of(largest), info, src, dst, work);                                     \
  }

// Parts: 1 sum, 2 min/max, 3 argmin/argmax, each with its COLS_PACKED kernel.
#if CH_PART(1)
CH_ALL(CH_REDUCE_KERNEL, reduce_sum, SumR)
CH_ALL(CH_REDUCE_PACKED_KERNEL, reduce_cols_sum, SumR)
#endif
#if CH_PART(2)
CH_ALL(CH_DIRECTED_REDUCE_KERNEL, reduce_minmax, MinMaxR)
CH_ALL(CH_DIRECTED_REDUCE_PACKED_KERNEL, reduce_cols_minmax, MinMaxR)
#endif
#if CH_PART(3)
CH_ALL(CH_DIRECTED_REDUCE_KERNEL, reduce_argminmax, ArgMinMaxR)
CH_ALL(CH_DIRECTED_REDUCE_PACKED_KERNEL, reduce_cols_argminmax, ArgMinMaxR)
#endif
