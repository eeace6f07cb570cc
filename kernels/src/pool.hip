// 2-D pooling over a strided (N, C, H, W) source into a contiguous
// (N, C, out_h, out_w) output, no padding, windows kh x kw every (sh, sw):
//
//   max_pool2d_<dtype>  every dtype; the first element of the window, then
//                       any larger one (NaN kept only when it comes first, as
//                       Candle's CPU backend compares `largest < v`)
//   avg_pool2d_<dtype>  f16, bf16, f32, f64; the window sum in f32 (f64 for
//                       f64) times 1 / (kh * kw)
//
// Signature: (const Nchw src, const T* x, T* y, ch_u32 kh, ch_u32 kw,
//             ch_u32 sh, ch_u32 sw, ch_u64 out_h, ch_u64 out_w)
// `x` points at the first element of the source view. One thread per output
// element, grid-stride; any block size.

#include "common.h"

template <typename T, bool F = Num<T>::is_float>
struct PoolValue;

template <typename T>
struct PoolValue<T, true> {
  typedef typename Num<T>::acc V;
  __device__ __forceinline__ static V get(T v) { return Num<T>::to_acc(v); }
  __device__ __forceinline__ static T put(V v) { return Num<T>::from_acc(v); }
};

template <typename T>
struct PoolValue<T, false> {
  typedef T V;
  __device__ __forceinline__ static V get(T v) { return v; }
  __device__ __forceinline__ static T put(V v) { return v; }
};

template <typename T>
struct MaxWindow {
  typedef typename PoolValue<T>::V V;
  V best;
  bool first;
  __device__ __forceinline__ MaxWindow() : best(), first(true) {}
  __device__ __forceinline__ void push(T t) {
    const V v = PoolValue<T>::get(t);
    if (first || best < v) best = v;
    first = false;
  }
  __device__ __forceinline__ T finish(ch_u32) const { return PoolValue<T>::put(best); }
};

template <typename T>
struct AvgWindow {
  typedef typename Num<T>::acc A;
  A sum;
  __device__ __forceinline__ AvgWindow() : sum((A)0) {}
  __device__ __forceinline__ void push(T t) { sum += Num<T>::to_acc(t); }
  __device__ __forceinline__ T finish(ch_u32 count) const { return Num<T>::from_acc(sum * ((A)1 / (A)count)); }
};

template <typename W, typename T>
__device__ __forceinline__ void pool2d(const Nchw& s, const T* x, T* y, ch_u32 kh, ch_u32 kw, ch_u32 sh, ch_u32 sw,
                                       ch_u64 out_h, ch_u64 out_w) {
  const ch_u64 total = s.dims[0] * s.dims[1] * out_h * out_w;
  for (ch_u64 o = global_thread(); o < total; o += global_threads()) {
    ch_u64 n, c, oy, ox;
    nchw_split(o, s.dims[1], out_h, out_w, n, c, oy, ox);
    const T* base = x + nchw_offset(s, n, c, oy * sh, ox * sw);
    W win;
    for (ch_u32 m = 0; m < kh; ++m) {
      for (ch_u32 k = 0; k < kw; ++k) win.push(base[m * s.strides[2] + k * s.strides[3]]);
    }
    y[o] = win.finish(kh * kw);
  }
}

#define CH_POOL_KERNEL(NAME, WINDOW, TY)                                                          \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                    \
      NAME##_##TY(const Nchw src, const ch_##TY* x, ch_##TY* y, ch_u32 kh, ch_u32 kw, ch_u32 sh, \
                  ch_u32 sw, ch_u64 out_h, ch_u64 out_w) {                                       \
    pool2d<WINDOW<ch_##TY> >(src, x, y, kh, kw, sh, sw, out_h, out_w);                           \
  }

CH_ALL(CH_POOL_KERNEL, max_pool2d, MaxWindow)
CH_FLOATS(CH_POOL_KERNEL, avg_pool2d, AvgWindow)
