// hip-on-cpu replacement for <hip/hip_bf16.h>. The kernels of this project
// keep bfloat16 as raw bits and convert in software (kernels/src/common.h),
// so nothing beyond the runtime header is needed.
#pragma once

#include <hip/hip_runtime.h>
