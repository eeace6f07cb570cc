// hip-on-cpu: the AMD builtins (`__builtin_amdgcn_*`) that kernels use behind
// `__AMDGCN__`, with the semantics of AMD's ISA documents at the emulated
// target's wave size.
//
// - Per-lane instructions (dot products, mbcnt) are plain functions.
// - Instructions that read other lanes' registers (readfirstlane, readlane,
//   wave_barrier, MFMA, WMMA) are wave collectives (hipcpu/device.h): they
//   run once every active lane of the wave reached the same one.
//   ds_bpermute is the wave-wide __shfl.
// - Each builtin exists only for the targets whose hardware has the
//   instruction (clang's target features, `__gfx942__` and friends), so using
//   it elsewhere fails to compile as it does with hipRTC. A builtin not
//   implemented here is a compile error that names it.
//
// Matrix instructions compute D = A·B + C for one M×N tile per wave. Where
// each lane keeps which element is AMD's register layout (the ISA guides'
// tables, as AMD's Matrix Instruction Calculator prints them, "no
// modifiers"); vector element `e` of an operand is its `e`-th 16-bit (or
// 8-bit) field counted from the first register's low bits. Products and sums
// are exact for the integer instructions (wrapping, or saturating with
// `clamp`); the float ones accumulate in f32 in k order (the hardware's
// internal rounding of the dot product is not modelled).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "hipcpu/device.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // vector arguments wider than SSE

// Target features, as clang groups them.
#if defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx942__)
#define HIPCPU_MAI_INSTS 1  // MFMA
#endif
#if defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx942__) || defined(__gfx1030__)
#define HIPCPU_DOT1_INSTS 1  // sdot4, sdot2, udot2
#endif
#if defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || \
    defined(__gfx1200__) || defined(__gfx1201__)
#define HIPCPU_DOT8_INSTS 1  // sudot4
#endif
#if (defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__)) && \
    __AMDGCN_WAVEFRONT_SIZE == 32
#define HIPCPU_WMMA_GFX11 1
#endif
#if (defined(__gfx1200__) || defined(__gfx1201__)) && __AMDGCN_WAVEFRONT_SIZE == 32
#define HIPCPU_WMMA_GFX12 1
#endif

namespace hipcpu {

// The vector types of the builtins' signatures (clang's `V4h`, `V8f`, ...).
typedef _Float16 v2h __attribute__((__vector_size__(2 * sizeof(_Float16))));
typedef _Float16 v4h __attribute__((__vector_size__(4 * sizeof(_Float16))));
typedef _Float16 v8h __attribute__((__vector_size__(8 * sizeof(_Float16))));
typedef _Float16 v16h __attribute__((__vector_size__(16 * sizeof(_Float16))));
typedef short v2s __attribute__((__vector_size__(2 * sizeof(short))));
typedef unsigned short v2us __attribute__((__vector_size__(2 * sizeof(unsigned short))));
typedef short v4s __attribute__((__vector_size__(4 * sizeof(short))));
typedef short v8s __attribute__((__vector_size__(8 * sizeof(short))));
typedef short v16s __attribute__((__vector_size__(16 * sizeof(short))));
typedef int v2i __attribute__((__vector_size__(2 * sizeof(int))));
typedef int v4i __attribute__((__vector_size__(4 * sizeof(int))));
typedef int v8i __attribute__((__vector_size__(8 * sizeof(int))));
typedef float v4f __attribute__((__vector_size__(4 * sizeof(float))));
typedef float v8f __attribute__((__vector_size__(8 * sizeof(float))));
typedef float v16f __attribute__((__vector_size__(16 * sizeof(float))));

inline uint64_t full_wave() { return kWave == 64 ? ~0ull : (1ull << kWave) - 1; }

// ---------------------------------------------------------------------------
// Lane exchanges.

/// A lane's operands of readfirstlane and readlane.
struct LaneRead {
  uint32_t value;
  int32_t arg;  // readlane: the source lane
};

inline const char* readfirstlane_all(const void* const* in, void* const* out, uint64_t active) {
  const auto* first = static_cast<const LaneRead*>(in[__builtin_ctzll(active)]);
  for (int l = 0; l < kWave; ++l)
    if (out[l] != nullptr) *static_cast<uint32_t*>(out[l]) = first->value;
  return nullptr;
}

inline const char* readlane_all(const void* const* in, void* const* out, uint64_t active) {
  const int src = static_cast<const LaneRead*>(in[__builtin_ctzll(active)])->arg;
  for (int l = 0; l < kWave; ++l)
    if (in[l] != nullptr && static_cast<const LaneRead*>(in[l])->arg != src)
      return "lanes name different source lanes (the lane must be wave-uniform)";
  if (src < 0 || src >= kWave) return "source lane outside the wave";
  if (!((active >> src) & 1))
    return "reads a lane that is not active (its register value is not modelled)";
  for (int l = 0; l < kWave; ++l)
    if (out[l] != nullptr)
      *static_cast<uint32_t*>(out[l]) = static_cast<const LaneRead*>(in[src])->value;
  return nullptr;
}

inline const char* meet(const void* const*, void* const*, uint64_t) { return nullptr; }

inline uint32_t lane_read(Collective fn, const char* name, uint32_t value, int32_t arg, Site site) {
  LaneRead ops{value, arg};
  uint32_t result = 0;
  wave_collective(fn, name, &ops, &result, site);
  return result;
}

// ---------------------------------------------------------------------------
// Dot products (per lane). `clamp` saturates an integer result to its type's
// range and a float result to [0, 1].

template <typename T>
inline int64_t field(uint32_t word, int i) {
  T v;
  std::memcpy(&v, reinterpret_cast<const char*>(&word) + i * sizeof(T), sizeof(T));
  return (int64_t)v;
}

inline int32_t saturate_i32(int64_t v, bool clamp) {
  if (!clamp) return (int32_t)(uint32_t)(uint64_t)v;
  return v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : (int32_t)v);
}
inline uint32_t saturate_u32(int64_t v, bool clamp) {
  if (!clamp) return (uint32_t)(uint64_t)v;
  return v > (int64_t)UINT32_MAX ? UINT32_MAX : (v < 0 ? 0 : (uint32_t)v);
}

/// Σ a_i·b_i over the `n` fields of type A (of `a`) and B (of `b`), plus c.
template <typename A, typename B, int N>
inline int64_t dot(uint32_t a, uint32_t b, int64_t c) {
  for (int i = 0; i < N; ++i) c += field<A>(a, i) * field<B>(b, i);
  return c;
}

template <typename V>
inline uint32_t word(V v) {
  static_assert(sizeof(V) == 4, "a 32-bit register");
  uint32_t w;
  std::memcpy(&w, &v, 4);
  return w;
}

// ---------------------------------------------------------------------------
// Matrix instructions.

/// Row and column of a matrix element.
struct Coord {
  int row, col;
};

/// How an element type widens to the accumulator.
struct F16 {
  using Raw = uint16_t;
  using Acc = float;
  static float widen(uint16_t bits, bool) { return f16_bits_to_f32(bits); }
};
struct BF16 {
  using Raw = uint16_t;
  using Acc = float;
  static float widen(uint16_t bits, bool) { return from_bits<float>((uint64_t)bits << 16); }
};
struct F32 {
  using Raw = float;
  using Acc = float;
  static float widen(float v, bool) { return v; }
};
struct I8 {
  using Raw = uint8_t;
  using Acc = int32_t;
  static int64_t widen(uint8_t v, bool is_signed) { return is_signed ? (int64_t)(int8_t)v : v; }
};

/// The CDNA MFMA layouts with 16×16 or 32×32 tiles of one block: lane l
/// holds row l % M of A (column of B) at k = per·(l / M) + e; each lane's C
/// and D elements sit in groups of four rows.
template <class E, int M_, int K_>
struct Mfma {
  using Elem = E;
  static constexpr int M = M_, N = M_, K = K_;
  static constexpr int kA = K * M / 64;  // A (and B) elements per lane
  static constexpr int kC = M * M / 64;  // C (and D) elements per lane
  static Coord a(int l, int e) { return {l % M, kA * (l / M) + e}; }
  static Coord b(int l, int e) { return {kA * (l / M) + e, l % M}; }
  static Coord cd(int l, int e) { return {8 * (e / 4) % M + 4 * (l / M) + e % 4, l % M}; }
};

/// RDNA 3 WMMA (wave 32): lanes l and l + 16 both hold row l % 16 of A
/// (column of B), all 16 k; C and D rows alternate between the half-waves.
template <class E>
struct WmmaGfx11 {
  using Elem = E;
  static constexpr int M = 16, N = 16, K = 16, kA = 16, kC = 8;
  static Coord a(int l, int e) { return {l % 16, e}; }
  static Coord b(int l, int e) { return {e, l % 16}; }
  static Coord cd(int l, int e) { return {2 * e + l / 16, l % 16}; }
};

/// RDNA 4 WMMA (wave 32): no replication; 16-bit types interleave k in
/// groups of four between the half-waves, 8-bit types split k in halves;
/// C and D rows 0-7 in the low half-wave, 8-15 in the high one.
template <class E>
struct WmmaGfx12 {
  using Elem = E;
  static constexpr int M = 16, N = 16, K = 16, kA = 8, kC = 8;
  static int k(int l, int e) {
    return sizeof(typename E::Raw) == 1 ? 8 * (l / 16) + e : 8 * (e / 4) + 4 * (l / 16) + e % 4;
  }
  static Coord a(int l, int e) { return {l % 16, k(l, e)}; }
  static Coord b(int l, int e) { return {k(l, e), l % 16}; }
  static Coord cd(int l, int e) { return {8 * (l / 16) + e, l % 16}; }
};

// The instructions' shapes.
using MfmaF16x16 = Mfma<F16, 16, 16>;
using MfmaF16x32 = Mfma<F16, 32, 8>;
using MfmaF32x16 = Mfma<F32, 16, 4>;
using MfmaBF16x16 = Mfma<BF16, 16, 16>;
using MfmaI8x16K16 = Mfma<I8, 16, 16>;
using MfmaI8x16K32 = Mfma<I8, 16, 32>;

/// One lane's operands of a matrix instruction.
template <class S>
struct MatrixOperands {
  typename S::Elem::Raw a[S::kA], b[S::kA];
  typename S::Elem::Acc c[S::kC];
  bool a_signed, b_signed, clamp;
};

/// Gathers one input matrix from every lane's fragment; several lanes that
/// hold the same element (RDNA 3's replicated halves) must agree.
template <class S, typename Wide>
inline const char* gather(const void* const* in, bool b_matrix, Wide* m) {
  using Raw = typename S::Elem::Raw;
  const int cols = b_matrix ? S::N : S::K;
  thread_local char msg[160];
  bool seen[64 * 64] = {};
  Raw raw[64 * 64];
  for (int l = 0; l < kWave; ++l) {
    const auto* ops = static_cast<const MatrixOperands<S>*>(in[l]);
    for (int e = 0; e < S::kA; ++e) {
      const Coord at = b_matrix ? S::b(l, e) : S::a(l, e);
      const int i = at.row * cols + at.col;
      const Raw v = b_matrix ? ops->b[e] : ops->a[e];
      if (seen[i] && std::memcmp(&raw[i], &v, sizeof(Raw)) != 0) {
        std::snprintf(msg, sizeof msg,
                      "lanes disagree on %c[%d][%d], which the register layout holds in "
                      "several lanes (they must carry the same value)",
                      b_matrix ? 'B' : 'A', at.row, at.col);
        return msg;
      }
      seen[i] = true;
      raw[i] = v;
      m[i] = S::Elem::widen(v, b_matrix ? ops->b_signed : ops->a_signed);
    }
  }
  return nullptr;
}

template <class S>
inline const char* matrix_all(const void* const* in, void* const* out, uint64_t active) {
  if (active != full_wave())
    return "every lane of the wave must take part (EXEC all ones); some are inactive or absent";
  using Acc = typename S::Elem::Acc;
  using Wide = typename std::conditional<std::is_same<Acc, float>::value, float, int64_t>::type;
  static_assert(S::M * S::K <= 64 * 64 && S::K * S::N <= 64 * 64, "tile too large");
  Wide a[S::M * S::K], b[S::K * S::N];
  if (const char* e = gather<S>(in, false, a)) return e;
  if (const char* e = gather<S>(in, true, b)) return e;
  const auto* first = static_cast<const MatrixOperands<S>*>(in[0]);
  for (int l = 0; l < kWave; ++l) {
    const auto* ops = static_cast<const MatrixOperands<S>*>(in[l]);
    auto* d = static_cast<Acc*>(out[l]);
    for (int e = 0; e < S::kC; ++e) {
      const Coord at = S::cd(l, e);
      Wide sum = ops->c[e];
      for (int k = 0; k < S::K; ++k) sum += a[at.row * S::K + k] * b[k * S::N + at.col];
      if constexpr (std::is_same<Acc, float>::value)
        d[e] = sum;
      else
        d[e] = saturate_i32(sum, first->clamp);
    }
  }
  return nullptr;
}

/// Runs matrix instruction `S` with this lane's fragments.
template <class S, typename D, typename AV, typename CV>
inline D matrix(const char* name, AV a, AV b, CV c, bool a_signed, bool b_signed, bool clamp,
                Site site) {
  MatrixOperands<S> ops;
  static_assert(sizeof(AV) == sizeof ops.a && sizeof(CV) == sizeof ops.c &&
                    sizeof(D) == sizeof ops.c,
                "hip-on-cpu: operand vector does not match the instruction's layout");
  std::memcpy(ops.a, &a, sizeof ops.a);
  std::memcpy(ops.b, &b, sizeof ops.b);
  std::memcpy(ops.c, &c, sizeof ops.c);
  ops.a_signed = a_signed;
  ops.b_signed = b_signed;
  ops.clamp = clamp;
  D d;
  wave_collective(&matrix_all<S>, name, &ops, &d, site);
  return d;
}

/// The CBSZ/ABID/BLGP broadcast modifiers of MFMA are not modelled.
inline void no_mfma_modifiers(const char* name, int cbsz, int abid, int blgp) {
  if (cbsz != 0 || abid != 0 || blgp != 0) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "%s: hip-on-cpu models no CBSZ/ABID/BLGP modifiers", name);
    fail(msg);
  }
}

}  // namespace hipcpu

// ---------------------------------------------------------------------------
// The builtins.

inline int __builtin_amdgcn_readfirstlane(int v, HIPCPU_SITE_ARGS) {
  return (int)::hipcpu::lane_read(&::hipcpu::readfirstlane_all, "__builtin_amdgcn_readfirstlane",
                                  (uint32_t)v, 0, HIPCPU_SITE);
}
inline int __builtin_amdgcn_readlane(int v, int lane, HIPCPU_SITE_ARGS) {
  return (int)::hipcpu::lane_read(&::hipcpu::readlane_all, "__builtin_amdgcn_readlane",
                                  (uint32_t)v, lane, HIPCPU_SITE);
}
// ds_bpermute_b32 reads lane (address / 4) mod wave, 0 from an inactive
// one: the __shfl of the whole wave.
inline int __builtin_amdgcn_ds_bpermute(int address, int v, HIPCPU_SITE_ARGS) {
  return ::hipcpu::shuffle(::hipcpu::WaveOp::Shfl, v, address >> 2, warpSize, HIPCPU_SITE);
}
inline void __builtin_amdgcn_wave_barrier(HIPCPU_SITE_ARGS) {
  ::hipcpu::wave_collective(&::hipcpu::meet, "__builtin_amdgcn_wave_barrier", nullptr, nullptr,
                            HIPCPU_SITE);
}
inline void __builtin_amdgcn_s_barrier(HIPCPU_SITE_ARGS) { ::hipcpu::block_barrier(HIPCPU_SITE); }
// Lanes below this one whose bit of `mask` is set: the low word covers lanes
// 0-31, the high word lanes 32-63 (nothing at wave 32).
inline unsigned __builtin_amdgcn_mbcnt_lo(unsigned mask, unsigned acc) {
  const unsigned lane = __lane_id();
  const unsigned below = lane >= 32 ? ~0u : (1u << lane) - 1;
  return acc + (unsigned)__builtin_popcount(mask & below);
}
inline unsigned __builtin_amdgcn_mbcnt_hi(unsigned mask, unsigned acc) {
  const unsigned lane = __lane_id();
  const unsigned below = lane < 32 ? 0u : (1u << (lane - 32)) - 1;
  return acc + (unsigned)__builtin_popcount(mask & below);
}

// Dot products: v_dot2_f32_f16 and v_dot4_u32_u8 exist on every target
// emulated here; the signed ones on CDNA and RDNA 2, the mixed-sign one on
// RDNA 3 and 4.
inline float __builtin_amdgcn_fdot2(::hipcpu::v2h a, ::hipcpu::v2h b,
                                    float c, bool clamp) {
  const uint32_t wa = ::hipcpu::word(a), wb = ::hipcpu::word(b);
  float d = c;
  for (int i = 0; i < 2; ++i)
    d += ::hipcpu::f16_bits_to_f32((uint16_t)(wa >> (16 * i))) *
         ::hipcpu::f16_bits_to_f32((uint16_t)(wb >> (16 * i)));
  return clamp ? (d < 0.f ? 0.f : (d > 1.f ? 1.f : d)) : d;
}
inline unsigned __builtin_amdgcn_udot4(unsigned a, unsigned b, unsigned c, bool clamp) {
  return ::hipcpu::saturate_u32(::hipcpu::dot<uint8_t, uint8_t, 4>(a, b, c), clamp);
}
#if defined(HIPCPU_DOT1_INSTS)
inline int __builtin_amdgcn_sdot4(int a, int b, int c, bool clamp) {
  return ::hipcpu::saturate_i32(::hipcpu::dot<int8_t, int8_t, 4>((uint32_t)a, (uint32_t)b, c), clamp);
}
inline int __builtin_amdgcn_sdot2(::hipcpu::v2s a, ::hipcpu::v2s b, int c,
                                  bool clamp) {
  return ::hipcpu::saturate_i32(
      ::hipcpu::dot<int16_t, int16_t, 2>(::hipcpu::word(a), ::hipcpu::word(b), c), clamp);
}
inline unsigned __builtin_amdgcn_udot2(::hipcpu::v2us a,
                                       ::hipcpu::v2us b, unsigned c, bool clamp) {
  return ::hipcpu::saturate_u32(
      ::hipcpu::dot<uint16_t, uint16_t, 2>(::hipcpu::word(a), ::hipcpu::word(b), c), clamp);
}
#endif
#if defined(HIPCPU_DOT8_INSTS)
inline int __builtin_amdgcn_sudot4(bool a_signed, int a, bool b_signed, int b, int c, bool clamp) {
  int64_t d = c;
  for (int i = 0; i < 4; ++i)
    d += (a_signed ? ::hipcpu::field<int8_t>((uint32_t)a, i) : ::hipcpu::field<uint8_t>((uint32_t)a, i)) *
         (b_signed ? ::hipcpu::field<int8_t>((uint32_t)b, i) : ::hipcpu::field<uint8_t>((uint32_t)b, i));
  return ::hipcpu::saturate_i32(d, clamp);
}
#endif

// MFMA (CDNA, wave 64).
#if defined(HIPCPU_MAI_INSTS)
#define HIPCPU_MFMA(NAME, SHAPE, D, AV, CV)                                                     \
  inline D NAME(AV a, AV b, CV c, int cbsz, int abid, int blgp, HIPCPU_SITE_ARGS) {               \
    ::hipcpu::no_mfma_modifiers(#NAME, cbsz, abid, blgp);                                       \
    return ::hipcpu::matrix<SHAPE, D>(#NAME, a, b, c, true, true, false, HIPCPU_SITE);          \
  }
HIPCPU_MFMA(__builtin_amdgcn_mfma_f32_16x16x16f16, ::hipcpu::MfmaF16x16,
            ::hipcpu::v4f, ::hipcpu::v4h, ::hipcpu::v4f)
HIPCPU_MFMA(__builtin_amdgcn_mfma_f32_32x32x8f16, ::hipcpu::MfmaF16x32,
            ::hipcpu::v16f, ::hipcpu::v4h, ::hipcpu::v16f)
HIPCPU_MFMA(__builtin_amdgcn_mfma_f32_16x16x4f32, ::hipcpu::MfmaF32x16,
            ::hipcpu::v4f, float, ::hipcpu::v4f)
#if defined(__gfx90a__) || defined(__gfx942__)
HIPCPU_MFMA(__builtin_amdgcn_mfma_f32_16x16x16bf16_1k, ::hipcpu::MfmaBF16x16,
            ::hipcpu::v4f, ::hipcpu::v4s, ::hipcpu::v4f)
#endif
#if defined(__gfx908__) || defined(__gfx90a__)
HIPCPU_MFMA(__builtin_amdgcn_mfma_i32_16x16x16i8, ::hipcpu::MfmaI8x16K16,
            ::hipcpu::v4i, int, ::hipcpu::v4i)
#endif
#if defined(__gfx942__)
HIPCPU_MFMA(__builtin_amdgcn_mfma_i32_16x16x32_i8, ::hipcpu::MfmaI8x16K32,
            ::hipcpu::v4i, long, ::hipcpu::v4i)
#endif
#undef HIPCPU_MFMA
#endif

// WMMA (RDNA 3 and 4, wave 32).
#define HIPCPU_WMMA_FLOAT(NAME, SHAPE, AV)                                                       \
  inline ::hipcpu::v8f NAME(AV a, AV b, ::hipcpu::v8f c, HIPCPU_SITE_ARGS) { \
    return ::hipcpu::matrix<SHAPE, ::hipcpu::v8f>(#NAME, a, b, c, true, true, false,   \
                                                            HIPCPU_SITE);                        \
  }
#define HIPCPU_WMMA_IU8(NAME, SHAPE, AV)                                                         \
  inline ::hipcpu::v8i NAME(bool a_signed, AV a, bool b_signed, AV b,                    \
                                    ::hipcpu::v8i c, bool clamp, HIPCPU_SITE_ARGS) {     \
    return ::hipcpu::matrix<SHAPE, ::hipcpu::v8i>(#NAME, a, b, c, a_signed, b_signed,    \
                                                          clamp, HIPCPU_SITE);                   \
  }
#if defined(HIPCPU_WMMA_GFX11)
HIPCPU_WMMA_FLOAT(__builtin_amdgcn_wmma_f32_16x16x16_f16_w32, ::hipcpu::WmmaGfx11<::hipcpu::F16>,
                  ::hipcpu::v16h)
HIPCPU_WMMA_FLOAT(__builtin_amdgcn_wmma_f32_16x16x16_bf16_w32, ::hipcpu::WmmaGfx11<::hipcpu::BF16>,
                  ::hipcpu::v16s)
HIPCPU_WMMA_IU8(__builtin_amdgcn_wmma_i32_16x16x16_iu8_w32, ::hipcpu::WmmaGfx11<::hipcpu::I8>,
                ::hipcpu::v4i)
#endif
#if defined(HIPCPU_WMMA_GFX12)
HIPCPU_WMMA_FLOAT(__builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12,
                  ::hipcpu::WmmaGfx12<::hipcpu::F16>, ::hipcpu::v8h)
HIPCPU_WMMA_FLOAT(__builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12,
                  ::hipcpu::WmmaGfx12<::hipcpu::BF16>, ::hipcpu::v8s)
HIPCPU_WMMA_IU8(__builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12,
                ::hipcpu::WmmaGfx12<::hipcpu::I8>, ::hipcpu::v2i)
#endif
#undef HIPCPU_WMMA_FLOAT
#undef HIPCPU_WMMA_IU8
