// Upsampling of a strided (N, C, H, W) source into a contiguous
// (N, C, out_h, out_w) output (grid-stride, any block size): nearest takes
// one thread per output column, bilinear one per output element. 1-D inputs
// are passed as H = 1.
//
//   upsample_nearest2d_<dtype>(const Nchw src, const T* x, T* y,
//       ch_u64 out_h, ch_u64 out_w, double scale_h, double scale_w)
//     every dtype; source row min(H - 1, floor(oy * scale_h)) with
//     scale_h = H / out_h (computed by the host in f64, as Candle does), and
//     the same for columns
//   upsample_bilinear2d_<dtype>(const Nchw src, const T* x, T* y,
//       ch_u64 out_h, ch_u64 out_w, double scale_h, double scale_w,
//       ch_u32 align_corners)
//     f16, bf16, f32, f64; PyTorch's source coordinate
//     (align_corners ? scale * o : scale * (o + 0.5) - 0.5, clamped at 0),
//     with the scales chosen by the host; positions in f64, interpolation in
//     f32 (f64 for f64).

#include "common.h"

__device__ __forceinline__ ch_u64 nearest_source(ch_u64 o, double scale, ch_u64 size) {
  const ch_u64 i = (ch_u64)((double)o * scale);
  return i < size - 1 ? i : size - 1;
}

// Output rows of one column each thread loads before storing them.
#define CH_NEAREST_ROWS 4

// One thread per output column (n, c, ox), walking its out_h rows: the
// column's source index and the plane's offsets are computed once per
// column instead of per element (three 64-bit divisions and two f64
// conversions per element made this compute-bound), and adjacent threads
// store adjacent elements of each row.
template <typename T>
__device__ __forceinline__ void upsample_nearest(const Nchw& s, const T* x, T* y, ch_u64 out_h, ch_u64 out_w,
                                                 double scale_h, double scale_w) {
  const ch_u64 columns = s.dims[0] * s.dims[1] * out_w;
  const int R = CH_NEAREST_ROWS;
  for (ch_u64 q = global_thread(); q < columns; q += global_threads()) {
    ch_u64 ox, c;
    const ch_u64 plane = divmod(q, out_w, ox);
    const ch_u64 n = divmod(plane, s.dims[1], c);
    const T* src = x + nchw_offset(s, n, c, 0, nearest_source(ox, scale_w, s.dims[3]));
    T* dst = y + plane * out_h * out_w + ox;
    ch_u64 oy = 0;
    for (; oy + R <= out_h; oy += R) {
      T v[R];
#pragma unroll
      for (int r = 0; r < R; ++r) v[r] = src[nearest_source(oy + r, scale_h, s.dims[2]) * s.strides[2]];
#pragma unroll
      for (int r = 0; r < R; ++r) dst[(oy + r) * out_w] = v[r];
    }
    for (; oy < out_h; ++oy) dst[oy * out_w] = src[nearest_source(oy, scale_h, s.dims[2]) * s.strides[2]];
  }
}

// The two source indices and the weight of the second along one axis.
struct Taps {
  ch_u64 i0, i1;
  double w;
};

__device__ __forceinline__ Taps bilinear_taps(ch_u64 o, double scale, ch_u64 size, bool align_corners) {
  const double pos = align_corners ? scale * (double)o : scale * ((double)o + 0.5) - 0.5;
  const double clamped = pos > 0.0 ? pos : 0.0;
  // A caller's scale factor may place a position past the last source
  // index (candle's CPU backend then indexes out of bounds): it reads the
  // edge, and the conversion never sees a value past the index range.
  const double last = (double)(size - 1);
  Taps t;
  t.i0 = (ch_u64)floor(clamped < last ? clamped : last);
  t.i1 = t.i0 + 1 < size - 1 ? t.i0 + 1 : size - 1;
  const double w = clamped - (double)t.i0;
  t.w = w < 0.0 ? 0.0 : (w > 1.0 ? 1.0 : w);
  return t;
}

template <typename T>
__device__ __forceinline__ void upsample_bilinear(const Nchw& s, const T* x, T* y, ch_u64 out_h, ch_u64 out_w,
                                                  double scale_h, double scale_w, bool align_corners) {
  typedef typename Num<T>::acc A;
  const ch_u64 total = s.dims[0] * s.dims[1] * out_h * out_w;
  for (ch_u64 o = global_thread(); o < total; o += global_threads()) {
    ch_u64 n, c, oy, ox;
    nchw_split(o, s.dims[1], out_h, out_w, n, c, oy, ox);
    const Taps ty = bilinear_taps(oy, scale_h, s.dims[2], align_corners);
    const Taps tx = bilinear_taps(ox, scale_w, s.dims[3], align_corners);
    const T* base = x + nchw_offset(s, n, c, 0, 0);
    const ch_u64 r0 = ty.i0 * s.strides[2], r1 = ty.i1 * s.strides[2];
    const ch_u64 c0 = tx.i0 * s.strides[3], c1 = tx.i1 * s.strides[3];
    const A wy = (A)ty.w, wx = (A)tx.w;
    const A top = Num<T>::to_acc(base[r0 + c0]) * ((A)1 - wx) + Num<T>::to_acc(base[r0 + c1]) * wx;
    const A bottom = Num<T>::to_acc(base[r1 + c0]) * ((A)1 - wx) + Num<T>::to_acc(base[r1 + c1]) * wx;
    y[o] = Num<T>::from_acc(top * ((A)1 - wy) + bottom * wy);
  }
}

#define CH_NEAREST_KERNEL(NAME, OP, TY)                                                        \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                 \
      NAME##_##TY(const Nchw src, const ch_##TY* x, ch_##TY* y, ch_u64 out_h, ch_u64 out_w,   \
                  double scale_h, double scale_w) {                                           \
    upsample_nearest(src, x, y, out_h, out_w, scale_h, scale_w);                              \
  }

#define CH_BILINEAR_KERNEL(NAME, OP, TY)                                                       \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                 \
      NAME##_##TY(const Nchw src, const ch_##TY* x, ch_##TY* y, ch_u64 out_h, ch_u64 out_w,   \
                  double scale_h, double scale_w, ch_u32 align_corners) {                     \
    upsample_bilinear(src, x, y, out_h, out_w, scale_h, scale_w, align_corners != 0);         \
  }

CH_CARRIERS(CH_NEAREST_KERNEL, upsample_nearest2d, _)
CH_FLOATS(CH_BILINEAR_KERNEL, upsample_bilinear2d, _)
