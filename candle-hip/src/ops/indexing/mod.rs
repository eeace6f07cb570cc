//! Indexing: index_select, gather, scatter (set and add), index_add.
//!
//! Contiguity requirements are candle's (CPU and CUDA backends alike): the
//! source of index_select and every operand of gather, scatter and
//! index_add except index_add's destination must be contiguous; index_select
//! takes strided 1-D indices.

pub(crate) mod fault;
mod plan;

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use hip_safe::LaunchConfig;

use crate::dtype;
use crate::error::{Result, invalid};
use crate::kernel::catalogue::{self as cat, Kernel};
use crate::kernel::grid::{per_pack, unrolled};
use crate::kernel::info::{IndexInfo, split_at_dim, to_u64};
use crate::ops::elementwise::{self, ConvertedIds};
use crate::size;
use crate::storage::HipStorage;
use fault::Reporter;
use plan::{INDEX_ADD, SCATTER, SCATTER_ADD, UpdateFamilies, Updates};

/// The kernel and launch shape that apply the updates `info` describes
/// into a destination like `dst` (its dtype and device), and the indices
/// as that kernel reads them: `ids` itself, or a converted copy (see
/// [`update_ids`]). Sets `info.wide_ids` for them.
fn plan_updates(
    op: &'static str,
    families: &UpdateFamilies,
    info: &mut IndexInfo,
    ids: &HipStorage,
    ids_l: &Layout,
    adds: bool,
    dst: &HipStorage,
) -> Result<(Kernel, LaunchConfig, ConvertedIds)> {
    let launcher = dst.device().kernels();
    let updates = Updates {
        info: *info,
        elem_bytes: dst.dtype().size_in_bytes(),
    };
    let (family, cfg) = families.choose(updates, launcher.wave_size(), launcher.compute_units());
    let converted = update_ids(ids, ids_l, op, adds, family == families.tiles)?;
    let ids = converted.as_ref().map_or(ids, |(w, _)| w);
    info.wide_ids = wide_ids(ids);
    let kernel = cat::indexing_kernel(family, op, ids.dtype(), dst.dtype())?;
    Ok((kernel, cfg, converted))
}

/// Indices of an update op as its kernel reads them, `None` where that is
/// `ids` as it is: the tile forms (`tiles`) read u32 ones only, so every
/// other dtype gets a u32 copy ([`elementwise::tile_ids`]); the other forms
/// read u32 and i64 ones, so u8 (and for the adding ops, `adds`, i16 and
/// i32) get an i64 copy ([`elementwise::widen_ids`]). Dtypes candle's CPU
/// backend refuses for `op` are refused before any copy.
fn update_ids(
    ids: &HipStorage,
    ids_l: &Layout,
    op: &'static str,
    adds: bool,
    tiles: bool,
) -> Result<ConvertedIds> {
    if !tiles {
        return elementwise::widen_ids(ids, ids_l, op, adds);
    }
    if !adds && dtype::ADD_ONLY_IDS.contains(&ids.dtype()) {
        return Err(candle_core::Error::UnsupportedDTypeForOp(ids.dtype(), op).bt());
    }
    elementwise::tile_ids(ids, ids_l, op)
}

/// `IndexInfo::wide_ids` for indices of `ids`' dtype: 1 for i64, 0 for u32
/// (the only index dtypes the kernels take: [`cat::indexing_kernel`]).
fn wide_ids(ids: &HipStorage) -> u64 {
    u64::from(ids.dtype() == DType::I64)
}

/// Whether scatter replaces or accumulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scatter {
    /// `dst[.., ids[..], ..] = src[..]`.
    Set,
    /// `dst[.., ids[..], ..] += src[..]`.
    Add,
}

fn require_contiguous(layout: &Layout, op: &'static str) -> Result<()> {
    if layout.is_contiguous() {
        Ok(())
    } else {
        Err(candle_core::Error::RequiresContiguous { op }.bt())
    }
}

fn check_dim(dim: usize, dims: &[usize], op: &'static str) -> Result<()> {
    if dim < dims.len() {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("dimension {dim} of a rank-{} tensor", dims.len()),
        ))
    }
}

/// A new storage of `numel` elements of `src`'s dtype, written by the
/// lookup kernel `(IndexInfo, const void* ids, const T* src, T* out)` launched
/// over `work` items (nothing is launched when `numel` is 0).
///
/// # Safety
/// `info` must keep every access inside the views of `ids`, `src` and the
/// `numel` outputs, the kernel must write all `numel` outputs (see the
/// kernels in `kernels/indexing.hip`), and `kernel` must be of the indexing
/// families.
#[allow(clippy::too_many_arguments)]
unsafe fn lookup(
    op: &'static str,
    kernel: Kernel,
    src: &HipStorage,
    src_l: &Layout,
    ids: &HipStorage,
    ids_l: &Layout,
    info: IndexInfo,
    numel: usize,
    work: usize,
) -> Result<HipStorage> {
    // SAFETY: the kernel writes all numel outputs (the caller's contract).
    let mut out = unsafe { src.device().alloc_storage(src.dtype(), numel) }?;
    if numel == 0 {
        return Ok(out);
    }
    let ids_view = ids.view(op, ids_l)?;
    let src_view = src.view(op, src_l)?;
    let out_view = out.view_all_mut();
    let cfg = unrolled(to_u64(work));
    // SAFETY: forwarded to the caller.
    unsafe {
        src.device()
            .kernels()
            .launch(kernel, cfg, &[&info, &ids_view, &src_view, &out_view])
    }?;
    Ok(out)
}

/// Selects `ids` (1-D, any stride) along `dim` of the contiguous `src`.
pub(crate) fn index_select(
    src: &HipStorage,
    ids: &HipStorage,
    src_l: &Layout,
    ids_l: &Layout,
    dim: usize,
) -> Result<HipStorage> {
    const OP: &str = "index-select";
    src.check_device(ids, OP)?;
    require_contiguous(src_l, OP)?;
    check_dim(dim, src_l.dims(), OP)?;
    let &[n_ids] = ids_l.dims() else {
        return Err(invalid(
            OP,
            format!("indices of shape {:?} are not 1-D", ids_l.dims()),
        ));
    };
    let wide = elementwise::widen_ids(ids, ids_l, OP, false)?;
    let (ids, ids_l) = wide.as_ref().map_or((ids, ids_l), |(w, l)| (w, l));
    let kernel = cat::indexing_kernel(&cat::INDEX_SELECT, OP, ids.dtype(), src.dtype())?;
    let (left, src_dim, right) = split_at_dim(OP, src_l.dims(), dim)?;
    let numel = size::product(OP, "the output", &[left, n_ids, right])?;
    let mut info = IndexInfo {
        left: to_u64(left),
        right: to_u64(right),
        src_dim: to_u64(src_dim),
        ids_dim: to_u64(n_ids),
        ids_stride: to_u64(ids_l.stride()[0]),
        wide_ids: wide_ids(ids),
        ..IndexInfo::default()
    };
    src.device().faults().arm(&mut info, Reporter::IndexSelect);
    let per_pack = per_pack(src.dtype().size_in_bytes());
    let work = if right % per_pack == 0 {
        numel / per_pack
    } else {
        numel
    };
    // SAFETY: the kernel writes all numel outputs; out[(l * ids_dim + i) *
    // right + r] (numel values) and src[(l * src_dim + id) * right + r] with
    // id < src_dim (checked by the kernel) stay inside the views;
    // ids[i * ids_stride] for i < n_ids is inside the index view, which
    // covers the 1-D layout's reach.
    unsafe { lookup(OP, kernel, src, src_l, ids, ids_l, info, numel, work) }
}

/// `out[l, i, r] = src[l, ids[l, i, r], r]`, the output shaped like `ids`.
pub(crate) fn gather(
    src: &HipStorage,
    src_l: &Layout,
    ids: &HipStorage,
    ids_l: &Layout,
    dim: usize,
) -> Result<HipStorage> {
    const OP: &str = "gather";
    src.check_device(ids, OP)?;
    require_contiguous(src_l, OP)?;
    require_contiguous(ids_l, OP)?;
    check_dim(dim, src_l.dims(), OP)?;
    check_dim(dim, ids_l.dims(), OP)?;
    if ids_l.dims().len() != src_l.dims().len() {
        return Err(invalid(
            OP,
            format!("indices {:?} for source {:?}", ids_l.dims(), src_l.dims()),
        ));
    }
    let wide = elementwise::widen_ids(ids, ids_l, OP, false)?;
    let (ids, ids_l) = wide.as_ref().map_or((ids, ids_l), |(w, l)| (w, l));
    let kernel = cat::indexing_kernel(&cat::GATHER, OP, ids.dtype(), src.dtype())?;
    let (left, ids_dim, right) = split_at_dim(OP, ids_l.dims(), dim)?;
    let (src_left, src_dim, src_right) = split_at_dim(OP, src_l.dims(), dim)?;
    if left > src_left || right > src_right {
        return Err(invalid(
            OP,
            format!(
                "indices {:?} larger than source {:?}",
                ids_l.dims(),
                src_l.dims()
            ),
        ));
    }
    let numel = size::product(OP, "the output", &[left, ids_dim, right])?;
    let mut info = IndexInfo {
        left: to_u64(left),
        right: to_u64(right),
        src_dim: to_u64(src_dim),
        ids_dim: to_u64(ids_dim),
        src_right: to_u64(src_right),
        wide_ids: wide_ids(ids),
        ..IndexInfo::default()
    };
    src.device().faults().arm(&mut info, Reporter::Gather);
    // SAFETY: the kernel writes all numel outputs; ids and out hold numel =
    // left * ids_dim * right elements; the source offset (l * src_dim + id)
    // * src_right + r with l < left <= src_left, id < src_dim (checked by the
    // kernel) and r < right <= src_right is below src_left * src_dim *
    // src_right.
    unsafe { lookup(OP, kernel, src, src_l, ids, ids_l, info, numel, numel) }
}

/// Writes (or adds) `src` into `dst` at the positions `ids` give along `dim`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter(
    dst: &mut HipStorage,
    dst_l: &Layout,
    ids: &HipStorage,
    ids_l: &Layout,
    src: &HipStorage,
    src_l: &Layout,
    dim: usize,
    mode: Scatter,
) -> Result<()> {
    let (op, families, reporter) = match mode {
        Scatter::Set => ("scatter", &SCATTER, Reporter::Scatter),
        Scatter::Add => ("scatter-add", &SCATTER_ADD, Reporter::ScatterAdd),
    };
    dst.check_device(ids, op)?;
    dst.check_device(src, op)?;
    dst.check_dtype(src, op)?;
    for layout in [dst_l, ids_l, src_l] {
        require_contiguous(layout, op)?;
    }
    check_dim(dim, dst_l.dims(), op)?;
    if ids_l.dims() != src_l.dims() || ids_l.dims().len() != dst_l.dims().len() {
        return Err(invalid(
            op,
            format!(
                "indices {:?}, source {:?}, destination {:?}",
                ids_l.dims(),
                src_l.dims(),
                dst_l.dims()
            ),
        ));
    }
    let (left, ids_dim, right) = split_at_dim(op, ids_l.dims(), dim)?;
    let (dst_left, dst_dim, dst_right) = split_at_dim(op, dst_l.dims(), dim)?;
    if (left, right) != (dst_left, dst_right) {
        return Err(invalid(
            op,
            format!(
                "source {:?} does not fit destination {:?}",
                src_l.dims(),
                dst_l.dims()
            ),
        ));
    }
    let wide = families.columns.computed_as(dst.dtype());
    if wide != dst.dtype() {
        // Updated in a wide copy, then converted back into dst's elements.
        let layout = Layout::contiguous(dst_l.shape());
        let mut wide_dst = dst.to_dtype(dst_l, wide)?;
        let wide_src = src.to_dtype(src_l, wide)?;
        let src_l = Layout::contiguous(src_l.shape());
        scatter(
            &mut wide_dst,
            &layout,
            ids,
            ids_l,
            &wide_src,
            &src_l,
            dim,
            mode,
        )?;
        let dtype = dst.dtype();
        return elementwise::cast_into(&wide_dst, &layout, dst.view_mut(op, dst_l)?, dtype);
    }
    let mut info = IndexInfo {
        left: to_u64(left),
        right: to_u64(right),
        dst_dim: to_u64(dst_dim),
        ids_dim: to_u64(ids_dim),
        ..IndexInfo::default()
    };
    let (kernel, cfg, converted) = plan_updates(
        op,
        families,
        &mut info,
        ids,
        ids_l,
        mode == Scatter::Add,
        dst,
    )?;
    let (ids, ids_l) = converted.as_ref().map_or((ids, ids_l), |(w, l)| (w, l));
    let device = dst.device().clone();
    device.faults().arm(&mut info, reporter);
    if left * right == 0 || ids_dim == 0 {
        return Ok(());
    }
    let ids_view = ids.view(op, ids_l)?;
    let src_view = src.view(op, src_l)?;
    let dst_view = dst.view_mut(op, dst_l)?;
    // SAFETY: scatter*(const IndexInfo, const void* ids, const T* src, T*
    // dst), ids of the dtype info.wide_ids names (the kernel lookup took
    // only u32 and i64; the tile forms get u32 ones, update_ids):
    // ids and src hold left * ids_dim * right elements, dst left * dst_dim *
    // right (the destination layout's reach); positions >= dst_dim are
    // skipped by the kernel. dst is a different storage (exclusive borrow),
    // so the kernel's early loads of ids and src never see its own writes.
    // The tile form gets blocks of one wave (its kernels' launch bound).
    unsafe {
        device
            .kernels()
            .launch(kernel, cfg, &[&info, &ids_view, &src_view, &dst_view])
    }
}

/// A copy of `dst` with `src` added along `dim` at the positions `ids` (1-D) give.
pub(crate) fn index_add(
    dst: &HipStorage,
    dst_l: &Layout,
    ids: &HipStorage,
    ids_l: &Layout,
    src: &HipStorage,
    src_l: &Layout,
    dim: usize,
) -> Result<HipStorage> {
    const OP: &str = "index-add";
    dst.check_device(ids, OP)?;
    dst.check_device(src, OP)?;
    dst.check_dtype(src, OP)?;
    require_contiguous(ids_l, OP)?;
    require_contiguous(src_l, OP)?;
    check_dim(dim, dst_l.dims(), OP)?;
    check_dim(dim, src_l.dims(), OP)?;
    let n_ids = size::numel(OP, ids_l.dims())?;
    let (left, dst_dim, right) = split_at_dim(OP, dst_l.dims(), dim)?;
    let (src_left, src_dim, src_right) = split_at_dim(OP, src_l.dims(), dim)?;
    if (left, right) != (src_left, src_right) || n_ids != src_dim {
        return Err(invalid(
            OP,
            format!(
                "indices {:?}, source {:?}, destination {:?}",
                ids_l.dims(),
                src_l.dims(),
                dst_l.dims()
            ),
        ));
    }
    let wide = INDEX_ADD.columns.computed_as(dst.dtype());
    if wide != dst.dtype() {
        let (layout, src_layout) = (
            Layout::contiguous(dst_l.shape()),
            Layout::contiguous(src_l.shape()),
        );
        let (wide_dst, wide_src) = (dst.to_dtype(dst_l, wide)?, src.to_dtype(src_l, wide)?);
        let out = index_add(&wide_dst, &layout, ids, ids_l, &wide_src, &src_layout, dim)?;
        return out.to_dtype(&layout, dst.dtype());
    }
    let mut info = IndexInfo {
        left: to_u64(left),
        right: to_u64(right),
        src_dim: to_u64(src_dim),
        dst_dim: to_u64(dst_dim),
        ids_dim: to_u64(n_ids),
        ..IndexInfo::default()
    };
    let (kernel, cfg, converted) = plan_updates(OP, &INDEX_ADD, &mut info, ids, ids_l, true, dst)?;
    let (ids, ids_l) = converted.as_ref().map_or((ids, ids_l), |(w, l)| (w, l));
    let device = dst.device();
    device.faults().arm(&mut info, Reporter::IndexAdd);
    let numel = size::numel(OP, dst_l.dims())?;
    // SAFETY: the copy below writes all numel elements.
    let mut out = unsafe { device.alloc_storage(dst.dtype(), numel) }?;
    elementwise::copy_into(dst, dst_l, out.view_all_mut())?;
    if left * right == 0 || n_ids == 0 {
        return Ok(out);
    }
    let ids_view = ids.view(OP, ids_l)?;
    let src_view = src.view(OP, src_l)?;
    let out_view = out.view_all_mut();
    // SAFETY: index_add(_rows, _tiles)(const IndexInfo, const void* ids,
    // const T* src, T* dst), ids of the dtype info.wide_ids names (u32 for
    // the tile form, update_ids): ids holds
    // n_ids values, src left * src_dim * right,
    // dst left * dst_dim * right; positions >= dst_dim are skipped by the
    // kernel. dst is the new storage `out`, distinct from ids and src. The
    // per-row kernel gets whole waves of at most CH_ELEM_BLOCK threads, the
    // tile form blocks of one wave.
    unsafe {
        device
            .kernels()
            .launch(kernel, cfg, &[&info, &ids_view, &src_view, &out_view])
    }?;
    Ok(out)
}
