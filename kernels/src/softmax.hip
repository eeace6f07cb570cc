// Softmax over the last dimension of a contiguous tensor: softmax_<dtype>
// for f16, bf16, f32, f64 (candle_nn::ops::softmax_last_dim).
//
// Signature: (const T* src, T* dst, ch_u32 cols); src and dst point at the
// first element of contiguous (rows, cols) matrices.
// Launch: one block per row (gridDim.x = rows); blockDim.x a multiple of
// the wave size, at most CH_REDUCE_MAX_BLOCK.
//
// Sums in f32 for f16/bf16/f32 and f64 for f64. Rows of up to
// SoftmaxCache<T>::VALUES * blockDim.x elements stay in registers and are read
// from memory once: maximum m, then the sum s of exp(x - m), then the store
// of exp(x - m) / s (the exponential computed again). Longer rows take two
// passes over memory: the online-softmax recurrence computes m and s
// together, then the store pass. Entries of -inf contribute 0; a row of only -inf
// gives NaN, as Candle's CPU backend does.

#include "common.h"

// Softmax caches twice the default for f16/bf16 (32 values per thread, as
// many registers as the row's 64 bytes of 16-bit values take twice), so
// that a 32000-entry vocabulary of a 16-bit model is read once by 1024
// threads: CH_ROW_CACHE_BYTES of the row as stored.
template <typename T>
struct SoftmaxCache {
  static const int VALUES = CH_ROW_CACHE_BYTES / (int)sizeof(T);
};

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
    return a.m == ch_neg_inf<A>() ? (A)0 : a.s * ch_exp_fast(a.m - m);
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
      st.s += ch_exp_fast(x - st.m);
    }
    return st;
  }
};

// Maximum of accumulator values.
template <typename A>
struct AccMax {
  struct State {
    A v;
  };
  __device__ __forceinline__ static State identity() {
    State s;
    s.v = ch_neg_inf<A>();
    return s;
  }
  __device__ __forceinline__ static State combine(State a, State b) {
    a.v = a.v > b.v ? a.v : b.v;
    return a;
  }
};

template <typename T>
struct SoftmaxBody {
  typedef typename Num<T>::acc A;
  const T* src;
  T* dst;
  ch_u32 cols;
  ch_u64* scratch;

  template <typename R>
  __device__ __forceinline__ typename R::State allreduce(typename R::State s) {
    return block_allreduce<R>(s, reinterpret_cast<typename R::State*>(scratch));
  }

  // Row in registers: the maximum m, then the sum s of exp(x - m).
  template <int V>
  __device__ __forceinline__ void max_and_sum(RowView<T, V, true, SoftmaxCache<T>::VALUES>& x, A& m, A& s) {
    typename AccMax<A>::State mx = AccMax<A>::identity();
    x.visit([&](A (&v)[V], ch_u32) {
#pragma unroll
      for (int k = 0; k < V; ++k) mx.v = v[k] > mx.v ? v[k] : mx.v;
    });
    m = allreduce<AccMax<A> >(mx).v;
    typename AccSum<A>::State sum = AccSum<A>::identity();
    x.visit([&](A (&v)[V], ch_u32) {
#pragma unroll
      for (int k = 0; k < V; ++k) sum.v += ch_exp_fast(v[k] - m);
    });
    s = allreduce<AccSum<A> >(sum).v;
  }

  // Row in memory: m and s together (one pass of the online recurrence).
  template <int V>
  __device__ __forceinline__ void max_and_sum(RowView<T, V, false, SoftmaxCache<T>::VALUES>& x, A& m, A& s) {
    typedef MaxSumExp<A> R;
    typename R::State st = R::identity();
    x.visit([&](A (&v)[V], ch_u32) {
#pragma unroll
      for (int k = 0; k < V; ++k) st = R::push(st, v[k]);
    });
    st = allreduce<R>(st);
    m = st.m;
    s = st.s;
  }

  // exp(x - m) / s, stored.
  template <int V, bool CACHED>
  __device__ __forceinline__ void softmax(RowView<T, V, CACHED, SoftmaxCache<T>::VALUES>& x, T* out) {
    A m, s;
    max_and_sum(x, m, s);
    const A inv = (A)1 / s;
    x.visit([&](A (&v)[V], ch_u32 p) {
      A y[V];
#pragma unroll
      for (int k = 0; k < V; ++k) y[k] = ch_exp_fast(v[k] - m) * inv;
      RowView<T, V, CACHED, SoftmaxCache<T>::VALUES>::store(out, p, y);
    });
  }

  template <int V, bool CACHED>
  __device__ __forceinline__ void row(ch_u64 r) {
    RowView<T, V, CACHED, SoftmaxCache<T>::VALUES> x(src + r * cols, cols / V);
    softmax(x, dst + r * cols);
  }
};

#define CH_SOFTMAX_KERNEL(NAME, OP, TY)                                                             \
  extern "C" __global__ void __launch_bounds__(CH_REDUCE_MAX_BLOCK)                                \
      NAME##_##TY(const ch_##TY* src, ch_##TY* dst, ch_u32 cols) {                                 \
    __shared__ ch_u64 scratch[CH_ROW_SCRATCH_WORDS];                                               \
    SoftmaxBody<ch_##TY> body{src, dst, cols, scratch};                                            \
    const int V = CH_VEC_BYTES / (int)sizeof(ch_##TY);                                             \
    row_of_block<ch_##TY, SoftmaxCache<ch_##TY>::VALUES>(                                          \
        cols, rows_vectorizable<V>(cols, src, (const ch_##TY*)dst, src, src), body);               \
  }

CH_FLOATS(CH_SOFTMAX_KERNEL, softmax, _)
