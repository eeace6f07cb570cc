// The logistic activations, element-wise over any strided layouts, for f16,
// bf16, f32, f64, computed in f32 (f64 for f64) and rounded once:
//
//   sigmoid_<dtype>   1 / (1 + exp(-x)) (candle_nn::ops::sigmoid)
//                     (const ElemInfo info, const T* in, T* out), as the
//                     unary kernels of unary.hip
//   silu_mul_<dtype>  silu(gate) * up, SwiGLU's activation
//                     (candle_nn::ops::swiglu on the two halves)
//                     (const ElemInfo info, const T* gate, const T* up, T* out),
//                     as the binary kernels of binary.hip

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

template <typename T>
struct SiluMulFn {
  static const bool costly = true;
  typedef typename Num<T>::acc A;
  __device__ __forceinline__ T operator()(T gate, T up) const {
    const A g = Num<T>::to_acc(gate);
    return Num<T>::from_acc(g / ((A)1 + ch_exp(-g)) * Num<T>::to_acc(up));
  }
};

#define CH_SILU_MUL_KERNEL(NAME, OP, TY)                                                        \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                   \
      NAME##_##TY(const ElemInfo info, const ch_##TY* gate, const ch_##TY* up, ch_##TY* out) {  \
    map_elems(info, out, SiluMulFn<ch_##TY>(), In<ch_##TY, 0>{gate}, In<ch_##TY, 1>{up});       \
  }

CH_FLOATS(CH_SILU_MUL_KERNEL, silu_mul, _)
