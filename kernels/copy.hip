// Copies and fills: copy2d_<dtype> (Candle's copy2d) and fill_<dtype>
// (const_set over a strided layout). Strided-to-contiguous copies use ucopy_*
// from unary.hip.

#include "common.h"

// dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < cols,
// in units U (elements or 16-byte packs of them).
template <typename U>
__device__ __forceinline__ void copy2d_units(ch_u64 rows, ch_u64 cols, ch_u64 src_stride, ch_u64 dst_stride,
                                             const U* src, U* dst) {
  const ch_u64 total = rows * cols;
  for (ch_u64 o = global_thread(); o < total; o += global_threads()) {
    ch_u64 c;
    const ch_u64 r = divmod(o, cols, c);
    dst[r * dst_stride + c] = src[r * src_stride + c];
  }
}

// Signature: (rows, cols, src_stride, dst_stride, src, dst), sizes and strides
// in elements; src and dst point at the first element to read / write.
template <typename T>
__device__ __forceinline__ void copy2d_body(ch_u64 rows, ch_u64 cols, ch_u64 src_stride, ch_u64 dst_stride,
                                            const T* src, T* dst) {
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  if ((cols % V) == 0 && (src_stride % V) == 0 && (dst_stride % V) == 0 && is_aligned<V>(src) &&
      is_aligned<V>(dst)) {
    typedef Pack<T, V> P;
    copy2d_units<P>(rows, cols / V, src_stride / V, dst_stride / V, reinterpret_cast<const P*>(src),
                    reinterpret_cast<P*>(dst));
  } else {
    copy2d_units<T>(rows, cols, src_stride, dst_stride, src, dst);
  }
}

#define CH_COPY2D_KERNEL(NAME, OP, TY)                                                             \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                      \
      NAME##_##TY(ch_u64 rows, ch_u64 cols, ch_u64 src_stride, ch_u64 dst_stride, const ch_##TY* src, \
                  ch_##TY* dst) {                                                                  \
    copy2d_body(rows, cols, src_stride, dst_stride, src, dst);                                    \
  }

CH_ALL(CH_COPY2D_KERNEL, copy2d, _)

// Every element of the layout described by operand 0 of `info` set to v.
template <typename T>
__device__ __forceinline__ void fill_body(const ElemInfo& info, T* dst, T v) {
  const ch_u64 n = info.numel;
  const ch_u64 first = global_thread();
  const ch_u64 step = global_threads();
  if (info.rank != 0) {
    for (ch_u64 i = first; i < n; i += step) {
      ch_u64 off[CH_MAX_OPERANDS];
      strided_offsets<1>(info, i, off);
      dst[off[0]] = v;
    }
    return;
  }
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  ch_u64 done = 0;
  if (is_aligned<V>(dst)) {
    Pack<T, V> p;
#pragma unroll
    for (int k = 0; k < V; ++k) p.v[k] = v;
    const ch_u64 nv = n / V;
    Pack<T, V>* dstv = reinterpret_cast<Pack<T, V>*>(dst);
    for (ch_u64 j = first; j < nv; j += step) dstv[j] = p;
    done = nv * V;
  }
  for (ch_u64 i = done + first; i < n; i += step) dst[i] = v;
}

// Signature: (const ElemInfo info, T* dst, u64 bits): the value is the low
// sizeof(T) bytes of `bits`.
#define CH_FILL_KERNEL(NAME, OP, TY)                                                       \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                              \
      NAME##_##TY(const ElemInfo info, ch_##TY* dst, ch_u64 bits) {                        \
    fill_body(info, dst, from_bits<ch_##TY>(bits));                                        \
  }

CH_ALL(CH_FILL_KERNEL, fill, _)
