// Row normalisations over the last dimension of contiguous tensors, for f16,
// bf16, f32 and f64 (candle_nn::ops::{rms_norm, layer_norm}):
//
//   rms_norm_<dtype>(const T* src, const T* alpha, T* dst, ch_u32 cols,
//                    float eps)
//     y = x / sqrt(mean(x^2) + eps) * alpha
//   layer_norm_<dtype>(const T* src, const T* alpha, const T* beta, T* dst,
//                      ch_u32 cols, float eps)
//     y = (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * alpha + beta
//
// src and dst are contiguous (rows, cols) matrices; alpha and beta hold
// `cols` elements. Launch: one block per row (gridDim.x = rows); blockDim.x
// a multiple of the wave size, at most CH_REDUCE_MAX_BLOCK. Sums run in f32 (f64 for f64) and each output is
// rounded once. The variance is computed from the centred values (two
// reductions), not as E[x^2] - E[x]^2. Rows of up to RowCache<T>::VALUES *
// blockDim.x elements (16 per thread, 8 for f64) are read from memory once.

#include "common.h"

template <typename T>
struct RmsNormBody {
  typedef typename Num<T>::acc A;
  const T* src;
  const T* alpha;
  T* dst;
  ch_u32 cols;
  A eps;
  typename AccSum<A>::State* scratch;

  template <int V, bool CACHED>
  __device__ __forceinline__ void row(ch_u64 r) {
    typedef RowView<T, V, CACHED> Row;
    Row x(src + r * cols, cols / V);
    typename AccSum<A>::State ss = AccSum<A>::identity();
    x.visit([&](A (&v)[V], ch_u32) {
#pragma unroll
      for (int k = 0; k < V; ++k) ss.v += v[k] * v[k];
    });
    ss = block_allreduce<AccSum<A> >(ss, scratch);
    const A inv = (A)1 / ch_sqrt(ss.v / (A)cols + eps);
    T* out = dst + r * cols;
    x.visit([&](A (&v)[V], ch_u32 p) {
      A a[V], y[V];
      Row::load(alpha, p, a);
#pragma unroll
      for (int k = 0; k < V; ++k) y[k] = v[k] * inv * a[k];
      Row::store(out, p, y);
    });
  }
};

template <typename T>
struct LayerNormBody {
  typedef typename Num<T>::acc A;
  const T* src;
  const T* alpha;
  const T* beta;
  T* dst;
  ch_u32 cols;
  A eps;
  typename AccSum<A>::State* scratch;

  template <int V, bool CACHED>
  __device__ __forceinline__ void row(ch_u64 r) {
    typedef RowView<T, V, CACHED> Row;
    Row x(src + r * cols, cols / V);
    typename AccSum<A>::State sum = AccSum<A>::identity();
    x.visit([&](A (&v)[V], ch_u32) {
#pragma unroll
      for (int k = 0; k < V; ++k) sum.v += v[k];
    });
    const A mean = block_allreduce<AccSum<A> >(sum, scratch).v / (A)cols;
    typename AccSum<A>::State var = AccSum<A>::identity();
    x.visit([&](A (&v)[V], ch_u32) {
#pragma unroll
      for (int k = 0; k < V; ++k) var.v += (v[k] - mean) * (v[k] - mean);
    });
    var = block_allreduce<AccSum<A> >(var, scratch);
    const A inv = (A)1 / ch_sqrt(var.v / (A)cols + eps);
    T* out = dst + r * cols;
    x.visit([&](A (&v)[V], ch_u32 p) {
      A a[V], b[V], y[V];
      Row::load(alpha, p, a);
      Row::load(beta, p, b);
#pragma unroll
      for (int k = 0; k < V; ++k) y[k] = (v[k] - mean) * inv * a[k] + b[k];
      Row::store(out, p, y);
    });
  }
};

#define CH_RMS_NORM_KERNEL(NAME, OP, TY)                                                               \
  extern "C" __global__ void __launch_bounds__(CH_REDUCE_MAX_BLOCK)                                   \
      NAME##_##TY(const ch_##TY* src, const ch_##TY* alpha, ch_##TY* dst, ch_u32 cols, float eps) {   \
    typedef Num<ch_##TY>::acc A;                                                                      \
    __shared__ ch_u64 scratch[CH_ROW_SCRATCH_WORDS];                                                  \
    RmsNormBody<ch_##TY> body{src, alpha, dst, cols, (A)eps,                                          \
                              reinterpret_cast<AccSum<A>::State*>(scratch)};                          \
    const int V = CH_VEC_BYTES / (int)sizeof(ch_##TY);                                                \
    row_of_block<ch_##TY>(cols, rows_vectorizable<V>(cols, src, alpha, (const ch_##TY*)dst, src), \
                          body);                                                                      \
  }

#define CH_LAYER_NORM_KERNEL(NAME, OP, TY)                                                              \
  extern "C" __global__ void __launch_bounds__(CH_REDUCE_MAX_BLOCK)                                    \
      NAME##_##TY(const ch_##TY* src, const ch_##TY* alpha, const ch_##TY* beta, ch_##TY* dst,         \
                  ch_u32 cols, float eps) {                                                            \
    typedef Num<ch_##TY>::acc A;                                                                       \
    __shared__ ch_u64 scratch[CH_ROW_SCRATCH_WORDS];                                                   \
    LayerNormBody<ch_##TY> body{src, alpha, beta, dst, cols, (A)eps,                                   \
                                reinterpret_cast<AccSum<A>::State*>(scratch)};                         \
    const int V = CH_VEC_BYTES / (int)sizeof(ch_##TY);                                                 \
    row_of_block<ch_##TY>(cols, rows_vectorizable<V>(cols, src, alpha, beta, (const ch_##TY*)dst), \
                          body);                                                                       \
  }

CH_FLOATS(CH_RMS_NORM_KERNEL, rms_norm, _)
CH_FLOATS(CH_LAYER_NORM_KERNEL, layer_norm, _)
