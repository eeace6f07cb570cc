//! Copies and fills: `copy_strided_src`, `copy2d` and `const_set`.

use candle_core::Layout;
use candle_core::backend::BackendStorage;
use candle_core::scalar::Scalar;
use hip_safe::{DeviceView, DeviceViewMut, LaunchConfig};

use crate::dtype;
use crate::error::{Result, hip, invalid};
use crate::kernel::catalogue as cat;
use crate::kernel::grid::{linear, per_pack, unrolled};
use crate::kernel::header::ELEM_BLOCK;
use crate::kernel::info::{ElemInfo, merge_dims, to_u64};
use crate::ops::elementwise;
use crate::size;
use crate::storage::HipStorage;

/// The arguments of candle's `copy2d`, in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Copy2d {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) src_stride: usize,
    pub(crate) dst_stride: usize,
    pub(crate) src_offset: usize,
    pub(crate) dst_offset: usize,
}

impl Copy2d {
    /// Elements reached from the first one with `stride` between rows.
    fn reach(&self, stride: usize) -> Result<usize> {
        size::span("copy2d", &[self.rows, self.cols], &[stride, 1])
    }

    /// Whether both sides are one contiguous run.
    fn is_contiguous(&self) -> bool {
        self.rows == 1 || (self.src_stride == self.cols && self.dst_stride == self.cols)
    }
}

/// The 2-D shape of a layout whose merged form is rows of contiguous
/// elements, with the row stride: such copies take the `copy2d` kernel.
fn as_rows(layout: &Layout) -> Option<(usize, usize, usize)> {
    let merged = merge_dims(layout.dims(), &[layout.stride()]);
    match (merged.dims.as_slice(), merged.strides[0].as_slice()) {
        (&[rows, cols], &[stride, 1]) => Some((rows, cols, stride)),
        _ => None,
    }
}

fn memcpy(
    src: &DeviceView<'_, u8>,
    dst: &mut DeviceViewMut<'_, u8>,
    stream: &hip_safe::Stream,
) -> Result<()> {
    stream.memcpy_dtod(src, dst).map_err(hip)
}

/// Copies the elements `src_l` selects, in row-major order, to `dst`
/// starting at element `dst_offset`.
pub(crate) fn copy_strided(
    src: &HipStorage,
    dst: &mut HipStorage,
    dst_offset: usize,
    src_l: &Layout,
) -> Result<()> {
    const OP: &str = "copy_strided_src";
    src.check_device(dst, OP)?;
    src.check_dtype(dst, OP)?;
    let numel = size::numel(OP, src_l.dims())?;
    if numel == 0 {
        return Ok(());
    }
    if src_l.is_contiguous() {
        let from = src.view_range(OP, src_l.start_offset(), numel)?;
        let mut to = dst.view_range_mut(OP, dst_offset, numel)?;
        return memcpy(&from, &mut to, src.device().stream());
    }
    if let Some((rows, cols, src_stride)) = as_rows(src_l) {
        let shape = Copy2d {
            rows,
            cols,
            src_stride,
            dst_stride: cols,
            src_offset: src_l.start_offset(),
            dst_offset,
        };
        return copy2d(src, dst, shape);
    }
    let to = dst.view_range_mut(OP, dst_offset, numel)?;
    let info = ElemInfo::new(OP, src_l.dims(), &[src_l.stride()])?;
    if let Some(k) = tiled_transpose(&info) {
        return transpose(src, src_l, info, k, to);
    }
    elementwise::copy_into(src, src_l, to)
}

/// Sides a transposed plane must have (in elements) for the tiled copy.
const MIN_TILE_SIDE: u64 = 8;

/// The dimension a tiled transpose reads contiguously, when the layout is
/// a (batched) transpose with planes large enough for tiles.
fn tiled_transpose(info: &ElemInfo) -> Option<usize> {
    let k = info.transposed_dim()?;
    let last = info.rank as usize - 1;
    (info.dims[k] >= MIN_TILE_SIDE && info.dims[last] >= MIN_TILE_SIDE).then_some(k)
}

/// Copies the transposed layout `info` of `src` (stride 1 along merged
/// dimension `k`) to the contiguous `to` through shared-memory tiles.
fn transpose(
    src: &HipStorage,
    src_l: &Layout,
    info: ElemInfo,
    k: usize,
    to: DeviceViewMut<'_, u8>,
) -> Result<()> {
    const OP: &str = "copy_strided_src";
    let kernel = cat::TRANSPOSE.kernel(OP, src.dtype())?;
    let cfg = transpose_shape(&info, k, dtype::elem_bytes(src.dtype()));
    let k = to_u64(k);
    let from = src.view(OP, src_l)?;
    // SAFETY: transpose_T(const ElemInfo, u64 k, const T* src, T* dst) with
    // CH_ELEM_BLOCK threads per block: it reads the offsets of `info` (the
    // merged shape and strides of `src_l`, whose reach the source view
    // covers; k < rank - 1 has stride 1) and writes dst[0..numel), the
    // length of `to`.
    unsafe {
        src.device()
            .kernels()
            .launch(kernel, cfg, &[&info, &k, &from, &to])
    }
}

/// Launch shape of a tiled transpose (`transpose_*` in `kernels/copy.hip`):
/// one block of `ELEM_BLOCK` threads per tile, tiles of 64 elements of 1 or
/// 2 bytes and 32 of wider types along each side.
fn transpose_shape(info: &ElemInfo, k: usize, elem_bytes: usize) -> LaunchConfig {
    let edge = if elem_bytes <= 2 { 64 } else { 32 };
    let last = info.rank as usize - 1;
    let (rows, cols) = (info.dims[k], info.dims[last]);
    let planes = info.numel / (rows * cols).max(1);
    linear(
        planes * rows.div_ceil(edge) * cols.div_ceil(edge),
        ELEM_BLOCK,
    )
}

/// Copies `rows` rows of `cols` elements between two row-strided regions.
pub(crate) fn copy2d(src: &HipStorage, dst: &mut HipStorage, c: Copy2d) -> Result<()> {
    const OP: &str = "copy2d";
    src.check_device(dst, OP)?;
    src.check_dtype(dst, OP)?;
    if c.rows == 0 || c.cols == 0 {
        return Ok(());
    }
    let from = src.view_range(OP, c.src_offset, c.reach(c.src_stride)?)?;
    let mut to = dst.view_range_mut(OP, c.dst_offset, c.reach(c.dst_stride)?)?;
    let device = src.device();
    if c.is_contiguous() {
        return memcpy(&from, &mut to, device.stream());
    }
    let kernel = cat::COPY2D.kernel(OP, src.dtype())?;
    let per_pack = per_pack(dtype::elem_bytes(src.dtype()));
    let numel = size::mul(OP, "rows x columns", c.rows, c.cols)?;
    let packed = [c.cols, c.src_stride, c.dst_stride]
        .iter()
        .all(|v| v % per_pack == 0);
    let work = if packed { numel / per_pack } else { numel };
    let cfg = unrolled(to_u64(work));
    let sizes = [c.rows, c.cols, c.src_stride, c.dst_stride].map(to_u64);
    let [rows, cols, src_stride, dst_stride] = &sizes;
    // SAFETY: copy2d_T(rows, cols, src_stride, dst_stride, const T*, T*)
    // touches element r * stride + c for r < rows, c < cols on each side,
    // which is below the reach each view was cut to.
    unsafe {
        device.kernels().launch(
            kernel,
            cfg,
            &[rows, cols, src_stride, dst_stride, &from, &to],
        )
    }
}

/// Sets every element `layout` selects in `dst` to `value`.
pub(crate) fn const_set(dst: &mut HipStorage, value: Scalar, layout: &Layout) -> Result<()> {
    const OP: &str = "const_set";
    let (dtype, bits) = dtype::scalar_bits(value)?;
    if dtype != dst.dtype() {
        return Err(invalid(
            OP,
            format!("a {dtype:?} value for a {:?} storage", dst.dtype()),
        ));
    }
    if size::numel(OP, layout.dims())? == 0 {
        return Ok(());
    }
    let info = ElemInfo::new(OP, layout.dims(), &[layout.stride()])?;
    let device = dst.device().clone();
    let mut view = dst.view_mut(OP, layout)?;
    if info.is_contiguous() && bits == 0 {
        return device.stream().memset_zeros(&mut view).map_err(hip);
    }
    let kernel = cat::FILL.kernel(OP, dtype)?;
    let cfg = elementwise::launch_shape(&info, dtype::elem_bytes(dtype));
    // SAFETY: fill_T(const ElemInfo, T* dst, u64 bits) writes the offsets of
    // `info` (the layout's shape and strides), all inside the view, which
    // spans the layout's reach.
    unsafe { device.kernels().launch(kernel, cfg, &[&info, &view, &bits]) }
}

/// An operand as one contiguous run of elements: the storage itself when
/// its layout is contiguous, otherwise a contiguous copy.
pub(crate) enum Dense<'a> {
    /// The operand's own storage, from element `start`.
    Borrowed(&'a HipStorage, usize),
    /// A contiguous copy.
    Owned(HipStorage),
}

impl Dense<'_> {
    /// `storage` read with `layout`, copied when not contiguous (`op` names
    /// the operation in a size error).
    pub(crate) fn of<'a>(
        op: &'static str,
        storage: &'a HipStorage,
        layout: &Layout,
    ) -> Result<Dense<'a>> {
        if let Some((start, _)) = layout.contiguous_offsets() {
            return Ok(Dense::Borrowed(storage, start));
        }
        let len = size::numel(op, layout.dims())?;
        // SAFETY: `copy_strided_src` writes all `len` elements.
        let mut copy = unsafe { storage.device().alloc_storage(storage.dtype(), len) }?;
        storage.copy_strided_src(&mut copy, 0, layout)?;
        Ok(Dense::Owned(copy))
    }

    /// The storage holding the elements.
    pub(crate) fn storage(&self) -> &HipStorage {
        match self {
            Dense::Borrowed(s, _) => s,
            Dense::Owned(s) => s,
        }
    }

    /// The first element.
    pub(crate) fn start(&self) -> usize {
        match self {
            Dense::Borrowed(_, start) => *start,
            Dense::Owned(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_layouts_are_recognised() {
        // Columns 2..5 of a (4, 10) matrix: 4 rows of 3, stride 10.
        let l = Layout::contiguous((4, 10)).narrow(1, 2, 3).unwrap();
        assert_eq!(as_rows(&l), Some((4, 3, 10)));
        // A (2, 3, 4) tensor narrowed on dim 1 merges to rows of 8 elements.
        let l = Layout::contiguous((2, 3, 4)).narrow(1, 1, 2).unwrap();
        assert_eq!(as_rows(&l), Some((2, 8, 12)));
        // A broadcast row repeats with stride 0.
        let l = Layout::contiguous(6).broadcast_as((3, 6)).unwrap();
        assert_eq!(as_rows(&l), Some((3, 6, 0)));
        // Transposes are not rows.
        let l = Layout::contiguous((4, 6)).transpose(0, 1).unwrap();
        assert_eq!(as_rows(&l), None);
        assert_eq!(as_rows(&Layout::contiguous((2, 3))), None);
    }

    #[test]
    fn transposes_take_the_tiled_copy() {
        let info = |l: &Layout| ElemInfo::new("t", l.dims(), &[l.stride()]).unwrap();
        let l = Layout::contiguous((64, 48)).transpose(0, 1).unwrap();
        assert_eq!(tiled_transpose(&info(&l)), Some(0));
        // (B, H, S, D) -> (B, H, D, S): the plane of the last two dims.
        let l = Layout::contiguous((2, 4, 32, 16)).transpose(2, 3).unwrap();
        let i = info(&l);
        assert_eq!(i.rank, 3);
        assert_eq!(tiled_transpose(&i), Some(1));
        // Thin planes and inner-contiguous permutations do not.
        let l = Layout::contiguous((4, 1030)).transpose(0, 1).unwrap();
        assert_eq!(tiled_transpose(&info(&l)), None);
        let l = Layout::contiguous((16, 8, 32)).transpose(0, 1).unwrap();
        assert_eq!(tiled_transpose(&info(&l)), None);
    }

    #[test]
    fn copy2d_reach_and_contiguity() {
        let c = Copy2d {
            rows: 3,
            cols: 4,
            src_stride: 10,
            dst_stride: 4,
            src_offset: 0,
            dst_offset: 0,
        };
        assert_eq!(c.reach(c.src_stride).unwrap(), 24);
        assert_eq!(c.reach(c.dst_stride).unwrap(), 12);
        assert!(!c.is_contiguous());
        assert!(Copy2d { src_stride: 4, ..c }.is_contiguous());
        assert!(Copy2d { rows: 1, ..c }.is_contiguous());
        assert_eq!(Copy2d { rows: 0, ..c }.reach(10).unwrap(), 0);
        let huge = Copy2d {
            rows: 1 << 40,
            src_stride: 1 << 40,
            ..c
        };
        assert!(huge.reach(huge.src_stride).is_err());
    }

    #[test]
    fn transposes_are_tiled() {
        let info = ElemInfo::new("t", &[8192, 8192], &[&[1, 8192]]).unwrap();
        assert_eq!(info.transposed_dim(), Some(0));
        assert_eq!(transpose_shape(&info, 0, 4).grid_dim.0, 256 * 256);
        assert_eq!(transpose_shape(&info, 0, 2).grid_dim.0, 128 * 128);
        // (4, 33, 65) with dims 1 and 2 swapped: 4 planes of 2 x 3 tiles.
        let info = ElemInfo::new("t", &[4, 65, 33], &[&[2145, 1, 65]]).unwrap();
        assert_eq!(info.transposed_dim(), Some(1));
        assert_eq!(transpose_shape(&info, 1, 4).grid_dim.0, 4 * 3 * 2);
    }
}
