//! Reductions: sum, min, max, argmin, argmax over any set of dimensions.

mod plan;

use candle_core::backend::BackendStorage;
use candle_core::op::ReduceOp;
use candle_core::{DType, Layout};

use hip_safe::KernelArg;

use crate::error::{Result, invalid};
use crate::kernel::catalogue::reduce_family;
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
    if reduce_dims.iter().all(|&d| d < layout.dims().len()) && !layout.is_contiguous() {
        let (kept, reduced) =
            ReduceInfo::merged_ranks(layout.dims(), layout.stride(), &reduce_dims);
        if kept.max(reduced) > REDUCE_MAX_DIMS {
            // More dimensions than the kernels index: reduce a contiguous
            // copy, whose runs of kept and reduced dimensions merge.
            let len = size::numel(name, layout.dims())?;
            // SAFETY: copy_strided_src writes every element of the copy.
            let mut copy = unsafe { src.device().alloc_storage(src.dtype(), len) }?;
            src.copy_strided_src(&mut copy, 0, layout)?;
            return reduce(&copy, op, &Layout::contiguous(layout.shape()), &reduce_dims);
        }
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
            // SAFETY: reduce_*(const ReduceInfo, const T* src, Out* dst, State*
            // work): `info` splits `layout` (whose reach the source view covers)
            // into kept and reduced dimensions, dst holds num_out values of the
            // output dtype, work holds REDUCE_STATE_BYTES (>= the state size)
            // per partial state when the plan splits the outputs and is never
            // touched (null) otherwise; block shapes are whole waves up to
            // CH_REDUCE_MAX_BLOCK, COLS and COLS_PACKED blocks exactly
            // CH_ELEM_BLOCK threads; reduce_cols_* take the same arguments.
            unsafe {
                device.kernels().launch(
                    step_kernel,
                    step.cfg,
                    &[&step.info, &src_view, &out_view, work_arg],
                )
            }?;
        }
    }
    Ok(out)
}
