// Softmax over the last dimension of a contiguous tensor: softmax_<dtype>
// for f16, bf16, f32, f64 (candle_nn::ops::softmax_last_dim).
//
// Signature: (const T* src, T* dst, ch_u32 cols); src and dst point at the
// first element of contiguous (rows, cols) matrices.
// Launch: one block per row (gridDim.x = rows); blockDim.x a multiple of
// the wave size, at most CH_REDUCE_MAX_BLOCK.
//
// One pass computes the row maximum m and the sum s of exp(x - m) together
// (the online-softmax recurrence, in f32 for f16/bf16/f32 and f64 for f64);
// a second pass writes exp(x - m) / s. Rows of up to RowCache<A>::VALUES *
// blockDim.x elements (32 per thread, 16 for f64) stay in registers between
// the two passes, so memory is read once. Entries of -inf contribute 0; a
// row of only -inf gives NaN, as Candle's CPU backend does.

#include "common.h"

// (running maximum, sum of exp(x - maximum)).
template <typename A>
struct MaxSumExp {
  struct State {
    A m;
    A s;
  };
  __device__ __forceinline__ static State identity() {
    State st;
    st.m = ch_neg_inf<A>();
    st.s = (A)0;
    return st;
  }
  // s scaled to the maximum m; an empty (or all -inf) part contributes 0.
  __device__ __forceinline__ static A rescale(State a, A m) {
    return a.m == ch_neg_inf<A>() ? (A)0 : a.s * ch_exp(a.m - m);
  }
  __device__ __forceinline__ static State combine(State a, State b) {
    State r;
    r.m = a.m > b.m ? a.m : b.m;
    r.s = rescale(a, r.m) + rescale(b, r.m);
    return r;
  }
  __device__ __forceinline__ static State push(State st, A x) {
    if (x > st.m) {
      st.s = rescale(st, x) + (A)1;
      st.m = x;
    } else if (st.m != ch_neg_inf<A>()) {
      st.s += ch_exp(x - st.m);
    }
    return st;
  }
};

template <typename T>
struct SoftmaxBody {
  typedef typename Num<T>::acc A;
  typedef MaxSumExp<A> R;
  const T* src;
  T* dst;
  ch_u32 cols;
  typename R::State* scratch;

  template <int V, bool CACHED>
  __device__ __forceinline__ void row(ch_u64 r) {
    RowView<T, V, CACHED> x(src + r * cols, cols / V);
    typename R::State st = R::identity();
    x.visit([&](A (&v)[V], ch_u32) {
#pragma unroll
      for (int k = 0; k < V; ++k) st = R::push(st, v[k]);
    });
    st = block_allreduce<R>(st, scratch);
    const A inv = (A)1 / st.s;
    T* out = dst + r * cols;
    x.visit([&](A (&v)[V], ch_u32 p) {
      A y[V];
#pragma unroll
      for (int k = 0; k < V; ++k) y[k] = ch_exp(v[k] - st.m) * inv;
      RowView<T, V, CACHED>::store(out, p, y);
    });
  }
};

#define CH_SOFTMAX_KERNEL(NAME, OP, TY)                                                             \
  extern "C" __global__ void __launch_bounds__(CH_REDUCE_MAX_BLOCK)                                \
      NAME##_##TY(const ch_##TY* src, ch_##TY* dst, ch_u32 cols) {                  \
    __shared__ ch_u64 scratch[CH_ROW_SCRATCH_WORDS];                                               \
    SoftmaxBody<ch_##TY> body{src, dst, cols,                                                      \
                              reinterpret_cast<MaxSumExp<Num<ch_##TY>::acc>::State*>(scratch)};    \
    const int V = CH_VEC_BYTES / (int)sizeof(ch_##TY);                                             \
    row_of_block<ch_##TY>(cols, rows_vectorizable<V>(cols, src, (const ch_##TY*)dst, src, src), \
                          body);                                                                   \
  }

CH_FLOATS(CH_SOFTMAX_KERNEL, softmax, _)
