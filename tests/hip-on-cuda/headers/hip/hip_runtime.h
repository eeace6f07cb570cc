// hip-on-cuda replacement for <hip/hip_runtime.h>, used when NVRTC compiles
// HIP kernel sources. It maps the HIP device API onto CUDA's: thread and block
// indices, __syncthreads, warpSize and the math functions are CUDA built-ins
// already; this header adds HIP's names where they differ (shuffles without
// masks, 64-bit ballots, HIP_DYNAMIC_SHARED, ...). Every source gets it
// implicitly, as with hipRTC.
#pragma once

#define __HIP_PLATFORM_NVIDIA__ 1
#define __HIP_PLATFORM_NVCC__ 1
#define __HIPCC__ 1
#define __HIPCC_RTC__ 1
#define __HIP_DEVICE_COMPILE__ 1
#define HIP_VERSION_MAJOR 6
#define HIP_VERSION_MINOR 4
#define HIP_VERSION_PATCH 0
#define HIP_VERSION (HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 + HIP_VERSION_PATCH)

// Fixed-width integers with their LP64 Linux definitions (NVRTC has no
// <stdint.h>).
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;

// clang builtins HIP code may use that NVRTC's front end lacks.
#define __builtin_huge_valf() __int_as_float(0x7f800000)
#define __builtin_huge_val() __longlong_as_double(0x7ff0000000000000LL)
#define __builtin_inff() __builtin_huge_valf()
#define __builtin_inf() __builtin_huge_val()

// HIP's launch bounds take (max threads per block, min warps per execution
// unit); CUDA's second argument means something else (min blocks per SM), so
// only the first one is kept.
#define __hip_on_cuda_first_arg(first, ...) first
#undef __launch_bounds__
#define __launch_bounds__(...) \
    __attribute__((launch_bounds(__hip_on_cuda_first_arg(__VA_ARGS__, 0))))

// Dynamic shared memory, as HIP spells it.
#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ type var[];
#define HIP_DYNAMIC_SHARED_ATTRIBUTE

// HIP's (deprecated) index macros.
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

// Warp-level operations. HIP's forms take no mask; they apply to the whole
// (converged) warp, so the full 32-lane mask is used. Ballots are 64-bit in
// HIP (AMD wavefronts have up to 64 lanes); on NVIDIA the upper half is 0.
#define __HIP_ON_CUDA_FULL_MASK 0xffffffffu

template <typename T>
__device__ __forceinline__ T __shfl(T var, int src_lane, int width = warpSize) {
    return __shfl_sync(__HIP_ON_CUDA_FULL_MASK, var, src_lane, width);
}
template <typename T>
__device__ __forceinline__ T __shfl_up(T var, unsigned int delta, int width = warpSize) {
    return __shfl_up_sync(__HIP_ON_CUDA_FULL_MASK, var, delta, width);
}
template <typename T>
__device__ __forceinline__ T __shfl_down(T var, unsigned int delta, int width = warpSize) {
    return __shfl_down_sync(__HIP_ON_CUDA_FULL_MASK, var, delta, width);
}
template <typename T>
__device__ __forceinline__ T __shfl_xor(T var, int lane_mask, int width = warpSize) {
    return __shfl_xor_sync(__HIP_ON_CUDA_FULL_MASK, var, lane_mask, width);
}
// Macros, because CUDA still declares a 32-bit __ballot (and __any/__all).
#define __ballot(predicate) \
    ((unsigned long long)__ballot_sync(__HIP_ON_CUDA_FULL_MASK, (predicate)))
#define __any(predicate) __any_sync(__HIP_ON_CUDA_FULL_MASK, (predicate))
#define __all(predicate) __all_sync(__HIP_ON_CUDA_FULL_MASK, (predicate))
__device__ __forceinline__ unsigned int __lane_id() {
    unsigned int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// HIP atomics whose names CUDA lacks.
template <typename T>
__device__ __forceinline__ T unsafeAtomicAdd(T* address, T value) {
    return atomicAdd(address, value);
}
template <typename T>
__device__ __forceinline__ T safeAtomicAdd(T* address, T value) {
    return atomicAdd(address, value);
}
