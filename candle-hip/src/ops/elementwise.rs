//! Element-wise operations (unary ops, affine, powf, elu, binary ops,
//! comparisons, casts, where_cond, strided copies), all through one launch
//! path: inputs of one shape with arbitrary strides, a contiguous output.
//! The kernels of the one-input ops (unary ops and casts,
//! `Family::reads_contiguous`) read contiguous inputs only: a strided input
//! is first copied to a contiguous one ([`Dense`]), one more pass over it
//! for a kernel with half the code.

use candle_core::backend::BackendStorage;
use candle_core::op::CmpOp;
use candle_core::{DType, Layout};
use hip_safe::{DeviceViewMut, KernelArg, LaunchConfig};

use crate::dtype;
use crate::error::{Result, invalid};
use crate::kernel::catalogue::{self as cat, Family, Kernel};
use crate::kernel::grid::{linear, per_pack};
use crate::kernel::header::{ELEM_BLOCK, UNROLL, VEC_BYTES};
use crate::kernel::info::ElemInfo;
use crate::ops::copy::Dense;
use crate::size;
use crate::storage::HipStorage;

/// One input operand: a storage and the layout to read it with.
pub(crate) struct Input<'a> {
    pub(crate) storage: &'a HipStorage,
    pub(crate) layout: &'a Layout,
}

/// Launches an element-wise kernel `(ElemInfo, inputs..., out, params...)`
/// writing `out_dtype` values to the contiguous `out`, which holds exactly
/// as many elements as the inputs' shape.
pub(crate) fn launch_into(
    op: &'static str,
    kernel: Kernel,
    inputs: &[Input<'_>],
    out: DeviceViewMut<'_, u8>,
    out_dtype: DType,
    params: &[f64],
) -> Result<()> {
    let Some(first) = inputs.first() else {
        return Err(invalid(op, "no input"));
    };
    let dims = first.layout.dims();
    for input in inputs {
        first.storage.check_device(input.storage, op)?;
        if input.layout.dims() != dims {
            return Err(invalid(
                op,
                format!(
                    "operand shapes differ: {dims:?} and {:?}",
                    input.layout.dims()
                ),
            ));
        }
    }
    let strides: Vec<&[usize]> = inputs.iter().map(|i| i.layout.stride()).collect();
    let numel = size::numel(op, dims)?;
    if out.len() != size::mul(op, "the output bytes", numel, dtype::elem_bytes(out_dtype))? {
        return Err(invalid(
            op,
            format!(
                "output of {} bytes for {numel} elements of {out_dtype:?}",
                out.len()
            ),
        ));
    }
    if numel == 0 {
        return Ok(());
    }
    let info = ElemInfo::new(op, dims, &strides)?;
    if kernel.family.reads_contiguous() && !info.is_contiguous() {
        let dense = inputs
            .iter()
            .map(|i| Dense::of(op, i.storage, i.layout))
            .collect::<Result<Vec<_>>>()?;
        let layouts: Vec<Layout> = dense
            .iter()
            .map(|d| Layout::contiguous_with_offset(dims, d.start()))
            .collect();
        let inputs: Vec<Input<'_>> = dense
            .iter()
            .zip(&layouts)
            .map(|(d, l)| input(d.storage(), l))
            .collect();
        return launch_into(op, kernel, &inputs, out, out_dtype, params);
    }
    let device = first.storage.device();
    let widest = inputs
        .iter()
        .map(|i| dtype::elem_bytes(i.storage.dtype()))
        .fold(dtype::elem_bytes(out_dtype), usize::max);
    let info = info.with_inner_packs(inputs.len(), per_pack(widest));
    let cfg = launch_shape(&info, widest);
    let views = inputs
        .iter()
        .map(|input| input.storage.view(op, input.layout))
        .collect::<Result<Vec<_>>>()?;
    let mut args: Vec<&dyn KernelArg> = Vec::with_capacity(inputs.len() + params.len() + 2);
    args.push(&info);
    args.extend(views.iter().map(|v| v as &dyn KernelArg));
    args.push(&out);
    args.extend(params.iter().map(|p| p as &dyn KernelArg));
    // SAFETY: the element-wise kernels take (const ElemInfo, const In*...,
    // Out*, double...) in this order (kernels/*.hip, table families); `info`
    // describes the inputs' shape and strides (contiguous ones for a family
    // that reads only those, copied above), every input view spans all the
    // elements its layout reaches, and `out` holds numel elements.
    unsafe { device.kernels().launch(kernel, cfg, &args) }
}

/// Runs an element-wise kernel into a new contiguous storage of `out_dtype`.
fn run(
    op: &'static str,
    kernel: Kernel,
    inputs: &[Input<'_>],
    out_dtype: DType,
    params: &[f64],
) -> Result<HipStorage> {
    let Some(first) = inputs.first() else {
        return Err(invalid(op, "no input"));
    };
    let numel = size::numel(op, first.layout.dims())?;
    // SAFETY: `launch_into` writes all numel elements (or fails).
    let mut out = unsafe { first.storage.device().alloc_storage(out_dtype, numel) }?;
    launch_into(op, kernel, inputs, out.view_all_mut(), out_dtype, params)?;
    Ok(out)
}

fn input<'a>(storage: &'a HipStorage, layout: &'a Layout) -> Input<'a> {
    Input { storage, layout }
}

/// A unary op of `family`, reported as `op`.
pub(crate) fn unary(
    src: &HipStorage,
    layout: &Layout,
    family: &'static Family,
    op: &'static str,
) -> Result<HipStorage> {
    let wide = family.computed_as(src.dtype());
    if wide != src.dtype() {
        let out = unary(&cast(src, layout, wide)?, &contiguous(layout), family, op)?;
        return cast(&out, &contiguous(layout), src.dtype());
    }
    let k = family.kernel(op, src.dtype())?;
    run(op, k, &[input(src, layout)], src.dtype(), &[])
}

/// The family of candle's `UnaryOpT::KERNEL` / `BinaryOpT::KERNEL` name,
/// or an error naming `op`.
pub(crate) fn candle_family(kernel: &str, op: &'static str) -> Result<&'static Family> {
    cat::candle_op(kernel).ok_or_else(|| {
        candle_core::Error::Msg(format!(
            "candle-hip has no kernel `{kernel}` for {op} (not yet supported on HIP)"
        ))
        .bt()
    })
}

/// `x * mul + add`.
pub(crate) fn affine(src: &HipStorage, layout: &Layout, mul: f64, add: f64) -> Result<HipStorage> {
    let k = cat::AFFINE.kernel("affine", src.dtype())?;
    run("affine", k, &[input(src, layout)], src.dtype(), &[mul, add])
}

/// A unary op with one scalar parameter (`powf`, `elu`), reported as `op`.
pub(crate) fn with_param(
    src: &HipStorage,
    layout: &Layout,
    family: &'static Family,
    op: &'static str,
    param: f64,
) -> Result<HipStorage> {
    let k = family.kernel(op, src.dtype())?;
    run(op, k, &[input(src, layout)], src.dtype(), &[param])
}

/// A binary op of `family`, reported as `op`.
pub(crate) fn binary(
    lhs: &HipStorage,
    rhs: &HipStorage,
    lhs_l: &Layout,
    rhs_l: &Layout,
    family: &'static Family,
    op: &'static str,
) -> Result<HipStorage> {
    lhs.check_dtype(rhs, op)?;
    let wide = family.computed_as(lhs.dtype());
    if wide != lhs.dtype() {
        return widened(
            (lhs, lhs_l),
            (rhs, rhs_l),
            wide,
            Some(lhs.dtype()),
            |l, r, layout| binary(l, r, layout, layout, family, op),
        );
    }
    let k = family.kernel(op, lhs.dtype())?;
    run(
        op,
        k,
        &[input(lhs, lhs_l), input(rhs, rhs_l)],
        lhs.dtype(),
        &[],
    )
}

/// A comparison, producing u8.
pub(crate) fn cmp(
    lhs: &HipStorage,
    op: CmpOp,
    rhs: &HipStorage,
    lhs_l: &Layout,
    rhs_l: &Layout,
) -> Result<HipStorage> {
    lhs.check_dtype(rhs, "cmp")?;
    let wide = cat::CMP.computed_as(lhs.dtype());
    if wide != lhs.dtype() {
        return widened((lhs, lhs_l), (rhs, rhs_l), wide, None, |l, r, layout| {
            cmp(l, op, r, layout, layout)
        });
    }
    let k = cat::CMP.kernel("cmp", lhs.dtype())?;
    run(
        "cmp",
        k,
        &[input(lhs, lhs_l), input(rhs, rhs_l)],
        DType::U8,
        &[f64::from(cat::cmp_accept(op))],
    )
}

/// `f` of two operands of one shape computed in `wide`
/// ([`Family::computed_as`]): both converted to contiguous copies of
/// `wide` (read with the layout they share), the result converted to
/// `back` where given.
fn widened(
    (lhs, lhs_l): (&HipStorage, &Layout),
    (rhs, rhs_l): (&HipStorage, &Layout),
    wide: DType,
    back: Option<DType>,
    f: impl FnOnce(&HipStorage, &HipStorage, &Layout) -> Result<HipStorage>,
) -> Result<HipStorage> {
    let layout = contiguous(lhs_l);
    let out = f(&cast(lhs, lhs_l, wide)?, &cast(rhs, rhs_l, wide)?, &layout)?;
    match back {
        Some(dtype) => cast(&out, &layout, dtype),
        None => Ok(out),
    }
}

/// The contiguous layout of `layout`'s shape: that of a converted copy.
fn contiguous(layout: &Layout) -> Layout {
    Layout::contiguous(layout.shape())
}

/// A conversion to `dtype`.
pub(crate) fn cast(src: &HipStorage, layout: &Layout, dtype: DType) -> Result<HipStorage> {
    dtype::check(dtype, "to_dtype")?;
    let k = cat::CAST.pair("to_dtype", src.dtype(), dtype)?;
    run("to_dtype", k, &[input(src, layout)], dtype, &[])
}

/// A contiguous copy of indices in the dtype a kernel reads, and its
/// layout; `None` where the indices need no copy.
pub(crate) type ConvertedIds = Option<(HipStorage, Layout)>;

/// Indices the indexing kernels do not take (`dtype::WIDENED_IDS`) as a
/// contiguous i64 copy, the "no index" marker (the dtype's maximum)
/// becoming i64's: u8 indices always, i16 and i32 ones only for the ops
/// that take them (`adds`: scatter_add and index_add). `None` for the other
/// dtypes, which need no copy; i16 and i32 indices of the other ops stay
/// as they are, and the kernel lookup refuses them as candle's CPU backend
/// does.
pub(crate) fn widen_ids(
    ids: &HipStorage,
    layout: &Layout,
    op: &'static str,
    adds: bool,
) -> Result<ConvertedIds> {
    let dtype = ids.dtype();
    if !dtype::WIDENED_IDS.contains(&dtype) || (!adds && dtype::ADD_ONLY_IDS.contains(&dtype)) {
        return Ok(None);
    }
    convert_ids(&cat::WIDEN_IDS, ids, layout, op, DType::I64).map(Some)
}

/// Indices as the tile forms of scatter, scatter_add and index_add read
/// them: a contiguous u32 copy of every other index dtype
/// (`dtype::TILE_CONVERTED_IDS`), the "no index" marker becoming u32's and
/// values no tile form's destination reaches (negative or too large)
/// becoming `header::TILE_ID_PAST`, still reported as past the
/// destination. `None` for u32 indices, which need no copy.
pub(crate) fn tile_ids(
    ids: &HipStorage,
    layout: &Layout,
    op: &'static str,
) -> Result<ConvertedIds> {
    if ids.dtype() == DType::U32 {
        return Ok(None);
    }
    convert_ids(&cat::TILE_IDS, ids, layout, op, DType::U32).map(Some)
}

/// A contiguous copy of `ids` in `dtype` by the index conversion `family`.
fn convert_ids(
    family: &'static Family,
    ids: &HipStorage,
    layout: &Layout,
    op: &'static str,
    dtype: DType,
) -> Result<(HipStorage, Layout)> {
    let k = family.kernel(op, ids.dtype())?;
    let converted = run(op, k, &[input(ids, layout)], dtype, &[])?;
    Ok((converted, contiguous(layout)))
}

/// `pred != 0 ? on_true : on_false`.
pub(crate) fn where_cond(
    pred: &HipStorage,
    pred_l: &Layout,
    on_true: &HipStorage,
    true_l: &Layout,
    on_false: &HipStorage,
    false_l: &Layout,
) -> Result<HipStorage> {
    on_true.check_dtype(on_false, "where_cond")?;
    let k = cat::WHERE.pair("where_cond", pred.dtype(), on_true.dtype())?;
    let inputs = [
        input(pred, pred_l),
        input(on_true, true_l),
        input(on_false, false_l),
    ];
    run("where_cond", k, &inputs, on_true.dtype(), &[])
}

/// Converts the elements `layout` selects from `src`, in row-major order,
/// to `dtype` in the contiguous `out`.
pub(crate) fn cast_into(
    src: &HipStorage,
    layout: &Layout,
    out: DeviceViewMut<'_, u8>,
    dtype: DType,
) -> Result<()> {
    let k = cat::CAST.pair("to_dtype", src.dtype(), dtype)?;
    launch_into("to_dtype", k, &[input(src, layout)], out, dtype, &[])
}

/// Copies the elements `layout` selects from `src`, in row-major order, to
/// the contiguous `out`.
pub(crate) fn copy_into(
    src: &HipStorage,
    layout: &Layout,
    out: DeviceViewMut<'_, u8>,
) -> Result<()> {
    let k = cat::UCOPY.kernel("copy_strided_src", src.dtype())?;
    launch_into(
        "copy_strided_src",
        k,
        &[input(src, layout)],
        out,
        src.dtype(),
        &[],
    )
}

/// The launch shape of an element-wise kernel (`map_elems`, `fill`): contiguous
/// operands take `UNROLL` packs per thread (half as many for packs of 8 or
/// more elements, as `map_elems` does), strided ones a pack or element per
/// thread (the kernel loops over what the grid does not cover).
pub(crate) fn launch_shape(info: &ElemInfo, widest: usize) -> LaunchConfig {
    let work = work(info, widest);
    let per_thread = if !info.is_contiguous() {
        1
    } else if per_pack(widest) <= 4 {
        UNROLL
    } else {
        UNROLL / 2
    };
    linear(
        work.div_ceil(u64::from(ELEM_BLOCK * per_thread)),
        ELEM_BLOCK,
    )
}

/// Work items of an element-wise kernel: 16-byte packs when every operand is
/// contiguous or the innermost dimension moves in packs (`widest` is the
/// largest element size among them), elements otherwise.
fn work(info: &ElemInfo, widest: usize) -> u64 {
    if info.is_contiguous() || info.inner_vec != 0 {
        let per_pack = (VEC_BYTES / widest.max(1)).max(1) as u64;
        info.numel.div_ceil(per_pack)
    } else {
        info.numel
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_work_counts_packs() {
        let info = ElemInfo::new("t", &[1001], &[&[1]]).unwrap();
        assert_eq!(work(&info, 4), 251);
        assert_eq!(work(&info, 1), 63);
        assert_eq!(work(&info, 8), 501);
        let strided = ElemInfo::new("t", &[4, 3], &[&[1, 4]]).unwrap();
        assert_eq!(work(&strided, 4), 12);
        // A row broadcast moves in packs along the rows.
        let bcast = ElemInfo::new("t", &[8, 16], &[&[16, 1], &[0, 1]])
            .unwrap()
            .with_inner_packs(2, 4);
        assert_eq!(work(&bcast, 4), 32);
        // 2^26 f32: 2^24 packs, UNROLL per thread; bf16: 2^23 packs of 8,
        // half as many per thread; strided: one per thread.
        let big = ElemInfo::new("t", &[1 << 26], &[&[1]]).unwrap();
        let per_block = ELEM_BLOCK * UNROLL;
        assert_eq!(launch_shape(&big, 4).grid_dim.0, (1 << 24) / per_block);
        assert_eq!(
            launch_shape(&big, 2).grid_dim.0,
            (1 << 23) / (per_block / 2)
        );
        let t = ElemInfo::new("t", &[1 << 13, 1 << 13], &[&[1, 1 << 13]]).unwrap();
        assert_eq!(launch_shape(&t, 4).grid_dim.0, (1 << 26) / ELEM_BLOCK);
    }
}
