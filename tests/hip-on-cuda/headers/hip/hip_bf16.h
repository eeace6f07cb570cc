// hip-on-cuda replacement for <hip/hip_bf16.h>: __hip_bfloat16 is CUDA's
// __nv_bfloat16, with the same conversion functions (__bfloat162float,
// __float2bfloat16, ...) and arithmetic operators from <cuda_bf16.h>.
#pragma once

#include <hip/hip_runtime.h>
#include <cuda_bf16.h>

typedef __nv_bfloat16 __hip_bfloat16;
typedef __nv_bfloat162 __hip_bfloat162;
