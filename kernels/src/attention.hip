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
//     instructions, the online softmax on the scores in registers, O += P·V;
//     where copies to shared memory can be asynchronous (ATTN_ASYNC), the
//     next tile's loads overlap the current tile's products. Grid
//     (ceil(s_q / rows per block), h_q, batch); block: ATTN_WAVES(D) waves.
//
//   flash_decode_d<D>_<T>(AttnArgs a, const T* q, const T* k, const T* v,
//                         float* part, const float* alibi,
//                         const ch_u32* key_lens, T* o)
//     Decode (short s_q: flash-decoding), the prefill kernel's tiles and
//     products with other owners: a block owns 16 query rows (query
//     position, head of the group; padded) of one (batch, key/value head),
//     so each key is read once for the whole group, and one split of the
//     keys (a.split_keys of them); its waves share each key tile, 16 keys
//     each. It writes each row's unnormalised partial output, running
//     maximum and sum to `part`; with o not null (the host passes it for
//     one split), the attention's output itself to o instead, as the merge
//     of that one split would write it, so that no merge follows. Grid
//     (splits, h_k * row groups of 16, batch); block: ATTN_DECODE_WAVES(D)
//     waves. With key_lens (one u32 per batch element, or null) sequence b
//     has min(key_lens[b], s_k) keys: a KV cache of s_k positions filled to
//     that length.
//
//   flash_combine_d<D>_<T>(AttnArgs a, const float* part, T* o)
//     Merges the splits of each row into the output. Grid (s_q * h_q,
//     batch); block: D threads rounded up to a multiple of the wave size.
//
//   flash_combine_round_d<D>_<T>(AttnArgs a, const float* part,
//                                signed char* q, float* d, float* s,
//                                ch_u32 act)
//     The same merge, each (batch, query) row of h_q * D values rounded
//     for a product against GGML blocks instead of written: exactly what
//     quantize_act_<a>_<T> (quantized.hip) makes of flash_combine's output,
//     a = q8_0, q8_1 or q8k for act 0, 1 or 2; h_q * D must be whole
//     blocks of a. Grid (ceil(h_q * D / 256), s_q, batch); block: 256
//     threads.
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

// Query rows of a decode block: one fragment's height.
#define CH_DECODE_ROWS 16

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
// lane: element e of lane l is A[a_at(l, e)], and so on (row, col). The
// portable product's A and B fragments are views of shared memory
// (VIEWS): it places only C.
//
// How the prefill kernel keeps the scores of a 16x16 tile in registers is
// told by five constants of each layout:
//   S_T           the scores are computed transposed (Sᵀ = K·Qᵀ), so that
//                 a lane's score elements sit where P·V wants P as A;
//   P_REGS        the score fragment's element e is A's element e (a_at):
//                 P feeds P·V from registers, else through shared memory;
//   O_ROWS_MATCH  element e of the output (C of P·V, rows = queries)
//                 belongs to the same query as score element e; else a
//                 lane holds one query (l % 16) and fetches the others'
//                 row statistics with shuffles;
//   ROW_LANES_FIRST, ROW_LANES_END
//                 the lanes holding one query's scores differ by the xor
//                 masks FIRST, 2·FIRST, ... below END.

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

// Two 16-bit elements as one 32-bit word, the lower index low (the order of
// the matrix instructions' operand registers).
__device__ __forceinline__ ch_u32 attn_word(ch_u16 lo, ch_u16 hi) { return (ch_u32)lo | ((ch_u32)hi << 16); }

// Element e of a fragment held as words.
template <int W>
__device__ __forceinline__ ch_u16 attn_half(const ch_u32 (&w)[W], int e) {
  return (ch_u16)(w[e / 2] >> (16 * (e % 2)));
}

// Fills a register fragment (as words: elements 2i and 2i + 1 in word i)
// with the elements its layout places in `lane`. Where the operand's k
// dimension has unit stride, the layout's runs of F::K_RUN elements
// consecutive along k (starting at multiples of the run) load together, up
// to 4 elements (8 bytes: every tile row is aligned to that).
template <class F, int W>
__device__ __forceinline__ void attn_gather(ch_u32 (&w)[W], const AttnView& v, int lane, bool b_operand) {
  const int RUN = F::K_RUN < 4 ? F::K_RUN : 4;
  if (RUN >= 2 && (b_operand ? v.sr : v.sc) == 1) {
#pragma unroll
    for (int e = 0; e < 2 * W; e += RUN) {
      const AttnAt at = b_operand ? F::b_at(lane, e) : F::a_at(lane, e);
      typedef Pack<ch_u32, RUN / 2> Run;
      const Run run = *reinterpret_cast<const Run*>(&v.p[at.row * v.sr + at.col * v.sc]);
#pragma unroll
      for (int i = 0; i < RUN / 2; ++i) w[e / 2 + i] = run.v[i];
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const AttnAt lo = b_operand ? F::b_at(lane, 2 * i) : F::a_at(lane, 2 * i);
    const AttnAt hi = b_operand ? F::b_at(lane, 2 * i + 1) : F::a_at(lane, 2 * i + 1);
    w[i] = attn_word(v.at(lo.row, lo.col), v.at(hi.row, hi.col));
  }
}

// The portable product, for targets without matrix instructions: both
// operands stay in shared memory (a fragment is a view of its tile), lane l
// owns C row l % 16, columns C_N·(l / 16) ... + C_N - 1, and k advances in
// rolled steps of 4: unrolled, these products would be most of the
// kernels' code and of their compile time.
// A has unit stride along k, B along k or along n (every tile here); runs
// of 4 elements are 8-byte aligned (tile rows and fragment origins are).
template <typename T>
struct MmaPortable {
  static const int C_N = 256 / CANDLE_HIP_WAVE;
  static const bool VIEWS = true, S_T = false, P_REGS = false, O_ROWS_MATCH = true;
  static const int ROW_LANES_FIRST = 16, ROW_LANES_END = CANDLE_HIP_WAVE;
  typedef AttnView AFrag;
  typedef AttnView BFrag;
  __device__ static AttnAt c_at(int l, int e) { return {l % 16, C_N * (l / 16) + e}; }
  __device__ static AFrag load_a(const AttnView& v, int) { return v; }
  __device__ static BFrag load_b(const AttnView& v, int) { return v; }
  // Four consecutive elements from `p` as floats.
  __device__ static void run4(const ch_u16* p, float (&f)[4]) {
    const Pack<ch_u32, 2> w = *reinterpret_cast<const Pack<ch_u32, 2>*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = attn_to_float<T>(attn_half(w.v, i));
  }
  __device__ static void mma(float (&c)[C_N], const AFrag& a, const BFrag& b, int lane) {
    static_assert(C_N % 4 == 0, "runs of 4 along n");
    const int row = lane % 16, n0 = C_N * (lane / 16);
#pragma unroll 1
    for (int k0 = 0; k0 < 16; k0 += 4) {
      float av[4], bv[4];
      run4(&a.p[row * a.sr + k0], av);
      if (b.sr == 1) {
#pragma unroll
        for (int e = 0; e < C_N; ++e) {
          run4(&b.p[(n0 + e) * b.sc + k0], bv);
#pragma unroll
          for (int k = 0; k < 4; ++k) c[e] = fmaf(av[k], bv[k], c[e]);
        }
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
          for (int e0 = 0; e0 < C_N; e0 += 4) {
            run4(&b.p[(k0 + k) * b.sr + n0 + e0], bv);
#pragma unroll
            for (int e = 0; e < 4; ++e) c[e0 + e] = fmaf(av[k], bv[e], c[e0 + e]);
          }
      }
    }
  }
};

// Loads layout L's fragment of A (or B, `b_operand`): gathered element by
// element (in runs of K_RUN); a layout may specialise this.
template <class L>
struct AttnLoad {
  template <int W>
  __device__ static void run(ch_u32 (&w)[W], const AttnView& v, int lane, bool b_operand) {
    attn_gather<L>(w, v, lane, b_operand);
  }
};

// A product whose fragments sit in registers, loaded by AttnLoad<L> (L
// gives A_N, B_N, C_N, a_at, b_at, c_at and mma over raw fragments).
template <class L>
struct MmaRegisters : L {
  static const bool VIEWS = false;
  struct AFrag {
    ch_u32 w[L::A_N / 2];
  };
  struct BFrag {
    ch_u32 w[L::B_N / 2];
  };
  __device__ static AFrag load_a(const AttnView& v, int lane) {
    AFrag f;
    AttnLoad<L>::run(f.w, v, lane, false);
    return f;
  }
  __device__ static BFrag load_b(const AttnView& v, int lane) {
    BFrag f;
    AttnLoad<L>::run(f.w, v, lane, true);
    return f;
  }
  __device__ static void mma(float (&c)[L::C_N], const AFrag& a, const BFrag& b, int) { L::mma(c, a.w, b.w); }
};

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
  static const bool S_T = false, P_REGS = true, O_ROWS_MATCH = true;
  static const int ROW_LANES_FIRST = 1, ROW_LANES_END = 4;
  __device__ static AttnAt a_at(int l, int e) {
    return {(l >> 2) + 8 * ((e >> 1) & 1), 2 * (l & 3) + (e & 1) + 8 * (e >> 2)};
  }
  __device__ static AttnAt b_at(int l, int e) {
    return {2 * (l & 3) + (e & 1) + 8 * ((e >> 1) & 1), (l >> 2) + 8 * (e >> 2)};
  }
  __device__ static AttnAt c_at(int l, int e) { return a_at(l, e); }
  __device__ static void mma(float (&c)[C_N], const ch_u32 (&ar)[A_N / 2], const ch_u32 (&br)[B_N / 2]) {
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

// The prefill kernel's operands sit in shared memory, where `ldmatrix` loads
// a whole fragment: four 8x8 tiles of 16-bit elements, lane L giving the
// address of row L % 8 of tile L / 8 (16 bytes, 16-byte aligned); each lane
// receives the pair at (row l / 4, columns 2·(l % 4) + {0, 1}) of every
// tile, or with `.trans` the transposed pair (PTX ISA, "ldmatrix"); those
// are the pairs of MmaNvLayout's a_at and b_at.
template <bool BF16>
struct AttnLoad<MmaNvLayout<BF16> > {
  __device__ static void run(ch_u32 (&w)[4], const AttnView& v, int lane, bool b_operand) {
    // Stored rows along which a tile's 8 elements are contiguous: A's rows
    // (k unit stride), B's columns n (k unit stride), or B's rows k (n unit
    // stride, loaded transposed).
    const bool k_unit = b_operand ? v.sr == 1 : v.sc == 1;
    const bool trans = b_operand && !k_unit && v.sc == 1;
    const int row_step = k_unit ? (b_operand ? v.sc : v.sr) : v.sr;
    // The prefill kernel's tiles are 16-byte aligned, and so is every
    // fragment's origin in them where the row step is (8 elements apart).
    const ch_u16* base = v.p;
    if ((!k_unit && !trans) || (row_step * 2) % 16 != 0) {
      attn_gather<MmaNvLayout<BF16> >(w, v, lane, b_operand);
      return;
    }
    // Lane's tile and its row: register i's tile has offsets 8·(i % 2) and
    // 8·(i / 2) along (row, k) for A and along (k, n) for B; stored by rows
    // of A or k, the first offset is along the rows, stored by n the second.
    const int tile = lane / 8, r = lane % 8;
    const bool first_along_rows = !b_operand || trans;
    const int row_off = 8 * (first_along_rows ? tile & 1 : tile >> 1);
    const int col_off = 8 * (first_along_rows ? tile >> 1 : tile & 1);
    const ch_u16* row = base + (row_off + r) * row_step + col_off;
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    if (trans) {
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "r"(addr));
    } else {
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "r"(addr));
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

// A fragment's words as the builtin's vector type V.
template <typename V, int N>
__device__ __forceinline__ V attn_vec(const ch_u32 (&v)[N]) {
  static_assert(sizeof(V) == N * sizeof(ch_u32), "fragment size");
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
  static const bool S_T = true, P_REGS = true, O_ROWS_MATCH = false;
  static const int ROW_LANES_FIRST = 16, ROW_LANES_END = 64;
  __device__ static AttnAt a_at(int l, int e) { return {l % 16, 4 * (l / 16) + e}; }
  __device__ static AttnAt b_at(int l, int e) { return {4 * (l / 16) + e, l % 16}; }
  __device__ static AttnAt c_at(int l, int e) { return {4 * (l / 16) + e, l % 16}; }
  __device__ static void mma(float (&c)[C_N], const ch_u32 (&a)[A_N / 2], const ch_u32 (&b)[B_N / 2]) {
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
  static const bool S_T = true, P_REGS = false, O_ROWS_MATCH = false;
  static const int ROW_LANES_FIRST = 16, ROW_LANES_END = 32;
  __device__ static AttnAt a_at(int l, int e) { return {l % 16, e}; }
  __device__ static AttnAt b_at(int l, int e) { return {e, l % 16}; }
  __device__ static AttnAt c_at(int l, int e) { return {2 * e + l / 16, l % 16}; }
  __device__ static void mma(float (&c)[C_N], const ch_u32 (&a)[A_N / 2], const ch_u32 (&b)[B_N / 2]) {
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
  static const bool S_T = true, P_REGS = false, O_ROWS_MATCH = false;
  static const int ROW_LANES_FIRST = 16, ROW_LANES_END = 32;
  __device__ static int k_of(int l, int e) { return 8 * (e / 4) + 4 * (l / 16) + e % 4; }
  __device__ static AttnAt a_at(int l, int e) { return {l % 16, k_of(l, e)}; }
  __device__ static AttnAt b_at(int l, int e) { return {k_of(l, e), l % 16}; }
  __device__ static AttnAt c_at(int l, int e) { return {8 * (l / 16) + e, l % 16}; }
  __device__ static void mma(float (&c)[C_N], const ch_u32 (&a)[A_N / 2], const ch_u32 (&b)[B_N / 2]) {
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

// 2^x where results below 2^-126 may flush to zero (against a sum of terms
// up to 1 they are far below f32 rounding): one instruction on the NVIDIA
// test platform, whose exp2f adds a denormal range fix-up.
__device__ __forceinline__ float attn_exp2_ftz(float x) {
#if defined(CH_ATTN_MMA_NV)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// Two floats rounded to T and packed as a word, `lo` in the low half.
template <typename T>
__device__ __forceinline__ ch_u32 attn_pack(float lo, float hi) {
  return attn_word(attn_from_float<T>(lo), attn_from_float<T>(hi));
}
#if defined(CH_ATTN_MMA_NV)
// One instruction for both (round to nearest even, as Num<T>::from_acc).
template <>
__device__ __forceinline__ ch_u32 attn_pack<ch_bf16>(float lo, float hi) {
  ch_u32 w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
template <>
__device__ __forceinline__ ch_u32 attn_pack<ch_f16>(float lo, float hi) {
  ch_u32 w;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
#endif

// ---------------------------------------------------------------------------
// Tile copies: 16 bytes from global to shared memory.

// Whether the prefill kernel's copies run asynchronously: `cp.async` on
// the NVIDIA test platform (sm_80 and newer) moves the bytes without
// passing them through registers, so a block has a tile in flight while it
// computes at no cost in occupancy. Elsewhere a copy is a load and a
// store, complete when it returns. -DATTN_ASYNC=0 turns it off (the kernel
// bench compares).
#ifndef ATTN_ASYNC
#if defined(CH_ATTN_MMA_NV)
#define ATTN_ASYNC 1
#else
#define ATTN_ASYNC 0
#endif
#endif

// Eight elements as words (zeroing them costs a move a word, not byte
// permutes): the 16 bytes at `src`, or zeros when !valid.
typedef Pack<ch_u32, 4> AttnWords;
__device__ __forceinline__ AttnWords attn_read16(const ch_u16* src, bool valid) {
  AttnWords w;
#pragma unroll
  for (int i = 0; i < 4; ++i) w.v[i] = 0;
  if (valid) w = *reinterpret_cast<const AttnWords*>(src);
  return w;
}

// Copies 16 bytes from `src` to `dst` in shared memory (both 16-byte
// aligned), or zeros when !valid (`src` is then not read); asynchronously
// where ASYNC and the target has it (ATTN_ASYNC).
template <bool ASYNC>
__device__ __forceinline__ void attn_copy16(ch_u16* dst, const ch_u16* src, bool valid) {
#if ATTN_ASYNC
  if (ASYNC) {
    // SAFETY: a source size of 0 reads nothing and fills the 16 bytes with
    // zeros (PTX ISA, "cp.async"); `dst` is a shared-memory address.
    const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
    return;
  }
#endif
  *reinterpret_cast<AttnWords*>(dst) = attn_read16(src, valid);
}

// Waits for this thread's asynchronous copies (a barrier then makes every
// thread's visible to the block).
__device__ __forceinline__ void attn_copy_wait() {
#if ATTN_ASYNC
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Waves per block and keys per tile by head dimension: shared memory stays
// within 48 KiB (a K and a V tile, and the Q tile where its fragments do
// not stay in registers). The NVIDIA test platform takes 64 keys per tile
// (faster there than 32); AMD targets 32, so that a CDNA compute unit's 64
// KiB holds three blocks of head dim 128 (their Q fragments in registers).
// -DATTN_TILE_KEYS=<n> overrides (the kernel bench compares tile sizes).
#define ATTN_WAVES(D) ((D) > 128 ? 2 : 4)
#ifndef ATTN_TILE_KEYS
#if defined(CH_ATTN_MMA_NV)
#define ATTN_TILE_KEYS 64
#else
#define ATTN_TILE_KEYS 32
#endif
#endif
#define ATTN_KEYS(D) ((D) > 128 ? 16 : ATTN_TILE_KEYS)
// Waves per decode block, each taking 16 keys of a tile: 64-key tiles on
// the NVIDIA test platform, 32 on AMD, so that a CDNA compute unit's 64 KiB
// holds the three blocks the host aims at (head dim 128: 17 KiB each); one
// wave for head dim 256, whose two-wave tiles spill registers on RDNA.
// (fused/attention.rs `decode_waves` mirrors it.)
#if defined(__HIP_PLATFORM_NVIDIA__)
#define ATTN_DECODE_TILE 64
#else
#define ATTN_DECODE_TILE 32
#endif
#define ATTN_DECODE_WAVES(D) ((D) > 128 ? 1 : ATTN_DECODE_TILE / 16)
// Whether a decode tile's K and V loads are all issued before its stores
// (`copy` with two sources): not on RDNA 4, whose head-dim-128 decode
// kernel then spills registers.
#if defined(__gfx1200__) || defined(__gfx1201__)
#define ATTN_DECODE_KV_AT_ONCE 0
#else
#define ATTN_DECODE_KV_AT_ONCE 1
#endif

// The score products of product M in its orientation (M::S_T): the query
// fragment's type and load, one product with a key fragment, and where a
// score element sits as (query, key) in its 16x16 tile.
template <class M, bool TRANSPOSED = M::S_T>
struct AttnScores {
  typedef typename M::AFrag QFrag;
  __device__ static QFrag load_q(const ch_u16* q, int ld, int lane) { return M::load_a(AttnView{q, ld, 1}, lane); }
  __device__ static void mma(float (&s)[M::C_N], const QFrag& qf, const ch_u16* k, int ld, int lane) {
    M::mma(s, qf, M::load_b(AttnView{k, 1, ld}, lane), lane);
  }
  __device__ static AttnAt at(int l, int e) { return M::c_at(l, e); }
};

template <class M>
struct AttnScores<M, true> {
  typedef typename M::BFrag QFrag;
  __device__ static QFrag load_q(const ch_u16* q, int ld, int lane) { return M::load_b(AttnView{q, 1, ld}, lane); }
  __device__ static void mma(float (&s)[M::C_N], const QFrag& qf, const ch_u16* k, int ld, int lane) {
    M::mma(s, M::load_a(AttnView{k, ld, 1}, lane), qf, lane);
  }
  __device__ static AttnAt at(int l, int e) {
    const AttnAt c = M::c_at(l, e);
    return {c.col, c.row};
  }
};

// The first score element of a lane with element e's query (the same for
// every lane: a layout's query of (l, e) is a function of l plus one of e).
template <class SC>
__device__ __forceinline__ int attn_first_of_query(int e) {
#pragma unroll
  for (int f = 0; f < e; ++f)
    if (SC::at(0, f).row == SC::at(0, e).row) return f;
  return e;
}

// The maximum (MAX) or sum of v over the score elements of this lane that
// belong to element e's query, for every e.
template <class M, class SC, bool MAX>
__device__ __forceinline__ void attn_in_lane(const float (&v)[M::C_N], float (&out)[M::C_N]) {
#pragma unroll
  for (int e = 0; e < M::C_N; ++e) {
    float r = v[e];
#pragma unroll
    for (int f = 0; f < M::C_N; ++f)
      if (f != e && SC::at(0, f).row == SC::at(0, e).row) r = MAX ? fmaxf(r, v[f]) : r + v[f];
    out[e] = r;
  }
}

// The maximum (MAX) or sum of per-lane row values v (equal over a lane's
// elements of one query) over the lanes holding each query: shuffles for
// the first element of each query, copies for the others.
template <class M, class SC, bool MAX>
__device__ __forceinline__ void attn_across_lanes(const float (&v)[M::C_N], float (&out)[M::C_N]) {
#pragma unroll
  for (int e = 0; e < M::C_N; ++e) {
    const int first = attn_first_of_query<SC>(e);  // a constant once unrolled
    if (first != e) {
      out[e] = out[first];
      continue;
    }
    float r = v[e];
#pragma unroll
    for (int w = M::ROW_LANES_FIRST; w < M::ROW_LANES_END; w *= 2) {
      const float o = __shfl_xor(r, w, CANDLE_HIP_WAVE);
      r = MAX ? fmaxf(r, o) : r + o;
    }
    out[e] = r;
  }
}

// A row statistic `v` (one per score element) for the query of output
// element e: in place where the layouts agree, else from lane `query`,
// which holds query `query` (layouts with one query per lane, l % 16).
template <class M>
__device__ __forceinline__ float attn_row_value(const float (&v)[M::C_N], int lane, int e) {
  static_assert(M::O_ROWS_MATCH || M::ROW_LANES_FIRST == 16, "one query per lane");
  if (M::O_ROWS_MATCH) return v[e];
  return __shfl(v[0], M::c_at(lane, e).row, CANDLE_HIP_WAVE);
}

// The block walks its key tiles, shared by its waves: S = Q·Kᵀ into
// registers, the online softmax on those registers (row maxima and sums by
// shuffles among the lanes of a row), then O += P·V with P taken from the
// same registers where the layout allows (else through a per-wave tile in
// shared memory). Q's fragments stay in registers for the whole kernel
// where they are small.
//
// Prefill (DECODE false): each wave owns 16 query rows of one head and
// takes every key of a tile; the output is normalised. Decode (DECODE
// true): the block owns 16 rows (query position, head of the group) of one
// key/value head and the keys of one split, each wave takes 16 keys of a
// tile for all 16 rows, and the waves' states merge into the split's
// partial results (`part`, as flash_combine reads them).
template <typename T, int D, bool DECODE>
__device__ __forceinline__ void flash_attn(const AttnArgs& a, const T* __restrict__ q, const T* __restrict__ k,
                                           const T* __restrict__ v, T* __restrict__ o, float* __restrict__ part,
                                           const float* __restrict__ alibi) {
  typedef typename MmaOf<T>::type M;
  typedef AttnScores<M> SC;
  const int WAVES = DECODE ? ATTN_DECODE_WAVES(D) : ATTN_WAVES(D), C_N = M::C_N;
  // Keys per tile and per wave's share of it; query rows per block.
  const int BC = DECODE ? 16 * WAVES : ATTN_KEYS(D), KW = DECODE ? 16 : BC;
  const int ROWS = DECODE ? CH_DECODE_ROWS : 16 * WAVES;
  static_assert(CH_DECODE_ROWS == 16, "a decode block's rows are one fragment's");
  const int LD = D + 8;    // padded row of a Q/K/V tile (elements)
  const int PLD = BC + 4;  // padded row of the probabilities (elements)
  const int PACK = 8;      // elements per 16-byte copy
  // Q's fragments stay in registers where they take at most 128 bytes a
  // lane (more, and a wave-32 target's registers run out); a product whose
  // fragments are views reads Q from its own tile.
  const bool Q_REGS = !M::VIEWS && sizeof(typename SC::QFrag) * (D / 16) <= 128;
  // V: row-major; transposed for D = 256 with register fragments, which
  // then load along rows (with row-major V, RDNA 4 spills a register
  // there; the portable product spills with the transposed one).
  const bool VT = D > 128 && !M::VIEWS;
  const int VLD = BC + 4;  // padded row of the transposed tile (elements)
  const int V_SIZE = VT ? D * VLD : BC * LD;
  // K then V; with Q_REGS, the Q tile passes through here first.
  __shared__ __attribute__((aligned(16))) ch_u16 s_kv[(BC * LD + V_SIZE > ROWS * LD) ? BC * LD + V_SIZE : ROWS * LD];
  __shared__ __attribute__((aligned(16))) ch_u16 sq[Q_REGS ? 1 : ROWS * LD];
  __shared__ __attribute__((aligned(16))) ch_u16 sp[M::P_REGS ? 1 : 16 * WAVES * PLD];  // a tile per wave
  ch_u16* const sk = s_kv;
  ch_u16* const sv = s_kv + BC * LD;

  const int tid = (int)threadIdx.x, lane = tid % CANDLE_HIP_WAVE, wave = tid / CANDLE_HIP_WAVE;
  const ch_u32 b = blockIdx.z, per_kv = a.h_q / a.h_k;
  // Prefill: query block blockIdx.x of head blockIdx.y. Decode: key split
  // blockIdx.x, row group blockIdx.y % row_groups of key/value head
  // blockIdx.y / row_groups.
  const ch_u32 row_groups = DECODE ? (a.s_q * per_kv + ROWS - 1) / ROWS : 1;
  const ch_u32 kvh = DECODE ? blockIdx.y / row_groups : blockIdx.y / per_kv;
  const ch_i64 i0 = DECODE ? (ch_i64)(blockIdx.y % row_groups) * ROWS : (ch_i64)blockIdx.x * ROWS;
  const ch_i64 row_count = DECODE ? (ch_i64)a.s_q * per_kv : (ch_i64)a.s_q;
  const ch_i64 rows = row_count - i0 < ROWS ? row_count - i0 : ROWS;
  // Row r's query position and head (decode: rows past the last repeat row
  // 0; a decode block's rows number at most s_q · h_q, 32-bit).
  auto position = [&](int r) -> ch_i64 {
    return DECODE ? (ch_u32)(i0 + (r < rows ? r : 0)) / per_kv : i0 + r;
  };
  auto head = [&](int r) -> ch_u32 {
    return DECODE ? kvh * per_kv + (ch_u32)(i0 + (r < rows ? r : 0)) % per_kv : blockIdx.y;
  };
  const ch_u16* kb = reinterpret_cast<const ch_u16*>(k) + b * a.k_stride[0] + kvh * a.k_stride[2];
  const ch_u16* vb = reinterpret_cast<const ch_u16*>(v) + b * a.v_stride[0] + kvh * a.v_stride[2];
  // Decode: the split's keys; a row sees none past them.
  const ch_i64 split_begin = DECODE ? (ch_i64)blockIdx.x * a.split_keys : 0;
  const ch_i64 split_end = DECODE && split_begin + a.split_keys < (ch_i64)a.s_k ? split_begin + a.split_keys
                                                                                 : (ch_i64)a.s_k;
  auto row_info = [&](int r) {
    AttnRow info = attn_row(a, position(r), alibi != nullptr ? alibi[head(r)] : 0.0f);
    if (info.hi > split_end - 1) info.hi = split_end - 1;
    return info;
  };

  // Tiles move in packs of PACK elements (attn_copy16), asynchronously in
  // prefill where the target allows: decode measured faster with its
  // copies' loads in registers (below) than with asynchronous copies and
  // the blocks the registers they free allow. A pack at (row, col) of a
  // padded tile: row-major (row step LD), or transposed (spread down a
  // column of row step VLD, through registers).
  static_assert(PACK * sizeof(ch_u16) == sizeof(AttnWords), "a pack is 16 bytes");
  const bool ASYNC = !DECODE && ATTN_ASYNC;
  auto store_pack = [&](ch_u16* dst, int row, int col, const AttnWords& val, bool transposed) {
    if (transposed) {
#pragma unroll
      for (int e = 0; e < PACK; ++e) dst[(col + e) * VLD + row] = attn_half(val.v, e);
    } else {
      *reinterpret_cast<AttnWords*>(dst + row * LD + col) = val;
    }
  };
  auto move_pack = [&](ch_u16* dst, int row, int col, const ch_u16* src, bool valid, bool transposed) {
    if (transposed) {
      store_pack(dst, row, col, attn_read16(src, valid), true);
    } else {
      attn_copy16<ASYNC>(dst + row * LD + col, src, valid);
    }
  };
  // Copies rows 0 .. n - 1 of `src` (row step `step`, elements) into a tile
  // of `tile_rows` rows (zeros below n), pack p = row · PPR + column / PACK
  // by thread p % THREADS; with `src2`, the same rows of `src2` (row step
  // `step2`) into `dst2` as well. Where THREADS is a multiple of PPR and
  // divides the tile's packs, a thread's packs share a column and its rows
  // are a fixed step apart: one pointer per source and thread, moved by
  // that step. With both sources (decode, synchronous), every load of
  // both is issued before the first store (a decode block then has a whole
  // K and V tile in flight, which the host pays for in blocks per unit:
  // fused/attention.rs); not for head dim 256, whose registers (the output
  // takes twice as many) would spill on RDNA.
  const int THREADS = WAVES * CANDLE_HIP_WAVE, PPR = D / PACK;
  const int MAX_STEPS = (BC > ROWS ? BC : ROWS) / (THREADS / PPR > 0 ? THREADS / PPR : 1);
  auto copy_spread = [&](ch_u16* dst, int tile_rows, const ch_u16* src, ch_u64 step, ch_i64 n, bool transposed) {
    for (int p = tid; p < tile_rows * PPR; p += THREADS) {
      const int row = p / PPR, col = (p % PPR) * PACK;
      move_pack(dst, row, col, src + (ch_u64)row * step + col, row < n, transposed);
    }
  };
  auto copy = [&](ch_u16* dst, int tile_rows, const ch_u16* src, ch_u64 step, ch_i64 n, bool transposed,
                  ch_u16* dst2 = nullptr, const ch_u16* src2 = nullptr, ch_u64 step2 = 0) {
    if (D <= 128 && THREADS % PPR == 0 && tile_rows % (THREADS / PPR) == 0) {
      const int RSTEP = THREADS / PPR, row0 = tid / PPR, col = (tid % PPR) * PACK;
      const ch_u16* from = src + (ch_u64)row0 * step + col;
      const ch_u64 jump = (ch_u64)RSTEP * step;
      if (src2 == nullptr) {
#pragma unroll
        for (int i = 0; i < tile_rows / RSTEP; ++i, from += jump) {
          const int row = row0 + i * RSTEP;
          move_pack(dst, row, col, from, row < n, transposed);
        }
        return;
      }
      const ch_u16* from2 = src2 + (ch_u64)row0 * step2 + col;
      const ch_u64 jump2 = (ch_u64)RSTEP * step2;
      AttnWords first[MAX_STEPS], second[MAX_STEPS];
#pragma unroll
      for (int i = 0; i < tile_rows / RSTEP; ++i, from += jump, from2 += jump2) {
        first[i] = attn_read16(from, row0 + i * RSTEP < n);
        second[i] = attn_read16(from2, row0 + i * RSTEP < n);
      }
#pragma unroll
      for (int i = 0; i < tile_rows / RSTEP; ++i) {
        store_pack(dst, row0 + i * RSTEP, col, first[i], transposed);
        store_pack(dst2, row0 + i * RSTEP, col, second[i], false);
      }
    } else {
      copy_spread(dst, tile_rows, src, step, n, transposed);
      if (src2 != nullptr) copy_spread(dst2, tile_rows, src2, step2, n, false);
    }
  };

  // The block's Q tile (decode: its rows gathered from their heads).
  ch_u16* const q_tile = Q_REGS ? s_kv : sq;
  const ch_u16* const qb = reinterpret_cast<const ch_u16*>(q) + b * a.q_stride[0];
  if (DECODE) {
    for (int p = tid; p < ROWS * PPR; p += THREADS) {
      const int r = p / PPR, col = (p % PPR) * PACK;
      const ch_u16* src = qb + (ch_u64)position(r) * a.q_stride[1] + (ch_u64)head(r) * a.q_stride[2] + col;
      move_pack(q_tile, r, col, src, r < rows, false);
    }
  } else {
    copy(q_tile, ROWS, qb + (ch_u64)head(0) * a.q_stride[2] + (ch_u64)i0 * a.q_stride[1], a.q_stride[1], rows,
         false);
  }
  // Decode: the rows' masks in shared memory, sparing registers.
  __shared__ AttnRow s_rows[DECODE ? ROWS : 1];
  if (DECODE && tid < ROWS) s_rows[tid] = row_info(tid);
  if (ASYNC) attn_copy_wait();
  __syncthreads();
  auto row_at = [&](int r) { return DECODE ? s_rows[r] : row_info(r); };
  // The wave's first row and first key of a tile.
  const int wave_row = DECODE ? 0 : wave * 16, wave_key = DECODE ? wave * KW : 0;
  ch_u16* const wave_q = q_tile + wave_row * LD;
  typename SC::QFrag qf[D / 16];
  if (Q_REGS) {
#pragma unroll
    for (int kt = 0; kt < D / 16; ++kt) qf[kt] = SC::load_q(wave_q + kt * 16, LD, lane);
  }

  // The keys any row of the block sees, and those every row sees (prefill
  // tiles start at multiples of the tile, so that the diagonal's tiles are
  // the same for every block).
  const AttnRow first = row_at(0), last = row_at((int)rows - 1);
  const ch_i64 j_begin = DECODE ? (first.lo > split_begin ? first.lo : split_begin) : (first.lo / BC) * BC;
  const ch_i64 j_end = last.hi + 1;
  // Scores as plain scaled products, whose row maximum is the products'
  // maximum times the scale (a positive one).
  const bool no_alibi = alibi == nullptr || (!DECODE && alibi[head(0)] == 0.0f);
  const bool plain = a.softcap <= 0.0f && no_alibi && a.scale > 0.0f;
  const float scale2 = a.scale * CH_LOG2E;

  // Running maximum and (this lane's part of the) sum of each score
  // element's query: equal over a lane's elements of one query.
  float m[C_N], l[C_N], acc[D / 16][C_N];
#pragma unroll
  for (int e = 0; e < C_N; ++e) {
    m[e] = -__builtin_huge_valf();
    l[e] = 0.0f;
#pragma unroll
    for (int t = 0; t < D / 16; ++t) acc[t][e] = 0.0f;
  }

  // K and V tiles go straight to shared memory. With asynchronous copies
  // the tiles are pipelined: a tile's V copies while its scores are
  // computed and the next tile's K while P·V is (the same memory and
  // barriers; with synchronous copies this order measured slower on the
  // NVIDIA test platform). Else both copy before the tile's products,
  // decode issuing both copies' loads together (V is row-major there).
  // (Loading the next tile into registers during the current one's
  // products measured slower on the NVIDIA test platform: the registers
  // cost occupancy.)
  auto tile_keys = [&](ch_i64 j0) { return j_end - j0 < BC ? j_end - j0 : (ch_i64)BC; };
  auto k_tile = [&](ch_i64 j0) { return kb + (ch_u64)j0 * a.k_stride[1]; };
  auto v_tile = [&](ch_i64 j0) { return vb + (ch_u64)j0 * a.v_stride[1]; };
  auto copy_k = [&](ch_i64 j0) { copy(sk, BC, k_tile(j0), a.k_stride[1], tile_keys(j0), false); };
  auto copy_v = [&](ch_i64 j0) { copy(sv, BC, v_tile(j0), a.v_stride[1], tile_keys(j0), VT); };
  auto copy_tile = [&](ch_i64 j0) {
    if (DECODE && !VT && ATTN_DECODE_KV_AT_ONCE) {
      copy(sk, BC, k_tile(j0), a.k_stride[1], tile_keys(j0), false, sv, v_tile(j0), a.v_stride[1]);
    } else {
      copy_k(j0);
      copy_v(j0);
    }
  };
  if (ASYNC && j_begin < j_end) {
    __syncthreads();  // Q is consumed
    copy_k(j_begin);
  }

  ch_u16* const wave_p = sp + wave * 16 * PLD;
  for (ch_i64 j0 = j_begin; j0 < j_end; j0 += BC) {
    if (ASYNC) {
      attn_copy_wait();
      __syncthreads();  // K in place; the previous tile's V is consumed
      copy_v(j0);
    } else {
      __syncthreads();  // the previous tile (or Q) is consumed
      copy_tile(j0);
      __syncthreads();
    }

    // S = Q·Kᵀ (or Sᵀ) for the wave's 16 rows and KW keys.
    const ch_u16* const wave_k = sk + wave_key * LD;
    float s[KW / 16][C_N];
#pragma unroll
    for (int t = 0; t < KW / 16; ++t)
#pragma unroll
      for (int e = 0; e < C_N; ++e) s[t][e] = 0.0f;
    if (Q_REGS) {
#pragma unroll
      for (int kt = 0; kt < D / 16; ++kt)
#pragma unroll
        for (int t = 0; t < KW / 16; ++t) SC::mma(s[t], qf[kt], wave_k + t * 16 * LD + kt * 16, LD, lane);
    } else {
      // Partly unrolled: fully unrolled, the compiler hoists every fragment
      // load and runs out of registers on wave-32 targets.
#pragma unroll 2
      for (int kt = 0; kt < D / 16; ++kt) {
        const typename SC::QFrag qk = SC::load_q(wave_q + kt * 16, LD, lane);
#pragma unroll
        for (int t = 0; t < KW / 16; ++t) SC::mma(s[t], qk, wave_k + t * 16 * LD + kt * 16, LD, lane);
      }
    }

    // Scores in log2 units are s·unit: where every row of the block sees
    // every key of the tile, the products as they are and unit = scale·log2
    // e (folded into the exponentials below); elsewhere the masked and
    // transformed scores and unit = 1.
    const bool interior = plain && j0 >= last.lo && j0 + BC - 1 <= first.hi;
    const float unit = interior ? scale2 : 1.0f;
    if (!interior) {
#pragma unroll
      for (int e = 0; e < C_N; ++e) {
        const AttnAt at = SC::at(lane, e);
        const AttnRow row = row_at(wave_row + at.row);
#pragma unroll
        for (int t = 0; t < KW / 16; ++t) s[t][e] = attn_score(a, row, j0 + wave_key + t * 16 + at.col, s[t][e]);
      }
    }
    float tile_max[C_N];
#pragma unroll
    for (int e = 0; e < C_N; ++e) {
      tile_max[e] = s[0][e];
#pragma unroll
      for (int t = 1; t < KW / 16; ++t) tile_max[e] = fmaxf(tile_max[e], s[t][e]);
      tile_max[e] *= unit;  // unit > 0 (plain)
    }
    float lane_max[C_N], row_max[C_N], m_sub[C_N], alpha[C_N], sums[C_N], lane_sum[C_N];
    attn_in_lane<M, SC, true>(tile_max, lane_max);
    attn_across_lanes<M, SC, true>(lane_max, row_max);
    // A query's statistics are computed at its first element and copied to
    // its others, so that the compiler keeps one register per query for
    // each across the tiles, not one per element.
#pragma unroll
    for (int e = 0; e < C_N; ++e) {
      const int first = attn_first_of_query<SC>(e);  // a constant once unrolled
      if (first != e) {
        m_sub[e] = m_sub[first];
        alpha[e] = alpha[first];
        m[e] = m[first];
      } else {
        const float m_new = fmaxf(m[e], row_max[e]);
        // A query that has seen no key yet keeps -inf; 0 is subtracted
        // then, so that every exponential is exp2(-inf) = 0.
        m_sub[e] = m_new == -__builtin_huge_valf() ? 0.0f : m_new;
        alpha[e] = attn_exp2_ftz(m[e] - m_sub[e]);
        m[e] = m_new;
      }
      sums[e] = 0.0f;
#pragma unroll
      for (int t = 0; t < KW / 16; ++t) {
        s[t][e] = attn_exp2_ftz(fmaf(s[t][e], unit, -m_sub[e]));
        sums[e] += s[t][e];
      }
    }
    // The lane's part of each query's sum.
    attn_in_lane<M, SC, false>(sums, lane_sum);
#pragma unroll
    for (int e = 0; e < C_N; ++e) {
      const int first = attn_first_of_query<SC>(e);
      l[e] = first != e ? l[first] : l[e] * alpha[e] + lane_sum[e];
    }

    if (ASYNC) {
      attn_copy_wait();
      __syncthreads();  // V in place; K is consumed
      if (j0 + BC < j_end) copy_k(j0 + BC);
    }

    // O = O·alpha + P·V.
#pragma unroll
    for (int e = 0; e < C_N; ++e) {
      const float f = attn_row_value<M>(alpha, lane, e);
#pragma unroll
      for (int t = 0; t < D / 16; ++t) acc[t][e] *= f;
    }
    if (!M::P_REGS) {
#pragma unroll
      for (int t = 0; t < KW / 16; ++t)
#pragma unroll
        for (int e = 0; e < C_N; ++e) {
          const AttnAt at = SC::at(lane, e);
          wave_p[at.row * PLD + t * 16 + at.col] = attn_from_float<T>(s[t][e]);
        }
      __syncthreads();
    }
    // O += P·V over the tile's 16-key steps; P from registers where the
    // layout allows (every step unrolled: P's registers are indexed by it),
    // else from the wave's tile (one step at a time: fewer registers).
    auto pv_step = [&](int kt, const typename M::AFrag& pa) {
      const int key = wave_key + kt * 16;
#pragma unroll
      for (int t = 0; t < D / 16; ++t) {
        const AttnView vview = VT ? AttnView{sv + t * 16 * VLD + key, 1, VLD} : AttnView{sv + key * LD + t * 16, LD, 1};
        M::mma(acc[t], pa, M::load_b(vview, lane), lane);
      }
    };
    if constexpr (M::P_REGS) {
      static_assert(M::A_N == C_N, "P from registers needs A_N == C_N");
#pragma unroll
      for (int kt = 0; kt < KW / 16; ++kt) {
        typename M::AFrag pa;
#pragma unroll
        for (int e = 0; e < C_N; e += 2) pa.w[e / 2] = attn_pack<T>(s[kt][e], s[kt][e + 1]);
        pv_step(kt, pa);
      }
    } else {
#pragma unroll 1
      for (int kt = 0; kt < KW / 16; ++kt) pv_step(kt, M::load_a(AttnView{wave_p + kt * 16, PLD, 1}, lane));
    }
  }

  // Each query's sum over its lanes.
  float total[C_N];
  attn_across_lanes<M, SC, false>(l, total);
  if (!DECODE) {
    // The normalised output.
    T* ob = o + (((ch_u64)b * a.s_q + (ch_u64)i0) * a.h_q + head(0)) * D;
#pragma unroll
    for (int e = 0; e < C_N; ++e) {
      const float sum = attn_row_value<M>(total, lane, e);
      const int r = wave_row + M::c_at(lane, e).row;
      if (r >= rows) continue;
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
      for (int t = 0; t < D / 16; ++t)
        ob[(ch_u64)r * a.h_q * D + t * 16 + M::c_at(lane, e).col] = Num<T>::from_acc(acc[t][e] * inv);
    }
    return;
  }
  // Decode: the waves' states of the same rows meet in shared memory (over
  // the tiles, now consumed), then the split's partials: per row, the
  // unnormalised output, the maximum and the sum.
  float* const s_o = reinterpret_cast<float*>(s_kv);  // [WAVES][16][D]
  float* const s_ml = s_o + WAVES * 16 * D;            // [WAVES][16][2]
  static_assert(!DECODE || WAVES * 16 * (D + 2) * 4 <= sizeof(s_kv), "the merge fits the tiles' memory");
  __syncthreads();
#pragma unroll
  for (int e = 0; e < C_N; ++e) {
    const float row_m = attn_row_value<M>(m, lane, e), row_l = attn_row_value<M>(total, lane, e);
    const AttnAt at = M::c_at(lane, e);
#pragma unroll
    for (int t = 0; t < D / 16; ++t) s_o[(wave * 16 + at.row) * D + t * 16 + at.col] = acc[t][e];
    s_ml[(wave * 16 + at.row) * 2] = row_m;  // every lane of the row stores the same
    s_ml[(wave * 16 + at.row) * 2 + 1] = row_l;
  }
  __syncthreads();
  for (int idx = tid; idx < (int)rows * D; idx += THREADS) {
    const int r = idx / D, d = idx % D;
    float mx = -__builtin_huge_valf();
#pragma unroll
    for (int w = 0; w < WAVES; ++w) mx = fmaxf(mx, s_ml[(w * 16 + r) * 2]);
    float sum = 0.0f, out = 0.0f;
#pragma unroll
    for (int w = 0; w < WAVES; ++w) {
      const float f = attn_exp2(s_ml[(w * 16 + r) * 2], mx);
      sum += s_ml[(w * 16 + r) * 2 + 1] * f;
      out += s_o[(w * 16 + r) * D + d] * f;
    }
    if (o != nullptr) {
      o[(((ch_u64)b * a.s_q + position(r)) * a.h_q + head(r)) * D + d] =
          Num<T>::from_acc(sum > 0.0f ? out / sum : 0.0f);
      continue;
    }
    // Partials of row (b, head, position): `splits` entries of D + 2 floats.
    float* dst = part + ((((ch_u64)b * a.h_q + head(r)) * a.s_q + position(r)) * a.splits + blockIdx.x) * (D + 2);
    dst[d] = out;
    if (d == 0) {
      dst[D] = mx;
      dst[D + 1] = sum;
    }
  }
}

// ---------------------------------------------------------------------------
// Decode.

// Splits per row at most (the host keeps to it): the merge holds each
// split's weight in shared memory.
#define CH_DECODE_MAX_SPLITS 256

// A softmax's running maximum and sum of exponentials (base 2), merged
// across key splits.
struct SplitStats {
  struct State {
    float m, l;
  };
  __device__ __forceinline__ static State identity() { return State{-__builtin_huge_valf(), 0.0f}; }
  __device__ __forceinline__ static State combine(State a, State b) {
    const float m = fmaxf(a.m, b.m);
    return State{m, a.l * attn_exp2(a.m, m) + b.l * attn_exp2(b.m, m)};
  }
};

// The weights of one row's splits (its records from `src` on) into w[s]
// and their sum into *sum, computed by one wave (this lane `lane`): the
// splits' maxima and sums merged with a wave reduction.
template <int D>
__device__ __forceinline__ void split_weights(const float* __restrict__ src, int splits, float* w, float* sum,
                                              int lane) {
  SplitStats::State st = SplitStats::identity();
  for (int s = lane; s < splits; s += CANDLE_HIP_WAVE)
    st = SplitStats::combine(st, SplitStats::State{src[s * (D + 2) + D], src[s * (D + 2) + D + 1]});
  st = wave_reduce<SplitStats>(st);
  for (int s = lane; s < splits; s += CANDLE_HIP_WAVE) w[s] = attn_exp2(src[s * (D + 2) + D], st.m);
  if (lane == 0) *sum = st.l;
}

// Element d of one row merged from its splits' records at `src` with the
// weights w and their sum (split_weights).
template <int D>
__device__ __forceinline__ float split_merge(const float* __restrict__ src, int splits, const float* w, float sum,
                                             int d) {
  // Four independent sums: the loads of four splits are in flight at once.
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int s = 0;
  for (; s + 4 <= splits; s += 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) acc[u] += w[s + u] * src[(s + u) * (D + 2) + d];
  }
  for (; s < splits; ++s) acc[0] += w[s] * src[s * (D + 2) + d];
  const float out = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  return sum > 0.0f ? out / sum : 0.0f;
}

// The records of row (batch b, query i, head h).
template <int D>
__device__ __forceinline__ const float* split_records(const AttnArgs& a, const float* part, ch_u32 b, ch_u32 i,
                                                      ch_u32 h) {
  return part + (((ch_u64)b * a.h_q + h) * a.s_q + i) * a.splits * (D + 2);
}

// One block per (query, head): the first wave merges the splits' maxima
// and sums and leaves each split's weight in shared memory, then thread d
// takes the weighted sum of the splits' element d. The block is D threads
// rounded up to whole waves.
template <typename T, int D>
__device__ __forceinline__ void flash_combine(const AttnArgs& a, const float* __restrict__ part, T* __restrict__ o) {
  __shared__ float s_w[CH_DECODE_MAX_SPLITS];
  __shared__ float s_sum;
  const ch_u32 hi = blockIdx.x, b = blockIdx.y;
  const ch_u32 i = hi / a.h_q, h = hi % a.h_q;
  const int d = (int)threadIdx.x;
  const float* src = split_records<D>(a, part, b, i, h);
  if (d < CANDLE_HIP_WAVE) split_weights<D>(src, (int)a.splits, s_w, &s_sum, d);
  __syncthreads();
  if (d >= D) return;
  o[(((ch_u64)b * a.s_q + i) * a.h_q + h) * D + d] = Num<T>::from_acc(split_merge<D>(src, (int)a.splits, s_w, s_sum, d));
}

// Values of a row a block of flash_combine_round merges and rounds: one a
// thread, one q8k block (eight of q8_0 / q8_1).
#define CH_MERGE_ROUND_VALUES 256
// The most heads such a block touches (head dim 32, or more where a head
// straddles two blocks).
#define CH_MERGE_ROUND_HEADS (CH_MERGE_ROUND_VALUES / 32 + 1)

// flash_combine's values of each row (batch, query: the h_q * D values of
// every head, a quantized o product's input), rounded to T, then to 8 bits
// as quantize_act_<a> rounds them (act 0 q8_0, 1 q8_1, 2 q8k): q the
// integers of row r from r * h_q * D on, d and s its scales and sums from
// r * h_q * D / 32 on. The waves weigh the splits of the block's heads,
// each thread merges one value into shared memory, then the first
// CH_MERGE_ROUND_VALUES / CH_QACT_PER_LANE lanes (of one wave) round them.
template <typename T, int D>
__device__ __forceinline__ void flash_combine_round(const AttnArgs& a, const float* __restrict__ part,
                                                    signed char* __restrict__ q, float* __restrict__ d,
                                                    float* __restrict__ s, ch_u32 act) {
  __shared__ float s_w[CH_MERGE_ROUND_HEADS][CH_DECODE_MAX_SPLITS];
  __shared__ float s_sum[CH_MERGE_ROUND_HEADS];
  __shared__ float s_v[CH_MERGE_ROUND_VALUES];
  static_assert(CH_MERGE_ROUND_VALUES / CH_QACT_PER_LANE <= CANDLE_HIP_WAVE, "one wave rounds the block");
  const ch_u32 i = blockIdx.y, b = blockIdx.z;
  const int tid = (int)threadIdx.x, lane = tid % CANDLE_HIP_WAVE, wave = tid / CANDLE_HIP_WAVE;
  const int splits = (int)a.splits;
  const ch_u64 width = (ch_u64)a.h_q * D, first = (ch_u64)blockIdx.x * CH_MERGE_ROUND_VALUES;
  const ch_u64 past = first + CH_MERGE_ROUND_VALUES < width ? first + CH_MERGE_ROUND_VALUES : width;
  const ch_u32 h0 = (ch_u32)(first / D), heads = (ch_u32)((past + D - 1) / D) - h0;
  for (ch_u32 h = (ch_u32)wave; h < heads; h += blockDim.x / CANDLE_HIP_WAVE)
    split_weights<D>(split_records<D>(a, part, b, i, h0 + h), splits, s_w[h], &s_sum[h], lane);
  __syncthreads();
  const ch_u64 e = first + tid;
  float v = 0.0f;
  if (e < width) {
    const ch_u32 h = (ch_u32)(e / D) - h0;
    const float merged = split_merge<D>(split_records<D>(a, part, b, i, h0 + h), splits, s_w[h], s_sum[h],
                                        (int)(e % D));
    v = Num<T>::to_acc(Num<T>::from_acc(merged));
  }
  s_v[tid] = v;
  __syncthreads();
  if (tid >= CH_MERGE_ROUND_VALUES / CH_QACT_PER_LANE) return;
  float vals[CH_QACT_PER_LANE];
#pragma unroll
  for (int k = 0; k < CH_QACT_PER_LANE; ++k) vals[k] = s_v[tid * CH_QACT_PER_LANE + k];
  const ch_u64 row = (ch_u64)b * a.s_q + i;
  const ch_u64 t = first / CH_QACT_PER_LANE + (ch_u64)tid;
  const bool live = first + (ch_u64)tid * CH_QACT_PER_LANE < width;
  q += row * width;
  d += row * (width / 32);
  s += row * (width / 32);
  if (act == 0) q_round<0>(q, d, s, t, live, vals);
  if (act == 1) q_round<1>(q, d, s, t, live, vals);
  if (act == 2) q_round<2>(q, d, s, t, live, vals);
}

#define FLASH_ATTN(NAME, D, TYPE)                                                                      \
  extern "C" __global__ void __launch_bounds__(ATTN_WAVES(D) * CANDLE_HIP_WAVE)                        \
      NAME##_##TYPE(AttnArgs a, const ch_##TYPE* q, const ch_##TYPE* k, const ch_##TYPE* v,          \
                    ch_##TYPE* o, const float* alibi) {                                                \
    flash_attn<ch_##TYPE, D, false>(a, q, k, v, o, nullptr, alibi);                                    \
  }
// `key_lens`, when not null, holds one u32 per batch element: the keys of
// that sequence (a KV cache's filled length, read on the device so that a
// captured graph serves every length); longer than s_k counts as s_k. The
// sequence's rows then see keys 0 .. len - 1, aligned to its end.
#define FLASH_DECODE(NAME, D, TYPE)                                                                    \
  extern "C" __global__ void __launch_bounds__(ATTN_DECODE_WAVES(D) * CANDLE_HIP_WAVE)                  \
      NAME##_##TYPE(AttnArgs a, const ch_##TYPE* q, const ch_##TYPE* k, const ch_##TYPE* v,          \
                    float* part, const float* alibi, const ch_u32* key_lens, ch_##TYPE* o) {           \
    if (key_lens != nullptr && key_lens[blockIdx.z] < a.s_k) a.s_k = key_lens[blockIdx.z];            \
    flash_attn<ch_##TYPE, D, true>(a, q, k, v, o, part, alibi);                                        \
  }
#define FLASH_COMBINE(NAME, D, TYPE)                                                                   \
  extern "C" __global__ void __launch_bounds__(256) NAME##_##TYPE(AttnArgs a, const float* part,      \
                                                                  ch_##TYPE* o) {                      \
    flash_combine<ch_##TYPE, D>(a, part, o);                                                           \
  }

#define FLASH_COMBINE_ROUND(NAME, D, TYPE)                                                             \
  extern "C" __global__ void __launch_bounds__(CH_MERGE_ROUND_VALUES)                                  \
      NAME##_##TYPE(AttnArgs a, const float* part, signed char* q, float* d, float* s, ch_u32 act) {   \
    flash_combine_round<ch_##TYPE, D>(a, part, q, d, s, act);                                          \
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
CH_HALVES(FLASH_COMBINE_ROUND, flash_combine_round_d32, 32)
CH_HALVES(FLASH_COMBINE_ROUND, flash_combine_round_d64, 64)
CH_HALVES(FLASH_COMBINE_ROUND, flash_combine_round_d80, 80)
CH_HALVES(FLASH_COMBINE_ROUND, flash_combine_round_d96, 96)
#endif
#if CH_PART(5)
CH_HALVES(FLASH_DECODE, flash_decode_d128, 128)
CH_HALVES(FLASH_DECODE, flash_decode_d256, 256)
CH_HALVES(FLASH_COMBINE, flash_combine_d128, 128)
CH_HALVES(FLASH_COMBINE, flash_combine_d256, 256)
CH_HALVES(FLASH_COMBINE_ROUND, flash_combine_round_d128, 128)
CH_HALVES(FLASH_COMBINE_ROUND, flash_combine_round_d256, 256)
#endif
