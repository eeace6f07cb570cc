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
//   gemv_fused_<dtype>(const T* x, const T* w, T* y, ch_u32 n, ch_u32 k,
//                      ch_u64 w_stride, ch_u32 split, ch_u32 input,
//                      const T* norm_w, float eps, const T* residual)
//     y[j] = sum over i < k of x'[i] * w[j * w_stride + i] (+ residual[j]),
//     where x' is, by `input` (CH_GEMV_INPUT_*):
//       PLAIN     x itself (k elements);
//       RMS_NORM  x / sqrt(mean(x^2) + eps) * norm_w (as rms_norm_*);
//       SWIGLU    silu(x[i]) * x[k + i] (x holds 2k elements: gate, up);
//     each x'[i] rounded to T as the separate kernels round it. The decode
//     step's norm, activation and residual addition ride on its products:
//     every block first writes x' into shared memory (k elements of T, the
//     launch's dynamic shared memory; in 16-byte packs when x and norm_w
//     are aligned), except that a plain x on a 16-byte boundary is read in
//     place (gemv_reads_in_place); then its waves multiply as gemv_*
//     (split 1) or gemv_split_* do, the block taking the outputs of block
//     indices blockIdx.x, blockIdx.x + gridDim.x, ... (a grid of a few
//     blocks per compute unit stages x' a few times per unit, not once per
//     handful of outputs). residual may be null; the sum is rounded once.
//
//   gemv_pairs_<dtype>(const T* x, const T* w, T* y, ch_u32 n, ch_u32 k,
//                      ch_u64 w_stride, ch_u32 split, ch_u32 input,
//                      const T* norm_w, float eps, ch_u32 output,
//                      const T* cos, const T* sin, const ch_u32* pos,
//                      GemvRope rope)
//     gemv_fused_*'s products of x' (no residual), two rows of W per group
//     of waves, each sum rounded to T, then combined by `output`
//     (CH_GEMV_PAIRS_*), so that the kernel after the product rides on it:
//       SWIGLU  y[j] = silu(p[j]) * p[n + j] for j < n (W has 2n rows, the
//               gate's then the up projection's), as silu_mul_*;
//       ROPE, ROPE_I
//               W's rows are a decoding step's q, k and v heads (n pairs:
//               (heads + 2 kv_heads) * d / 2), y the step's state, and
//               each pair (rope: rows j, j + d/2 of a head; rope_i: 2j,
//               2j + 1) goes where rope_append_* / rope_i_append_*
//               (rope.hip) write it, the q and k pairs rotated at the
//               position *pos; a position at or past max_len or the
//               tables' rows writes nothing.
//     The same split as gemv_fused_* of the 2n rows gives each row the same
//     sum, bit for bit.
//
// The S * wave lanes of an output's waves stream W's row j in 16-byte packs,
// lane g of the group (g = wave of the group * wave size + lane) taking
// packs g, g + S * wave, g + 2 * S * wave, ... with CH_GEMV_UNROLL packs
// in flight (half of them from each row for gemv_pairs_*): each load instruction of a wave reads wave-size consecutive
// packs, and the group sweeps the row front to back together. Each pack is
// multiplied with the same pack of x (which every wave reads, so it stays in
// cache), and each wave sums its lanes. With S > 1 the first wave of the
// group then adds the S wave sums in wave order through shared memory, so
// the result does not change from run to run (it may differ in rounding
// between values of S). Sums run in f32 (f64 for f64), each output is
// rounded once. The host picks S (candle-hip/src/ops/gemv.rs).
//
// Launch: blocks of whole waves, a multiple of S waves per block (S = 1 for
// gemv_*) and at most CH_REDUCE_MAX_BLOCK threads, one output (pair) per S
// waves (gridDim.x = ceil(n / (waves per block / S))). The host guarantees: k a
// multiple of the pack size (16 bytes of T), x, w and w_stride aligned to 16
// bytes, and for gemv_split_* S one of 2, 4, 8, 16.

#include "common.h"

#define CH_GEMV_UNROLL 4
#define CH_GEMV_MAX_SPLIT 16

// What gemv_* and gemv_fused_* store: output j (the weight's row j) as
// one sum, plus residual[j] when residual is not null (the sum rounded once).
template <typename T>
struct GemvRows {
  typedef typename Num<T>::acc A;
  static const int R = 1;
  T* y;
  const T* residual;
  __device__ __forceinline__ ch_u64 row(ch_u64 j, int) const { return j; }
  __device__ __forceinline__ void store(ch_u64 j, const A (&v)[R]) const {
    y[j] = Num<T>::from_acc(residual != nullptr ? v[0] + Num<T>::to_acc(residual[j]) : v[0]);
  }
};

// The outputs of block index `block` (blockIdx.x, or a block's turn of a
// loop over them); every thread of the block calls it. Each group of S
// waves takes one item j < n of `out` (Out::R rows of the weight,
// out.row(j, r), multiplied together so that each x pack serves all of
// them) and hands their sums to out.store(j, ...).
template <typename T, int S, class Out>
__device__ __forceinline__ void gemv(const T* __restrict__ x, const T* __restrict__ w, ch_u32 n, ch_u32 k,
                                     ch_u64 w_stride, const Out& out, ch_u32 block) {
  typedef typename Num<T>::acc A;
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  const int R = Out::R;
  // Packs in flight per row: each lane keeps CH_GEMV_UNROLL packs in
  // flight whatever R is (the order of a row's sum does not depend on U).
  const int U = CH_GEMV_UNROLL / R;
  typedef Pack<T, V> P;
  // One partial sum per row and wave of the block (S > 1 only).
  __shared__ A partial[R][CH_MAX_WAVES];
  const ch_u32 lane = threadIdx.x % CANDLE_HIP_WAVE;
  const ch_u32 wave = threadIdx.x / CANDLE_HIP_WAVE;
  const ch_u32 part = wave % S;  // this wave's place in its group
  const ch_u64 j = (ch_u64)block * (blockDim.x / CANDLE_HIP_WAVE / S) + wave / S;
  // One wave per item: the whole wave leaves together, the reduction
  // below stays converged. Several: groups past the last item (in the
  // last block) load nothing but stay for the block's barrier; whole groups
  // are live or not, so every reduction stays converged.
  if (S == 1 && j >= n) return;
  const bool live = j < n;
  const P* wrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wrow[r] = reinterpret_cast<const P*>(w + (live ? out.row(j, r) : 0) * w_stride);
  const P* xv = reinterpret_cast<const P*>(x);
  const ch_u32 packs = live ? k / V : 0;
  A acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = (A)0;
  // Pack p of x times pack p of each row (wp[r]), in the same order for
  // every R, so that a row's sum does not depend on its neighbours.
  auto fma_packs = [&](const P (&wp)[R], ch_u32 p) {
    const P xp = xv[p];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int v = 0; v < V; ++v) acc[r] += Num<T>::to_acc(wp[r].v[v]) * Num<T>::to_acc(xp.v[v]);
  };
  // packs < 2^31 (two or more elements per pack) and U * stride <= 2^12:
  // p never wraps in 32 bits.
  const ch_u32 stride = S * CANDLE_HIP_WAVE;
  ch_u32 p = part * CANDLE_HIP_WAVE + lane;
  for (; p + (U - 1) * stride < packs; p += U * stride) {
    P wp[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) wp[u][r] = wrow[r][p + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) fma_packs(wp[u], p + u * stride);
  }
  // Fewer than U packs are left to this lane.
  if (S == 1) {
    for (; p < packs; p += stride) {
      P wp[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wp[r] = wrow[r][p];
      fma_packs(wp, p);
    }
  } else {
    // Split rows leave each lane only a few steps: the last packs are all
    // loaded before any is used.
    P wp[U - 1][R];
#pragma unroll
    for (int u = 0; u < U - 1; ++u)
      if (p + u * stride < packs)
#pragma unroll
        for (int r = 0; r < R; ++r) wp[u][r] = wrow[r][p + u * stride];
#pragma unroll
    for (int u = 0; u < U - 1; ++u)
      if (p + u * stride < packs) fma_packs(wp[u], p + u * stride);
  }

  A sums[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    typename AccSum<A>::State s;
    s.v = acc[r];
    sums[r] = wave_reduce<AccSum<A> >(s).v;
  }
  if (S == 1) {
    if (lane == 0) out.store(j, sums);
    return;
  }
  // Every thread of the block reaches the barrier (S is the kernel's).
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < R; ++r) partial[r][wave] = sums[r];
  __syncthreads();
  if (live && part == 0 && lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      sums[r] = partial[r][wave];
#pragma unroll
      for (int q = 1; q < S; ++q) sums[r] += partial[r][wave + q];
    }
    out.store(j, sums);
  }
  // The block's next call may write `partial` again.
  __syncthreads();
}

#define GEMV(NAME, OP, TYPE)                                                                       \
  extern "C" __global__ void NAME##_##TYPE(const ch_##TYPE* x, const ch_##TYPE* w, ch_##TYPE* y,   \
                                           ch_u32 n, ch_u32 k, ch_u64 w_stride) {                  \
    const GemvRows<ch_##TYPE> out = {y, nullptr};                                                   \
    gemv<ch_##TYPE, 1>(x, w, n, k, w_stride, out, blockIdx.x);                                      \
  }

// The items of S-wave groups: of block index blockIdx.x alone (gemv_split_*,
// whose grid has one block per block index), or with LOOP of block indices
// blockIdx.x, blockIdx.x + gridDim.x, ... below the launch's block count
// (ceil(n / items per block); gemv_fused_*, gemv_pairs_*). Each split runs
// its own loop, so what the compiler hoists out of one loop is live only
// while that split runs (one loop around the switch below held every
// split's at once and ran out of registers).
template <typename T, int S, bool LOOP, class Out>
__device__ __forceinline__ void gemv_blocks(const T* x, const T* w, ch_u32 n, ch_u32 k, ch_u64 w_stride,
                                            const Out& out) {
  if (!LOOP) {
    gemv<T, S>(x, w, n, k, w_stride, out, blockIdx.x);
    return;
  }
  const ch_u32 per_block = blockDim.x / CANDLE_HIP_WAVE / S;
  if (per_block == 0) return; /* not a launch the host makes */
  const ch_u32 blocks = (n + per_block - 1) / per_block;
  for (ch_u32 b = blockIdx.x; b < blocks; b += gridDim.x) gemv<T, S>(x, w, n, k, w_stride, out, b);
}

// The product of a launch's `split` (the same for the whole launch, so every
// block takes one branch; CH_GEMV_MAX_SPLIT is its last case) over the
// blocks gemv_blocks names.
template <typename T, bool LOOP, class Out>
__device__ __forceinline__ void gemv_of_split(ch_u32 split, const T* x, const T* w, ch_u32 n, ch_u32 k,
                                              ch_u64 w_stride, const Out& out) {
  switch (split) {
    case 1:
      gemv_blocks<T, 1, LOOP>(x, w, n, k, w_stride, out);
      break;
    case 2:
      gemv_blocks<T, 2, LOOP>(x, w, n, k, w_stride, out);
      break;
    case 4:
      gemv_blocks<T, 4, LOOP>(x, w, n, k, w_stride, out);
      break;
    case 8:
      gemv_blocks<T, 8, LOOP>(x, w, n, k, w_stride, out);
      break;
    case 16:
      gemv_blocks<T, 16, LOOP>(x, w, n, k, w_stride, out);
      break;
    default: /* not a split the host passes: nothing is read or written */
      break;
  }
}

#define CH_GEMV_INPUT_PLAIN 0
#define CH_GEMV_INPUT_RMS_NORM 1
#define CH_GEMV_INPUT_SWIGLU 2

// Writes gemv_fused's x' (see the top of the file) into xs, k elements, with
// every thread of the block; returns after a barrier. x, norm_w and xs are
// read and written in 16-byte packs when x and norm_w start on a 16-byte
// boundary (k is whole packs, xs is aligned), element by element otherwise;
// either way each x'[i] is the same.
template <typename T, int V>
__device__ __forceinline__ void gemv_stage_packs(T* xs, const T* __restrict__ x, ch_u32 k, ch_u32 input,
                                                 const T* __restrict__ norm_w, float eps) {
  typedef typename Num<T>::acc A;
  typedef Pack<T, V> P;
  __shared__ ch_u64 scratch[CH_ROW_SCRATCH_WORDS];
  const ch_u32 tid = threadIdx.x, threads = blockDim.x, packs = k / V;
  const P* xp = reinterpret_cast<const P*>(x);
  P* sp = reinterpret_cast<P*>(xs);
  if (input == CH_GEMV_INPUT_RMS_NORM) {
    typename AccSum<A>::State ss = AccSum<A>::identity();
    for (ch_u32 i = tid; i < packs; i += threads) {
      const P p = xp[i];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const A v = Num<T>::to_acc(p.v[e]);
        ss.v += v * v;
      }
    }
    ss = block_allreduce<AccSum<A> >(ss, reinterpret_cast<typename AccSum<A>::State*>(scratch));
    const A inv = (A)1 / ch_sqrt(ss.v / (A)k + (A)eps);
    const P* wp = reinterpret_cast<const P*>(norm_w);
    for (ch_u32 i = tid; i < packs; i += threads) {
      const P p = xp[i], g = wp[i];
      P o;
#pragma unroll
      for (int e = 0; e < V; ++e) o.v[e] = Num<T>::from_acc(Num<T>::to_acc(p.v[e]) * inv * Num<T>::to_acc(g.v[e]));
      sp[i] = o;
    }
  } else if (input == CH_GEMV_INPUT_SWIGLU) {
    for (ch_u32 i = tid; i < packs; i += threads) {
      const P gp = xp[i], up = xp[packs + i];
      P o;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const A g = Num<T>::to_acc(gp.v[e]);
        const T silu = Num<T>::from_acc(g / ((A)1 + ch_exp(-g)));
        o.v[e] = Num<T>::from_acc(Num<T>::to_acc(silu) * Num<T>::to_acc(up.v[e]));
      }
      sp[i] = o;
    }
  } else {
    for (ch_u32 i = tid; i < packs; i += threads) sp[i] = xp[i];
  }
  __syncthreads();
}

// gemv_stage_packs in packs of 16 bytes when x (and norm_w, for the norm)
// allow it, else of one element.
template <typename T>
__device__ __forceinline__ void gemv_stage_input(T* xs, const T* __restrict__ x, ch_u32 k, ch_u32 input,
                                                 const T* __restrict__ norm_w, float eps) {
  const bool aligned = ((ch_u64)x | (input == CH_GEMV_INPUT_RMS_NORM ? (ch_u64)norm_w : 0)) % CH_VEC_BYTES == 0;
  if (aligned)
    gemv_stage_packs<T, CH_VEC_BYTES / sizeof(T)>(xs, x, k, input, norm_w, eps);
  else
    gemv_stage_packs<T, 1>(xs, x, k, input, norm_w, eps);
}

// Whether gemv_fused multiplies x itself, read where it is (and cached as
// every block reads it), instead of staging x': a plain input on a 16-byte
// boundary. The host passes no shared memory then (fused/linear.rs mirrors
// it).
__device__ __forceinline__ bool gemv_reads_in_place(const void* x, ch_u32 input) {
  return input == CH_GEMV_INPUT_PLAIN && (ch_u64)x % CH_VEC_BYTES == 0;
}

// Multiplies x' (gemv_fused's input, staged or read in place) over the
// launch's split, for out's items.
template <typename T, class Out>
__device__ __forceinline__ void gemv_fused(const T* x, const T* w, ch_u32 n, ch_u32 k, ch_u64 w_stride,
                                           ch_u32 split, ch_u32 input, const T* norm_w, float eps,
                                           const Out& out) {
  // The staged input: the launch's dynamic shared memory, one type for
  // every dtype's kernel, 16-byte aligned for the packs.
  extern __shared__ Pack<ch_u32, 4> ch_gemv_input[];
  if (gemv_reads_in_place(x, input)) {
    gemv_of_split<T, true>(split, x, w, n, k, w_stride, out);
  } else {
    T* xs = reinterpret_cast<T*>(ch_gemv_input);
    gemv_stage_input<T>(xs, x, k, input, norm_w, eps);
    gemv_of_split<T, true>(split, xs, w, n, k, w_stride, out);
  }
}

#define CH_GEMV_PAIRS_SWIGLU 0
#define CH_GEMV_PAIRS_ROPE 1
#define CH_GEMV_PAIRS_ROPE_I 2

// The step's heads as gemv_pairs_* takes them: heads, kv_heads, d, max_len
// and the RoPE tables' rows (candle-hip's fused/linear.rs mirrors it).
struct GemvRope {
  ch_u32 heads, kv_heads, d, max_len, rows;
};

// What gemv_pairs_* stores for pair j of output rows (each sum rounded to
// T first, as the product's own output is): SwiGLU's activation of rows j
// and j + n, or a rotary pair of rows of the step's q, k and v heads
// written where rope_append_* (rope.hip) writes it.
template <typename T>
struct GemvPairs {
  typedef typename Num<T>::acc A;
  static const int R = 2;
  T* y;
  const T* cos;
  const T* sin;
  ch_u32 output, n;
  StepState step;  // RoPE only
  __device__ __forceinline__ ch_u64 row(ch_u64 j, int r) const {
    if (output == CH_GEMV_PAIRS_SWIGLU) return j + (ch_u64)r * n;
    const ch_u32 half = step.d / 2;
    const ch_u64 head = j / half, i = j % half;
    return head * step.d + (output == CH_GEMV_PAIRS_ROPE_I ? 2 * i + r : i + r * half);
  }
  __device__ __forceinline__ void store(ch_u64 j, const A (&v)[R]) const {
    const T t1 = Num<T>::from_acc(v[0]), t2 = Num<T>::from_acc(v[1]);
    if (output == CH_GEMV_PAIRS_SWIGLU) {
      const A g = Num<T>::to_acc(t1);
      y[j] = Num<T>::from_acc(g / ((A)1 + ch_exp(-g)) * Num<T>::to_acc(t2));
      return;
    }
    const ch_u32 half = step.d / 2, i = (ch_u32)(j % half);
    const bool interleaved = output == CH_GEMV_PAIRS_ROPE_I;
    const ch_u32 i1 = interleaved ? 2 * i : i, i2 = interleaved ? i1 + 1 : i + half;
    step_store_pair(y, step, cos, sin, j / half, i, i1, i2, t1, t2);
  }
};

#if CH_PART(1)
#define GEMV_FUSED(NAME, OP, TYPE)                                                                 \
  extern "C" __global__ void NAME##_##TYPE(const ch_##TYPE* x, const ch_##TYPE* w, ch_##TYPE* y,   \
                                           ch_u32 n, ch_u32 k, ch_u64 w_stride, ch_u32 split,      \
                                           ch_u32 input, const ch_##TYPE* norm_w, float eps,       \
                                           const ch_##TYPE* residual) {                            \
    const GemvRows<ch_##TYPE> out = {y, residual};                                                  \
    gemv_fused(x, w, n, k, w_stride, split, input, norm_w, eps, out);                              \
  }

#define GEMV_SPLIT(NAME, OP, TYPE)                                                                 \
  extern "C" __global__ void NAME##_##TYPE(const ch_##TYPE* x, const ch_##TYPE* w, ch_##TYPE* y,   \
                                           ch_u32 n, ch_u32 k, ch_u64 w_stride, ch_u32 split) {    \
    const GemvRows<ch_##TYPE> out = {y, nullptr};                                                   \
    gemv_of_split<ch_##TYPE, false>(split, x, w, n, k, w_stride, out);                             \
  }

CH_FLOATS(GEMV, gemv, unused)
CH_FLOATS(GEMV_SPLIT, gemv_split, unused)
CH_FLOATS(GEMV_FUSED, gemv_fused, unused)
#endif

#if CH_PART(2)
// The position is read on the device (a captured step serves every
// position); one past the cache or the tables writes nothing, and the
// whole block leaves before any barrier.
#define GEMV_PAIRS(NAME, OP, TYPE)                                                                 \
  extern "C" __global__ void NAME##_##TYPE(const ch_##TYPE* x, const ch_##TYPE* w, ch_##TYPE* y,   \
                                           ch_u32 n, ch_u32 k, ch_u64 w_stride, ch_u32 split,      \
                                           ch_u32 input, const ch_##TYPE* norm_w, float eps,       \
                                           ch_u32 output, const ch_##TYPE* cos,                    \
                                           const ch_##TYPE* sin, const ch_u32* pos, GemvRope rope) { \
    const ch_u32 p = output == CH_GEMV_PAIRS_SWIGLU ? 0 : *pos;                                    \
    if (output != CH_GEMV_PAIRS_SWIGLU && (p >= rope.max_len || p >= rope.rows)) return;           \
    const StepState step = {rope.heads, rope.kv_heads, rope.d, rope.max_len, p};                   \
    const GemvPairs<ch_##TYPE> out = {y, cos, sin, output, n, step};                               \
    gemv_fused(x, w, n, k, w_stride, split, input, norm_w, eps, out);                              \
  }

CH_FLOATS(GEMV_PAIRS, gemv_pairs, unused)
#endif
