// Convolution through GEMM, for f16, bf16, f32 and f64 (the fallback where
// MIOpen is not used). Shapes follow Candle: x (N, C, H, W), cross-correlation
// (what ML frameworks call convolution); 1-D convolutions use H = 1.
//
//   im2col_<dtype>(const Nchw src, const T* x, T* col, ch_u64 n0, ch_u64 nb,
//                  const ConvGeom g)
//     col[b][(c * kh + ky) * kw + kx][oy * out_w + ox] =
//       x[n0 + b, c, oy * sh + ky * dh - ph, ox * sw + kx * dw - pw]
//     (0 outside the image) for the nb images n0 .. n0 + nb - 1, so that
//     y[b] = W (K x C*kh*kw) * col[b] is the convolution in (K, out_h*out_w).
//   col2im_<dtype>(const T* col, T* y, ch_u64 nb, ch_u64 channels,
//                  const ConvGeom g)
//     the transposed convolution's scatter as a gather, with `col` =
//     W^T * x holding (channels * kh * kw) x (in_h * in_w) per image:
//     y[b, c, oy, ox] = sum over (ky, kx) with oy = iy * sh + ky * dh - ph,
//     ox = ix * sw + kx * dw - pw of col[b][(c * kh + ky) * kw + kx][iy * in_w + ix]
//     (sums in f32, f64 for f64); y is contiguous (nb, channels, out_h, out_w).
//
// One thread per written element, grid-stride; any block size.

#include "common.h"

// Geometry shared by both kernels. For im2col, in_* is the image and out_*
// the convolution output; for col2im, in_* is the transposed convolution's
// input and out_* its output. Mirrored by `ConvGeom` in candle-hip/src/kernel/nchw.rs.
struct ConvGeom {
  ch_u64 in_h, in_w, out_h, out_w;
  ch_u32 kh, kw, ph, pw, sh, sw, dh, dw;
};

template <typename T>
__device__ __forceinline__ void im2col(const Nchw& s, const T* x, T* col, ch_u64 n0, ch_u64 nb, const ConvGeom& g) {
  const ch_u64 spatial = g.out_h * g.out_w;
  const ch_u64 taps = (ch_u64)g.kh * g.kw;
  const ch_u64 total = nb * s.dims[1] * taps * spatial;
  for (ch_u64 e = global_thread(); e < total; e += global_threads()) {
    ch_u64 pos, tap, c;
    ch_u64 rest = divmod(e, spatial, pos);
    rest = divmod(rest, taps, tap);
    const ch_u64 b = divmod(rest, s.dims[1], c);
    ch_u64 ox, kx;
    const ch_u64 oy = divmod(pos, g.out_w, ox);
    const ch_u64 ky = divmod(tap, g.kw, kx);
    // Unsigned wrap-around makes positions left of or above the image huge.
    const ch_u64 iy = oy * g.sh + ky * g.dh - g.ph;
    const ch_u64 ix = ox * g.sw + kx * g.dw - g.pw;
    T v = zero_bits<T>();
    if (iy < g.in_h && ix < g.in_w) v = x[nchw_offset(s, n0 + b, c, iy, ix)];
    col[e] = v;
  }
}

// The input position (iy) that output position o takes from tap k, if any.
__device__ __forceinline__ bool transposed_source(ch_u64 o, ch_u32 k, ch_u32 pad, ch_u32 stride, ch_u32 dil,
                                                  ch_u64 in_size, ch_u64& i) {
  const ch_u64 shifted = o + pad;
  const ch_u64 reach = (ch_u64)k * dil;
  if (shifted < reach) return false;
  ch_u64 rem;
  i = divmod(shifted - reach, stride, rem);
  return rem == 0 && i < in_size;
}

template <typename T>
__device__ __forceinline__ void col2im(const T* col, T* y, ch_u64 nb, ch_u64 channels, const ConvGeom& g) {
  typedef typename Num<T>::acc A;
  const ch_u64 in_spatial = g.in_h * g.in_w;
  const ch_u64 total = nb * channels * g.out_h * g.out_w;
  for (ch_u64 o = global_thread(); o < total; o += global_threads()) {
    ch_u64 b, c, oy, ox;
    nchw_split(o, channels, g.out_h, g.out_w, b, c, oy, ox);
    const T* rows = col + (b * channels + c) * g.kh * g.kw * in_spatial;
    A sum = (A)0;
    for (ch_u32 ky = 0; ky < g.kh; ++ky) {
      ch_u64 iy;
      if (!transposed_source(oy, ky, g.ph, g.sh, g.dh, g.in_h, iy)) continue;
      for (ch_u32 kx = 0; kx < g.kw; ++kx) {
        ch_u64 ix;
        if (!transposed_source(ox, kx, g.pw, g.sw, g.dw, g.in_w, ix)) continue;
        sum += Num<T>::to_acc(rows[((ch_u64)ky * g.kw + kx) * in_spatial + iy * g.in_w + ix]);
      }
    }
    y[o] = Num<T>::from_acc(sum);
  }
}

#define CH_IM2COL_KERNEL(NAME, OP, TY)                                                                \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                       \
      NAME##_##TY(const Nchw src, const ch_##TY* x, ch_##TY* col, ch_u64 n0, ch_u64 nb, const ConvGeom g) { \
    im2col(src, x, col, n0, nb, g);                                                                 \
  }

#define CH_COL2IM_KERNEL(NAME, OP, TY)                                                                \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                       \
      NAME##_##TY(const ch_##TY* col, ch_##TY* y, ch_u64 nb, ch_u64 channels, const ConvGeom g) {    \
    col2im(col, y, nb, channels, g);                                                                \
  }

CH_FLOATS(CH_IM2COL_KERNEL, im2col, _)
CH_FLOATS(CH_COL2IM_KERNEL, col2im, _)
