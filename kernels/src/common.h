// Shared definitions for every candle-hip kernel source.
//
// Every source of this folder includes it as "common.h"; the host hands it to
// hipRTC as an in-memory header (see candle-hip/src/kernel/). Compiled with
// -DCANDLE_HIP_WAVE=<wave size of the device> (64 on CDNA, 32 on RDNA and on
// NVIDIA through the test shim).
//
// Portability rules followed here (kernels/README.md lists them all):
// - the wave size only ever comes from CANDLE_HIP_WAVE;
// - shuffles run in converged code only (every lane of the wave calls them);
// - data crosses waves only through shared memory and __syncthreads;
// - no __builtin_amdgcn_* builtins;
// - 64-bit element indices wherever a tensor can exceed 2^31 elements.
#ifndef CANDLE_HIP_COMMON_H
#define CANDLE_HIP_COMMON_H

// hipRTC on AMD pre-includes the HIP runtime and __half and has no hip/*.h
// headers to include; other compilers (hipcc, NVRTC through the HIP-on-CUDA
// test shim) take them from the headers.
#if !defined(__HIPCC_RTC__)
#include <hip/hip_runtime.h>
#endif
#if !defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_NVIDIA__)
#include <hip/hip_fp16.h>
#endif

#ifndef CANDLE_HIP_WAVE
#error "CANDLE_HIP_WAVE must be defined to the device's wave size"
#endif
#if CANDLE_HIP_WAVE <= 0 || (CANDLE_HIP_WAVE & (CANDLE_HIP_WAVE - 1)) != 0
#error "CANDLE_HIP_WAVE must be a power of two"
#endif

// Limits shared with the host (candle-hip/src/kernel/header.rs mirrors them
// and a unit test checks that both sides agree).
#define CH_MAX_DIMS 8
#define CH_MAX_OPERANDS 3
#define CH_ELEM_BLOCK 256
#define CH_REDUCE_MAX_BLOCK 1024
#define CH_VEC_BYTES 16
// Bytes reserved per partial state of a split reduction (reduce.hip).
#define CH_REDUCE_STATE_BYTES 16
#define CH_MAX_WAVES (CH_REDUCE_MAX_BLOCK / CANDLE_HIP_WAVE)

// The element types, one per candle dtype with arithmetic (`ch_<dtype>`).
// candle's other dtypes (f6e2m3, f6e3m2, f4, f8e8m0) are raw bytes that
// only the data-movement kernels touch, through ch_u8 (the host picks the
// kernel of the same element width: candle-hip/src/kernel/catalogue.rs).
typedef unsigned char ch_u8;
typedef unsigned short ch_u16;
typedef short ch_i16;
typedef int ch_i32;
typedef unsigned int ch_u32;
typedef long long ch_i64;
typedef unsigned long long ch_u64;
typedef float ch_f32;
typedef double ch_f64;
typedef __half ch_f16;

// bfloat16 is stored as its 16 raw bits and converted in software: hipRTC has
// no hip_bf16.h, and the conversions are a handful of integer operations.
struct ch_bf16 {
  ch_u16 bits;
};

// 8-bit float with 4 exponent and 3 mantissa bits (candle's F8E4M3, the
// `float8` crate's type): its raw bits, converted in software like bf16.
// Bias 7, subnormals, no infinities; 0x7f and 0xff are NaN, 0x7e is 448.
struct ch_f8e4m3 {
  ch_u8 bits;
};

// ---------------------------------------------------------------------------
// Bit casts between float types and integers of the same size.

union ch_f32_bits {
  float f;
  ch_u32 u;
};

union ch_f64_bits {
  double f;
  ch_u64 u;
};

__device__ __forceinline__ float ch_bf16_to_float(ch_bf16 v) {
  ch_f32_bits b;
  b.u = ((ch_u32)v.bits) << 16;
  return b.f;
}

// Round to nearest even; NaN stays NaN (quiet bit set, sign kept).
__device__ __forceinline__ ch_bf16 ch_float_to_bf16(float f) {
  ch_f32_bits b;
  b.f = f;
  const ch_u32 rounded = b.u + 0x7fffu + ((b.u >> 16) & 1u);
  // A float compare finds NaN in one instruction (the integer test took two).
  const ch_u32 high = f != f ? (b.u | 0x00400000u) : rounded;
  ch_bf16 r;
  r.bits = (ch_u16)(high >> 16);
  return r;
}

// f8e4m3 -> f32, exact. Both NaNs give the positive NaN 0x7fffe000, as the
// float8 crate's to_f32 does (it goes through the f16 NaN 0x7fff).
__device__ __forceinline__ float ch_f8e4m3_to_float(ch_f8e4m3 v) {
  const ch_u32 a = v.bits & 0x7fu;
  const ch_u32 sign = (ch_u32)(v.bits & 0x80u) << 24;
  ch_f32_bits b;
  if (a == 0x7fu) {
    b.u = 0x7fffe000u;
  } else if (a < 8u) {
    // Zero and subnormals: a * 2^-9.
    b.f = (float)a * 0.001953125f;
    b.u |= sign;
  } else {
    // Exponent e (bias 7) and mantissa m: (e + 120) << 23 | m << 20.
    b.u = sign | ((a + (120u << 3)) << 20);
  }
  return b.f;
}

// The rounding of an f8e4m3 conversion, as the float8 crate (0.7) does it
// (its saturating from_f64): |x| <= 2^-10
// gives a zero, NaN 0x7f, |x| > 464 (infinities too) 448, everything else
// rounds to nearest even; the sign is kept (NaN and zeros included).
// `a` is |x| as the bits of an IEEE float whose mantissa has `M` bits.
// Written once for f32 (M = 23) and f64 (M = 52) bit patterns: the crate's
// from_f32 is from_f64 of the exactly widened value, so both agree.
template <typename U, int M>
__device__ __forceinline__ ch_u32 ch_f8e4m3_round(U a, U min_half, U nan_above, U sat_above, U min_normal) {
  const int B = M == 23 ? 127 : 1023;  // the source's exponent bias
  if (a <= min_half) return 0u;
  if (a > nan_above) return 0x7fu;
  if (a > sat_above) return 0x7eu;
  const U one = 1;
  const U half = one << (M - 4);  // half a unit of the 3-bit mantissa
  if (a >= min_normal) {
    // The biased exponent and top 3 mantissa bits, rebiased to 7.
    ch_u32 r = (ch_u32)(a >> (M - 3)) - (ch_u32)((B - 7) << 3);
    const U rest = a & ((half << 1) - one);
    if (rest > half || (rest == half && (r & 1u))) r += 1u;
    return r;
  }
  // Subnormal results: the significand (implicit bit included) shifted
  // right by 1 - e, e in -3..0 the rebiased exponent.
  const ch_u32 shift = (ch_u32)(B - 6) - (ch_u32)(a >> M);
  ch_u32 r = (((ch_u32)(a >> (M - 3)) & 7u) | 8u) >> shift;
  const U h = half << shift;
  const U rest = (a | (one << M)) & ((h << 1) - one);
  if (rest > h || (rest == h && (r & 1u))) r += 1u;
  return r;
}

__device__ __forceinline__ ch_f8e4m3 ch_float_to_f8e4m3(float f) {
  ch_f32_bits b;
  b.f = f;
  ch_f8e4m3 r;
  r.bits = (ch_u8)(((b.u >> 24) & 0x80u) |
                   ch_f8e4m3_round<ch_u32, 23>(b.u & 0x7fffffffu, 0x3a800000u, 0x7f800000u, 0x43e80000u,
                                               0x3c800000u));
  return r;
}

__device__ __forceinline__ ch_f8e4m3 ch_double_to_f8e4m3(double f) {
  ch_f64_bits b;
  b.f = f;
  ch_f8e4m3 r;
  r.bits = (ch_u8)(((ch_u32)(b.u >> 56) & 0x80u) |
                   ch_f8e4m3_round<ch_u64, 52>(b.u & 0x7fffffffffffffffull, 0x3f50000000000000ull,
                                               0x7ff0000000000000ull, 0x407d000000000000ull,
                                               0x3f90000000000000ull));
  return r;
}

// x rounded to the f8e4m3 grid, in f32: the value one f8e4m3 operation of
// the float8 crate leaves behind (it computes in f32 and rounds).
__device__ __forceinline__ float ch_f8e4m3_round_f32(float x) {
  return ch_f8e4m3_to_float(ch_float_to_f8e4m3(x));
}

// ---------------------------------------------------------------------------
// Numeric traits: how each storage type computes.
//
// Floating types compute in `acc` (f32 for f16/bf16/f32, f64 for f64) and are
// rounded once when stored. Integer types compute in their own type; `wide`
// is the unsigned type their wrapping arithmetic runs in (no signed overflow).

template <typename T>
struct Num;

template <>
struct Num<ch_f16> {
  typedef float acc;
  static const bool is_float = true;
  __device__ __forceinline__ static float to_f32(ch_f16 v) { return __half2float(v); }
  __device__ __forceinline__ static double to_f64(ch_f16 v) { return (double)__half2float(v); }
  __device__ __forceinline__ static ch_f16 from_f32(float v) { return __float2half(v); }
  // Through f32: at most one unit in the last place away from a direct rounding.
  __device__ __forceinline__ static ch_f16 from_f64(double v) { return __float2half((float)v); }
  __device__ __forceinline__ static float to_acc(ch_f16 v) { return to_f32(v); }
  __device__ __forceinline__ static ch_f16 from_acc(float v) { return from_f32(v); }
};

template <>
struct Num<ch_bf16> {
  typedef float acc;
  static const bool is_float = true;
  __device__ __forceinline__ static float to_f32(ch_bf16 v) { return ch_bf16_to_float(v); }
  __device__ __forceinline__ static double to_f64(ch_bf16 v) { return (double)ch_bf16_to_float(v); }
  __device__ __forceinline__ static ch_bf16 from_f32(float v) { return ch_float_to_bf16(v); }
  __device__ __forceinline__ static ch_bf16 from_f64(double v) { return ch_float_to_bf16((float)v); }
  __device__ __forceinline__ static float to_acc(ch_bf16 v) { return to_f32(v); }
  __device__ __forceinline__ static ch_bf16 from_acc(float v) { return from_f32(v); }
};

template <>
struct Num<float> {
  typedef float acc;
  static const bool is_float = true;
  __device__ __forceinline__ static float to_f32(float v) { return v; }
  __device__ __forceinline__ static double to_f64(float v) { return (double)v; }
  __device__ __forceinline__ static float from_f32(float v) { return v; }
  __device__ __forceinline__ static float from_f64(double v) { return (float)v; }
  __device__ __forceinline__ static float to_acc(float v) { return v; }
  __device__ __forceinline__ static float from_acc(float v) { return v; }
};

template <>
struct Num<double> {
  typedef double acc;
  static const bool is_float = true;
  __device__ __forceinline__ static float to_f32(double v) { return (float)v; }
  __device__ __forceinline__ static double to_f64(double v) { return v; }
  __device__ __forceinline__ static double from_f32(float v) { return (double)v; }
  __device__ __forceinline__ static double from_f64(double v) { return v; }
  __device__ __forceinline__ static double to_acc(double v) { return v; }
  __device__ __forceinline__ static double from_acc(double v) { return v; }
};

// f8e4m3 computes in f32 and rounds once per operation, as the float8
// crate's operators do (candle's CPU backend computes with them).
template <>
struct Num<ch_f8e4m3> {
  typedef float acc;
  static const bool is_float = true;
  __device__ __forceinline__ static float to_f32(ch_f8e4m3 v) { return ch_f8e4m3_to_float(v); }
  __device__ __forceinline__ static double to_f64(ch_f8e4m3 v) { return (double)ch_f8e4m3_to_float(v); }
  __device__ __forceinline__ static ch_f8e4m3 from_f32(float v) { return ch_float_to_f8e4m3(v); }
  // Directly from f64, like the crate's from_f64 (no rounding through f32).
  __device__ __forceinline__ static ch_f8e4m3 from_f64(double v) { return ch_double_to_f8e4m3(v); }
  __device__ __forceinline__ static float to_acc(ch_f8e4m3 v) { return to_f32(v); }
  __device__ __forceinline__ static ch_f8e4m3 from_acc(float v) { return from_f32(v); }
};

template <>
struct Num<ch_u8> {
  typedef ch_u8 acc;
  typedef ch_u32 wide;
  static const bool is_float = false;
  static const ch_u8 max_value = 0xff;
  static const ch_u8 min_value = 0;
};

// Signed 16- and 32-bit integers wrap in u32 (a u16 would promote to a
// signed int, whose products overflow).
template <>
struct Num<ch_i16> {
  typedef ch_i16 acc;
  typedef ch_u32 wide;
  static const bool is_float = false;
  static const ch_i16 max_value = 0x7fff;
  static const ch_i16 min_value = -0x7fff - 1;
};

template <>
struct Num<ch_i32> {
  typedef ch_i32 acc;
  typedef ch_u32 wide;
  static const bool is_float = false;
  static const ch_i32 max_value = 0x7fffffff;
  static const ch_i32 min_value = -0x7fffffff - 1;
};

template <>
struct Num<ch_u32> {
  typedef ch_u32 acc;
  typedef ch_u32 wide;
  static const bool is_float = false;
  static const ch_u32 max_value = 0xffffffffu;
  static const ch_u32 min_value = 0;
};

template <>
struct Num<ch_i64> {
  typedef ch_i64 acc;
  typedef ch_u64 wide;
  static const bool is_float = false;
  static const ch_i64 max_value = 0x7fffffffffffffffll;
  static const ch_i64 min_value = -0x7fffffffffffffffll - 1;
};

// The type values are compared in (comparisons, min/max reductions): the
// computation type of floats, an exact promotion; integers themselves.
template <typename T, bool F = Num<T>::is_float>
struct KeyOf;

template <typename T>
struct KeyOf<T, true> {
  typedef typename Num<T>::acc K;
  __device__ __forceinline__ static K key(T v) { return Num<T>::to_acc(v); }
  __device__ __forceinline__ static T value(K k) { return Num<T>::from_acc(k); }
};

template <typename T>
struct KeyOf<T, false> {
  typedef T K;
  __device__ __forceinline__ static K key(T v) { return v; }
  __device__ __forceinline__ static T value(K k) { return k; }
};

// Wrapping integer arithmetic (Rust's wrapping_* semantics).
template <typename T>
__device__ __forceinline__ T wrap_add(T a, T b) {
  typedef typename Num<T>::wide W;
  return (T)((W)a + (W)b);
}
template <typename T>
__device__ __forceinline__ T wrap_sub(T a, T b) {
  typedef typename Num<T>::wide W;
  return (T)((W)a - (W)b);
}
template <typename T>
__device__ __forceinline__ T wrap_mul(T a, T b) {
  typedef typename Num<T>::wide W;
  return (T)((W)a * (W)b);
}
template <typename T>
__device__ __forceinline__ T wrap_neg(T a) {
  typedef typename Num<T>::wide W;
  return (T)((W)0 - (W)a);
}

// ---------------------------------------------------------------------------
// Conversions with Rust's `as` semantics: float -> int saturates and maps NaN
// to 0; int -> int wraps; int -> float rounds to nearest; float -> float
// rounds to nearest even (f64 -> f16/bf16 goes through f32). As in candle's
// CPU backend, f8e4m3 goes to other types through f32 (exactly) and comes
// from f64 directly, from everything else through f32 (integers are
// rounded to f32 first: `F8E4M3::from_f32(v as f32)`).

template <typename D>
__device__ __forceinline__ D saturate_from_f64(double v) {
  if (v != v) return (D)0;
  if (v <= (double)Num<D>::min_value) return Num<D>::min_value;
  if (v >= (double)Num<D>::max_value) return Num<D>::max_value;
  return (D)v;
}

template <typename D, typename S, bool SF = Num<S>::is_float, bool DF = Num<D>::is_float>
struct Cast;

template <typename D, typename S>
struct Cast<D, S, true, true> {
  __device__ __forceinline__ static D apply(S v) {
    // f64 sources keep their precision until the final rounding.
    return sizeof(S) == sizeof(double) ? Num<D>::from_f64(Num<S>::to_f64(v))
                                       : Num<D>::from_f32(Num<S>::to_f32(v));
  }
};

template <typename D, typename S>
struct Cast<D, S, true, false> {
  __device__ __forceinline__ static D apply(S v) { return saturate_from_f64<D>(Num<S>::to_f64(v)); }
};

template <typename D, typename S>
struct Cast<D, S, false, true> {
  __device__ __forceinline__ static D apply(S v) {
    return sizeof(D) == sizeof(double) ? Num<D>::from_f64((double)v) : Num<D>::from_f32((float)v);
  }
};

template <typename D, typename S>
struct Cast<D, S, false, false> {
  __device__ __forceinline__ static D apply(S v) { return (D)v; }
};

// candle's CPU backend copies f8e4m3 to f8e4m3 unchanged (a round trip
// through f32 would turn the NaN 0xff into 0x7f).
template <>
struct Cast<ch_f8e4m3, ch_f8e4m3, true, true> {
  __device__ __forceinline__ static ch_f8e4m3 apply(ch_f8e4m3 v) { return v; }
};

template <typename D, typename S>
__device__ __forceinline__ D cast_to(S v) {
  return Cast<D, S>::apply(v);
}

// A value of any type whose bits are all zero (0 for every supported dtype).
template <typename U>
__device__ __forceinline__ U zero_bits() {
  U u;
  unsigned char* b = reinterpret_cast<unsigned char*>(&u);
#pragma unroll
  for (int k = 0; k < (int)sizeof(U); ++k) b[k] = 0;
  return u;
}

// The low sizeof(T) bytes of `bits` reinterpreted as a T (scalars travel
// from the host as 64-bit patterns).
template <typename T>
__device__ __forceinline__ T from_bits(ch_u64 bits) {
  T t;
  unsigned char* dst = reinterpret_cast<unsigned char*>(&t);
#pragma unroll
  for (int k = 0; k < (int)sizeof(T); ++k) dst[k] = (unsigned char)(bits >> (8 * k));
  return t;
}

// ---------------------------------------------------------------------------
// Thread indexing and index arithmetic.

__device__ __forceinline__ ch_u64 global_thread() {
  return (ch_u64)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ ch_u64 global_threads() {
  return (ch_u64)gridDim.x * blockDim.x;
}

// n / d with the remainder in `rem`, for 64-bit n: one f64 division and
// one correction step, shorter code than the compiler's expansion of a
// 64-bit integer division (the GPU has none). Exact for n < 2^53, which
// every element offset and count is (no allocation comes close): the
// rounded quotient is then within one of the true one. `decompose` does
// not use it: unrolled over the dimensions, its f64 registers made
// reductions spill on wave64 targets.
__device__ __forceinline__ ch_u64 divmod64(ch_u64 n, ch_u64 d, ch_u64& rem) {
  ch_u64 q = (ch_u64)((double)n / (double)d);
  ch_i64 r = (ch_i64)(n - q * d);
  if (r < 0) {
    q -= 1;
    r += (ch_i64)d;
  } else if (r >= (ch_i64)d) {
    q += 1;
    r -= (ch_i64)d;
  }
  rem = (ch_u64)r;
  return q;
}

// n / d with the remainder in `rem`; 32-bit division whenever both fit.
__device__ __forceinline__ ch_u64 divmod(ch_u64 n, ch_u64 d, ch_u64& rem) {
  if (((n | d) >> 32) == 0) {
    const ch_u32 q = (ch_u32)n / (ch_u32)d;
    rem = (ch_u32)n - q * (ch_u32)d;
    return q;
  }
  return divmod64(n, d, rem);
}

// One step of decompose's 64-bit path: the coordinate of dimension d
// (i's remainder by it) added to the offsets, i divided by it.
template <int N, typename Stride>
__device__ __forceinline__ void wide_digit(ch_u64& i, const ch_u64* dims, const Stride& stride, int d,
                                           ch_u64 (&off)[CH_MAX_OPERANDS]) {
  const ch_u64 q = i / dims[d];
  const ch_u64 c = i - q * dims[d];
  i = q;
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] += c * stride(k, d);
}

// Offsets in N operands of element `i` (row-major order) of a view of
// `rank` <= MAX_DIMS dims, sharing the divisions; stride(k, d) is operand
// k's stride of dimension d. Every dimension but the first takes a division;
// the first's coordinate is what remains of i (i < the view's element
// count). The usual case, i and every divisor below 2^32, divides in 32 bits
// in a loop unrolled over the MAX_DIMS dimensions. Otherwise (views of 2^32
// elements or more) each dimension takes the compiler's 64-bit division (see
// divmod64), several times the code of a 32-bit one: with ROLL_WIDE, once in
// a rolled loop, which reads the dimensions at computed offsets of the
// argument struct (half the code of an element-wise kernel). Reductions keep
// that loop unrolled: rolled, or left out with the host guaranteeing 32-bit
// indices, hipRTC 6.4 gives some of them an unused private segment of 36 to
// 68 bytes (candle-hip/benches/results/sandbox-2026-11-28-index-math.md).
template <int N, bool ROLL_WIDE, int MAX_DIMS = CH_MAX_DIMS, typename Stride>
__device__ __forceinline__ void decompose(ch_u64 i, ch_u32 rank, const ch_u64* dims, const Stride& stride,
                                          ch_u64 (&off)[CH_MAX_OPERANDS]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  if (rank == 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = i * stride(k, 0);
    return;
  }
  ch_u64 wide = i;
#pragma unroll
  for (int d = 1; d < MAX_DIMS; ++d) {
    if (d < (int)rank) wide |= dims[d];
  }
  if ((wide >> 32) == 0) {
    ch_u32 n = (ch_u32)i;
#pragma unroll
    for (int d = MAX_DIMS - 1; d >= 1; --d) {
      if (d < (int)rank) {
        const ch_u32 q = n / (ch_u32)dims[d];
        const ch_u64 c = n - q * (ch_u32)dims[d];
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += c * stride(k, d);
        n = q;
      }
    }
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += (ch_u64)n * stride(k, 0);
    return;
  }
  if (ROLL_WIDE) {
#pragma unroll 1
    for (int d = (int)rank - 1; d >= 1; --d) wide_digit<N>(i, dims, stride, d, off);
  } else {
#pragma unroll
    for (int d = MAX_DIMS - 1; d >= 1; --d) {
      if (d < (int)rank) wide_digit<N>(i, dims, stride, d, off);
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] += i * stride(k, 0);
}

// Storage offset of the `i`-th element (row-major order) of a strided view
// of at most MAX_DIMS dims.
template <int MAX_DIMS = CH_MAX_DIMS>
__device__ __forceinline__ ch_u64 strided_offset(ch_u64 i, ch_u32 rank, const ch_u64* dims,
                                                 const ch_u64* strides) {
  ch_u64 off[CH_MAX_OPERANDS];
  decompose<1, false, MAX_DIMS>(i, rank, dims, [&](int, int d) { return strides[d]; }, off);
  return off[0];
}

// ---------------------------------------------------------------------------
// Element-wise kernels: one shape, up to CH_MAX_OPERANDS strided inputs, one
// contiguous output. Mirrored by `ElemInfo` in candle-hip/src/kernel/info.rs.
struct ElemInfo {
  ch_u64 numel;
  // 0 when every operand is contiguous (and the strides are unused);
  // otherwise the number of (merged) dimensions.
  ch_u32 rank;
  // Strided layouts only: 1 when the innermost dimension can be moved in
  // packs of CH_VEC_BYTES / (widest element): its size and the outer strides
  // of every operand whose inner stride is 1 are multiples of the pack, and
  // every inner stride is 0 or 1 (row and column broadcasts, inner-contiguous
  // permutations). The kernel still checks pointer alignment.
  ch_u32 inner_vec;
  ch_u64 dims[CH_MAX_DIMS];
  ch_u64 strides[CH_MAX_OPERANDS][CH_MAX_DIMS];
};

// Offsets of element `i` in each of the first N operands, sharing the divisions.
template <int N>
__device__ __forceinline__ void strided_offsets(const ElemInfo& info, ch_u64 i, ch_u64 (&off)[CH_MAX_OPERANDS]) {
  decompose<N, true>(i, info.rank, info.dims, [&](int k, int d) { return info.strides[k][d]; }, off);
}

// V consecutive elements moved with one wide memory access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, typename... Ts>
struct MaxSize {
  static const int rest = MaxSize<Ts...>::value;
  static const int value = (int)sizeof(T) > rest ? (int)sizeof(T) : rest;
};

template <typename T>
struct MaxSize<T> {
  static const int value = (int)sizeof(T);
};

template <int V, typename T>
__device__ __forceinline__ bool is_aligned(const T* p) {
  return (reinterpret_cast<ch_u64>(p) % (sizeof(T) * V)) == 0;
}

// Input operand K of an element-wise kernel.
template <typename T, int K>
struct In {
  typedef T type;
  const T* p;
  __device__ __forceinline__ T at(const ch_u64 (&off)[CH_MAX_OPERANDS]) const { return p[off[K]]; }
  // Pack j of a contiguous operand.
  template <int V>
  __device__ __forceinline__ Pack<T, V> pack(ch_u64 j) const {
    return reinterpret_cast<const Pack<T, V>*>(p)[j];
  }
  // The V elements from offset off[K] along the innermost dimension, whose
  // stride is 1 (one wide load; off[K] is a multiple of V) or 0 (broadcast).
  template <int V>
  __device__ __forceinline__ Pack<T, V> inner_pack(const ElemInfo& info, const ch_u64 (&off)[CH_MAX_OPERANDS]) const {
    if (info.strides[K][info.rank - 1] != 0) return reinterpret_cast<const Pack<T, V>*>(p + off[K])[0];
    Pack<T, V> r;
    const T v = p[off[K]];
#pragma unroll
    for (int k = 0; k < V; ++k) r.v[k] = v;
    return r;
  }
  template <int V>
  __device__ __forceinline__ bool aligned() const {
    return is_aligned<V>(p);
  }
};

template <int V, typename Out>
__device__ __forceinline__ bool all_aligned(const Out* out) {
  return is_aligned<V>(out);
}

template <int V, typename Out, typename I, typename... Is>
__device__ __forceinline__ bool all_aligned(const Out* out, const I& in, const Is&... ins) {
  return in.template aligned<V>() && all_aligned<V>(out, ins...);
}

template <int V, typename Out, typename F, typename... P>
__device__ __forceinline__ Pack<Out, V> apply_pack(const F& f, const P&... packs) {
  Pack<Out, V> r;
#pragma unroll
  for (int k = 0; k < V; ++k) r.v[k] = f(packs.v[k]...);
  return r;
}

// Work items (16-byte packs) each thread of a contiguous element-wise loop
// handles per step: their loads are all issued before the first result is
// stored, so several memory accesses per thread are in flight. The host sizes
// grids with it (`UNROLL` in candle-hip/src/kernel/header.rs).
#define CH_UNROLL 4

// store(j, compute(j)) for every j < count. A thread takes items j, j +
// blockDim.x, ... (U of them, coalesced across the block) per step; the grid
// strides over the rest. Every compute of a step runs before its stores, so
// compute must only read memory the stores do not write.
template <int U, typename R, typename Compute, typename Store>
__device__ __forceinline__ void unrolled_loop(ch_u64 count, const Compute& compute, const Store& store) {
  const ch_u64 block = blockDim.x;
  const ch_u64 step = (ch_u64)gridDim.x * block * U;
  for (ch_u64 base = (ch_u64)blockIdx.x * block * U + threadIdx.x; base < count; base += step) {
    if (U > 1 && base + (U - 1) * block < count) {
      R r[U];
#pragma unroll
      for (int u = 0; u < U; ++u) r[u] = compute(base + u * block);
#pragma unroll
      for (int u = 0; u < U; ++u) store(base + u * block, r[u]);
    } else {
      for (ch_u64 j = base; j < count && j < base + U * block; j += block) store(j, compute(j));
    }
  }
}

// Elements per pack of an element-wise kernel: CH_VEC_BYTES of the widest
// operand, except 1 (no packs) for f8e4m3 results. Every f8e4m3 result is
// rounded by a long emulated sequence, which packs and their unrolling
// would copy dozens of times into each kernel, multiplying compile time;
// f8e4m3 is a storage format whose arithmetic is rare, so its kernels are
// kept small rather than wide.
template <typename Out, typename... Ins>
struct PackWidth {
  static const int value = CH_VEC_BYTES / MaxSize<Out, Ins...>::value;
};

template <typename... Ins>
struct PackWidth<ch_f8e4m3, Ins...> {
  static const int value = 1;
};

// Whether element-wise function F is costly (`static const bool costly =
// true`: libm calls and the like). Contiguous loops of a costly function
// take one pack per step: its arithmetic hides memory latency better than
// more loads in flight would, and every unrolled copy of a libm call
// multiplies compile time and code size.
template <typename F, typename = void>
struct IsCostly {
  static const bool value = false;
};

template <typename F>
struct IsCostly<F, decltype((void)F::costly)> {
  static const bool value = F::costly;
};

// out[i] = f(in0[i], in1[i], ...) for every element of operands that are all
// contiguous (info.rank == 0): 16-byte packs when every pointer is aligned,
// else one element at a time. The kernels of ops with one input (unary ops,
// casts) take only this path, and the host copies a strided input to a
// contiguous one first: the strided path is more than half of an
// element-wise kernel's code and compile time.
template <typename Out, typename F, typename... Ins>
__device__ __forceinline__ void map_contiguous(const ElemInfo& info, Out* out, const F& f, const Ins&... ins) {
  const int V = PackWidth<Out, typename Ins::type...>::value;
  typedef Pack<Out, V> OutPack;
  OutPack* outv = reinterpret_cast<OutPack*>(out);
  const ch_u64 n = info.numel;
  ch_u64 done = 0;
  if (V > 1 && all_aligned<V>(out, ins...)) {
    // unrolled_loop written out: f can be large (8 or 16 calls of a libm
    // function per pack), and a lambda around it may not be inlined. Packs
    // of 8 or more elements take half the unroll (the same bytes in flight
    // per element, half the code), costly functions none.
    const int U = IsCostly<F>::value ? 1 : V <= 4 ? CH_UNROLL : CH_UNROLL / 2;
    const ch_u64 nv = n / V;
    const ch_u64 block = blockDim.x;
    const ch_u64 step = (ch_u64)gridDim.x * block * U;
    for (ch_u64 base = (ch_u64)blockIdx.x * block * U + threadIdx.x; base < nv; base += step) {
      if (base + (U - 1) * block < nv) {
        OutPack r[U];
#pragma unroll
        for (int u = 0; u < U; ++u) r[u] = apply_pack<V, Out>(f, ins.template pack<V>(base + u * block)...);
#pragma unroll
        for (int u = 0; u < U; ++u) outv[base + u * block] = r[u];
      } else {
        for (ch_u64 j = base; j < nv; j += block) outv[j] = apply_pack<V, Out>(f, ins.template pack<V>(j)...);
      }
    }
    done = nv * V;
  }
  for (ch_u64 i = done + global_thread(); i < n; i += global_threads()) out[i] = f(ins.p[i]...);
}

// out[i] = f(in0[i], in1[i], ...) for every element of operands with any
// strides (broadcasts included). Three paths:
// - every operand contiguous: map_contiguous;
// - strided with `inner_vec`: packs along the innermost dimension (one index
//   computation per pack; broadcast operands load one element per pack);
// - otherwise one element at a time, offsets from the merged dims.
template <typename Out, typename F, typename... Ins>
__device__ __forceinline__ void map_elems(const ElemInfo& info, Out* out, const F& f, const Ins&... ins) {
  if (info.rank == 0) {
    map_contiguous(info, out, f, ins...);
    return;
  }
  const int V = PackWidth<Out, typename Ins::type...>::value;
  typedef Pack<Out, V> OutPack;
  OutPack* outv = reinterpret_cast<OutPack*>(out);
  const ch_u64 n = info.numel;
  // Strided: one index decomposition per pack (inner_vec) or per element,
  // in one loop so that the decomposition is compiled once.
  const bool packs = V > 1 && info.inner_vec && all_aligned<V>(out, ins...);
  const ch_u64 items = packs ? n / V : n;
  for (ch_u64 j = global_thread(); j < items; j += global_threads()) {
    ch_u64 off[CH_MAX_OPERANDS];
    strided_offsets<sizeof...(Ins)>(info, packs ? j * V : j, off);
    if (packs) {
      outv[j] = apply_pack<V, Out>(f, ins.template inner_pack<V>(info, off)...);
    } else {
      out[j] = f(ins.at(off)...);
    }
  }
}

// ---------------------------------------------------------------------------
// Moving plain-data values between the lanes of a wave (converged code only:
// every lane of the wave calls these), as whole 32-bit words.

// `s` moved word by word with `move(word)` (a __shfl or __shfl_xor); bytes
// past a value narrower than a word are defined (zero) before they move.
template <typename S, typename Move>
__device__ __forceinline__ S shfl_words(const S& s, const Move& move) {
  const int words = (int)((sizeof(S) + sizeof(int) - 1) / sizeof(int));
  union {
    S s;
    int w[(sizeof(S) + sizeof(int) - 1) / sizeof(int)];
  } in, out;
#pragma unroll
  for (int k = 0; k < words; ++k) in.w[k] = 0;
  in.s = s;
#pragma unroll
  for (int k = 0; k < words; ++k) out.w[k] = move(in.w[k]);
  return out.s;
}

// `s` of lane (this lane ^ lane_mask).
template <typename S>
__device__ __forceinline__ S shfl_xor_state(const S& s, int lane_mask) {
  return shfl_words(s, [&](int w) { return __shfl_xor(w, lane_mask, CANDLE_HIP_WAVE); });
}

// `s` of lane `lane`.
template <typename S>
__device__ __forceinline__ S shfl_from(const S& s, int lane) {
  return shfl_words(s, [&](int w) { return __shfl(w, lane, CANDLE_HIP_WAVE); });
}

// ---------------------------------------------------------------------------
// Wave and block reductions over plain-data states.
// R provides: typedef State; static State identity(); static State combine(State, State).
// combine must be associative and commutative.

// Every lane of the wave must call this; each lane gets the reduction of the wave.
template <typename R>
__device__ __forceinline__ typename R::State wave_reduce(typename R::State s) {
#pragma unroll
  for (int m = CANDLE_HIP_WAVE / 2; m > 0; m /= 2) s = R::combine(s, shfl_xor_state(s, m));
  return s;
}

// Every thread of the block must call this; blockDim.x is a multiple of the
// wave size and at most CH_REDUCE_MAX_BLOCK. The result is valid in thread 0.
// `scratch` is shared memory of CH_MAX_WAVES states; calls may be repeated
// (the leading barrier protects the scratch of the previous call).
template <typename R>
__device__ __forceinline__ typename R::State block_reduce(typename R::State s, typename R::State* scratch) {
  s = wave_reduce<R>(s);
  const int waves = (int)(blockDim.x / CANDLE_HIP_WAVE);
  if (waves == 1) return s;
  const int lane = (int)(threadIdx.x % CANDLE_HIP_WAVE);
  const int wave = (int)(threadIdx.x / CANDLE_HIP_WAVE);
  __syncthreads();
  if (lane == 0) scratch[wave] = s;
  __syncthreads();
  s = (int)threadIdx.x < waves ? scratch[threadIdx.x] : R::identity();
  return wave_reduce<R>(s);
}

// ---------------------------------------------------------------------------
// Instantiation helpers: M(NAME, OP, dtype) for each dtype of a group. Kernel
// names are NAME##_##dtype, e.g. uexp_f32; a family of two dtypes passes its
// first one as OP, so the dtype of the helper is always the last suffix.
//
// A program compiled with -DCH_ONLY_DTYPES=<mask> (bit CH_DTYPE_<dtype> set
// for each dtype it holds, e.g. `(1<<CH_DTYPE_f16)|(1<<CH_DTYPE_bf16)`)
// defines only the helpers' kernels whose last suffix is one of those
// dtypes: candle-hip compiles its largest sources once per group of dtypes
// that way, so that the first use of an op compiles a fraction of the
// source. Without the define, every kernel.

#define CH_DTYPE_u8 1
#define CH_DTYPE_u32 2
#define CH_DTYPE_i16 3
#define CH_DTYPE_i32 4
#define CH_DTYPE_i64 5
#define CH_DTYPE_f16 6
#define CH_DTYPE_bf16 7
#define CH_DTYPE_f32 8
#define CH_DTYPE_f64 9
#define CH_DTYPE_f8e4m3 10

#ifdef CH_ONLY_DTYPES
#if ((CH_ONLY_DTYPES) & ~0x7fe) != 0 || (CH_ONLY_DTYPES) == 0
#error "CH_ONLY_DTYPES must be a non-empty mask of (1<<CH_DTYPE_<dtype>) bits"
#endif
#define CH_HAS_DTYPE(d) (((CH_ONLY_DTYPES) >> (d)) & 1)
#else
#define CH_HAS_DTYPE(d) 1
#endif

#if CH_HAS_DTYPE(CH_DTYPE_u8)
#define CH_IF_u8(...) __VA_ARGS__
#else
#define CH_IF_u8(...)
#endif
#if CH_HAS_DTYPE(CH_DTYPE_u32)
#define CH_IF_u32(...) __VA_ARGS__
#else
#define CH_IF_u32(...)
#endif
#if CH_HAS_DTYPE(CH_DTYPE_i16)
#define CH_IF_i16(...) __VA_ARGS__
#else
#define CH_IF_i16(...)
#endif
#if CH_HAS_DTYPE(CH_DTYPE_i32)
#define CH_IF_i32(...) __VA_ARGS__
#else
#define CH_IF_i32(...)
#endif
#if CH_HAS_DTYPE(CH_DTYPE_i64)
#define CH_IF_i64(...) __VA_ARGS__
#else
#define CH_IF_i64(...)
#endif
#if CH_HAS_DTYPE(CH_DTYPE_f16)
#define CH_IF_f16(...) __VA_ARGS__
#else
#define CH_IF_f16(...)
#endif
#if CH_HAS_DTYPE(CH_DTYPE_bf16)
#define CH_IF_bf16(...) __VA_ARGS__
#else
#define CH_IF_bf16(...)
#endif
#if CH_HAS_DTYPE(CH_DTYPE_f32)
#define CH_IF_f32(...) __VA_ARGS__
#else
#define CH_IF_f32(...)
#endif
#if CH_HAS_DTYPE(CH_DTYPE_f64)
#define CH_IF_f64(...) __VA_ARGS__
#else
#define CH_IF_f64(...)
#endif
#if CH_HAS_DTYPE(CH_DTYPE_f8e4m3)
#define CH_IF_f8e4m3(...) __VA_ARGS__
#else
#define CH_IF_f8e4m3(...)
#endif

// A source may also group its families into numbered parts, each
// instantiated inside `#if CH_PART(n)`: a program compiled with
// -DCH_ONLY_PART=<n> defines only part n, which candle-hip compiles (per
// dtype) as a unit of its own; without the define, every part.
#ifndef CH_ONLY_PART
#define CH_ONLY_PART 0
#endif
#define CH_PART(n) (CH_ONLY_PART == 0 || CH_ONLY_PART == (n))

// M(NAME, OP, dtype) where the program defines kernels of `dtype`.
#define CH_EACH(M, NAME, OP, TY) CH_IF_##TY(M(NAME, OP, TY))

#define CH_FLOATS(M, NAME, OP) \
  CH_EACH(M, NAME, OP, f16) CH_EACH(M, NAME, OP, bf16) CH_EACH(M, NAME, OP, f32) CH_EACH(M, NAME, OP, f64)
#define CH_INTS(M, NAME, OP) CH_EACH(M, NAME, OP, u8) CH_EACH(M, NAME, OP, u32) CH_EACH(M, NAME, OP, i64)
// The seven dtypes with a kernel of every family that takes all dtypes;
// data movement (copies, fills, selects) serves every other dtype through
// the one of its element width.
#define CH_ALL(M, NAME, OP) CH_FLOATS(M, NAME, OP) CH_INTS(M, NAME, OP)
// The other dtypes with arithmetic, instantiated where the computation
// depends on the type.
#define CH_NARROW_INTS(M, NAME, OP) CH_EACH(M, NAME, OP, i16) CH_EACH(M, NAME, OP, i32)
#define CH_F8(M, NAME, OP) CH_EACH(M, NAME, OP, f8e4m3)
// Every dtype with arithmetic but i16 and i32: the families whose i16 and
// i32 results the host computes as i64 (which wrap back to theirs;
// catalogue.rs `Family::computed_as`) while f8e4m3 keeps kernels of its own.
#define CH_CORE_AND_F8(M, NAME, OP) CH_ALL(M, NAME, OP) CH_F8(M, NAME, OP)
// One dtype per element width (1, 2, 4, 8 bytes): the kernels that move
// elements without looking at them (copies, fills, selects), which the host
// runs for every dtype of that width.
#define CH_CARRIERS(M, NAME, OP) \
  CH_EACH(M, NAME, OP, u8) CH_EACH(M, NAME, OP, bf16) CH_EACH(M, NAME, OP, u32) CH_EACH(M, NAME, OP, i64)
// Every float dtype.
#define CH_ANY_FLOAT(M, NAME, OP) CH_FLOATS(M, NAME, OP) CH_F8(M, NAME, OP)
// Every dtype with arithmetic.
#define CH_NUMERIC(M, NAME, OP) CH_ALL(M, NAME, OP) CH_NARROW_INTS(M, NAME, OP) CH_F8(M, NAME, OP)

// ---------------------------------------------------------------------------
// Row kernels (softmax, rms_norm, layer_norm): a block per row.

// Row kernels keep up to RowCache<T>::VALUES elements of a row per thread
// in registers (as accumulators), so that rows of up to VALUES * blockDim.x
// elements are read from memory once: as many as CH_ROW_CACHE_BYTES of
// accumulators hold (16, 8 for f64), few enough registers for 1024-thread
// blocks on every target. A kernel may cache more (softmax does).
#define CH_ROW_CACHE_BYTES 64

// Packs an uncached row visit loads ahead of their use.
#define CH_ROW_LOADS 4

template <typename T>
struct RowCache {
  static const int VALUES = CH_ROW_CACHE_BYTES / (int)sizeof(typename Num<T>::acc);
};

__device__ __forceinline__ float ch_exp(float x) { return expf(x); }
__device__ __forceinline__ double ch_exp(double x) { return exp(x); }
// The hardware exponential for f32 (relative error within a few f32 units
// times |x|, for softmax's moderate arguments x <= 0), exp for f64.
__device__ __forceinline__ float ch_exp_fast(float x) { return __expf(x); }
__device__ __forceinline__ double ch_exp_fast(double x) { return exp(x); }
__device__ __forceinline__ float ch_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double ch_sqrt(double x) { return sqrt(x); }

template <typename A>
__device__ __forceinline__ A ch_neg_inf();
template <>
__device__ __forceinline__ float ch_neg_inf<float>() { return -__builtin_huge_valf(); }
template <>
__device__ __forceinline__ double ch_neg_inf<double>() { return -__builtin_huge_val(); }

// block_reduce with the result handed to every thread of the block (same
// calling rules as block_reduce).
template <typename R>
__device__ __forceinline__ typename R::State block_allreduce(typename R::State s, typename R::State* scratch) {
  s = block_reduce<R>(s, scratch);
  // One wave: the butterfly already left the result in every lane.
  if (blockDim.x <= CANDLE_HIP_WAVE) return s;
  // block_reduce's last reads of scratch are scratch[tid] for tid < waves:
  // thread 0 may overwrite scratch[0] (which only it read) at once.
  if (threadIdx.x == 0) scratch[0] = s;
  __syncthreads();
  return scratch[0];
}

// Sum of accumulator values.
template <typename A>
struct AccSum {
  struct State {
    A v;
  };
  __device__ __forceinline__ static State identity() {
    State s;
    s.v = (A)0;
    return s;
  }
  __device__ __forceinline__ static State combine(State a, State b) {
    a.v += b.v;
    return a;
  }
};

// Shared memory for block_allreduce of any state of up to two f64 words.
#define CH_ROW_SCRATCH_WORDS (2 * CH_MAX_WAVES)

// One row of `np` packs of V elements, as this thread sees it: packs
// threadIdx.x, threadIdx.x + blockDim.x, ... Cached rows keep their packs in
// registers (VALUES elements per thread, as accumulators) after
// construction; uncached rows read memory on every visit.
template <typename T, int V, bool CACHED, int VALUES = RowCache<T>::VALUES>
struct RowView {
  typedef typename Num<T>::acc A;
  static const int PACKS = CACHED ? VALUES / V : 1;
  const T* src;
  ch_u32 np;
  A cache[PACKS][V];

  __device__ __forceinline__ static void load(const T* row, ch_u32 p, A (&v)[V]) {
    const Pack<T, V> pk = reinterpret_cast<const Pack<T, V>*>(row)[p];
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = Num<T>::to_acc(pk.v[k]);
  }

  __device__ __forceinline__ static void store(T* row, ch_u32 p, const A (&v)[V]) {
    Pack<T, V> pk;
#pragma unroll
    for (int k = 0; k < V; ++k) pk.v[k] = Num<T>::from_acc(v[k]);
    reinterpret_cast<Pack<T, V>*>(row)[p] = pk;
  }

  __device__ __forceinline__ RowView(const T* row, ch_u32 packs) : src(row), np(packs) {
    if (CACHED) {
#pragma unroll
      for (int i = 0; i < PACKS; ++i) {
        const ch_u32 p = threadIdx.x + (ch_u32)i * blockDim.x;
        if (p < np) load(src, p, cache[i]);
      }
    }
  }

  // f(values, pack index) for each pack of this thread.
  template <typename F>
  __device__ __forceinline__ void visit(F f) {
    if (CACHED) {
#pragma unroll
      for (int i = 0; i < PACKS; ++i) {
        const ch_u32 p = threadIdx.x + (ch_u32)i * blockDim.x;
        if (p < np) f(cache[i], p);
      }
    } else {
      // Several packs loaded before any is used, so that more than one
      // load per thread is in flight (a lone dependent load per iteration
      // leaves a memory-bound row latency-bound).
      const ch_u32 step = blockDim.x;
      ch_u32 p = threadIdx.x;
      for (; p + (CH_ROW_LOADS - 1) * step < np; p += CH_ROW_LOADS * step) {
        A v[CH_ROW_LOADS][V];
#pragma unroll
        for (int j = 0; j < CH_ROW_LOADS; ++j) load(src, p + (ch_u32)j * step, v[j]);
#pragma unroll
        for (int j = 0; j < CH_ROW_LOADS; ++j) f(v[j], p + (ch_u32)j * step);
      }
      for (; p < np; p += step) {
        A v[V];
        load(src, p, v);
        f(v, p);
      }
    }
  }
};

// Whether a row of `cols` elements can be moved in packs of V with every
// pointer aligned to a pack.
template <int V, typename T>
__device__ __forceinline__ bool rows_vectorizable(ch_u32 cols, const T* a, const T* b, const T* c, const T* d) {
  return cols % V == 0 && is_aligned<V>(a) && is_aligned<V>(b) && is_aligned<V>(c) && is_aligned<V>(d);
}

// Runs body.template row<V, CACHED>(blockIdx.x) (one block per row, the grid
// covers every row), choosing 16-byte packs when `vec` and keeping the row in
// registers when it fits VALUES elements per thread (the body's cached
// RowView must hold as many).
template <typename T, int VALUES = RowCache<T>::VALUES, typename Body>
__device__ __forceinline__ void row_of_block(ch_u32 cols, bool vec, Body& body) {
  const int VMAX = CH_VEC_BYTES / (int)sizeof(T);
  const ch_u32 cap = (ch_u32)VALUES * blockDim.x;
  const ch_u64 r = blockIdx.x;
  if (vec) {
    if (cols <= cap) body.template row<VMAX, true>(r);
    else body.template row<VMAX, false>(r);
  } else {
    if (cols <= cap) body.template row<1, true>(r);
    else body.template row<1, false>(r);
  }
}

// ---------------------------------------------------------------------------
// A decoding step's state: one layer's key and value caches and the step's
// rotated query, [keys (kv_heads, max_len, d) | values (same) | query
// (heads, d)] (rope.hip's rope_append_*, and the products that write the
// step themselves: gemv.hip's gemv_pairs_*, quantized.hip's qmatvec_*).
// Mirrored by `StepCache` in candle-hip/src/fused/rope.rs.
struct StepState {
  ch_u32 heads, kv_heads, d, max_len;
  ch_u32 p;  // the step's position, p < max_len
};

// Stores the step's pair (x1, x2) at elements i1 and i2 of its head `head`
// (query heads, then key heads, then value heads): a query or key pair
// rotated by frequency j of row p of the (rows, d / 2) tables, a value pair
// as it is, a key or value pair at position p of its cache. Computed in the
// dtype's accumulator (f32, f64 for f64) and rounded once.
template <typename T>
__device__ __forceinline__ void step_store_pair(T* state, const StepState& st, const T* cos, const T* sin,
                                                ch_u64 head, ch_u32 j, ch_u32 i1, ch_u32 i2, T x1, T x2) {
  typedef typename Num<T>::acc A;
  const ch_u64 cache = (ch_u64)st.kv_heads * st.max_len * st.d;
  if (head >= (ch_u64)st.heads + st.kv_heads) {
    T* y = state + cache + ((head - st.heads - st.kv_heads) * st.max_len + st.p) * st.d;
    y[i1] = x1;
    y[i2] = x2;
    return;
  }
  T* y = head < st.heads ? state + 2 * cache + head * st.d : state + ((head - st.heads) * st.max_len + st.p) * st.d;
  const A a1 = Num<T>::to_acc(x1), a2 = Num<T>::to_acc(x2);
  const ch_u64 t = (ch_u64)st.p * (st.d / 2) + j;
  const A c = Num<T>::to_acc(cos[t]), sn = Num<T>::to_acc(sin[t]);
  y[i1] = Num<T>::from_acc(a1 * c - a2 * sn);
  y[i2] = Num<T>::from_acc(a1 * sn + a2 * c);
}

// ---------------------------------------------------------------------------
// Image kernels (pooling, upsampling, im2col): a strided 4-D (N, C, H, W) source.
// Mirrored by `Nchw` in candle-hip/src/kernel/nchw.rs.
struct Nchw {
  ch_u64 dims[4];
  ch_u64 strides[4];
};

__device__ __forceinline__ ch_u64 nchw_offset(const Nchw& s, ch_u64 n, ch_u64 c, ch_u64 y, ch_u64 x) {
  return n * s.strides[0] + c * s.strides[1] + y * s.strides[2] + x * s.strides[3];
}

// Splits the index of a contiguous (N, C, H, W) output element.
__device__ __forceinline__ void nchw_split(ch_u64 o, ch_u64 c_dim, ch_u64 h_dim, ch_u64 w_dim, ch_u64& n, ch_u64& c,
                                           ch_u64& y, ch_u64& x) {
  ch_u64 rest = divmod(o, w_dim, x);
  rest = divmod(rest, h_dim, y);
  n = divmod(rest, c_dim, c);
}

// ---------------------------------------------------------------------------
// Rounding activations to 8 bits as candle's CPU from_float of the vec-dot
// types does (q8_0, q8_1, q8k): quantized.hip's quantize_act and the
// attention merge that feeds a quantized product (attention.hip).

// The f32 value of the f16 nearest to v (ties to even).
__device__ __forceinline__ float q_round_half(float v) { return Num<ch_f16>::to_f32(Num<ch_f16>::from_f32(v)); }

// Each thread rounds CH_QACT_PER_LANE consecutive values, so a block of 32
// (q8_0, q8_1) is rounded by 4 adjacent lanes and a block of 256 (q8k) by
// 32, which combine their maxima and sums with shuffles that stay inside
// the group: the lanes of a group must be converged; lanes past the end
// compute on the first values and store nothing.
#define CH_QACT_PER_LANE 8

// `v` combined over the G adjacent lanes of this lane's aligned group.
template <int G, typename S, typename F>
__device__ __forceinline__ S q_group_reduce(S v, const F& combine) {
#pragma unroll
  for (int m = G / 2; m > 0; m /= 2) v = combine(v, shfl_xor_state(v, m));
  return v;
}

// The signed bytes `q` of this thread, stored at its 8-byte-aligned place.
__device__ __forceinline__ void q_act_store(signed char* __restrict__ q, ch_u64 t, const int (&v)[CH_QACT_PER_LANE]) {
  Pack<ch_u32, 2> packed;
  packed.v[0] = packed.v[1] = 0;
#pragma unroll
  for (int e = 0; e < CH_QACT_PER_LANE; ++e) packed.v[e / 4] |= ((ch_u32)v[e] & 0xffu) << (8 * (e % 4));
  *reinterpret_cast<Pack<ch_u32, 2>*>(q + t * CH_QACT_PER_LANE) = packed;
}

// Candle's BlockQ8_0 / BlockQ8_1 from_float of thread t's values v (t a real
// item where `live`; the lanes of a group call together): d = amax / 127
// (stored as f16), q = round(x / d) (through 1 / d, half away from zero);
// q8_1 adds s = f16(sum q) * d, rounded to f16.
template <bool SUM>
__device__ __forceinline__ void q_round_32(signed char* __restrict__ q, float* __restrict__ d,
                                           float* __restrict__ s, ch_u64 t, bool live,
                                           const float (&v)[CH_QACT_PER_LANE]) {
  const int G = 32 / CH_QACT_PER_LANE;
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < CH_QACT_PER_LANE; ++e) amax = fmaxf(amax, fabsf(v[e]));
  amax = q_group_reduce<G>(amax, [](float a, float b) { return fmaxf(a, b); });
  const float scale = amax / 127.0f;
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  int iv[CH_QACT_PER_LANE], sum = 0;
#pragma unroll
  for (int e = 0; e < CH_QACT_PER_LANE; ++e) {
    iv[e] = (int)roundf(v[e] * inv);
    sum += iv[e];
  }
  sum = q_group_reduce<G>(sum, [](int a, int b) { return a + b; });
  if (live) {
    q_act_store(q, t, iv);
    if (t % G == 0) {
      const float stored = q_round_half(scale);
      d[t / G] = stored;
      if (SUM) s[t / G] = q_round_half(q_round_half((float)sum) * stored);
    }
  }
}

// The largest magnitude of a q8k block and the value that has it first.
struct QAbsMax {
  float amax, max;
  ch_u32 index;
};

// Candle's BlockQ8K from_float: per 256 values, the first value of largest
// magnitude `max` gives iscale = -127 / max, q = round(iscale * x) clamped to
// [-128, 127], d = 1 / iscale (f32, repeated for each of the 8 sub-blocks);
// called as q_round_32.
__device__ __forceinline__ void q_round_256(signed char* __restrict__ q, float* __restrict__ d, ch_u64 t, bool live,
                                            const float (&v)[CH_QACT_PER_LANE]) {
  const int G = 256 / CH_QACT_PER_LANE;
  QAbsMax m = {0.0f, 0.0f, 0u};
#pragma unroll
  for (int e = 0; e < CH_QACT_PER_LANE; ++e) {
    if (m.amax < fabsf(v[e])) {
      m.amax = fabsf(v[e]);
      m.max = v[e];
      m.index = (ch_u32)e;
    }
  }
  m.index += (ch_u32)(t % G) * CH_QACT_PER_LANE;
  // The larger magnitude; of equal ones, the earlier value (NaN never
  // becomes the maximum, as in the CPU's comparison).
  m = q_group_reduce<G>(m, [](QAbsMax a, QAbsMax b) {
    return (b.amax > a.amax || (b.amax == a.amax && b.index < a.index)) ? b : a;
  });
  const float iscale = m.amax == 0.0f ? 0.0f : -127.0f / m.max;
  int iv[CH_QACT_PER_LANE];
#pragma unroll
  for (int e = 0; e < CH_QACT_PER_LANE; ++e) iv[e] = (int)fminf(fmaxf(roundf(iscale * v[e]), -128.0f), 127.0f);
  if (live) {
    q_act_store(q, t, iv);
    if (t % G < 256 / 32) d[(t / G) * (256 / 32) + t % G] = m.amax == 0.0f ? 0.0f : 1.0f / iscale;
  }
}

// Thread t's values v rounded to activation type ACT (q_round_*).
template <int ACT>
__device__ __forceinline__ void q_round(signed char* q, float* d, float* s, ch_u64 t, bool live,
                                        const float (&v)[CH_QACT_PER_LANE]) {
  if (ACT == 2) {
    q_round_256(q, d, t, live, v);
  } else {
    q_round_32<ACT == 1>(q, d, s, t, live, v);
  }
}

#endif  // CANDLE_HIP_COMMON_H
