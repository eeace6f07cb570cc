// hip-on-cuda replacement for <hip/hip_fp16.h>: HIP's half precision is
// CUDA's. __half, __half2, __half2float, __float2half, the arithmetic
// operators and the h* math functions come from <cuda_fp16.h> under the same
// names (found through the -I the shim passes to NVRTC).
#pragma once

#include <hip/hip_runtime.h>
#include <cuda_fp16.h>

typedef __half half;
typedef __half2 half2;
