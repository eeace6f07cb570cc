//! Reductions: sum, min, max, argmin, argmax over any set of dimensions.

use candle_core::backend::BackendStorage;
use candle_core::op::ReduceOp;
use candle_core::{DType, Layout};

use crate::error::{Result, invalid};
use crate::info::ReduceInfo;
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
    let family = table::reduce_family(op);
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
    let mut info = ReduceInfo::new(family, layout.dims(), layout.stride(), &reduce_dims)?;
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
    let cfg = launch::reduction(&mut info, device.wave_size(), device.compute_units());
    let args = [
        Arg::Reduce(info),
        Arg::In(src.view(family, layout)?),
        Arg::Out(out.view_all_mut()),
    ];
    // SAFETY: reduce_*(const ReduceInfo, const T* src, Out* dst): `info`
    // splits `layout` (whose reach the source view covers) into kept and
    // reduced dimensions, dst holds num_out values of the output dtype, and
    // the block shape is a whole number of waves up to CH_REDUCE_MAX_BLOCK.
    unsafe { launch::launch(device, kernel, cfg, &args) }?;
    Ok(out)
}
