// Logistic sigmoid 1 / (1 + exp(-x)) (candle_nn::ops::sigmoid), element-wise
// over any strided layout: sigmoid_<dtype> for f16, bf16, f32, f64, computed
// in f32 (f64 for f64) and rounded once.
//
// Signature: (const ElemInfo info, const T* in, T* out), as the unary kernels
// of unary.hip (one operand, contiguous output).

#include "common.h"

template <typename T>
struct SigmoidFn {
  static const bool costly = true;
  typedef typename Num<T>::acc A;
  __device__ __forceinline__ T operator()(T x) const {
    return Num<T>::from_acc((A)1 / ((A)1 + ch_exp(-Num<T>::to_acc(x))));
  }
};

#define CH_SIGMOID_KERNEL(NAME, OP, TY)                                                   \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                             \
      NAME##_##TY(const ElemInfo info, const ch_##TY* in, ch_##TY* out) {                 \
    map_elems(info, out, SigmoidFn<ch_##TY>(), In<ch_##TY, 0>{in});                       \
  }

CH_FLOATS(CH_SIGMOID_KERNEL, sigmoid, _)
