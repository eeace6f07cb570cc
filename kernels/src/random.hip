// Random number generation on the device: rand_uniform_<dtype> and
// rand_normal_<dtype> for f16, bf16, f32, f64, f8e4m3.
//
// A counter-based generator (Philox-4x32 with 10 rounds, Salmon et al., SC'11)
// keyed by the 64-bit seed: block b of a call uses counter (offset + b), so
// successive calls continue the stream when the host advances `offset` by the
// number of blocks used (RandPerBlock below; the host mirrors both counts).
//
// Signature: (u64 n, u64 seed, u64 offset, double a, double b, T* out) with
// (a, b) = (low, high) for uniform values in [low, high) and (mean, std) for
// normal ones (Box-Muller).

#include "common.h"

// Values produced per Philox block: four from 24-bit uniforms, two from 53-bit ones.
#define CH_RAND_PER_BLOCK 4
#define CH_RAND_PER_BLOCK_F64 2
template <typename T>
struct RandPerBlock {
  static const int value = sizeof(T) == sizeof(double) ? CH_RAND_PER_BLOCK_F64 : CH_RAND_PER_BLOCK;
};

__device__ __forceinline__ void philox4x32_10(ch_u32 (&c)[4], ch_u32 k0, ch_u32 k1) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const ch_u64 p0 = (ch_u64)0xD2511F53u * c[0];
    const ch_u64 p1 = (ch_u64)0xCD9E8D57u * c[2];
    const ch_u32 next0 = (ch_u32)(p1 >> 32) ^ c[1] ^ k0;
    const ch_u32 next2 = (ch_u32)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = next0;
    c[1] = (ch_u32)p1;
    c[2] = next2;
    c[3] = (ch_u32)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// Uniform in [0, 1) with 24 random bits.
__device__ __forceinline__ float unit_f32(ch_u32 x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

// Uniform in [0, 1) with 53 random bits.
__device__ __forceinline__ double unit_f64(ch_u32 a, ch_u32 b) {
  return ((double)(a >> 5) * 67108864.0 + (double)(b >> 6)) * (1.0 / 9007199254740992.0);
}

// Rounding to the dtype may reach `high`; such values wrap to `low`.
template <typename T, typename A>
__device__ __forceinline__ T uniform_value(A low, A high, A u) {
  const T t = cast_to<T>(low + u * (high - low));
  return Num<T>::to_f64(t) < (double)high ? t : cast_to<T>(low);
}

template <typename T, bool IsF64 = sizeof(T) == sizeof(double)>
struct RandGen;

template <typename T>
struct RandGen<T, false> {
  __device__ __forceinline__ static void uniform(const ch_u32 (&w)[4], double low, double high, T (&out)[4]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) out[k] = uniform_value<T, float>((float)low, (float)high, unit_f32(w[k]));
  }
  __device__ __forceinline__ static void normal(const ch_u32 (&w)[4], double mean, double std, T (&out)[4]) {
#pragma unroll
    for (int k = 0; k < 4; k += 2) {
      // u1 in (0, 1] keeps the logarithm finite.
      const float u1 = (float)((w[k] >> 8) + 1) * (1.0f / 16777216.0f);
      const float r = sqrtf(-2.0f * logf(u1));
      // The angle 2 pi u as sincospi(2u): exact argument, no range reduction.
      float s, c;
      sincospif(2.0f * unit_f32(w[k + 1]), &s, &c);
      out[k] = cast_to<T>((float)mean + (float)std * r * c);
      out[k + 1] = cast_to<T>((float)mean + (float)std * r * s);
    }
  }
};

template <typename T>
struct RandGen<T, true> {
  __device__ __forceinline__ static void uniform(const ch_u32 (&w)[4], double low, double high, T (&out)[2]) {
    out[0] = uniform_value<T, double>(low, high, unit_f64(w[0], w[1]));
    out[1] = uniform_value<T, double>(low, high, unit_f64(w[2], w[3]));
  }
  __device__ __forceinline__ static void normal(const ch_u32 (&w)[4], double mean, double std, T (&out)[2]) {
    const double u1 = 1.0 - unit_f64(w[0], w[1]);
    const double r = sqrt(-2.0 * log(u1));
    double s, c;
    sincospi(2.0 * unit_f64(w[2], w[3]), &s, &c);
    out[0] = (T)(mean + std * r * c);
    out[1] = (T)(mean + std * r * s);
  }
};

// Philox block `blk` (counter offset + blk) turned into its values; whole
// blocks are stored with one wide access when `out` is aligned to them.
template <typename T, bool Normal>
__device__ __forceinline__ void rand_body(ch_u64 n, ch_u64 seed, ch_u64 offset, double a, double b, T* out) {
  const int P = RandPerBlock<T>::value;
  typedef Pack<T, P> Vals;
  const bool packed = is_aligned<P>(out);
  unrolled_loop<2, Vals>(
      (n + P - 1) / P,
      [&](ch_u64 blk) {
        const ch_u64 counter = offset + blk;
        ch_u32 w[4] = {(ch_u32)counter, (ch_u32)(counter >> 32), 0u, 0u};
        philox4x32_10(w, (ch_u32)seed, (ch_u32)(seed >> 32));
        Vals vals;
        if (Normal) {
          RandGen<T>::normal(w, a, b, vals.v);
        } else {
          RandGen<T>::uniform(w, a, b, vals.v);
        }
        return vals;
      },
      [&](ch_u64 blk, const Vals& vals) {
        if (packed && (blk + 1) * P <= n) {
          reinterpret_cast<Vals*>(out)[blk] = vals;
          return;
        }
#pragma unroll
        for (int k = 0; k < P; ++k) {
          const ch_u64 i = blk * P + k;
          if (i < n) out[i] = vals.v[k];
        }
      });
}

#define CH_RAND_KERNEL(NAME, NORMAL, TY)                                                            \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                       \
      NAME##_##TY(ch_u64 n, ch_u64 seed, ch_u64 offset, double a, double b, ch_##TY* out) {          \
    rand_body<ch_##TY, NORMAL>(n, seed, offset, a, b, out);                                         \
  }

CH_ANY_FLOAT(CH_RAND_KERNEL, rand_uniform, false)
CH_ANY_FLOAT(CH_RAND_KERNEL, rand_normal, true)
