//! Reductions: sum, min, max, argmin, argmax over any set of dimensions.

use candle_core::backend::BackendStorage;
use candle_core::op::ReduceOp;
use candle_core::{DType, Layout};

use crate::error::{Result, invalid};
use crate::info::{REDUCE_STATE_BYTES, ReduceInfo, ReduceMode};
use crate::launch::{self, Arg};
use crate::storage::HipStorage;
use crate::table;

/// Reduces `src` over `dims`. The output is contiguous in the order of the
/// kept dimensions (candle's keepdim shape); argmin/argmax give u32
/// positions counted in the reduced dimensions, in increasing dimension order.
pub(crate) fn reduce(
    src: &HipStorage,
    op: ReduceOp,
    layout: &Layout,
    dims: &[usize],
) -> Result<HipStorage> {
    let family = table::reduce_family(op, false);
    let kernel = table::kernel(family, family, src.dtype(), None)?;
    let out_dtype = match op {
        ReduceOp::ArgMin | ReduceOp::ArgMax => DType::U32,
        ReduceOp::Sum | ReduceOp::Min | ReduceOp::Max => src.dtype(),
    };
    if op != ReduceOp::Sum && layout.shape().elem_count() == 0 {
        return Err(candle_core::Error::EmptyTensor { op: "reduce" }.bt());
    }
    let mut reduce_dims = dims.to_vec();
    reduce_dims.sort_unstable();
    reduce_dims.dedup();
    let info = ReduceInfo::new(family, layout.dims(), layout.stride(), &reduce_dims)?;
    if out_dtype == DType::U32 && info.red_size >= u64::from(u32::MAX) {
        return Err(invalid(
            family,
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
    let plan = launch::reduction(
        info,
        src.dtype().size_in_bytes(),
        layout.start_offset() as u64,
        device.wave_size(),
        device.compute_units(),
    );
    let partials = usize::try_from(plan.partials())
        .ok()
        .and_then(|p| p.checked_mul(REDUCE_STATE_BYTES))
        .ok_or_else(|| invalid(family, "too many partial states"))?;
    let mut work = if partials == 0 {
        None
    } else {
        // SAFETY: the main launch writes every partial state before the
        // finish launch (queued after it on the same stream) reads them.
        Some(unsafe { device.alloc_storage(DType::U8, partials) }?)
    };
    for step in [Some(plan.main), plan.finish].into_iter().flatten() {
        let work_arg = match work.as_mut() {
            Some(w) => Arg::Out(w.view_all_mut()),
            None => Arg::U64(0),
        };
        let step_kernel = if step.info.mode == ReduceMode::ColsPacked as u32 {
            table::kernel(table::reduce_family(op, true), family, src.dtype(), None)?
        } else {
            kernel
        };
        let args = [
            Arg::Reduce(step.info),
            Arg::In(src.view(family, layout)?),
            Arg::Out(out.view_all_mut()),
            work_arg,
        ];
        // SAFETY: reduce_*(const ReduceInfo, const T* src, Out* dst, State*
        // work): `info` splits `layout` (whose reach the source view covers)
        // into kept and reduced dimensions, dst holds num_out values of the
        // output dtype, work holds REDUCE_STATE_BYTES (>= the state size)
        // per partial state when the plan splits the outputs and is never
        // touched (null) otherwise; block shapes are whole waves up to
        // CH_REDUCE_MAX_BLOCK, COLS and COLS_PACKED blocks exactly
        // CH_ELEM_BLOCK threads; reduce_cols_* take the same arguments.
        unsafe { launch::launch(device, step_kernel, step.cfg, &args) }?;
    }
    Ok(out)
}
