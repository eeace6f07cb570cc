// hip-on-cpu replacement for <hip/hip_runtime.h>: the HIP device API for
// kernels that the host C++ compiler builds into a shared object (see
// "hipcpu/device.h" for the execution model). Every source gets it
// implicitly, as with hipRTC on AMD, which also pre-includes __half.
//
// The predefined macros are those of hipRTC compiling for an AMD target, so
// sources take their AMD paths. Builtins that only AMD's compiler has
// (__builtin_amdgcn_*) are not declared: using one is a compile error that
// names it.
#pragma once

#define __HIP_PLATFORM_AMD__ 1
#define __HIP_PLATFORM_HCC__ 1
#define __HIPCC__ 1
#define __HIPCC_RTC__ 1
#define __HIP_DEVICE_COMPILE__ 1
#define __AMDGCN__ 1
#define __AMDGPU__ 1
#define HIP_VERSION_MAJOR 6
#define HIP_VERSION_MINOR 4
#define HIP_VERSION_PATCH 0
#define HIP_VERSION (HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 + HIP_VERSION_PATCH)

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hipcpu/device.h"

// Function and variable qualifiers. A kernel is an ordinary function;
// `__global__` becomes a marker the compile step finds to generate its
// launch entry point (see the shim's hiprtc module). Shared memory is
// per block: a block runs on one CPU thread, so thread-local storage is
// exactly the block's; `extern __shared__` arrays are rewritten by the
// compile step to point at the launch's dynamic shared memory.
#define __global__ __hipcpu_kernel
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __shared__ __hipcpu_shared
#define __constant__ static
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ type var[];
#define HIP_DYNAMIC_SHARED_ATTRIBUTE

#define threadIdx (::hipcpu::self()->idx)
#define blockIdx (::hipcpu::block_idx())
#define blockDim (::hipcpu::block_dim())
#define gridDim (::hipcpu::grid_dim())
#define warpSize (::hipcpu::kWave)

#define hipThreadIdx_x threadIdx.x
#define hipThreadIdx_y threadIdx.y
#define hipThreadIdx_z threadIdx.z
#define hipBlockIdx_x blockIdx.x
#define hipBlockIdx_y blockIdx.y
#define hipBlockIdx_z blockIdx.z
#define hipBlockDim_x blockDim.x
#define hipBlockDim_y blockDim.y
#define hipBlockDim_z blockDim.z
#define hipGridDim_x gridDim.x
#define hipGridDim_y gridDim.y
#define hipGridDim_z gridDim.z

// The call site of a barrier or wave operation, as default arguments.
#define HIPCPU_SITE_ARGS const char *hipcpu_file = __builtin_FILE(), int hipcpu_line = __builtin_LINE()
#define HIPCPU_SITE (::hipcpu::Site{hipcpu_file, hipcpu_line})

// Barriers and fences. A block's threads share one CPU thread, so a fence
// only has to stop the compiler from keeping memory values in registers
// across it; blocks of one launch run on different CPU threads.
inline void __syncthreads(HIPCPU_SITE_ARGS) {
  ::hipcpu::block_barrier(HIPCPU_SITE);
}
inline void __threadfence_block() { std::atomic_signal_fence(std::memory_order_seq_cst); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// Wave-level operations, with the semantics of HIP on AMD hardware: a
// shuffle reads lane `index` of the calling lane's `width`-lane segment
// (ds_bpermute; an inactive source lane reads 0); up/down/xor keep the
// lane's own value when the source falls outside its segment.
namespace hipcpu {
template <typename T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "hip-on-cpu: wave operations move values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
inline T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
template <typename T>
inline T shuffle(WaveOp op, T var, int arg, int width, Site site) {
  return from_bits<T>(wave_exchange(op, to_bits(var), arg, width, site));
}
}  // namespace hipcpu

template <typename T>
inline T __shfl(T var, int src_lane, int width = warpSize, HIPCPU_SITE_ARGS) {
  return ::hipcpu::shuffle(::hipcpu::WaveOp::Shfl, var, src_lane, width, HIPCPU_SITE);
}
template <typename T>
inline T __shfl_up(T var, unsigned int delta, int width = warpSize,
                   HIPCPU_SITE_ARGS) {
  return ::hipcpu::shuffle(::hipcpu::WaveOp::ShflUp, var, (int)delta, width, HIPCPU_SITE);
}
template <typename T>
inline T __shfl_down(T var, unsigned int delta, int width = warpSize,
                     HIPCPU_SITE_ARGS) {
  return ::hipcpu::shuffle(::hipcpu::WaveOp::ShflDown, var, (int)delta, width, HIPCPU_SITE);
}
template <typename T>
inline T __shfl_xor(T var, int lane_mask, int width = warpSize,
                    HIPCPU_SITE_ARGS) {
  return ::hipcpu::shuffle(::hipcpu::WaveOp::ShflXor, var, lane_mask, width, HIPCPU_SITE);
}
inline unsigned long long __ballot(int predicate, HIPCPU_SITE_ARGS) {
  return ::hipcpu::wave_exchange(::hipcpu::WaveOp::Ballot, predicate != 0, 0, warpSize, HIPCPU_SITE);
}
inline int __any(int predicate, HIPCPU_SITE_ARGS) {
  return (int)::hipcpu::wave_exchange(::hipcpu::WaveOp::Any, predicate != 0, 0, warpSize, HIPCPU_SITE);
}
inline int __all(int predicate, HIPCPU_SITE_ARGS) {
  return (int)::hipcpu::wave_exchange(::hipcpu::WaveOp::All, predicate != 0, 0, warpSize, HIPCPU_SITE);
}
inline unsigned int __lane_id() { return ::hipcpu::self()->linear % (unsigned)warpSize; }

// Bit operations.
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(unsigned int x) { return __builtin_ffs((int)x); }
inline int __ffsll(unsigned long long x) { return __builtin_ffsll((long long)x); }
inline int __clz(unsigned int x) { return x == 0 ? 32 : __builtin_clz(x); }
inline int __clzll(unsigned long long x) { return x == 0 ? 64 : __builtin_clzll(x); }
inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}

// Reinterpretations and the device math names HIP adds to <cmath>'s.
inline int __float_as_int(float x) { return ::hipcpu::from_bits<int>(::hipcpu::to_bits(x)); }
inline unsigned int __float_as_uint(float x) { return ::hipcpu::from_bits<unsigned int>(::hipcpu::to_bits(x)); }
inline float __int_as_float(int x) { return ::hipcpu::from_bits<float>(::hipcpu::to_bits(x)); }
inline float __uint_as_float(unsigned int x) { return ::hipcpu::from_bits<float>(::hipcpu::to_bits(x)); }
inline long long __double_as_longlong(double x) { return ::hipcpu::from_bits<long long>(::hipcpu::to_bits(x)); }
inline double __longlong_as_double(long long x) { return ::hipcpu::from_bits<double>(::hipcpu::to_bits(x)); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
// sin(pi x) and cos(pi x), the argument reduced exactly (x mod 2) before
// the multiplication by pi, as the device functions do.
namespace hipcpu {
template <typename T>
inline void sincospi(T x, T* s, T* c) {
  const T r = std::fmod(x, (T)2);
  const T pi = (T)3.141592653589793238462643383279502884L;
  *s = std::sin(pi * r);
  *c = std::cos(pi * r);
}
}  // namespace hipcpu
inline void sincospif(float x, float* s, float* c) { ::hipcpu::sincospi(x, s, c); }
inline void sincospi(double x, double* s, double* c) { ::hipcpu::sincospi(x, s, c); }
inline float sinpif(float x) { float s, c; sincospif(x, &s, &c); return s; }
inline float cospif(float x) { float s, c; sincospif(x, &s, &c); return c; }
inline double sinpi(double x) { double s, c; sincospi(x, &s, &c); return s; }
inline double cospi(double x) { double s, c; sincospi(x, &s, &c); return c; }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
template <typename T, typename = typename std::enable_if<std::is_arithmetic<T>::value>::type>
inline T min(T a, T b) { return b < a ? b : a; }
template <typename T, typename = typename std::enable_if<std::is_arithmetic<T>::value>::type>
inline T max(T a, T b) { return a < b ? b : a; }

// Atomics (blocks of one launch run concurrently on different CPU threads),
// as compare-and-swap loops on the value's bits so any 4- or 8-byte type works.
namespace hipcpu {
template <typename T, typename F>
inline T atomic_update(T* address, F next) {
  T old;
  __atomic_load(address, &old, __ATOMIC_SEQ_CST);
  T desired = next(old);
  while (!__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST)) {
    desired = next(old);
  }
  return old;
}
}  // namespace hipcpu
template <typename T>
inline T atomicAdd(T* address, T value) {
  return ::hipcpu::atomic_update(address, [&](T old) { return (T)(old + value); });
}
template <typename T>
inline T atomicMax(T* address, T value) {
  return ::hipcpu::atomic_update(address, [&](T old) { return old < value ? value : old; });
}
template <typename T>
inline T atomicMin(T* address, T value) {
  return ::hipcpu::atomic_update(address, [&](T old) { return value < old ? value : old; });
}
template <typename T>
inline T atomicExch(T* address, T value) {
  return ::hipcpu::atomic_update(address, [&](T) { return value; });
}
template <typename T>
inline T atomicCAS(T* address, T compare, T value) {
  __atomic_compare_exchange(address, &compare, &value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}

#include <hip/hip_fp16.h>
#include "hipcpu/amdgcn.h"
