// Fused attention (flash attention, forward): softmax(Q·Kᵀ·scale)·V with
// the scores kept on chip, for f16 and bf16 with f32 accumulation.
//
// Layout as candle-flash-attn takes it: q (batch, s_q, h_q, D), k and v
// (batch, s_k, h_k, D), any strides for the first three dimensions and unit
// stride along D; the output is contiguous (batch, s_q, h_q, D). Query head
// h reads key/value head h / (h_q / h_k) (grouped- and multi-query).
//
// Masking follows flash-attention 2: the query at row i sits at key
// position i + s_k - s_q (the diagonal is aligned to the bottom right), and
// key j is visible when i + off - win_left <= j <= i + off + win_right,
// where off = s_k - s_q and a window of CH_ATTN_UNBOUNDED is no limit
// (causal: win_right = 0). A row that sees no key gets zeros. The score of a
// visible key is s = q·k·scale, then softcap·tanh(s / softcap) when softcap
// > 0, then minus alibi[h]·|i + off - j| when alibi slopes are given.
//
//   flash_attn_d<D>_<T>(AttnArgs a, const T* q, const T* k, const T* v,
//                       T* o, const float* alibi)
//     Prefill (any s_q). A block owns 16 query rows per wave of one
//     (batch, head) and walks the visible key tiles: S = Q·Kᵀ with matrix
//     instructions, online softmax in shared memory, O += P·V.
//     Grid (ceil(s_q / rows per block), h_q, batch); block: ATTN_WAVES(D)
//     waves.
//
//   flash_decode_d<D>_<T>(AttnArgs a, const T* q, const T* k, const T* v,
//                         float* part, const float* alibi,
//                         const ch_u32* key_lens)
//     Decode (short s_q: flash-decoding). A block owns up to
//     DECODE_ROWS query rows (query position, head of the group) of one
//     (batch, key/value head), so each key is read once for the whole
//     group, and one split of the keys (a.split_keys of them); a lane
//     scores one key at a time. It writes each row's unnormalised partial output, running
//     maximum and sum to `part`. Grid (splits, h_k * row groups, batch);
//     block: CH_DECODE_THREADS threads. With key_lens (one u32 per batch
//     element, or null) sequence b has min(key_lens[b], s_k) keys: a KV
//     cache of s_k positions filled to that length.
//
//   flash_combine_d<D>_<T>(AttnArgs a, const float* part, T* o)
//     Merges the splits of each row into the output. Grid (s_q * h_q,
//     batch); block: D threads.
//
// Matrix instructions (one 16x16x16 product per wave, `Mma` below): MFMA on
// CDNA (gfx908 for f16; gfx90a, gfx942 for f16 and bf16), WMMA on RDNA 3
// (gfx11) and RDNA 4 (gfx12), `mma.sync` on the NVIDIA test platform
// (sm_80 and newer); everything else takes the portable product, which
// reads its operands from shared memory with plain FMAs. The tiling code
// only sees a fragment's element placement (`a_at`, `b_at`, `c_at`), so the
// same source drives every path. Which paths were executed where is stated
// in candle-hip/src/fused/attention.rs.

#include "common.h"

// A window bound that never limits (candle-flash-attn's None).
#define CH_ATTN_UNBOUNDED 0x3fffffff
// Threads of a decode block.
#define CH_DECODE_THREADS 128

// The problem, shared with the host (candle-hip/src/fused/attention.rs
// mirrors it; both check the size).
struct AttnArgs {
  ch_u64 q_stride[3];  // batch, query position, head (elements)
  ch_u64 k_stride[3];
  ch_u64 v_stride[3];
  ch_u32 s_q, s_k, h_q, h_k;
  ch_i32 win_left, win_right;
  float scale, softcap;
  ch_u32 split_keys;  // decode: keys per split
  ch_u32 splits;      // decode: splits per row
};
static_assert(sizeof(AttnArgs) == 9 * 8 + 10 * 4, "AttnArgs layout");

#define CH_LOG2E 1.4426950408889634f

// ---------------------------------------------------------------------------
// 16-bit elements as raw bits: f16 and bf16 share every data path.

template <typename T>
__device__ __forceinline__ float attn_to_float(ch_u16 bits) {
  return Num<T>::to_acc(*reinterpret_cast<const T*>(&bits));
}

template <typename T>
__device__ __forceinline__ ch_u16 attn_from_float(float v) {
  const T t = Num<T>::from_acc(v);
  return *reinterpret_cast<const ch_u16*>(&t);
}

// ---------------------------------------------------------------------------
// Fragments: C (16x16, f32) += A (16x16) · B (16x16) on one wave. Each
// implementation places A_N elements of A, B_N of B and C_N of C in every
// lane: element e of lane l is A[a_at(l, e)], and so on (row, col).

struct AttnAt {
  int row, col;
};

// The raw bits of A (or B) at (row, col) of a 16x16 operand stored at `p`
// with steps `sr` and `sc` (elements).
struct AttnView {
  const ch_u16* p;
  int sr, sc;
  __device__ __forceinline__ ch_u16 at(int r, int c) const { return p[r * sr + c * sc]; }
};

// Fills a register fragment with the elements its layout places in `lane`.
// Where the operand's k dimension has unit stride, the layout's runs of
// F::K_RUN elements consecutive along k (starting at multiples of the run)
// load together, up to 4 elements (8 bytes: every tile row is aligned to
// that).
template <class F, int N>
__device__ __forceinline__ void attn_gather(ch_u16 (&f)[N], const AttnView& v, int lane, bool b_operand) {
  const int RUN = F::K_RUN < 4 ? F::K_RUN : 4;
  if ((b_operand ? v.sr : v.sc) == 1) {
#pragma unroll
    for (int e = 0; e < N; e += RUN) {
      const AttnAt at = b_operand ? F::b_at(lane, e) : F::a_at(lane, e);
      const Pack<ch_u16, RUN> run = *reinterpret_cast<const Pack<ch_u16, RUN>*>(&v.p[at.row * v.sr + at.col * v.sc]);
#pragma unroll
      for (int i = 0; i < RUN; ++i) f[e + i] = run.v[i];
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const AttnAt at = b_operand ? F::b_at(lane, e) : F::a_at(lane, e);
    f[e] = v.at(at.row, at.col);
  }
}

// The portable product: lane l owns C row l % 16, columns C_N·(l / 16) ...;
// A is gathered (its row), B read from shared memory inside the product.
template <typename T>
struct MmaPortable {
  static const int C_N = 256 / CANDLE_HIP_WAVE;
  static const int A_N = 16, K_RUN = 16;
  struct AFrag {
    ch_u16 v[A_N];
  };
  typedef AttnView BFrag;
  __device__ static AttnAt a_at(int l, int e) { return {l % 16, e}; }
  __device__ static AttnAt c_at(int l, int e) { return {l % 16, C_N * (l / 16) + e}; }
  __device__ static AttnAt b_at(int l, int e) { return {e, l % 16}; }
  __device__ static AFrag load_a(const AttnView& v, int lane) {
    AFrag f;
    attn_gather<MmaPortable<T> >(f.v, v, lane, false);
    return f;
  }
  __device__ static BFrag load_b(const AttnView& v, int) { return v; }
  __device__ static void mma(float (&c)[C_N], const AFrag& a, const BFrag& b, int lane) {
    float af[16];
#pragma unroll
    for (int k = 0; k < 16; ++k) af[k] = attn_to_float<T>(a.v[k]);
#pragma unroll
    for (int e = 0; e < C_N; ++e) {
      const int n = c_at(lane, e).col;
      float s = c[e];
#pragma unroll
      for (int k = 0; k < 16; ++k) s += af[k] * attn_to_float<T>(b.at(k, n));
      c[e] = s;
    }
  }
};

// A product whose fragments sit in registers, gathered by layout L (which
// gives A_N, B_N, C_N, a_at, b_at, c_at and mma over raw fragments).
template <class L>
struct MmaRegisters : L {
  struct AFrag {
    ch_u16 v[L::A_N];
  };
  struct BFrag {
    ch_u16 v[L::B_N];
  };
  __device__ static AFrag load_a(const AttnView& v, int lane) {
    AFrag f;
    attn_gather<L>(f.v, v, lane, false);
    return f;
  }
  __device__ static BFrag load_b(const AttnView& v, int lane) {
    BFrag f;
    attn_gather<L>(f.v, v, lane, true);
    return f;
  }
  __device__ static void mma(float (&c)[L::C_N], const AFrag& a, const BFrag& b, int) { L::mma(c, a.v, b.v); }
};

// Two 16-bit elements as one 32-bit register, the lower index low.
__device__ __forceinline__ ch_u32 attn_pair(const ch_u16* v) { return (ch_u32)v[0] | ((ch_u32)v[1] << 16); }

#if defined(__HIP_PLATFORM_NVIDIA__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define CH_ATTN_MMA_NV 1
#elif defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || \
    defined(__gfx950__)
#define CH_ATTN_MFMA 1
#define CH_ATTN_MFMA_BF16 1
#elif defined(__gfx908__)
#define CH_ATTN_MFMA 1
#elif defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__) || \
    defined(__gfx1150__) || defined(__gfx1151__)
#define CH_ATTN_WMMA_GFX11 1
#elif defined(__gfx1200__) || defined(__gfx1201__)
#define CH_ATTN_WMMA_GFX12 1
#endif

#if defined(CH_ATTN_MMA_NV)
// Two m16n8k16 products (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
// g = l / 4, t = l % 4; A pairs at rows g, g + 8 and columns 2t, 2t + 8;
// B pairs at k = 2t, 2t + 8 of column g (+ 8 for the second product); C
// like A.
template <bool BF16>
struct MmaNvLayout {
  static const int A_N = 8, B_N = 8, C_N = 8, K_RUN = 2;
  __device__ static AttnAt a_at(int l, int e) {
    return {(l >> 2) + 8 * ((e >> 1) & 1), 2 * (l & 3) + (e & 1) + 8 * (e >> 2)};
  }
  __device__ static AttnAt b_at(int l, int e) {
    return {2 * (l & 3) + (e & 1) + 8 * ((e >> 1) & 1), (l >> 2) + 8 * (e >> 2)};
  }
  __device__ static AttnAt c_at(int l, int e) { return a_at(l, e); }
  __device__ static void mma(float (&c)[C_N], const ch_u16 (&a)[A_N], const ch_u16 (&b)[B_N]) {
    ch_u32 ar[4], br[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ar[i] = attn_pair(a + 2 * i);
      br[i] = attn_pair(b + 2 * i);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* d = c + 4 * h;
      if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[2 * h]), "r"(br[2 * h + 1]));
      } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[2 * h]), "r"(br[2 * h + 1]));
      }
    }
  }
};
#endif

#if defined(CH_ATTN_MFMA) || defined(CH_ATTN_WMMA_GFX11) || defined(CH_ATTN_WMMA_GFX12)
typedef _Float16 attn_v4h __attribute__((__vector_size__(4 * sizeof(_Float16))));
typedef _Float16 attn_v8h __attribute__((__vector_size__(8 * sizeof(_Float16))));
typedef _Float16 attn_v16h __attribute__((__vector_size__(16 * sizeof(_Float16))));
typedef short attn_v4s __attribute__((__vector_size__(4 * sizeof(short))));
typedef short attn_v8s __attribute__((__vector_size__(8 * sizeof(short))));
typedef short attn_v16s __attribute__((__vector_size__(16 * sizeof(short))));
typedef float attn_v4f __attribute__((__vector_size__(4 * sizeof(float))));
typedef float attn_v8f __attribute__((__vector_size__(8 * sizeof(float))));

// The N raw elements of a fragment as the builtin's vector type V.
template <typename V, int N>
__device__ __forceinline__ V attn_vec(const ch_u16 (&v)[N]) {
  static_assert(sizeof(V) == N * sizeof(ch_u16), "fragment size");
  V r;
  __builtin_memcpy(&r, v, sizeof(V));
  return r;
}

template <typename V, int N>
__device__ __forceinline__ void attn_accumulate(float (&c)[N], const V& d) {
  static_assert(sizeof(V) == N * sizeof(float), "accumulator size");
  __builtin_memcpy(c, &d, sizeof(V));
}
#endif

#if defined(CH_ATTN_MFMA)
// CDNA v_mfma_f32_16x16x16{f16,bf16_1k} (wave 64; AMD Instinct ISA guides,
// "Dependency and layout" of the MFMA chapter): lane l holds row l % 16 of A
// (column of B) at k = 4·(l / 16) + e; C rows 4·(l / 16) + e of column l % 16.
template <bool BF16>
struct MmaMfmaLayout {
  static_assert(CANDLE_HIP_WAVE == 64, "MFMA needs wave 64");
  static const int A_N = 4, B_N = 4, C_N = 4, K_RUN = 4;
  __device__ static AttnAt a_at(int l, int e) { return {l % 16, 4 * (l / 16) + e}; }
  __device__ static AttnAt b_at(int l, int e) { return {4 * (l / 16) + e, l % 16}; }
  __device__ static AttnAt c_at(int l, int e) { return {4 * (l / 16) + e, l % 16}; }
  __device__ static void mma(float (&c)[C_N], const ch_u16 (&a)[A_N], const ch_u16 (&b)[B_N]) {
    attn_v4f acc;
    __builtin_memcpy(&acc, c, sizeof acc);
#if defined(CH_ATTN_MFMA_BF16)
    if (BF16) {
      acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(attn_vec<attn_v4s>(a), attn_vec<attn_v4s>(b), acc, 0, 0, 0);
    } else
#endif
    {
      acc = __builtin_amdgcn_mfma_f32_16x16x16f16(attn_vec<attn_v4h>(a), attn_vec<attn_v4h>(b), acc, 0, 0, 0);
    }
    attn_accumulate(c, acc);
  }
};
#endif

#if defined(CH_ATTN_WMMA_GFX11)
// RDNA 3 v_wmma_f32_16x16x16_{f16,bf16} (wave 32; RDNA 3 ISA guide, "WMMA
// matrix layouts"): lanes l and l + 16 both hold row l % 16 of A (column of
// B), all 16 k; C row 2·e + l / 16 of column l % 16.
template <bool BF16>
struct MmaWmma11Layout {
  static_assert(CANDLE_HIP_WAVE == 32, "WMMA is compiled for wave 32");
  static const int A_N = 16, B_N = 16, C_N = 8, K_RUN = 16;
  __device__ static AttnAt a_at(int l, int e) { return {l % 16, e}; }
  __device__ static AttnAt b_at(int l, int e) { return {e, l % 16}; }
  __device__ static AttnAt c_at(int l, int e) { return {2 * e + l / 16, l % 16}; }
  __device__ static void mma(float (&c)[C_N], const ch_u16 (&a)[A_N], const ch_u16 (&b)[B_N]) {
    attn_v8f acc;
    __builtin_memcpy(&acc, c, sizeof acc);
    if (BF16) {
      acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(attn_vec<attn_v16s>(a), attn_vec<attn_v16s>(b), acc);
    } else {
      acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(attn_vec<attn_v16h>(a), attn_vec<attn_v16h>(b), acc);
    }
    attn_accumulate(c, acc);
  }
};
#endif

#if defined(CH_ATTN_WMMA_GFX12)
// RDNA 4 v_wmma_f32_16x16x16_{f16,bf16} (wave 32; RDNA 4 ISA guide): lane l
// holds row l % 16 of A (column of B) at k = 8·(e / 4) + 4·(l / 16) + e % 4;
// C row 8·(l / 16) + e of column l % 16.
template <bool BF16>
struct MmaWmma12Layout {
  static_assert(CANDLE_HIP_WAVE == 32, "WMMA is compiled for wave 32");
  static const int A_N = 8, B_N = 8, C_N = 8, K_RUN = 4;
  __device__ static int k_of(int l, int e) { return 8 * (e / 4) + 4 * (l / 16) + e % 4; }
  __device__ static AttnAt a_at(int l, int e) { return {l % 16, k_of(l, e)}; }
  __device__ static AttnAt b_at(int l, int e) { return {k_of(l, e), l % 16}; }
  __device__ static AttnAt c_at(int l, int e) { return {8 * (l / 16) + e, l % 16}; }
  __device__ static void mma(float (&c)[C_N], const ch_u16 (&a)[A_N], const ch_u16 (&b)[B_N]) {
    attn_v8f acc;
    __builtin_memcpy(&acc, c, sizeof acc);
    if (BF16) {
      acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(attn_vec<attn_v8s>(a), attn_vec<attn_v8s>(b), acc);
    } else {
      acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(attn_vec<attn_v8h>(a), attn_vec<attn_v8h>(b), acc);
    }
    attn_accumulate(c, acc);
  }
};
#endif

// The product each element type uses on the target being compiled.
template <typename T>
struct MmaOf {
  typedef MmaPortable<T> type;
};
#if defined(CH_ATTN_MMA_NV)
template <>
struct MmaOf<ch_f16> {
  typedef MmaRegisters<MmaNvLayout<false> > type;
};
template <>
struct MmaOf<ch_bf16> {
  typedef MmaRegisters<MmaNvLayout<true> > type;
};
#elif defined(CH_ATTN_MFMA)
template <>
struct MmaOf<ch_f16> {
  typedef MmaRegisters<MmaMfmaLayout<false> > type;
};
#if defined(CH_ATTN_MFMA_BF16)
template <>
struct MmaOf<ch_bf16> {
  typedef MmaRegisters<MmaMfmaLayout<true> > type;
};
#endif
#elif defined(CH_ATTN_WMMA_GFX11)
template <>
struct MmaOf<ch_f16> {
  typedef MmaRegisters<MmaWmma11Layout<false> > type;
};
template <>
struct MmaOf<ch_bf16> {
  typedef MmaRegisters<MmaWmma11Layout<true> > type;
};
#elif defined(CH_ATTN_WMMA_GFX12)
template <>
struct MmaOf<ch_f16> {
  typedef MmaRegisters<MmaWmma12Layout<false> > type;
};
template <>
struct MmaOf<ch_bf16> {
  typedef MmaRegisters<MmaWmma12Layout<true> > type;
};
#endif

// ---------------------------------------------------------------------------
// Masking and score transforms, per query row.

struct AttnRow {
  ch_i64 lo, hi;  // visible keys: lo <= j <= hi
  ch_i64 pos;     // the row's key position, i + s_k - s_q
  float slope;    // alibi slope (0: none)
};

__device__ __forceinline__ AttnRow attn_row(const AttnArgs& a, ch_i64 i, float slope) {
  AttnRow r;
  r.pos = i + (ch_i64)a.s_k - (ch_i64)a.s_q;
  r.lo = r.pos - (ch_i64)a.win_left;
  if (r.lo < 0) r.lo = 0;
  r.hi = r.pos + (ch_i64)a.win_right;
  if (r.hi > (ch_i64)a.s_k - 1) r.hi = (ch_i64)a.s_k - 1;
  r.slope = slope;
  return r;
}

// The score of dot product `dot` with key j in log2 units, or -inf when
// the key is not visible.
__device__ __forceinline__ float attn_score(const AttnArgs& a, const AttnRow& r, ch_i64 j, float dot) {
  if (j < r.lo || j > r.hi) return -__builtin_huge_valf();
  float s = dot * a.scale;
  if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
  if (r.slope != 0.0f) {
    const ch_i64 d = r.pos - j;
    s -= r.slope * (float)(d < 0 ? -d : d);
  }
  return s * CH_LOG2E;
}

// exp2(x - m) for a running maximum m that may still be -inf.
__device__ __forceinline__ float attn_exp2(float x, float m) {
  return m == -__builtin_huge_valf() ? 0.0f : exp2f(x - m);
}

// ---------------------------------------------------------------------------
// Prefill.

// Waves per block and keys per tile by head dimension: shared memory stays
// within 48 KiB (a Q tile, a K and a V tile, the scores and probabilities).
#define ATTN_WAVES(D) ((D) > 128 ? 2 : 4)
#define ATTN_KEYS(D) ((D) > 128 ? 16 : 32)

template <typename T, int D>
__device__ __forceinline__ void flash_attn(const AttnArgs& a, const T* __restrict__ q, const T* __restrict__ k,
                                           const T* __restrict__ v, T* __restrict__ o,
                                           const float* __restrict__ alibi) {
  typedef typename MmaOf<T>::type M;
  const int WAVES = ATTN_WAVES(D), BC = ATTN_KEYS(D), ROWS = 16 * WAVES;
  const int LD = D + 8;    // padded row of a Q/K/V tile (elements)
  const int SLD = BC + 2;  // padded row of the scores (floats)
  const int PLD = BC + 4;  // padded row of the probabilities (elements)
  const int LPR = CANDLE_HIP_WAVE / 16;  // lanes per score row
  const int PACK = 8;                    // elements per 16-byte copy
  __shared__ ch_u16 sq[ROWS * LD];
  __shared__ ch_u16 sk[BC * LD];
  // V: row-major; transposed for D = 256, whose P·V fragments then load
  // along rows (with row-major V, RDNA 4 spills a register there).
  const bool VT = D > 128;
  const int VLD = BC + 4;  // padded row of the transposed tile (elements)
  __shared__ ch_u16 sv[VT ? D * VLD : BC * LD];
  __shared__ float ss[ROWS * SLD];
  __shared__ ch_u16 sp[ROWS * PLD];
  __shared__ float s_alpha[ROWS];
  __shared__ float s_sum[ROWS];

  const int tid = (int)threadIdx.x, lane = tid % CANDLE_HIP_WAVE, wave = tid / CANDLE_HIP_WAVE;
  const ch_u32 h = blockIdx.y, b = blockIdx.z;
  const ch_u32 kvh = h / (a.h_q / a.h_k);
  const ch_i64 i0 = (ch_i64)blockIdx.x * ROWS;
  const ch_i64 rows = (ch_i64)a.s_q - i0 < ROWS ? (ch_i64)a.s_q - i0 : ROWS;
  const ch_u16* qb = reinterpret_cast<const ch_u16*>(q) + b * a.q_stride[0] + h * a.q_stride[2];
  const ch_u16* kb = reinterpret_cast<const ch_u16*>(k) + b * a.k_stride[0] + kvh * a.k_stride[2];
  const ch_u16* vb = reinterpret_cast<const ch_u16*>(v) + b * a.v_stride[0] + kvh * a.v_stride[2];
  const float slope = alibi != nullptr ? alibi[h] : 0.0f;

  // Copies `n` rows of D elements at `src` (row step `step`) into a padded
  // tile, zeros past `n`: row-major (row step LD), or transposed (each
  // pack spread down a column of row step VLD).
  auto load_tile = [&](ch_u16* dst, int tile_rows, const ch_u16* src, ch_u64 step, ch_i64 n, bool transposed) {
    const int packs = tile_rows * (D / PACK);
    for (int p = tid; p < packs; p += (int)blockDim.x) {
      const int r = p / (D / PACK), c = (p % (D / PACK)) * PACK;
      Pack<ch_u16, PACK> val;
      if (r < n) {
        val = *reinterpret_cast<const Pack<ch_u16, PACK>*>(src + (ch_u64)r * step + c);
      } else {
#pragma unroll
        for (int e = 0; e < PACK; ++e) val.v[e] = 0;
      }
      if (transposed) {
#pragma unroll
        for (int e = 0; e < PACK; ++e) dst[(c + e) * VLD + r] = val.v[e];
      } else {
        *reinterpret_cast<Pack<ch_u16, PACK>*>(dst + r * LD + c) = val;
      }
    }
  };
  load_tile(sq, ROWS, qb + (ch_u64)i0 * a.q_stride[1], a.q_stride[1], rows, false);

  // This lane's score row (in the wave's 16) and its running statistics.
  const int my_row = lane / LPR, my_part = lane % LPR;
  const int block_row = wave * 16 + my_row;
  const AttnRow row = attn_row(a, i0 + block_row, slope);
  float m = -__builtin_huge_valf(), l = 0.0f;

  // The keys any row of the block sees.
  const AttnRow first = attn_row(a, i0, slope), last = attn_row(a, i0 + rows - 1, slope);
  const ch_i64 j_begin = (first.lo / BC) * BC, j_end = last.hi + 1;

  float acc[D / 16][M::C_N];
#pragma unroll
  for (int t = 0; t < D / 16; ++t)
#pragma unroll
    for (int e = 0; e < M::C_N; ++e) acc[t][e] = 0.0f;

  float* wave_s = ss + wave * 16 * SLD;
  ch_u16* wave_p = sp + wave * 16 * PLD;
  for (ch_i64 j0 = j_begin; j0 < j_end; j0 += BC) {
    const ch_i64 n = (ch_i64)a.s_k - j0 < BC ? (ch_i64)a.s_k - j0 : BC;
    __syncthreads();  // the previous tile is consumed
    load_tile(sk, BC, kb + (ch_u64)j0 * a.k_stride[1], a.k_stride[1], n, false);
    load_tile(sv, BC, vb + (ch_u64)j0 * a.v_stride[1], a.v_stride[1], n, VT);
    __syncthreads();

    // S = Q·Kᵀ for the wave's 16 rows.
    float s[BC / 16][M::C_N];
#pragma unroll
    for (int t = 0; t < BC / 16; ++t)
#pragma unroll
      for (int e = 0; e < M::C_N; ++e) s[t][e] = 0.0f;
    // Partly unrolled: fully unrolled, the compiler hoists every fragment
    // load and runs out of registers on wave-32 targets.
#pragma unroll 2
    for (int kt = 0; kt < D / 16; ++kt) {
      const typename M::AFrag qa = M::load_a(AttnView{sq + wave * 16 * LD + kt * 16, LD, 1}, lane);
#pragma unroll
      for (int t = 0; t < BC / 16; ++t) {
        const typename M::BFrag kf = M::load_b(AttnView{sk + t * 16 * LD + kt * 16, 1, LD}, lane);
        M::mma(s[t], qa, kf, lane);
      }
    }
#pragma unroll
    for (int t = 0; t < BC / 16; ++t)
#pragma unroll
      for (int e = 0; e < M::C_N; ++e) {
        const AttnAt at = M::c_at(lane, e);
        wave_s[at.row * SLD + t * 16 + at.col] = s[t][e];
      }
    __syncthreads();

    // Online softmax: each row's LPR lanes take every LPR-th key, in two
    // passes over the scores (the maximum, then the exponentials) rather
    // than holding them in registers beside the output accumulators.
    float tile_max = -__builtin_huge_valf();
#pragma unroll
    for (int c = 0; c < BC / LPR; ++c) {
      const int col = c * LPR + my_part;
      tile_max = fmaxf(tile_max, attn_score(a, row, j0 + col, wave_s[my_row * SLD + col]));
    }
#pragma unroll
    for (int w = 1; w < LPR; w *= 2) tile_max = fmaxf(tile_max, __shfl_xor(tile_max, w, CANDLE_HIP_WAVE));
    const float m_new = fmaxf(m, tile_max);
    const float alpha = attn_exp2(m, m_new);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < BC / LPR; ++c) {
      const int col = c * LPR + my_part;
      const float p = attn_exp2(attn_score(a, row, j0 + col, wave_s[my_row * SLD + col]), m_new);
      sum += p;
      wave_p[my_row * PLD + col] = attn_from_float<T>(p);
    }
#pragma unroll
    for (int w = 1; w < LPR; w *= 2) sum += __shfl_xor(sum, w, CANDLE_HIP_WAVE);
    l = l * alpha + sum;
    m = m_new;
    if (my_part == 0) {
      s_alpha[block_row] = alpha;
      s_sum[block_row] = l;
    }
    __syncthreads();

    // O = O·alpha + P·V.
#pragma unroll
    for (int e = 0; e < M::C_N; ++e) {
      const float f = s_alpha[wave * 16 + M::c_at(lane, e).row];
#pragma unroll
      for (int t = 0; t < D / 16; ++t) acc[t][e] *= f;
    }
#pragma unroll 1
    for (int kt = 0; kt < BC / 16; ++kt) {
      const typename M::AFrag pa = M::load_a(AttnView{wave_p + kt * 16, PLD, 1}, lane);
#pragma unroll
      for (int t = 0; t < D / 16; ++t) {
        const AttnView vview = VT ? AttnView{sv + t * 16 * VLD + kt * 16, 1, VLD}
                                  : AttnView{sv + kt * 16 * LD + t * 16, LD, 1};
        const typename M::BFrag vf = M::load_b(vview, lane);
        M::mma(acc[t], pa, vf, lane);
      }
    }
  }
  __syncthreads();

  T* ob = o + (((ch_u64)b * a.s_q + (ch_u64)i0) * a.h_q + h) * D;
#pragma unroll
  for (int e = 0; e < M::C_N; ++e) {
    const AttnAt at = M::c_at(lane, e);
    const int r = wave * 16 + at.row;
    if (r >= rows) continue;
    const float total = j_begin < j_end ? s_sum[r] : 0.0f;
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
    for (int t = 0; t < D / 16; ++t) ob[(ch_u64)r * a.h_q * D + t * 16 + at.col] = Num<T>::from_acc(acc[t][e] * inv);
  }
}

// ---------------------------------------------------------------------------
// Decode.

// Query rows per decode block (query position, head of the group).
#define DECODE_ROWS 4

// Loads a decode step issues together: DECODE_STEP K row packs, then
// DECODE_V_ROWS V rows. Fewer on RDNA, whose registers would spill with
// more. Sixteen V rows halve the groups of loads a wave's keys wait for in
// turn, a large part of a short cache's decode time.
#if defined(CH_ATTN_WMMA_GFX11) || defined(CH_ATTN_WMMA_GFX12) || defined(__gfx1030__) || \
    defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__)
#define DECODE_STEP 4
#define DECODE_V_ROWS 4
#else
#define DECODE_STEP 8
#define DECODE_V_ROWS 16
#endif

// Dimensions of the output each lane accumulates in the decode kernel:
// DECODE_DIMS(D) consecutive ones (read with one load) when the wave
// divides D into a power of two per lane, else every wave-th from the
// lane's index.
#define DECODE_DIMS(D) (((D) + CANDLE_HIP_WAVE - 1) / CANDLE_HIP_WAVE)
#define DECODE_VEC(D)                                                                              \
  ((D) % CANDLE_HIP_WAVE == 0 && (DECODE_DIMS(D) == 1 || DECODE_DIMS(D) == 2 || DECODE_DIMS(D) == 4 || \
                                  DECODE_DIMS(D) == 8))

// The output dimension of a lane's i-th accumulator.
template <int D>
__device__ __forceinline__ int decode_dim(int lane, int i) {
  return DECODE_VEC(D) ? lane * DECODE_DIMS(D) + i : lane + i * CANDLE_HIP_WAVE;
}

// A lane's DECODE_DIMS(D) values of a V row, as floats.
template <typename T, int D, bool VEC>
struct DecodeRow {
  __device__ static void load(const ch_u16* row, int lane, float (&out)[DECODE_DIMS(D)]) {
#pragma unroll
    for (int i = 0; i < DECODE_DIMS(D); ++i) {
      const int d = decode_dim<D>(lane, i);
      out[i] = d < D ? attn_to_float<T>(row[d]) : 0.0f;
    }
  }
};

template <typename T, int D>
struct DecodeRow<T, D, true> {
  __device__ static void load(const ch_u16* row, int lane, float (&out)[DECODE_DIMS(D)]) {
    typedef Pack<ch_u16, DECODE_DIMS(D)> P;
    const P p = reinterpret_cast<const P*>(row)[lane];
#pragma unroll
    for (int i = 0; i < DECODE_DIMS(D); ++i) out[i] = attn_to_float<T>(p.v[i]);
  }
};

// Each wave of a decode block walks the split's keys a wave's worth at a
// time, one key per lane: the lane computes its key's scores for every row
// in full (its K row read in 16-byte packs, the queries broadcast from
// shared memory), the wave takes the maximum and sum of each row's scores
// with shuffles, then accumulates P·V with lanes owning output dimensions
// (decode_dim), each key's probabilities broadcast from its lane.
template <typename T, int D>
__device__ __forceinline__ void flash_decode(const AttnArgs& a, const T* __restrict__ q, const T* __restrict__ k,
                                             const T* __restrict__ v, float* __restrict__ part,
                                             const float* __restrict__ alibi) {
  const int R = DECODE_ROWS, W = CANDLE_HIP_WAVE, WAVES = CH_DECODE_THREADS / CANDLE_HIP_WAVE;
  const int DL = DECODE_DIMS(D), PACK = 8;
  __shared__ Pack<float, 4> s_q[R][D / 4];  // read as 16-byte broadcasts
  __shared__ AttnRow s_info[R];             // the rows' masks, in shared memory to spare registers
  __shared__ float s_m[WAVES][R], s_l[WAVES][R];
  __shared__ float s_o[WAVES][R][D];

  const int tid = (int)threadIdx.x, lane = tid % W, wave = tid / W;
  const ch_u32 split = blockIdx.x, b = blockIdx.z;
  const ch_u32 per_kv = a.h_q / a.h_k;
  const ch_u32 total_rows = a.s_q * per_kv;
  const ch_u32 row_groups = (total_rows + R - 1) / R;
  const ch_u32 kvh = blockIdx.y / row_groups;
  const ch_u32 row0 = (blockIdx.y % row_groups) * R;
  const int rows = total_rows - row0 < (ch_u32)R ? (int)(total_rows - row0) : R;

  // Row r's query position and head: (row0 + r) / per_kv and
  // kvh·per_kv + (row0 + r) % per_kv; rows past the last repeat row 0.
  auto position = [&](int r) { return (row0 + (r < rows ? r : 0)) / per_kv; };
  auto head = [&](int r) { return kvh * per_kv + (row0 + (r < rows ? r : 0)) % per_kv; };
  if (tid < R) s_info[tid] = attn_row(a, position(tid), alibi != nullptr ? alibi[head(tid)] : 0.0f);
  for (int idx = tid; idx < R * D; idx += CH_DECODE_THREADS) {
    const int r = idx / D, d = idx % D;
    s_q[r][d / 4].v[d % 4] =
        Num<T>::to_acc(q[b * a.q_stride[0] + position(r) * a.q_stride[1] + head(r) * a.q_stride[2] + d]);
  }
  __syncthreads();

  float m[R], l[R], acc[R][DL];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -__builtin_huge_valf();
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < DL; ++i) acc[r][i] = 0.0f;
  }

  const ch_i64 j_begin = (ch_i64)split * a.split_keys;
  const ch_i64 j_limit = j_begin + a.split_keys < (ch_i64)a.s_k ? j_begin + a.split_keys : (ch_i64)a.s_k;
  const ch_u16* kb = reinterpret_cast<const ch_u16*>(k) + b * a.k_stride[0] + kvh * a.k_stride[2];
  const ch_u16* vb = reinterpret_cast<const ch_u16*>(v) + b * a.v_stride[0] + kvh * a.v_stride[2];
  // Every lane of a wave runs the same steps (the shuffles need whole waves).
  for (ch_i64 j0 = j_begin + (ch_i64)wave * W; j0 < j_limit; j0 += (ch_i64)WAVES * W) {
    const ch_i64 j = j0 + lane;
    const bool valid = j < j_limit;
    const Pack<ch_u16, PACK>* krow =
        reinterpret_cast<const Pack<ch_u16, PACK>*>(kb + (ch_u64)(valid ? j : j_begin) * a.k_stride[1]);
    float dot[R];
#pragma unroll
    for (int r = 0; r < R; ++r) dot[r] = 0.0f;
    // K row packs DECODE_STEP at a time, their loads issued together.
#if DECODE_STEP == 8
#pragma unroll 8
#else
#pragma unroll 4
#endif
    for (int c = 0; c < D / PACK; ++c) {
      const Pack<ch_u16, PACK> kp = krow[c];
      float kf[PACK];
#pragma unroll
      for (int e = 0; e < PACK; ++e) kf[e] = attn_to_float<T>(kp.v[e]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= rows) break;  // uniform over the block
        const Pack<float, 4> q0 = s_q[r][c * 2], q1 = s_q[r][c * 2 + 1];
#pragma unroll
        for (int e = 0; e < 4; ++e) dot[r] += q0.v[e] * kf[e] + q1.v[e] * kf[4 + e];
      }
    }
    const int keys = j_limit - j0 < W ? (int)(j_limit - j0) : W;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;
      const float x = valid ? attn_score(a, s_info[r], j, dot[r]) : -__builtin_huge_valf();
      float mx = x;
#pragma unroll
      for (int w = W / 2; w > 0; w /= 2) mx = fmaxf(mx, __shfl_xor(mx, w, W));
      if (mx == -__builtin_huge_valf()) {  // the whole wave agrees
        dot[r] = 0.0f;
        continue;
      }
      const float m_new = fmaxf(m[r], mx);
      const float alpha = attn_exp2(m[r], m_new);
      const float p = attn_exp2(x, m_new);
      float sum = p;
#pragma unroll
      for (int w = W / 2; w > 0; w /= 2) sum += __shfl_xor(sum, w, W);
      m[r] = m_new;
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int i = 0; i < DL; ++i) acc[r][i] *= alpha;
      dot[r] = p;  // the row's probability of this lane's key, for P·V
    }
    // P·V: the V rows of KB keys are loaded before any is used.
    const int KB = DECODE_V_ROWS;
    for (int k0 = 0; k0 < keys; k0 += KB) {
      float vv[KB][DL];
#pragma unroll
      for (int u = 0; u < KB; ++u) {
        const ch_u16* vrow = vb + (ch_u64)(j0 + (k0 + u < keys ? k0 + u : 0)) * a.v_stride[1];
        DecodeRow<T, D, DECODE_VEC(D)>::load(vrow, lane, vv[u]);
      }
#pragma unroll
      for (int u = 0; u < KB; ++u) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r >= rows) break;  // uniform over the block
          // Keys past the split's end have probability 0 (their lanes' dot).
          const float p = __shfl(dot[r], k0 + u < keys ? k0 + u : lane, W);
          const float pk = k0 + u < keys ? p : 0.0f;
#pragma unroll
          for (int i = 0; i < DL; ++i) acc[r][i] += pk * vv[u][i];
        }
      }
    }
  }

  // Merge the waves of the block, then store the split's partials.
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (lane == 0) {
      s_m[wave][r] = m[r];
      s_l[wave][r] = l[r];
    }
#pragma unroll
    for (int i = 0; i < DL; ++i) {
      const int d = decode_dim<D>(lane, i);
      if (d < D) s_o[wave][r][d] = acc[r][i];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < rows * D; idx += CH_DECODE_THREADS) {
    const int r = idx / D, d = idx % D;
    float mx = -__builtin_huge_valf();
    for (int g = 0; g < WAVES; ++g) mx = fmaxf(mx, s_m[g][r]);
    float sum = 0.0f, out = 0.0f;
    for (int g = 0; g < WAVES; ++g) {
      const float f = attn_exp2(s_m[g][r], mx);
      sum += s_l[g][r] * f;
      out += s_o[g][r][d] * f;
    }
    // Partials of row (b, head, position): `splits` entries of D + 2 floats.
    float* dst = part + ((((ch_u64)b * a.h_q + head(r)) * a.s_q + position(r)) * a.splits + split) * (D + 2);
    dst[d] = out;
    if (d == 0) {
      dst[D] = mx;
      dst[D + 1] = sum;
    }
  }
}

// Splits per row at most (the host keeps to it): the merge holds each
// split's weight in shared memory.
#define CH_DECODE_MAX_SPLITS 256

template <typename T, int D>
__device__ __forceinline__ void flash_combine(const AttnArgs& a, const float* __restrict__ part, T* __restrict__ o) {
  __shared__ float s_w[CH_DECODE_MAX_SPLITS];
  __shared__ float s_red[D];
  const ch_u32 hi = blockIdx.x, b = blockIdx.y;
  const ch_u32 i = hi / a.h_q, h = hi % a.h_q;
  const int d = (int)threadIdx.x;
  const int splits = (int)a.splits;
  const float* src = part + (((ch_u64)b * a.h_q + h) * a.s_q + i) * a.splits * (D + 2);
  // The splits' maxima and sums in parallel, one split per thread.
  float mx = -__builtin_huge_valf();
  for (int s = d; s < splits; s += D) mx = fmaxf(mx, src[s * (D + 2) + D]);
  s_red[d] = mx;
  __syncthreads();
  mx = -__builtin_huge_valf();
  for (int t = 0; t < D; ++t) mx = fmaxf(mx, s_red[t]);
  __syncthreads();
  float sum = 0.0f;
  for (int s = d; s < splits; s += D) {
    const float w = attn_exp2(src[s * (D + 2) + D], mx);
    s_w[s] = w;
    sum += w * src[s * (D + 2) + D + 1];
  }
  s_red[d] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int t = 0; t < D; ++t) sum += s_red[t];
  // Four independent sums: the loads of four splits are in flight at once.
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int s = 0;
  for (; s + 4 <= splits; s += 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) acc[u] += s_w[s + u] * src[(s + u) * (D + 2) + d];
  }
  for (; s < splits; ++s) acc[0] += s_w[s] * src[s * (D + 2) + d];
  const float out = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  o[(((ch_u64)b * a.s_q + i) * a.h_q + h) * D + d] = Num<T>::from_acc(sum > 0.0f ? out / sum : 0.0f);
}

#define FLASH_ATTN(NAME, D, TYPE)                                                                      \
  extern "C" __global__ void __launch_bounds__(ATTN_WAVES(D) * CANDLE_HIP_WAVE)                        \
      NAME##_##TYPE(AttnArgs a, const ch_##TYPE* q, const ch_##TYPE* k, const ch_##TYPE* v,          \
                    ch_##TYPE* o, const float* alibi) {                                                \
    flash_attn<ch_##TYPE, D>(a, q, k, v, o, alibi);                                                    \
  }
// `key_lens`, when not null, holds one u32 per batch element: the keys of
// that sequence (a KV cache's filled length, read on the device so that a
// captured graph serves every length); longer than s_k counts as s_k. The
// sequence's rows then see keys 0 .. len - 1, aligned to its end.
#define FLASH_DECODE(NAME, D, TYPE)                                                                    \
  extern "C" __global__ void __launch_bounds__(CH_DECODE_THREADS)                                      \
      NAME##_##TYPE(AttnArgs a, const ch_##TYPE* q, const ch_##TYPE* k, const ch_##TYPE* v,          \
                    float* part, const float* alibi, const ch_u32* key_lens) {                         \
    if (key_lens != nullptr && key_lens[blockIdx.z] < a.s_k) a.s_k = key_lens[blockIdx.z];            \
    flash_decode<ch_##TYPE, D>(a, q, k, v, part, alibi);                                               \
  }
#define FLASH_COMBINE(NAME, D, TYPE)                                                                   \
  extern "C" __global__ void __launch_bounds__(256) NAME##_##TYPE(AttnArgs a, const float* part,      \
                                                                  ch_##TYPE* o) {                      \
    flash_combine<ch_##TYPE, D>(a, part, o);                                                           \
  }

#define CH_HALVES(M, NAME, OP) CH_EACH(M, NAME, OP, f16) CH_EACH(M, NAME, OP, bf16)

#if CH_PART(1)
CH_HALVES(FLASH_ATTN, flash_attn_d32, 32)
CH_HALVES(FLASH_ATTN, flash_attn_d64, 64)
CH_HALVES(FLASH_ATTN, flash_attn_d80, 80)
CH_HALVES(FLASH_ATTN, flash_attn_d96, 96)
#endif
#if CH_PART(2)
CH_HALVES(FLASH_ATTN, flash_attn_d128, 128)
#endif
#if CH_PART(3)
CH_HALVES(FLASH_ATTN, flash_attn_d256, 256)
#endif
#if CH_PART(4)
CH_HALVES(FLASH_DECODE, flash_decode_d32, 32)
CH_HALVES(FLASH_DECODE, flash_decode_d64, 64)
CH_HALVES(FLASH_DECODE, flash_decode_d80, 80)
CH_HALVES(FLASH_DECODE, flash_decode_d96, 96)
CH_HALVES(FLASH_COMBINE, flash_combine_d32, 32)
CH_HALVES(FLASH_COMBINE, flash_combine_d64, 64)
CH_HALVES(FLASH_COMBINE, flash_combine_d80, 80)
CH_HALVES(FLASH_COMBINE, flash_combine_d96, 96)
#endif
#if CH_PART(5)
CH_HALVES(FLASH_DECODE, flash_decode_d128, 128)
CH_HALVES(FLASH_DECODE, flash_decode_d256, 256)
CH_HALVES(FLASH_COMBINE, flash_combine_d128, 128)
CH_HALVES(FLASH_COMBINE, flash_combine_d256, 256)
#endif
