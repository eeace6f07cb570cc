//! Element-wise operations (unary ops, affine, powf, elu, binary ops,
//! comparisons, casts, where_cond, strided copies), all through one launch
//! path: inputs of one shape with arbitrary strides, a contiguous output.

use candle_core::backend::BackendStorage;
use candle_core::op::CmpOp;
use candle_core::{DType, Layout};
use hip_safe::DeviceViewMut;

use crate::dtype;
use crate::error::{Result, invalid};
use crate::info::ElemInfo;
use crate::launch::{self, Arg};
use crate::storage::HipStorage;
use crate::table::{self, Kernel};

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
    let numel = first.layout.shape().elem_count();
    if out.len() != numel * out_dtype.size_in_bytes() {
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
    let device = first.storage.device();
    let widest = inputs
        .iter()
        .map(|i| i.storage.dtype().size_in_bytes())
        .fold(out_dtype.size_in_bytes(), usize::max);
    let info =
        ElemInfo::new(op, dims, &strides)?.with_inner_packs(inputs.len(), launch::per_pack(widest));
    let cfg = launch::elementwise(&info, widest);
    let mut args = Vec::with_capacity(inputs.len() + params.len() + 2);
    args.push(Arg::Elem(info));
    for input in inputs {
        args.push(Arg::In(input.storage.view(op, input.layout)?));
    }
    args.push(Arg::Out(out));
    args.extend(params.iter().map(|&p| Arg::F64(p)));
    // SAFETY: the element-wise kernels take (const ElemInfo, const In*...,
    // Out*, double...) in this order (kernels/*.hip, table families); `info`
    // describes the inputs' shape and strides, every input view spans all
    // the elements its layout reaches, and `out` holds numel elements.
    unsafe { launch::launch(device, kernel, cfg, &args) }
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
    let numel = first.layout.shape().elem_count();
    // SAFETY: `launch_into` writes all numel elements (or fails).
    let mut out = unsafe { first.storage.device().alloc_storage(out_dtype, numel) }?;
    launch_into(op, kernel, inputs, out.view_all_mut(), out_dtype, params)?;
    Ok(out)
}

fn input<'a>(storage: &'a HipStorage, layout: &'a Layout) -> Input<'a> {
    Input { storage, layout }
}

/// A unary op by candle's `UnaryOpT::KERNEL` (`kernel`) and `NAME` (`op`).
pub(crate) fn unary(
    src: &HipStorage,
    layout: &Layout,
    kernel: &str,
    op: &'static str,
) -> Result<HipStorage> {
    let k = table::kernel(kernel, op, src.dtype(), None)?;
    run(op, k, &[input(src, layout)], src.dtype(), &[])
}

/// `x * mul + add`.
pub(crate) fn affine(src: &HipStorage, layout: &Layout, mul: f64, add: f64) -> Result<HipStorage> {
    let k = table::kernel("affine", "affine", src.dtype(), None)?;
    run("affine", k, &[input(src, layout)], src.dtype(), &[mul, add])
}

/// A unary op with one scalar parameter (`powf`, `elu`).
pub(crate) fn with_param(
    src: &HipStorage,
    layout: &Layout,
    op: &'static str,
    param: f64,
) -> Result<HipStorage> {
    let k = table::kernel(op, op, src.dtype(), None)?;
    run(op, k, &[input(src, layout)], src.dtype(), &[param])
}

/// A binary op by candle's `BinaryOpT::KERNEL` (`kernel`) and `NAME` (`op`).
pub(crate) fn binary(
    lhs: &HipStorage,
    rhs: &HipStorage,
    lhs_l: &Layout,
    rhs_l: &Layout,
    kernel: &str,
    op: &'static str,
) -> Result<HipStorage> {
    lhs.check_dtype(rhs, op)?;
    let k = table::kernel(kernel, op, lhs.dtype(), None)?;
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
    let k = table::kernel(table::cmp_family(op), "cmp", lhs.dtype(), None)?;
    run(
        "cmp",
        k,
        &[input(lhs, lhs_l), input(rhs, rhs_l)],
        DType::U8,
        &[],
    )
}

/// A conversion to `dtype`.
pub(crate) fn cast(src: &HipStorage, layout: &Layout, dtype: DType) -> Result<HipStorage> {
    dtype::check(dtype, "to_dtype")?;
    let k = table::kernel("cast", "to_dtype", src.dtype(), Some(dtype))?;
    run("to_dtype", k, &[input(src, layout)], dtype, &[])
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
    let k = table::kernel("where", "where_cond", pred.dtype(), Some(on_true.dtype()))?;
    let inputs = [
        input(pred, pred_l),
        input(on_true, true_l),
        input(on_false, false_l),
    ];
    run("where_cond", k, &inputs, on_true.dtype(), &[])
}

/// Copies the elements `layout` selects from `src`, in row-major order, to
/// the contiguous `out`.
pub(crate) fn copy_into(
    src: &HipStorage,
    layout: &Layout,
    out: DeviceViewMut<'_, u8>,
) -> Result<()> {
    let k = table::kernel("ucopy", "copy_strided_src", src.dtype(), None)?;
    launch_into(
        "copy_strided_src",
        k,
        &[input(src, layout)],
        out,
        src.dtype(),
        &[],
    )
}
