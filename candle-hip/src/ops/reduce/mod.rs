//! Reductions: sum, min, max, argmin, argmax over any set of dimensions.

mod plan;

use candle_core::backend::BackendStorage;
use candle_core::op::ReduceOp;
use candle_core::{DType, Layout};

use hip_safe::KernelArg;

use crate::error::{Result, invalid};
use crate::kernel::catalogue::{reduce_direction, reduce_family};
use crate::kernel::header::{REDUCE_MAX_DIMS, REDUCE_STATE_BYTES};
use crate::kernel::info::{ReduceInfo, ReduceMode};
use crate::size;
use crate::storage::HipStorage;

/// Reduces `src` over `dims`. The output is contiguous in the order of the
/// kept dimensions (candle's keepdim shape); argmin/argmax give u32
/// positions counted in the reduced dimensions, in increasing dimension order.
pub(crate) fn reduce(
    src: &HipStorage,
    op: ReduceOp,
    layout: &Layout,
    dims: &[usize],
) -> Result<HipStorage> {
    let wide = reduce_family(op, false).computed_as(src.dtype());
    if wide != src.dtype() {
        return reduce_widened(src, op, layout, dims, wide);
    }
    let family = reduce_family(op, false);
    let name = family.name;
    let kernel = family.kernel(name, src.dtype())?;
    let out_dtype = match op {
        ReduceOp::ArgMin | ReduceOp::ArgMax => DType::U32,
        ReduceOp::Sum | ReduceOp::Min | ReduceOp::Max => src.dtype(),
    };
    if op != ReduceOp::Sum && size::numel(name, layout.dims())? == 0 {
        return Err(candle_core::Error::EmptyTensor { op: "reduce" }.bt());
    }
    let mut reduce_dims = dims.to_vec();
    reduce_dims.sort_unstable();
    reduce_dims.dedup();
    // A contiguous source of rank 2 * REDUCE_MAX_DIMS or less always fits.
    let may_exceed = !layout.is_contiguous() || layout.dims().len() > 2 * REDUCE_MAX_DIMS;
    if may_exceed
        && reduce_dims.iter().all(|&d| d < layout.dims().len())
        && ReduceInfo::exceeds_kernels(layout.dims(), layout.stride(), &reduce_dims)
        && let Some(out) = reduce_in_steps(src, op, layout, &reduce_dims)?
    {
        return Ok(out);
    }
    let info = ReduceInfo::new(name, layout.dims(), layout.stride(), &reduce_dims)?;
    if out_dtype == DType::U32 && info.red_size >= u64::from(u32::MAX) {
        return Err(invalid(
            name,
            format!(
                "{} elements per output exceed the u32 positions",
                info.red_size
            ),
        ));
    }
    let device = src.device();
    let num_out = info.num_out as usize;
    // SAFETY: the kernel writes every one of the num_out outputs.
    let mut out = unsafe { device.alloc_storage(out_dtype, num_out) }?;
    if num_out == 0 {
        return Ok(out);
    }
    let plan = plan::reduction(
        info,
        src.dtype().size_in_bytes(),
        layout.start_offset() as u64,
        device.kernels().wave_size(),
        device.kernels().compute_units(),
    );
    let partials = usize::try_from(plan.partials())
        .ok()
        .and_then(|p| p.checked_mul(REDUCE_STATE_BYTES))
        .ok_or_else(|| invalid(name, "too many partial states"))?;
    let mut work = if partials == 0 {
        None
    } else {
        // SAFETY: the main launch writes every partial state before the
        // finish launch (queued after it on the same stream) reads them.
        Some(unsafe { device.alloc_storage(DType::U8, partials) }?)
    };
    {
        let src_view = src.view(name, layout)?;
        let out_view = out.view_all_mut();
        let work_view = work.as_mut().map(|w| w.view_all_mut());
        let no_work = 0u64;
        let largest = reduce_direction(op);
        let work_arg: &dyn KernelArg = match &work_view {
            Some(w) => w,
            None => &no_work,
        };
        for step in [Some(plan.main), plan.finish].into_iter().flatten() {
            let step_kernel = if step.info.mode == ReduceMode::ColsPacked as u32 {
                reduce_family(op, true).kernel(name, src.dtype())?
            } else {
                kernel
            };
            let mut args: Vec<&dyn KernelArg> = vec![&step.info, &src_view, &out_view, work_arg];
            if let Some(largest) = &largest {
                args.push(largest);
            }
            // SAFETY: reduce_*(const ReduceInfo, const T* src, Out* dst, State*
            // work[, u32 largest]): `info` splits `layout` (whose reach the
            // source view covers) into kept and reduced dimensions, dst holds
            // num_out values of the output dtype, work holds
            // REDUCE_STATE_BYTES (>= the state size) per partial state when
            // the plan splits the outputs and is never touched (null)
            // otherwise; min/max kernels (and only they) take the direction
            // last; block shapes are whole waves up to CH_REDUCE_MAX_BLOCK,
            // COLS and COLS_PACKED blocks exactly CH_ELEM_BLOCK threads;
            // reduce_cols_* take the same arguments.
            unsafe { device.kernels().launch(step_kernel, step.cfg, &args) }?;
        }
    }
    Ok(out)
}

/// Reduces `src` as `wide`, a dtype that holds each of its values exactly,
/// and converts a sum, minimum or maximum back (positions stay u32): i16,
/// i32 and f8e4m3 as the dtype whose kernels reduce them
/// (`Family::computed_as`), where minima, maxima and positions are the same
/// and a sum wraps (integers) or rounds once (f8e4m3, whose kernels would sum
/// in f32 too) as the narrow dtype's own kernel would; and the f16/bf16 sums that
/// [`reduce_in_steps`] takes in two passes, in f32 as the kernels sum them.
fn reduce_widened(
    src: &HipStorage,
    op: ReduceOp,
    layout: &Layout,
    dims: &[usize],
    wide: DType,
) -> Result<HipStorage> {
    let widened = src.to_dtype(layout, wide)?;
    let out = reduce(&widened, op, &Layout::contiguous(layout.shape()), dims)?;
    if matches!(op, ReduceOp::ArgMin | ReduceOp::ArgMax) {
        return Ok(out);
    }
    out.to_dtype(&Layout::contiguous(out.len()), src.dtype())
}

/// Reduces a source with more kept or reduced dimensions, after merging,
/// than the kernels index ([`REDUCE_MAX_DIMS`]; `reduce_dims` sorted and
/// valid). A strided source is reduced from a contiguous copy, whose runs
/// of kept and reduced dimensions merge (at most four of each up to rank
/// 8). Past that, sum, min and max reduce the later half of the dimensions
/// first, then the rest of that result (whose reduced dimensions have size
/// 1), in f32 for a sum of 16-bit floats as the kernels sum them.
/// `None`: no way round it (argmin/argmax, or one reduced dimension, of a
/// contiguous source), which [`ReduceInfo::new`] reports.
fn reduce_in_steps(
    src: &HipStorage,
    op: ReduceOp,
    layout: &Layout,
    reduce_dims: &[usize],
) -> Result<Option<HipStorage>> {
    if !layout.is_contiguous() {
        let len = size::numel("reduce", layout.dims())?;
        // SAFETY: copy_strided_src writes every element of the copy.
        let mut copy = unsafe { src.device().alloc_storage(src.dtype(), len) }?;
        src.copy_strided_src(&mut copy, 0, layout)?;
        return reduce(&copy, op, &Layout::contiguous(layout.shape()), reduce_dims).map(Some);
    }
    if matches!(op, ReduceOp::ArgMin | ReduceOp::ArgMax) || reduce_dims.len() < 2 {
        return Ok(None);
    }
    let narrow = matches!(src.dtype(), DType::F16 | DType::BF16);
    if op == ReduceOp::Sum && narrow {
        return reduce_widened(src, op, layout, reduce_dims, DType::F32).map(Some);
    }
    let (first, later) = reduce_dims.split_at(reduce_dims.len() / 2);
    let partial = reduce(src, op, layout, later)?;
    let mut dims = layout.dims().to_vec();
    for &d in later {
        dims[d] = 1;
    }
    reduce(&partial, op, &Layout::contiguous(dims), first).map(Some)
}
