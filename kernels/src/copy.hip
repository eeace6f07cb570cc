// Copies and fills: ucopy_<dtype> (any strided view to a contiguous one),
// copy2d_<dtype> (Candle's copy2d), transpose_<dtype> (a strided-to-contiguous
// copy through shared-memory tiles) and fill_<dtype> (const_set over a
// strided layout). Each is instantiated for one dtype per element width
// (CH_CARRIERS): the host runs it for every dtype of that width.

#include "common.h"

struct CopyFn {
  template <typename T>
  __device__ __forceinline__ T operator()(T x) const { return x; }
};

// Signature: (const ElemInfo info, const T* in, T* out), `in` any strided
// view, `out` contiguous.
#define CH_UCOPY_KERNEL(NAME, OP, TY)                                     \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)             \
      NAME##_##TY(const ElemInfo info, const ch_##TY* in, ch_##TY* out) { \
    map_elems(info, out, OP(), In<ch_##TY, 0>{in});                       \
  }

CH_CARRIERS(CH_UCOPY_KERNEL, ucopy, CopyFn)

// A value and the destination offset it goes to.
template <typename U>
struct Placed {
  U v;
  ch_u64 at;
};

// dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < cols,
// in units U (elements or 16-byte packs of them).
template <typename U>
__device__ __forceinline__ void copy2d_units(ch_u64 rows, ch_u64 cols, ch_u64 src_stride, ch_u64 dst_stride,
                                             const U* src, U* dst) {
  unrolled_loop<CH_UNROLL, Placed<U> >(
      rows * cols,
      [&](ch_u64 o) {
        ch_u64 c;
        const ch_u64 r = divmod(o, cols, c);
        Placed<U> p;
        p.v = src[r * src_stride + c];
        p.at = r * dst_stride + c;
        return p;
      },
      [&](ch_u64, const Placed<U>& p) { dst[p.at] = p.v; });
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

CH_CARRIERS(CH_COPY2D_KERNEL, copy2d, _)

// ---------------------------------------------------------------------------
// Tiled transpose. The source is operand 0 of `info` (merged dims, rank >= 2)
// with stride 1 along dimension `k` < rank - 1 and a larger stride along the
// last dimension; dst is contiguous in the row-major order of the dims. Each
// block moves EDGE x EDGE tiles of the (k, last) plane through shared memory:
// reads are coalesced along k, writes along the last dimension. Tile sizes
// are plain block geometry (CH_ELEM_BLOCK threads, EDGE columns per row of
// threads), not wave sizes.
template <typename T>
struct TransposeTile {
  // Rows of 64 bytes or more: 64 elements of 1 or 2 bytes, 32 of wider types.
  static const int EDGE = sizeof(T) <= 2 ? 64 : 32;
  // Tile rows are padded by 4 bytes (one element for wider types) so that a
  // column of the tile falls into distinct 4-byte shared-memory banks.
  static const int PAD = sizeof(T) >= 4 ? 1 : 4 / (int)sizeof(T);
  // Tile rows each pass of the block covers.
  static const int ROWS = CH_ELEM_BLOCK / EDGE;
};

// Must be launched with CH_ELEM_BLOCK threads per block.
template <typename T>
__device__ __forceinline__ void transpose_body(const ElemInfo& info, ch_u64 k, const T* src, T* dst) {
  typedef TransposeTile<T> Tile;
  const int E = Tile::EDGE;
  __shared__ T tile[E][E + Tile::PAD];
  const int last = (int)info.rank - 1;
  const ch_u64 rows = info.dims[k];
  const ch_u64 cols = info.dims[last];
  const ch_u64 col_stride = info.strides[0][last];
  const ch_u64 row_tiles = (rows + E - 1) / E;
  const ch_u64 col_tiles = (cols + E - 1) / E;
  const ch_u64 tiles = info.numel / (rows * cols) * row_tiles * col_tiles;
  const int tx = (int)(threadIdx.x % E);
  const int ty = (int)(threadIdx.x / E);
  for (ch_u64 t = blockIdx.x; t < tiles; t += gridDim.x) {
    ch_u64 tc, tr;
    ch_u64 rest = divmod(divmod(t, col_tiles, tc), row_tiles, tr);
    // Offsets of the tile's plane: `rest` indexes the other dimensions.
    ch_u64 src_off = 0, dst_off = 0, row_out_stride = 0, out_stride = 1;
#pragma unroll
    for (int d = CH_MAX_DIMS - 1; d >= 0; --d) {
      if (d > last) continue;
      if (d == (int)k) {
        row_out_stride = out_stride;
      } else if (d != last) {
        ch_u64 c;
        rest = divmod(rest, info.dims[d], c);
        src_off += c * info.strides[0][d];
        dst_off += c * out_stride;
      }
      out_stride *= info.dims[d];
    }
    const ch_u64 r0 = tr * E, c0 = tc * E;
    const ch_u64 r_in = r0 + tx;
#pragma unroll
    for (int y = 0; y < E; y += Tile::ROWS) {
      const ch_u64 c = c0 + ty + y;
      if (r_in < rows && c < cols) tile[ty + y][tx] = src[src_off + r_in + c * col_stride];
    }
    __syncthreads();
    const ch_u64 c_out = c0 + tx;
#pragma unroll
    for (int y = 0; y < E; y += Tile::ROWS) {
      const ch_u64 r = r0 + ty + y;
      if (r < rows && c_out < cols) dst[dst_off + r * row_out_stride + c_out] = tile[tx][ty + y];
    }
    __syncthreads();
  }
}

// Signature: (const ElemInfo info, u64 k, const T* src, T* dst).
#define CH_TRANSPOSE_KERNEL(NAME, OP, TY)                                                         \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                     \
      NAME##_##TY(const ElemInfo info, ch_u64 k, const ch_##TY* src, ch_##TY* dst) {              \
    transpose_body(info, k, src, dst);                                                            \
  }

CH_CARRIERS(CH_TRANSPOSE_KERNEL, transpose, _)

// ---------------------------------------------------------------------------
// Every element of the layout described by operand 0 of `info` set to v.
template <typename T>
__device__ __forceinline__ void fill_body(const ElemInfo& info, T* dst, T v) {
  const ch_u64 n = info.numel;
  if (info.rank != 0) {
    unrolled_loop<1, T>(
        n, [&](ch_u64) { return v; },
        [&](ch_u64 i, const T& x) {
          ch_u64 off[CH_MAX_OPERANDS];
          strided_offsets<1>(info, i, off);
          dst[off[0]] = x;
        });
    return;
  }
  const int V = CH_VEC_BYTES / (int)sizeof(T);
  typedef Pack<T, V> P;
  ch_u64 done = 0;
  if (is_aligned<V>(dst)) {
    P p;
#pragma unroll
    for (int k = 0; k < V; ++k) p.v[k] = v;
    P* dstv = reinterpret_cast<P*>(dst);
    done = n / V * V;
    unrolled_loop<CH_UNROLL, P>(
        n / V, [&](ch_u64) { return p; }, [&](ch_u64 j, const P& x) { dstv[j] = x; });
  }
  unrolled_loop<1, T>(
      n - done, [&](ch_u64) { return v; }, [&](ch_u64 j, const T& x) { dst[done + j] = x; });
}

// Signature: (const ElemInfo info, T* dst, u64 bits): the value is the low
// sizeof(T) bytes of `bits`.
#define CH_FILL_KERNEL(NAME, OP, TY)                                                       \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                              \
      NAME##_##TY(const ElemInfo info, ch_##TY* dst, ch_u64 bits) {                        \
    fill_body(info, dst, from_bits<ch_##TY>(bits));                                        \
  }

CH_CARRIERS(CH_FILL_KERNEL, fill, _)
