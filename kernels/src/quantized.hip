// GGML's quantized blocks, in the byte layouts of GGUF files (those
// candle-core 0.11.1 reads): dequantization, and the matrix-vector product
// of decoding against a quantized weight, computed as candle's CPU backend
// computes it. For q in q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q2k, q3k, q4k,
// q5k, q6k, q8k:
//
//   dequantize_<q>_<dtype>(const ch_u8* blocks, T* y, ch_u64 subs)
//     y[i] = value i of the blocks, for i < subs * 32 (dtype f16, bf16, f32);
//     a grid-stride loop over DQ_LANES (1 or 4) threads per sub-block
//
//   quantize_act_<a>_<dtype>(const T* x, signed char* q, float* d, float* s,
//                            ch_u64 count, ch_u32 input, const T* norm_w,
//                            float eps)
//     x' rounded to 8 bits as candle's CPU `from_float` of block type a
//     does, a the vec-dot type of the weight's blocks (q8_0 for q4_0, q5_0
//     and q8_0, q8_1 for q4_1, q5_1 and q8_1: 32 values per scale; q8k for
//     the k-quants: 256; one kernel serves every weight type of its a),
//     where x' (count values, whole blocks; dtype f16, bf16, f32, widened to
//     f32 exactly) is x itself, the RMS norm of each of its rows or the
//     SwiGLU of each row's halves, by `input` (CH_QACT_INPUT_* below; norm_w
//     and eps are read for the norm only; the norm and SwiGLU take a row
//     of count / gridDim.y values per blockIdx.y): q[i] the integers, d[i /
//     32] the scale of value i's block (as stored: f16-rounded for q8_0 and
//     q8_1), s[i / 32] q8_1's scaled sum (unused otherwise)
//
//   qmatvec_<q>(const ch_u8* w, const signed char* q, const float* d,
//               const float* s, void* y, ch_u32 y_dtype, ch_u32 n, ch_u32 k,
//               ch_u32 rows, const void* residual, QRope rope)
//     y[r * n + j] = sum over the blocks of row j of W of candle's vec_dot of
//     the block with row r's quantized activations, for r < rows and j < n
//     (summed in f32, rounded once to y's dtype: y_dtype is CH_DTYPE_f16,
//     CH_DTYPE_bf16 or CH_DTYPE_f32, an argument rather than a kernel per
//     dtype since only the last store depends on it), plus residual[r * n +
//     j] (y's dtype) when residual is not null, the sum rounded again; row
//     j of W is the k / QK blocks from byte j * (k / QK) * BYTES of w on.
//     qmatvec_few_<q>: the same for any rows, made for at most
//     CH_QMATVEC_FEW_ROWS (it reads the weight once per that many rows;
//     qmatvec_ once per CH_QMATVEC_ROWS).
//     With rope.cos not null (QRope below; one row, no residual),
//     qmatvec_few_<q>'s output pairs are a decoding step's interleaved
//     rotary pairs instead, rotated and written into the step's state y as
//     rope_i_append_* writes them (qmatvec_<q> ignores rope).
//     qmatvec_few_split_<q> (q4_0, q8_0, q6k): qmatvec_few_<q> with two
//     waves per group of outputs, each taking every other share of the row
//     (the host takes it for one row's long rows: quantized.rs
//     `matvec_split_family`).
//
// With the input and the residual, a decode step's product against a
// quantized weight takes two launches, its norm or activation and its
// residual addition included, where separate kernels take four.
//
// Every block type is read through two functions: `sub` dequantizes 32
// consecutive values (a sub-block) with the arithmetic of candle's CPU
// `to_float`, product by product, so that the values are the CPU's bit for
// bit; `ints` gives the same 32 values as the integers of the block format,
// and `combine` turns their integer dot products with the activations into
// the sub-block's share of candle's `vec_dot` (the same integers and scale
// products; only the order of the float sums differs). `ints` reads whole
// aligned words (`q_words`): most block sizes are not multiples of 4.
//
// Dequantization: DQ_LANES threads per sub-block, 32 / DQ_LANES values
// each, stored in 16-byte packs: four where that measured faster for the
// type (adjacent lanes store adjacent packs), else one. Activation
// rounding: CH_QACT_PER_LANE values per thread, a group of adjacent lanes
// per block. The product: one wave (two: _split) per CH_QMATVEC_OUTS
// outputs j; its lanes take the sub-blocks of those rows in turn (adjacent
// lanes read adjacent blocks; the q4k and q5k mat-vecs for few rows take
// them in pairs that share their bytes, PairLoop), CH_QMATVEC_UNROLL at a
// time, for up to CH_QMATVEC_ROWS (CH_QMATVEC_FEW_ROWS) rows of activations
// at a time (each activation load serving every output of the wave), and
// the wave sums its lanes (a split group's two waves then add their sums
// in wave order). The host guarantees: w 16-byte aligned and followed by
// at least 4 readable bytes, k a multiple of the block size, q 16-byte
// aligned with rows * k values, d and s rows * k / 32.

#include "common.h"

// Rows of activations the mat-vec holds at once: 8, or 2 for one or two
// (a decode step at batch 1): fewer accumulators, so that more waves fit a
// compute unit (the NVIDIA test platform: 64-80 registers instead of 80-109,
// a 1B or 8B token's products 10-18 % faster at batch 1).
#define CH_QMATVEC_ROWS 8
#define CH_QMATVEC_FEW_ROWS 2
// Sub-blocks a lane of the mat-vec has in flight at once.
#ifndef CH_QMATVEC_UNROLL
#define CH_QMATVEC_UNROLL 2
#endif
// Threads per sub-block of the dequantization, by block type (DQ_LANES):
// `n`, unless CH_DEQUANT_LANES (1 or 4) sets every type's, for measuring.
#ifdef CH_DEQUANT_LANES
#define CH_DQ_LANES(n) CH_DEQUANT_LANES
#else
#define CH_DQ_LANES(n) n
#endif
// The most any type takes: the host sizes the grid for it
// (quantized.rs DEQUANT_MAX_LANES).
#define CH_DQ_MAX_LANES 4

// Outputs (rows of the weight) each wave of the mat-vec computes, sharing
// its activation loads (quantized.rs MATVEC_OUTS_PER_WAVE).
#ifndef CH_QMATVEC_OUTS
#define CH_QMATVEC_OUTS 2
#endif

// a * b rounded on its own: never fused with a neighbouring add into an FMA,
// which rounds once and would differ from the CPU's two roundings.
__device__ __forceinline__ float q_mul(float a, float b) {
#if defined(__HIP_PLATFORM_NVIDIA__)
  return __fmul_rn(a, b);
#else
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  return a * b;
#endif
}

// The f16 at p as f32, exactly; a NaN keeps its payload with the quiet bit
// set, as the half crate converts. Every f16 field of a block lies at an even
// offset and every block size is even, so p is 2-byte aligned.
__device__ __forceinline__ float q_half(const ch_u8* p) {
  const ch_u32 h = *reinterpret_cast<const ch_u16*>(p);
  const ch_u32 sign = (h & 0x8000u) << 16;
  const ch_u32 exp = (h >> 10) & 0x1fu;
  const ch_u32 man = h & 0x3ffu;
  ch_f32_bits b;
  if (exp == 0x1fu) {
    b.u = sign | 0x7f800000u | (man != 0 ? 0x00400000u : 0u) | (man << 13);
  } else if (exp != 0) {
    b.u = sign | ((exp + 112u) << 23) | (man << 13);
  } else {
    // Zero or subnormal: man * 2^-24, exact in f32.
    const float v = (float)man * 5.9604644775390625e-8f;
    return sign != 0 ? -v : v;
  }
  return b.f;
}

// An f16 scale of a block at p (2-byte aligned) as f32 for the mat-vec: the
// target's own conversion, exact for every finite value and infinity. Only a
// NaN's payload may differ from q_half's, and a NaN scale makes the product
// NaN either way.
__device__ __forceinline__ float q_scale(const ch_u8* p) {
  return Num<ch_f16>::to_f32(*reinterpret_cast<const ch_f16*>(p));
}

// The f32 scale of a q8k block (at a 4-byte aligned p: blocks of 292 bytes
// from a 16-byte aligned start).
__device__ __forceinline__ float q_scale_f32(const ch_u8* p) { return *reinterpret_cast<const float*>(p); }

// The 6-bit scale and min j (< 8) of the 12 packed bytes of a q4k/q5k block.
__device__ __forceinline__ void q_scale_min_k4(int j, const ch_u8* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The 16 bytes a q4k block starts with (d, dmin, then the 12 packed bytes
// of its eight 6-bit scales and mins) as the words of one 16-byte load
// (blocks of 144 bytes from a 16-byte aligned row start).
typedef Pack<ch_u32, 4> QHeadK4;

__device__ __forceinline__ QHeadK4 q_head_k4(const ch_u8* b) { return *reinterpret_cast<const QHeadK4*>(b); }

// q_scale_min_k4 of sub-block j from a head: the bytes q[j % 4], q[4 + j %
// 4] and q[8 + j % 4] of the packed scales sit at the same place of words
// 1, 2 and 3.
__device__ __forceinline__ void q_scale_min_head_k4(int j, const QHeadK4& h, int& sc, int& m) {
  const int shift = 8 * (j % 4);
  const int a = (int)((h.v[1] >> shift) & 0xffu), b = (int)((h.v[2] >> shift) & 0xffu),
            c = (int)((h.v[3] >> shift) & 0xffu);
  if (j < 4) {
    sc = a & 63;
    m = b & 63;
  } else {
    sc = (c & 0xf) | ((a >> 6) << 4);
    m = (c >> 4) | ((b >> 6) << 4);
  }
}

// A block's f16 field as f32 from its bits (as q_scale converts it).
__device__ __forceinline__ float q_scale_bits(ch_u32 bits) {
  return Num<ch_f16>::to_f32(__ushort_as_half((unsigned short)bits));
}

// The share of candle's vec_dot of a q4k or q5k sub-block with scale sc and
// min m, in a block of scales d and dmin: from the integer dot products of
// its halves (i0, i1), the activations' sums (x0, x1) and scale (dx).
__device__ __forceinline__ float q_share_k4(float d, float dmin, int sc, int m, int i0, int i1, int x0, int x1,
                                            float dx) {
  return q_mul(q_mul(d, dx), (float)(sc * (i0 + i1))) - q_mul(q_mul(dmin, dx), (float)(m * (x0 + x1)));
}

// The 6-bit scale j (< 16) of the 12 packed bytes of a q3k block.
__device__ __forceinline__ int q_scale_k3(int j, const ch_u8* q) {
  const int g = j / 4, k = j % 4;
  const int low = ((g & 1) != 0 ? q[4 + k] : q[k]) >> (g >= 2 ? 4 : 0);
  const int high = (q[8 + k] >> (2 * g)) & 3;
  return (low & 0xf) | (high << 4);
}

// The N little-endian words from p on, p in a block of BYTES bytes (a
// block's integers and high-bit masks):
// - BYTES and p's offset in its block multiples of 16 (q4k, q5k): 16-byte
//   loads (rows start 16-byte aligned);
// - BYTES a multiple of 4: one 32-bit load per word;
// - else (p 2-byte aligned): the N + 1 aligned words around them, shifted
//   into place. The last may lie past the field, at most 4 bytes past the
//   blocks: the host pads every weight allocation (quantized.rs Q_PAD).
template <int N, int BYTES>
__device__ __forceinline__ void q_words(const ch_u8* p, ch_u32* w) {
  if (BYTES % 16 == 0 && N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const Pack<ch_u32, 4> v = reinterpret_cast<const Pack<ch_u32, 4>*>(p)[i];
#pragma unroll
      for (int e = 0; e < 4; ++e) w[4 * i + e] = v.v[e];
    }
    return;
  }
  if (BYTES % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = reinterpret_cast<const ch_u32*>(p)[i];
    return;
  }
  const ch_u64 at = reinterpret_cast<ch_u64>(p);
  const ch_u32* a = reinterpret_cast<const ch_u32*>(at & ~(ch_u64)3);
  const ch_u32 shift = (ch_u32)(at & 2) * 8;
  ch_u32 v[N + 1];
#pragma unroll
  for (int i = 0; i <= N; ++i) v[i] = a[i];
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] = (ch_u32)((((ch_u64)v[i + 1] << 32) | v[i]) >> shift);
}

// Each byte of w (at most 0x7f) minus c, as signed bytes: the high bit set
// first keeps the subtraction from borrowing across bytes.
__device__ __forceinline__ ch_u32 q_sub_bytes(ch_u32 w, ch_u32 c) { return ((w | 0x80808080u) - c * 0x01010101u) ^ 0x80808080u; }

// The four bits of x spread to bit 4 of the four bytes of a word.
__device__ __forceinline__ ch_u32 q_bits_to_16s(ch_u32 x) {
  return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

// c plus the sum of the four products of the signed bytes of a and b: one
// instruction where the target has it (NVIDIA's dp4a; AMD's v_dot4_i32_i8 on
// gfx906, CDNA and RDNA2, v_dot4_i32_iu8 on RDNA3/3.5/4: the targets hipRTC
// 6.4 compiles each builtin for), else four multiply-adds (gfx900), several
// times the code.
__device__ __forceinline__ int q_dot4(ch_u32 a, ch_u32 b, int c) {
#if defined(__HIP_PLATFORM_NVIDIA__)
  return __dp4a((int)a, (int)b, c);
#elif defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx942__) || \
    defined(__gfx1030__) || defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1034__) ||  \
    defined(__gfx1035__) || defined(__gfx1036__)
  return __builtin_amdgcn_sdot4((int)a, (int)b, c, false);
#elif defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__) || \
    defined(__gfx1150__) || defined(__gfx1151__) || defined(__gfx1200__) || defined(__gfx1201__)
  return __builtin_amdgcn_sudot4(true, (int)a, true, (int)b, c, false);
#else
#pragma unroll
  for (int k = 0; k < 4; ++k) c += (int)(signed char)(a >> (8 * k)) * (int)(signed char)(b >> (8 * k));
  return c;
#endif
}

// Which 16-value half of its sub-block value t is, for `sub`'s N values
// from `first` (a multiple of N): one half for all of them when N <= 16, so
// that the half's scale is worked out once.
template <int N>
__device__ __forceinline__ int q_half_of(int first, int t) {
  return (N <= 16 ? first : t) / 16;
}

// Each block type: BYTES per block of QK values; ACT, the activation
// rounding of candle's vec-dot type for it (0: q8_0, 1: q8_1, 2: q8k);
// sub<N>(b, s, first, y), which writes values 32 * s + first .. 32 * s +
// first + N - 1 of the block at b into y (N dividing 32, first a multiple
// of N); DQ_LANES, the threads that dequantize a sub-block (N = 32 /
// DQ_LANES values each); ints(b, s, w), values 32 * s .. 32 * s + 31 as
// the format's integers (signed bytes, four to a word of w, value t in byte
// t % 4 of w[t / 4]); and
// combine(b, s, i0, i1, x0, x1, dx, sx), the sub-block's share of candle's
// vec_dot from the integer dot products of its 16-value halves with the
// activations (i0, i1), the halves' activation sums (x0, x1: GGML's bsums)
// and the activations' scale (dx) and q8_1 sum (sx). Where a share is a sum
// or difference of two products, each product is rounded on its own
// (q_mul), as the CPU rounds it, instead of fused into an FMA at the
// compiler's choice.

struct Q4_0 {
  static const int ACT = 0;
  static const int BYTES = 18, QK = 32;
  static const int DQ_LANES = CH_DQ_LANES(4);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int, int first, float* y) {
    const float d = q_half(b);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const int t = first + e;
      const int q = t < 16 ? (b[2 + t] & 0xf) : (b[2 + t - 16] >> 4);
      y[e] = q_mul((float)(q - 8), d);
    }
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int, ch_u32* w) {
    ch_u32 qs[4];
    q_words<4, BYTES>(b + 2, qs);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const ch_u32 q = qs[p];
      w[p] = q_sub_bytes(q & 0x0f0f0f0fu, 8);
      w[4 + p] = q_sub_bytes((q >> 4) & 0x0f0f0f0fu, 8);
    }
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int, int i0, int i1, int, int, float dx, float) {
    return (float)(i0 + i1) * q_scale(b) * dx;
  }
};

struct Q4_1 {
  static const int ACT = 1;
  static const int BYTES = 20, QK = 32;
  static const int DQ_LANES = CH_DQ_LANES(4);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int, int first, float* y) {
    const float d = q_half(b), m = q_half(b + 2);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const int t = first + e;
      const int q = t < 16 ? (b[4 + t] & 0xf) : (b[4 + t - 16] >> 4);
      y[e] = q_mul((float)q, d) + m;
    }
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int, ch_u32* w) {
    ch_u32 qs[4];
    q_words<4, BYTES>(b + 4, qs);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const ch_u32 q = qs[p];
      w[p] = q & 0x0f0f0f0fu;
      w[4 + p] = (q >> 4) & 0x0f0f0f0fu;
    }
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int, int i0, int i1, int, int, float dx, float sx) {
    return q_mul(q_mul((float)(i0 + i1), q_scale(b)), dx) + q_mul(q_scale(b + 2), sx);
  }
};

struct Q5_0 {
  static const int ACT = 0;
  static const int BYTES = 22, QK = 32;
  static const int DQ_LANES = CH_DQ_LANES(4);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int, int first, float* y) {
    const float d = q_half(b);
    ch_u32 qh;
    q_words<1, BYTES>(b + 2, &qh);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const int t = first + e;
      const int low = t < 16 ? (b[6 + t] & 0xf) : (b[6 + t - 16] >> 4);
      const int q = low | (int)(((qh >> t) & 1u) << 4);
      y[e] = q_mul((float)(q - 16), d);
    }
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int, ch_u32* w) {
    ch_u32 words[5];
    q_words<5, BYTES>(b + 2, words);
    const ch_u32 qh = words[0];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const ch_u32 q = words[1 + p];
      w[p] = q_sub_bytes((q & 0x0f0f0f0fu) | q_bits_to_16s(qh >> (4 * p)), 16);
      w[4 + p] = q_sub_bytes(((q >> 4) & 0x0f0f0f0fu) | q_bits_to_16s(qh >> (16 + 4 * p)), 16);
    }
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int, int i0, int i1, int, int, float dx, float) {
    return (float)(i0 + i1) * q_scale(b) * dx;
  }
};

struct Q5_1 {
  static const int ACT = 1;
  static const int BYTES = 24, QK = 32;
  static const int DQ_LANES = CH_DQ_LANES(1);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int, int first, float* y) {
    const float d = q_half(b), m = q_half(b + 2);
    ch_u32 qh;
    q_words<1, BYTES>(b + 4, &qh);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const int t = first + e;
      const int low = t < 16 ? (b[8 + t] & 0xf) : (b[8 + t - 16] >> 4);
      const int q = low | (int)(((qh >> t) & 1u) << 4);
      y[e] = q_mul((float)q, d) + m;
    }
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int, ch_u32* w) {
    ch_u32 words[5];
    q_words<5, BYTES>(b + 4, words);
    const ch_u32 qh = words[0];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const ch_u32 q = words[1 + p];
      w[p] = (q & 0x0f0f0f0fu) | q_bits_to_16s(qh >> (4 * p));
      w[4 + p] = ((q >> 4) & 0x0f0f0f0fu) | q_bits_to_16s(qh >> (16 + 4 * p));
    }
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int, int i0, int i1, int, int, float dx, float sx) {
    return q_mul(q_mul((float)(i0 + i1), q_scale(b)), dx) + q_mul(q_scale(b + 2), sx);
  }
};

// q8_0 and q8_1 (whose second f16 is a sum the dequantization ignores).
template <int OFFSET>
struct Q8 {
  static const int ACT = OFFSET == 4 ? 1 : 0;
  static const int BYTES = OFFSET + 32, QK = 32;
  static const int DQ_LANES = CH_DQ_LANES(4);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int, int first, float* y) {
    const float d = q_half(b);
#pragma unroll
    for (int e = 0; e < N; ++e) y[e] = q_mul((float)(signed char)b[OFFSET + first + e], d);
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int, ch_u32* w) {
    q_words<8, BYTES>(b + OFFSET, w);
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int, int i0, int i1, int, int, float dx, float) {
    return (float)(i0 + i1) * q_scale(b) * dx;
  }
};
typedef Q8<2> Q8_0;
typedef Q8<4> Q8_1;

struct Q2K {
  static const int ACT = 2;
  static const int BYTES = 84, QK = 256;
  static const int DQ_LANES = CH_DQ_LANES(4);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int s, int first, float* y) {
    const ch_u8* scales = b;
    const ch_u8* qs = b + 16 + 32 * (s / 4);
    const float d = q_half(b + 80), dmin = q_half(b + 82);
    const int shift = 2 * (s % 4);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const int t = first + e;
      const int sc = scales[2 * s + q_half_of<N>(first, t)];
      const float dl = q_mul(d, (float)(sc & 0xf));
      const float ml = q_mul(dmin, (float)(sc >> 4));
      y[e] = q_mul(dl, (float)((qs[t] >> shift) & 3)) - ml;
    }
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int s, ch_u32* w) {
    q_words<8, BYTES>(b + 16 + 32 * (s / 4), w);
    const int shift = 2 * (s % 4);
#pragma unroll
    for (int p = 0; p < 8; ++p) w[p] = (w[p] >> shift) & 0x03030303u;
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int s, int i0, int i1, int x0, int x1, float dx, float) {
    const int sc0 = b[2 * s], sc1 = b[2 * s + 1];
    const float dall = dx * q_scale(b + 80), dmin = dx * q_scale(b + 82);
    const int scaled = (sc0 & 0xf) * i0 + (sc1 & 0xf) * i1, mins = (sc0 >> 4) * x0 + (sc1 >> 4) * x1;
    return q_mul(dall, (float)scaled) - q_mul(dmin, (float)mins);
  }
};

struct Q3K {
  static const int ACT = 2;
  static const int BYTES = 110, QK = 256;
  static const int DQ_LANES = CH_DQ_LANES(1);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int s, int first, float* y) {
    const ch_u8* hmask = b;
    const ch_u8* qs = b + 32 + 32 * (s / 4);
    const float d = q_half(b + 108);
    const int shift = 2 * (s % 4);
    const int m = 1 << s;
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const int t = first + e;
      const float dl = q_mul(d, (float)q_scale_k3(2 * s + q_half_of<N>(first, t), b + 96) - 32.0f);
      const int q = ((qs[t] >> shift) & 3) - ((hmask[t] & m) != 0 ? 0 : 4);
      y[e] = q_mul(dl, (float)q);
    }
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int s, ch_u32* w) {
    ch_u32 hmask[8];
    q_words<8, BYTES>(b, hmask);
    q_words<8, BYTES>(b + 32 + 32 * (s / 4), w);
    const int shift = 2 * (s % 4);
#pragma unroll
    for (int p = 0; p < 8; ++p) w[p] = q_sub_bytes(((w[p] >> shift) & 0x03030303u) | (((hmask[p] >> s) & 0x01010101u) << 2), 4);
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int s, int i0, int i1, int, int, float dx, float) {
    const int sc0 = q_scale_k3(2 * s, b + 96) - 32, sc1 = q_scale_k3(2 * s + 1, b + 96) - 32;
    return q_scale(b + 108) * dx * (float)(sc0 * i0 + sc1 * i1);
  }
};

struct Q4K {
  static const int ACT = 2;
  static const int BYTES = 144, QK = 256;
  static const int DQ_LANES = CH_DQ_LANES(4);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int s, int first, float* y) {
    const float d = q_half(b), dmin = q_half(b + 2);
    int sc, m;
    q_scale_min_k4(s, b + 4, sc, m);
    const float d1 = q_mul(d, (float)sc), m1 = q_mul(dmin, (float)m);
    const ch_u8* qs = b + 16 + 32 * (s / 2);
    const int shift = 4 * (s % 2);
#pragma unroll
    for (int e = 0; e < N; ++e) y[e] = q_mul(d1, (float)((qs[first + e] >> shift) & 0xf)) - m1;
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int s, ch_u32* w) {
    q_words<8, BYTES>(b + 16 + 32 * (s / 2), w);
    const int shift = 4 * (s % 2);
#pragma unroll
    for (int p = 0; p < 8; ++p) w[p] = (w[p] >> shift) & 0x0f0f0f0fu;
  }
  // PairLoop: the words sub-blocks 2j and 2j + 1 share (qs), and sub-block
  // s's integers from them (as `ints`); the block's head, loaded once for
  // both, and sub-block s's share from it (as `combine`: the same integers
  // and products).
  static const int PAIR_WORDS = 8;
  __device__ __forceinline__ static void pair_words(const ch_u8* b, int j, ch_u32* words) {
    q_words<8, BYTES>(b + 16 + 32 * j, words);
  }
  __device__ __forceinline__ static void pair_ints(const ch_u32* words, int s, ch_u32* w) {
#pragma unroll
    for (int p = 0; p < 8; ++p) w[p] = (words[p] >> (4 * (s % 2))) & 0x0f0f0f0fu;
  }
  typedef QHeadK4 PairHead;
  __device__ __forceinline__ static PairHead pair_head(const ch_u8* b) { return q_head_k4(b); }
  __device__ __forceinline__ static float pair_combine(const ch_u8*, const PairHead& h, int s, int i0, int i1,
                                                       int x0, int x1, float dx, float) {
    int sc, m;
    q_scale_min_head_k4(s, h, sc, m);
    return q_share_k4(q_scale_bits(h.v[0] & 0xffffu), q_scale_bits(h.v[0] >> 16), sc, m, i0, i1, x0, x1, dx);
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int s, int i0, int i1, int x0, int x1, float dx, float) {
    int sc, m;
    q_scale_min_k4(s, b + 4, sc, m);
    return q_share_k4(q_scale(b), q_scale(b + 2), sc, m, i0, i1, x0, x1, dx);
  }
};

struct Q5K {
  static const int ACT = 2;
  static const int BYTES = 176, QK = 256;
  static const int DQ_LANES = CH_DQ_LANES(1);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int s, int first, float* y) {
    const float d = q_half(b), dmin = q_half(b + 2);
    int sc, m;
    q_scale_min_k4(s, b + 4, sc, m);
    const float d1 = q_mul(d, (float)sc), m1 = q_mul(dmin, (float)m);
    const ch_u8* qh = b + 16;
    const ch_u8* qs = b + 48 + 32 * (s / 2);
    const int shift = 4 * (s % 2);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const int t = first + e;
      const float high = (qh[t] & (1 << s)) != 0 ? 16.0f : 0.0f;
      y[e] = q_mul(d1, (float)((qs[t] >> shift) & 0xf) + high) - m1;
    }
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int s, ch_u32* w) {
    ch_u32 qh[8];
    q_words<8, BYTES>(b + 16, qh);
    q_words<8, BYTES>(b + 48 + 32 * (s / 2), w);
    const int shift = 4 * (s % 2);
#pragma unroll
    for (int p = 0; p < 8; ++p) w[p] = ((w[p] >> shift) & 0x0f0f0f0fu) | (((qh[p] >> s) & 0x01010101u) << 4);
  }
  // PairLoop: the words sub-blocks 2j and 2j + 1 share (qs, then qh), and
  // sub-block s's integers from them (as `ints`).
  static const int PAIR_WORDS = 16;
  __device__ __forceinline__ static void pair_words(const ch_u8* b, int j, ch_u32* words) {
    q_words<8, BYTES>(b + 48 + 32 * j, words);
    q_words<8, BYTES>(b + 16, words + 8);
  }
  __device__ __forceinline__ static void pair_ints(const ch_u32* words, int s, ch_u32* w) {
#pragma unroll
    for (int p = 0; p < 8; ++p)
      w[p] = ((words[p] >> (4 * (s % 2))) & 0x0f0f0f0fu) | (((words[8 + p] >> s) & 0x01010101u) << 4);
  }
  // No head held for the pair: its scales are read per sub-block, as
  // `combine` reads them (q4k's 16-byte head load measured 4 % slower for
  // q5k's products on the NVIDIA test platform).
  struct PairHead {};
  __device__ __forceinline__ static PairHead pair_head(const ch_u8*) { return PairHead(); }
  __device__ __forceinline__ static float pair_combine(const ch_u8* b, const PairHead&, int s, int i0, int i1,
                                                       int x0, int x1, float dx, float sx) {
    return combine(b, s, i0, i1, x0, x1, dx, sx);
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int s, int i0, int i1, int x0, int x1, float dx, float) {
    int sc, m;
    q_scale_min_k4(s, b + 4, sc, m);
    return q_share_k4(q_scale(b), q_scale(b + 2), sc, m, i0, i1, x0, x1, dx);
  }
};

struct Q6K {
  static const int ACT = 2;
  static const int BYTES = 210, QK = 256;
  static const int DQ_LANES = CH_DQ_LANES(1);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int s, int first, float* y) {
    const int n = s / 4, quarter = s % 4;
    const ch_u8* ql = b + 64 * n + 32 * (quarter & 1);
    const ch_u8* qh = b + 128 + 32 * n;
    const signed char* scales = (const signed char*)(b + 192 + 8 * n);
    const float d = q_half(b + 208);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const int t = first + e;
      const int low = quarter < 2 ? (ql[t] & 0xf) : (ql[t] >> 4);
      const int q = (low | (((qh[t] >> (2 * quarter)) & 3) << 4)) - 32;
      y[e] = q_mul(q_mul(d, (float)scales[q_half_of<N>(first, t) + 2 * quarter]), (float)q);
    }
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int s, ch_u32* w) {
    const int n = s / 4, quarter = s % 4;
    const ch_u8* ql = b + 64 * n + 32 * (quarter & 1);
    const ch_u8* qh = b + 128 + 32 * n;
    ch_u32 high[8];
    q_words<8, BYTES>(ql, w);
    q_words<8, BYTES>(qh, high);
#pragma unroll
    for (int p = 0; p < 8; ++p)
      w[p] = q_sub_bytes(((w[p] >> (4 * (quarter / 2))) & 0x0f0f0f0fu) | (((high[p] >> (2 * quarter)) & 0x03030303u) << 4), 32);
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int s, int i0, int i1, int, int, float dx, float) {
    const signed char* scales = (const signed char*)(b + 192 + 8 * (s / 4));
    const int quarter = s % 4;
    return q_scale(b + 208) * dx * (float)(scales[2 * quarter] * i0 + scales[2 * quarter + 1] * i1);
  }
};

struct Q8K {
  static const int ACT = 2;
  static const int BYTES = 292, QK = 256;
  static const int DQ_LANES = CH_DQ_LANES(4);
  template <int N>
  __device__ __forceinline__ static void sub(const ch_u8* b, int s, int first, float* y) {
    const float d = q_scale_f32(b);
#pragma unroll
    for (int e = 0; e < N; ++e) y[e] = q_mul(d, (float)(signed char)b[4 + 32 * s + first + e]);
  }
  __device__ __forceinline__ static void ints(const ch_u8* b, int s, ch_u32* w) {
    q_words<8, BYTES>(b + 4 + 32 * s, w);
  }
  __device__ __forceinline__ static float combine(const ch_u8* b, int, int i0, int i1, int, int, float dx, float) {
    return q_scale_f32(b) * dx * (float)(i0 + i1);
  }
};

// Part i % DQ_LANES of sub-block i / DQ_LANES of a run of blocks: its
// 32 / DQ_LANES values.
template <typename Q>
__device__ __forceinline__ void q_sub(const ch_u8* blocks, ch_u64 i, float* y) {
  const int per_block = Q::QK / 32, N = 32 / Q::DQ_LANES;
  const ch_u64 sub = i / Q::DQ_LANES;
  Q::template sub<N>(blocks + (sub / per_block) * Q::BYTES, (int)(sub % per_block),
                     (int)(i % Q::DQ_LANES) * N, y);
}

template <typename Q, typename T>
__device__ __forceinline__ void dequantize(const ch_u8* __restrict__ blocks, T* __restrict__ y, ch_u64 subs) {
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  typedef Pack<T, V> P;
  static_assert(Q::DQ_LANES <= CH_DQ_MAX_LANES, "the host's grid has CH_DQ_MAX_LANES threads per sub-block");
  const int N = 32 / Q::DQ_LANES;
  const ch_u64 step = (ch_u64)gridDim.x * blockDim.x;
  for (ch_u64 i = (ch_u64)blockIdx.x * blockDim.x + threadIdx.x; i < subs * Q::DQ_LANES; i += step) {
    float v[N];
    q_sub<Q>(blocks, i, v);
    P* out = reinterpret_cast<P*>(y + i * N);
#pragma unroll
    for (int p = 0; p < N / V; ++p) {
      P pack;
#pragma unroll
      for (int e = 0; e < V; ++e) pack.v[e] = Num<T>::from_f32(v[p * V + e]);
      out[p] = pack;
    }
  }
}

// What quantize_act rounds of one row of `count` values, by `input` (as
// gemv.hip's CH_GEMV_INPUT_*):
//   PLAIN     x itself (any number of rows as one);
//   RMS_NORM  x / sqrt(mean(x^2) + eps) * norm_w over the row (as
//             rms_norm_*);
//   SWIGLU    silu(x[i]) * x[count + i] (the row holds 2 * count values,
//             gate then up; as silu_mul_*);
// each value rounded to T as the separate kernel rounds it, so that the
// rounding of the activations sees what it would after that kernel.
#define CH_QACT_INPUT_PLAIN 0
#define CH_QACT_INPUT_RMS_NORM 1
#define CH_QACT_INPUT_SWIGLU 2

template <typename T>
struct QActInput {
  const T* __restrict__ x;
  const T* __restrict__ norm_w;
  ch_u64 count;
  ch_u32 input;

  // The values thread `t` rounds, as f32 (lanes past the end, !live, take
  // the first ones): x' of the plain input or SwiGLU.
  __device__ __forceinline__ void load(ch_u64 t, bool live, float (&v)[CH_QACT_PER_LANE]) const {
    const ch_u64 at = live ? t * CH_QACT_PER_LANE : 0;
#pragma unroll
    for (int e = 0; e < CH_QACT_PER_LANE; ++e) {
      const float a = Num<T>::to_acc(x[at + e]);
      if (input == CH_QACT_INPUT_SWIGLU) {
        v[e] = Num<T>::to_acc(Num<T>::from_acc(a / (1.0f + ch_exp(-a)) * Num<T>::to_acc(x[count + at + e])));
      } else {
        v[e] = a;
      }
    }
  }

  // The RMS norm's x and norm weight of thread `t`'s values, as f32.
  __device__ __forceinline__ void load_norm(ch_u64 t, bool live, float (&v)[CH_QACT_PER_LANE],
                                            float (&w)[CH_QACT_PER_LANE]) const {
    const ch_u64 at = live ? t * CH_QACT_PER_LANE : 0;
#pragma unroll
    for (int e = 0; e < CH_QACT_PER_LANE; ++e) {
      v[e] = Num<T>::to_acc(x[at + e]);
      w[e] = Num<T>::to_acc(norm_w[at + e]);
    }
  }

  // x' = x * inv * w of the norm, rounded to T, from load_norm's values.
  __device__ __forceinline__ void normed(float (&v)[CH_QACT_PER_LANE], const float (&w)[CH_QACT_PER_LANE],
                                        float inv) const {
#pragma unroll
    for (int e = 0; e < CH_QACT_PER_LANE; ++e) v[e] = Num<T>::to_acc(Num<T>::from_acc(v[e] * inv * w[e]));
  }
};

// The sum of x's squares over one row of `count` values, as this thread
// sees it (for row_of_block: the row is x whichever block runs it).
template <typename T>
struct QActSquares {
  const T* __restrict__ x;
  ch_u32 count;
  float sum;

  template <int V, bool CACHED>
  __device__ __forceinline__ void row(ch_u64) {
    RowView<T, V, CACHED> view(x, count / V);
    AccSum<float>::State ss = AccSum<float>::identity();
    view.visit([&](float (&v)[V], ch_u32) {
#pragma unroll
      for (int e = 0; e < V; ++e) ss.v += v[e] * v[e];
    });
    sum = ss.v;
  }
};

// The RMS norm's 1 / sqrt(mean(x^2) + eps) over the count values of x, in
// every thread of the block (each block computes it for itself: a row of a
// decode step is a few thousand values, read in 16-byte packs where x is
// aligned to them, every thread's loads in flight at once).
template <typename T>
__device__ __forceinline__ float q_act_rms_inv(const T* __restrict__ x, ch_u32 count, float eps) {
  __shared__ ch_u64 scratch[CH_ROW_SCRATCH_WORDS];
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  QActSquares<T> body{x, count, 0.0f};
  row_of_block<T>(count, rows_vectorizable<V>(count, x, x, x, x), body);
  AccSum<float>::State ss = {body.sum};
  ss = block_allreduce<AccSum<float> >(ss, reinterpret_cast<AccSum<float>::State*>(scratch));
  return 1.0f / ch_sqrt(ss.v / (float)count + eps);
}

// 32 activations (16-byte aligned) as two packs of 16.
struct QAct32 {
  Pack<ch_u32, 4> lo, hi;
};

__device__ __forceinline__ QAct32 q_act32(const signed char* q) {
  QAct32 a;
  a.lo = reinterpret_cast<const Pack<ch_u32, 4>*>(q)[0];
  a.hi = reinterpret_cast<const Pack<ch_u32, 4>*>(q)[1];
  return a;
}

// The dot products of the 32 packed integers w with the activations a, per
// 16-value half.
__device__ __forceinline__ void q_dot32(const ch_u32* w, const QAct32& a, int& i0, int& i1) {
  i0 = i1 = 0;
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    i0 = q_dot4(w[p], a.lo.v[p], i0);
    i1 = q_dot4(w[4 + p], a.hi.v[p], i1);
  }
}

// The sums of the activations' 16-value halves.
__device__ __forceinline__ void q_sums32(const QAct32& a, int& x0, int& x1) {
  x0 = x1 = 0;
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    x0 = q_dot4(0x01010101u, a.lo.v[p], x0);
    x1 = q_dot4(0x01010101u, a.hi.v[p], x1);
  }
}

// y[i] = v rounded to T, plus residual[i] when residual is not null (that
// sum rounded again: the separate addition's result).
template <typename T>
__device__ __forceinline__ void q_store(void* y, ch_u64 i, float v, const void* residual) {
  T out = Num<T>::from_f32(v);
  if (residual != nullptr) out = Num<T>::from_f32(Num<T>::to_f32(out) + Num<T>::to_f32(static_cast<const T*>(residual)[i]));
  static_cast<T*>(y)[i] = out;
}

// q_store in y's dtype (CH_DTYPE_f16, CH_DTYPE_bf16 or CH_DTYPE_f32).
__device__ __forceinline__ void store_activation(void* y, ch_u32 y_dtype, ch_u64 i, float v, const void* residual) {
  switch (y_dtype) {
    case CH_DTYPE_f16:
      q_store<ch_f16>(y, i, v, residual);
      break;
    case CH_DTYPE_bf16:
      q_store<ch_bf16>(y, i, v, residual);
      break;
    default:
      q_store<float>(y, i, v, residual);
  }
}

// A decoding step's RoPE and cache write on the mat-vec's outputs, for one
// row of activations (fused_quantized_linear_rope_append): where cos is not
// null, outputs j and j + 1 of a wave (j even: an interleaved rotary pair,
// rope_i, of global row first + j of the step's q, k and v heads) go where
// rope_i_append_* (rope.hip) writes them, y being the step's state
// (common.h's StepState) of y's dtype, and the rotation reads the (rows,
// d / 2) tables cos and sin at position *pos. candle-hip's quantized.rs
// mirrors it.
struct QRope {
  const void* cos;
  const void* sin;
  const ch_u32* pos;
  ch_u32 first, heads, kv_heads, d, max_len, rows;
};

// Output pair (j, j + 1) of the mat-vec's sums (v1, v2), each rounded to T
// as q_store rounds it, stored by QRope into the state y.
template <typename T>
__device__ __forceinline__ void q_store_rope(void* y, const QRope& rope, ch_u32 p, ch_u64 j, float v1, float v2) {
  const StepState st = {rope.heads, rope.kv_heads, rope.d, rope.max_len, p};
  const ch_u64 g = rope.first + j;
  const ch_u32 i1 = (ch_u32)(g % rope.d);
  step_store_pair(static_cast<T*>(y), st, static_cast<const T*>(rope.cos), static_cast<const T*>(rope.sin),
                  g / rope.d, i1 / 2, i1, i1 + 1, Num<T>::from_f32(v1), Num<T>::from_f32(v2));
}

// q_store_rope in y's dtype (as store_activation).
// A position at or past the caches or the tables writes nothing.
__device__ __forceinline__ void store_rope(void* y, ch_u32 y_dtype, const QRope& rope, ch_u64 j, float v1,
                                           float v2) {
  const ch_u32 p = *rope.pos;
  if (p >= rope.max_len || p >= rope.rows) return;
  switch (y_dtype) {
    case CH_DTYPE_f16:
      q_store_rope<ch_f16>(y, rope, p, j, v1, v2);
      break;
    case CH_DTYPE_bf16:
      q_store_rope<ch_bf16>(y, rope, p, j, v1, v2);
      break;
    default:
      q_store_rope<float>(y, rope, p, j, v1, v2);
  }
}

// Whether q's mat-vec for few rows walks pairs of sub-blocks (PairLoop):
// q4k and q5k, whose sub-blocks 2j and 2j + 1 are the low and high nibbles
// of the same 32 bytes of qs (q5k: and read their high bits from the same
// qh), so that a lane per sub-block loads each word twice.
template <typename Q>
struct PairedFewRows {
  static const bool value = false;
};
template <>
struct PairedFewRows<Q4K> {
  static const bool value = true;
};
template <>
struct PairedFewRows<Q5K> {
  static const bool value = true;
};

// The mat-vec's walk over the pairs of sub-blocks of its O rows of the
// weight (row[o]), for R rows of activations from r0: a lane takes pairs
// lane, lane + lanes, ... (pair p: sub-blocks 2p and 2p + 1), loads the
// words they share once (Q::pair_words: 16-byte loads) and splits them
// where each sub-block is used (Q::pair_ints), and holds what the pair's
// shares need of the block's head (Q::pair_head; q4k: its 16 bytes in one
// load, where `combine` made a few narrow loads per sub-block). At batch 1
// that halves a sub-block's weight loads (the NVIDIA test platform: q4k in
// 72 registers against 73, q5k in 121 against 78, both faster); with more rows, whose
// accumulators then compete with the kept words, it measured slower, so
// only the few-rows kernels take it. The primary template is for the types
// that never do. (The sub-block's share, below, repeats qmatvec's: as one
// helper for both, q5k's product measured 8 % slower.)
template <typename Q, bool PAIRS>
struct PairLoop {
  template <int O, int R>
  __device__ __forceinline__ static void run(const ch_u8* const (&)[O], const signed char*, const float*,
                                             const float*, ch_u32, ch_u32, ch_u32, ch_u32, ch_u32,
                                             float (&)[O][R]) {}
};
template <typename Q>
struct PairLoop<Q, true> {
  template <int O, int R>
  __device__ __forceinline__ static void run(const ch_u8* const (&row)[O], const signed char* __restrict__ q,
                                             const float* __restrict__ d, const float* __restrict__ s,
                                             ch_u32 subs, ch_u32 r0, ch_u32 rows, ch_u32 lane, ch_u32 lanes,
                                             float (&acc)[O][R]) {
    const int pairs_per_block = Q::QK / 64;
    const ch_u32 pairs = subs / 2;
    for (ch_u32 pair = lane; pair < pairs; pair += lanes) {
      const ch_u64 in_row = (ch_u64)(pair / pairs_per_block) * Q::BYTES;
      const int j = (int)(pair % pairs_per_block);
      ch_u32 words[O][Q::PAIR_WORDS];
      typename Q::PairHead head[O];
#pragma unroll
      for (int o = 0; o < O; ++o) {
        Q::pair_words(row[o] + in_row, j, words[o]);
        head[o] = Q::pair_head(row[o] + in_row);
      }
#pragma unroll
      for (int t = 0; t < 2; ++t) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const ch_u64 rr = r0 + r;
          if (rr < rows) {
            const ch_u64 at = rr * subs + 2 * pair + t;
            const QAct32 a = q_act32(q + 32 * at);
            int x0, x1;
            q_sums32(a, x0, x1);
            const float dx = d[at], sx = s[at];
#pragma unroll
            for (int o = 0; o < O; ++o) {
              ch_u32 w[8];
              Q::pair_ints(words[o], 2 * j + t, w);
              int i0, i1;
              q_dot32(w, a, i0, i1);
              acc[o][r] += Q::pair_combine(row[o] + in_row, head[o], 2 * j + t, i0, i1, x0, x1, dx, sx);
            }
          }
        }
      }
    }
  }
};

template <typename Q, int R, bool PAIRS, bool STEP, int SPLIT>
__device__ __forceinline__ void qmatvec(const ch_u8* __restrict__ w, const signed char* __restrict__ q,
                                        const float* __restrict__ d, const float* __restrict__ s,
                                        void* __restrict__ y, ch_u32 y_dtype, ch_u32 n, ch_u32 k, ch_u32 rows,
                                        const void* __restrict__ residual, const QRope& rope) {
  const int U = CH_QMATVEC_UNROLL, O = CH_QMATVEC_OUTS;
  const ch_u32 split = SPLIT;
  static_assert(O % 2 == 0, "QRope's pairs are a wave's outputs");
  // The split waves of a group: part `part` of them, its lane `lane` of
  // the group's `lanes`.
  const ch_u32 wave = threadIdx.x / CANDLE_HIP_WAVE, part = wave % split;
  const ch_u32 lane = part * CANDLE_HIP_WAVE + threadIdx.x % CANDLE_HIP_WAVE, lanes = split * CANDLE_HIP_WAVE;
  const ch_u64 j0 = ((ch_u64)blockIdx.x * (blockDim.x / CANDLE_HIP_WAVE / split) + wave / split) * O;
  // The whole wave leaves together: the reductions below stay converged.
  // A split group past n stays for the block's barriers and stores nothing.
  if (split == 1 && j0 >= n) return;
  __shared__ float s_part[SPLIT > 1 ? CH_ELEM_BLOCK / CANDLE_HIP_WAVE * O : 1];

  const ch_u32 subs = k / 32;
  const int per_block = Q::QK / 32;
  const ch_u64 row_bytes = (ch_u64)(k / Q::QK) * Q::BYTES;
  // Outputs past n (the last wave's) recompute output n - 1 and store nothing.
  const ch_u8* row[O];
#pragma unroll
  for (int o = 0; o < O; ++o) row[o] = w + (j0 + o < n ? j0 + o : (ch_u64)n - 1) * row_bytes;
  for (ch_u32 r0 = 0; r0 < rows; r0 += R) {
    float acc[O][R];
#pragma unroll
    for (int o = 0; o < O; ++o)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[o][r] = 0.0f;
    if (PAIRS) PairLoop<Q, PAIRS>::run(row, q, d, s, subs, r0, rows, lane, lanes, acc);
    // Otherwise a lane takes sub-blocks lane, lane + lanes, ... in that
    // order, U at a time with every weight load of the U issued first.
    for (ch_u32 base = lane; !PAIRS && base < subs; base += U * lanes) {
      ch_u32 wv[U][O][8];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const ch_u32 sub = base + u * lanes;
        if (sub < subs) {
#pragma unroll
          for (int o = 0; o < O; ++o)
            Q::ints(row[o] + (ch_u64)(sub / per_block) * Q::BYTES, (int)(sub % per_block), wv[u][o]);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const ch_u32 sub = base + u * lanes;
        if (sub < subs) {
          const ch_u64 in_row = (ch_u64)(sub / per_block) * Q::BYTES;
          const int in_block = (int)(sub % per_block);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const ch_u64 rr = r0 + r;
            if (rr < rows) {
              const ch_u64 at = rr * subs + sub;
              const QAct32 a = q_act32(q + 32 * at);
              int x0, x1;
              q_sums32(a, x0, x1);
              const float dx = d[at], sx = s[at];
#pragma unroll
              for (int o = 0; o < O; ++o) {
                int i0, i1;
                q_dot32(wv[u][o], a, i0, i1);
                acc[o][r] += Q::combine(row[o] + in_row, in_block, i0, i1, x0, x1, dx, sx);
              }
            }
          }
        }
      }
    }
    // Whether the outputs are the step's rotary pairs (STEP: the kernel
    // stores them; others ignore `rope`). The step's row (one) pairs output
    // o - 1 (kept in `even`) with o; n is even (whole heads), so both exist.
    const bool step = STEP && rope.cos != nullptr;
    float even = 0.0f;
#pragma unroll
    for (int o = 0; o < O; ++o)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r0 + r < rows) {
          AccSum<float>::State st;
          st.v = acc[o][r];
          st = wave_reduce<AccSum<float> >(st);
          if (split > 1) {
            // The group's waves add their sums in wave order; its first
            // wave stores them.
            if (threadIdx.x % CANDLE_HIP_WAVE == 0) s_part[wave * O + o] = st.v;
            __syncthreads();
            st.v = 0.0f;
            for (ch_u32 p = 0; p < split; ++p) st.v += s_part[(wave - part + p) * O + o];
            __syncthreads();
            if (part != 0 || j0 >= n) continue;
          }
          if (step) {
            if (o % 2 == 0) even = st.v;
            else if (lane == 0) store_rope(y, y_dtype, rope, j0 + o - 1, even, st.v);
          } else if (lane == 0 && j0 + o < n) {
            store_activation(y, y_dtype, (ch_u64)(r0 + r) * n + j0 + o, st.v, residual);
          }
        }
      }
  }
}

template <int ACT, typename T>
__device__ __forceinline__ void quantize_act(const T* x, signed char* q, float* d, float* s, ch_u64 count,
                                             ch_u32 input, const T* norm_w, float eps) {
  // The norm and SwiGLU work per row: row blockIdx.y of gridDim.y, each of
  // count / gridDim.y values (whole blocks of 32), its x twice as long for
  // SwiGLU. Plain input is one row whatever its shape (gridDim.y 1). One
  // row (a decode step) skips the 64-bit division: the rounding is a chain
  // of dependent instructions, and the division delayed its first loads.
  if (input != CH_QACT_INPUT_PLAIN && gridDim.y > 1) {
    const ch_u64 k = count / gridDim.y, row = blockIdx.y;
    x += row * k * (input == CH_QACT_INPUT_SWIGLU ? 2 : 1);
    q += row * k;
    d += row * k / 32;
    s += row * k / 32;
    count = k;
  }
  QActInput<T> in;
  in.x = x;
  in.norm_w = norm_w;
  in.count = count;
  in.input = input;
  const ch_u64 items = count / CH_QACT_PER_LANE;
  const ch_u64 start = (ch_u64)blockIdx.x * blockDim.x;
  float v[CH_QACT_PER_LANE], w[CH_QACT_PER_LANE];
  if (input == CH_QACT_INPUT_RMS_NORM) {
    // The thread's first values and weights are read before the sum of
    // squares, so that both reads are in flight together. count is the
    // row's k, which the host checks fits 32 bits.
    in.load_norm(start + threadIdx.x, start + threadIdx.x < items, v, w);
    const float inv = q_act_rms_inv(x, (ch_u32)count, eps);
    for (ch_u64 first = start; first < items; first += global_threads()) {
      const ch_u64 t = first + threadIdx.x;
      if (first != start) in.load_norm(t, t < items, v, w);
      in.normed(v, w, inv);
      q_round<ACT>(q, d, s, t, t < items, v);
    }
    return;
  }
  for (ch_u64 first = start; first < items; first += global_threads()) {
    const ch_u64 t = first + threadIdx.x;
    in.load(t, t < items, v);
    q_round<ACT>(q, d, s, t, t < items, v);
  }
}

#define DEQUANTIZE(Q, NAME, TYPE)                                                                  \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK) dequantize_##NAME##_##TYPE(const ch_u8* blocks, ch_##TYPE* y,         \
                                                        ch_u64 subs) {                             \
    dequantize<Q, ch_##TYPE>(blocks, y, subs);                                                     \
  }

#define QMATVEC(Q, NAME, KIND, R, PAIRS, STEP, SPLIT)                                             \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                      \
      KIND##_##NAME(const ch_u8* w, const signed char* q, const float* d, const float* s, void* y, \
                    ch_u32 y_dtype, ch_u32 n, ch_u32 k, ch_u32 rows, const void* residual,         \
                    QRope rope) {                                                                  \
    qmatvec<Q, R, PAIRS, STEP, SPLIT>(w, q, d, s, y, y_dtype, n, k, rows, residual, rope);         \
  }

#define QUANTIZE_ACT(ACT, NAME, TYPE)                                                              \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                      \
      quantize_act_##NAME##_##TYPE(const ch_##TYPE* x, signed char* q, float* d, float* s, ch_u64 count,  \
                                   ch_u32 input, const ch_##TYPE* norm_w, float eps) {             \
    quantize_act<ACT, ch_##TYPE>(x, q, d, s, count, input, norm_w, eps);                           \
  }

// Every GGML block type: M(block traits, name suffix); the blocks of 32
// values, then the k-quants (blocks of 256).
#define CH_EACH_BLOCK32(M) \
  M(Q4_0, q4_0) M(Q4_1, q4_1) M(Q5_0, q5_0) M(Q5_1, q5_1) M(Q8_0, q8_0) M(Q8_1, q8_1)
#define CH_EACH_BLOCK256(M) M(Q2K, q2k) M(Q3K, q3k) M(Q4K, q4k) M(Q5K, q5k) M(Q6K, q6k) M(Q8K, q8k)
#define CH_EACH_BLOCK(M) CH_EACH_BLOCK32(M) CH_EACH_BLOCK256(M)
// Every activation type: M(Q::ACT of the weights rounding to it, name).
#define CH_EACH_ACT(M) M(0, q8_0) M(1, q8_1) M(2, q8k)

// Each kernel of a block type in each activation dtype the program defines.
#define DEQUANTIZE_ALL(Q, NAME) \
  CH_IF_f16(DEQUANTIZE(Q, NAME, f16)) CH_IF_bf16(DEQUANTIZE(Q, NAME, bf16)) CH_IF_f32(DEQUANTIZE(Q, NAME, f32))
#define QUANTIZE_ACT_ALL(ACT, NAME)                                                    \
  CH_IF_f16(QUANTIZE_ACT(ACT, NAME, f16)) CH_IF_bf16(QUANTIZE_ACT(ACT, NAME, bf16)) \
      CH_IF_f32(QUANTIZE_ACT(ACT, NAME, f32))
#define QMATVEC_ALL(Q, NAME) QMATVEC(Q, NAME, qmatvec, CH_QMATVEC_ROWS, false, false, 1)
#define QMATVEC_FEW_ALL(Q, NAME) \
  QMATVEC(Q, NAME, qmatvec_few, CH_QMATVEC_FEW_ROWS, PairedFewRows<Q>::value, true, 1)
// The few-rows mat-vec with two waves per group of outputs, for the types
// whose long rows measured faster that way (catalogue.rs SPLIT_BLOCKS_*):
// kernels of their own, so that the unsplit products keep their registers.
#define QMATVEC_FEW_SPLIT(Q, NAME) QMATVEC(Q, NAME, qmatvec_few_split, CH_QMATVEC_FEW_ROWS, false, true, 2)

// Part 1: dequantization (prefill) and the rounding of the mat-vec's
// activations, the small kernels; parts 2 and 3: the mat-vec of the blocks
// of 32 values and of the k-quants (catalogue.rs QMATVEC32, QMATVEC256);
// parts 4 and 5: the same for few rows (QMATVEC_FEW32, QMATVEC_FEW256), so
// that a batch-1 decoder compiles only those.
#if CH_PART(1)
CH_EACH_BLOCK(DEQUANTIZE_ALL)
CH_EACH_ACT(QUANTIZE_ACT_ALL)
#endif
#if CH_PART(2)
CH_EACH_BLOCK32(QMATVEC_ALL)
#endif
#if CH_PART(3)
CH_EACH_BLOCK256(QMATVEC_ALL)
#endif
#if CH_PART(4)
CH_EACH_BLOCK32(QMATVEC_FEW_ALL)
QMATVEC_FEW_SPLIT(Q4_0, q4_0) QMATVEC_FEW_SPLIT(Q8_0, q8_0)
#endif
#if CH_PART(5)
CH_EACH_BLOCK256(QMATVEC_FEW_ALL)
QMATVEC_FEW_SPLIT(Q6K, q6k)
#endif
