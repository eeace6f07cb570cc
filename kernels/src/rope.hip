// Rotary position embeddings (candle_nn::rotary_emb), for f16, bf16, f32 and
// f64, on contiguous tensors:
//
//   rope_i_<dtype>   x: (b, h, t, d), pairs (x[2j], x[2j+1])      (rope_i)
//   rope_<dtype>     x: (b, h, t, d), pairs (x[j], x[j + d/2])    (rope)
//   rope_thd_<dtype> x: (b, t, h, d), pairs (x[j], x[j + d/2])    (rope_thd)
//
// Signature: (const T* x, const T* cos, const T* sin, T* y, ch_u32 b,
//             ch_u32 h, ch_u32 t, ch_u32 d, ch_u32 batched)
// cos and sin are (t', d/2) with t' >= t, or (b, t, d/2) when `batched` is 1
// (their batch stride is t * d/2, as in candle-nn's CPU implementation).
// Each pair (x1, x2) at sequence position i_t and frequency j becomes
//   (x1 * cos - x2 * sin, x1 * sin + x2 * cos), cos = cos[i_t, j] ...
// computed in f32 (f64 for f64) and rounded once. One thread per pair,
// grid-stride; any block size.
//
// One decoding step of batch 1, rotated and appended to its key/value cache in
// one launch:
//
//   rope_append_<dtype>    pairs (x[j], x[j + d/2])   (rope)
//   rope_i_append_<dtype>  pairs (x[2j], x[2j+1])     (rope_i)
//
// Signature: (const T* qkv, const T* cos, const T* sin, const ch_u32* pos,
//             T* state, ch_u32 heads, ch_u32 kv_heads, ch_u32 d,
//             ch_u32 max_len, ch_u32 rows)
// qkv holds the step's projections: `heads` query heads, then `kv_heads` key
// heads, then `kv_heads` value heads, d elements each. The position p = *pos
// is read on the device (a captured step serves every position). state is
// [keys (kv_heads, max_len, d) | values (kv_heads, max_len, d) | query
// (heads, d)]: the rotated keys go to row p of the keys, the values (as they
// are) to row p of the values, the rotated query heads to the query. cos and
// sin are (rows, d/2); p >= max_len or p >= rows writes nothing (the host
// checks the position before it reaches the device).

#include "common.h"

// Where pair q of each variant lives: element indices of x1 and x2 and the
// index into cos/sin.
struct RopeShape {
  ch_u64 h, t, d, batched;
};

struct RopeInterleaved {
  __device__ __forceinline__ static void map(const RopeShape& s, ch_u64 q, ch_u64& i1, ch_u64& i2, ch_u64& cs) {
    const ch_u64 td2 = s.t * (s.d / 2);
    ch_u64 r;
    const ch_u64 bh = divmod(q, td2, r);
    i1 = 2 * q;
    i2 = i1 + 1;
    cs = r + (s.batched ? (bh / s.h) * td2 : 0);
  }
};

struct RopeHalves {
  __device__ __forceinline__ static void map(const RopeShape& s, ch_u64 q, ch_u64& i1, ch_u64& i2, ch_u64& cs) {
    const ch_u64 half = s.d / 2;
    ch_u64 j, i_t;
    const ch_u64 row = divmod(q, half, j);
    const ch_u64 bh = divmod(row, s.t, i_t);
    i1 = row * s.d + j;
    i2 = i1 + half;
    cs = i_t * half + j + (s.batched ? (bh / s.h) * s.t * half : 0);
  }
};

struct RopeThd {
  __device__ __forceinline__ static void map(const RopeShape& s, ch_u64 q, ch_u64& i1, ch_u64& i2, ch_u64& cs) {
    const ch_u64 half = s.d / 2;
    ch_u64 j, i_h, i_t;
    const ch_u64 row = divmod(q, half, j);
    const ch_u64 bt = divmod(row, s.h, i_h);
    const ch_u64 b = divmod(bt, s.t, i_t);
    i1 = row * s.d + j;
    i2 = i1 + half;
    cs = i_t * half + j + (s.batched ? b * s.t * half : 0);
  }
};

template <typename Map, typename T>
__device__ __forceinline__ void rope_body(const T* x, const T* cos, const T* sin, T* y, const RopeShape& s,
                                          ch_u64 pairs) {
  typedef typename Num<T>::acc A;
  for (ch_u64 q = global_thread(); q < pairs; q += global_threads()) {
    ch_u64 i1, i2, cs;
    Map::map(s, q, i1, i2, cs);
    const A x1 = Num<T>::to_acc(x[i1]);
    const A x2 = Num<T>::to_acc(x[i2]);
    const A c = Num<T>::to_acc(cos[cs]);
    const A sn = Num<T>::to_acc(sin[cs]);
    y[i1] = Num<T>::from_acc(x1 * c - x2 * sn);
    y[i2] = Num<T>::from_acc(x1 * sn + x2 * c);
  }
}

#define CH_ROPE_KERNEL(NAME, MAP, TY)                                                               \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                      \
      NAME##_##TY(const ch_##TY* x, const ch_##TY* cos, const ch_##TY* sin, ch_##TY* y, ch_u32 b,  \
                  ch_u32 h, ch_u32 t, ch_u32 d, ch_u32 batched) {                                  \
    const RopeShape s = {h, t, d, batched};                                                        \
    rope_body<MAP>(x, cos, sin, y, s, (ch_u64)b * h * t * (d / 2));                                \
  }

CH_FLOATS(CH_ROPE_KERNEL, rope_i, RopeInterleaved)
CH_FLOATS(CH_ROPE_KERNEL, rope, RopeHalves)
CH_FLOATS(CH_ROPE_KERNEL, rope_thd, RopeThd)

template <bool INTERLEAVED, typename T>
__device__ __forceinline__ void rope_append_body(const T* qkv, const T* cos, const T* sin, const ch_u32* pos,
                                                 T* state, ch_u32 heads, ch_u32 kv_heads, ch_u32 d,
                                                 ch_u32 max_len, ch_u32 rows) {
  const StepState st = {heads, kv_heads, d, max_len, *pos};
  if (st.p >= max_len || st.p >= rows) return;
  const ch_u32 half = d / 2;
  const ch_u64 pairs = (ch_u64)(heads + 2 * kv_heads) * half;
  for (ch_u64 q = global_thread(); q < pairs; q += global_threads()) {
    const ch_u64 head = q / half;
    const ch_u32 j = (ch_u32)(q % half);
    const ch_u32 i1 = INTERLEAVED ? 2 * j : j;
    const ch_u32 i2 = INTERLEAVED ? i1 + 1 : j + half;
    const T* x = qkv + head * d;
    step_store_pair(state, st, cos, sin, head, j, i1, i2, x[i1], x[i2]);
  }
}

#define CH_ROPE_APPEND_KERNEL(NAME, INTERLEAVED, TY)                                                 \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                       \
      NAME##_##TY(const ch_##TY* qkv, const ch_##TY* cos, const ch_##TY* sin, const ch_u32* pos,    \
                  ch_##TY* state, ch_u32 heads, ch_u32 kv_heads, ch_u32 d, ch_u32 max_len,          \
                  ch_u32 rows) {                                                                    \
    rope_append_body<INTERLEAVED>(qkv, cos, sin, pos, state, heads, kv_heads, d, max_len, rows);    \
  }

CH_FLOATS(CH_ROPE_APPEND_KERNEL, rope_append, false)
CH_FLOATS(CH_ROPE_APPEND_KERNEL, rope_i_append, true)
