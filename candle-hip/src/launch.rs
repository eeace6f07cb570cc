//! Launch shapes (pure functions of the problem and the device) and the one
//! generic path every kernel launch goes through.

use hip_safe::{DeviceView, DeviceViewMut, LaunchConfig};

use crate::device::HipDevice;
use crate::error::{Result, hip};
use crate::info::{ELEM_BLOCK, ElemInfo, IndexInfo, REDUCE_MAX_BLOCK, ReduceInfo, VEC_BYTES};
use crate::table::Kernel;

/// Grid-stride kernels get at most this many blocks per compute unit: enough
/// to fill every unit several times over; each thread then loops.
const BLOCKS_PER_CU: u64 = 16;
/// Reductions of at most this many elements per output use one thread per output.
const SMALL_REDUCTION: u64 = 16;
/// A reduction over strided (non-innermost) elements uses one thread per
/// output once it has this many outputs (adjacent threads read adjacent memory).
const MANY_OUTPUTS: u64 = 1024;
/// Elements each thread of a reduction block should handle at least.
const ELEMS_PER_THREAD: u64 = 8;
/// Most blocks of a block-per-output reduction (the blocks loop beyond).
const MAX_REDUCE_GRID: u64 = 1 << 20;

/// Most blocks of a 1-D grid on every platform (CUDA's limit for x).
const MAX_GRID: u64 = (1 << 31) - 1;

/// A 1-D launch of `blocks` blocks of `threads` threads (kernels loop over
/// what a capped grid does not cover).
fn config(blocks: u64, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks.clamp(1, MAX_GRID) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride launch for `work` independent items on a device with
/// `compute_units` units: one item per thread up to the block cap.
pub(crate) fn grid_stride(work: u64, compute_units: u32) -> LaunchConfig {
    let needed = work.div_ceil(u64::from(ELEM_BLOCK)).max(1);
    let cap = u64::from(compute_units.max(1)) * BLOCKS_PER_CU;
    config(needed.min(cap), ELEM_BLOCK)
}

/// Work items of an element-wise kernel: 16-byte packs when every operand is
/// contiguous (`widest` is the largest element size among them), elements otherwise.
pub(crate) fn elementwise_work(info: &ElemInfo, widest: usize) -> u64 {
    if info.is_contiguous() {
        let per_pack = (VEC_BYTES / widest.max(1)).max(1) as u64;
        info.numel.div_ceil(per_pack)
    } else {
        info.numel
    }
}

/// Chooses the shape of a reduction, records it in `info.per_thread` and
/// returns the launch configuration.
pub(crate) fn reduction(info: &mut ReduceInfo, wave_size: u32, compute_units: u32) -> LaunchConfig {
    let per_thread = info.red_size <= SMALL_REDUCTION
        || (!info.contiguous_rows() && info.num_out >= MANY_OUTPUTS);
    info.per_thread = u32::from(per_thread);
    if per_thread {
        return grid_stride(info.num_out, compute_units);
    }
    let wave = u64::from(wave_size.clamp(1, REDUCE_MAX_BLOCK));
    let threads = info
        .red_size
        .div_ceil(ELEMS_PER_THREAD)
        .next_power_of_two()
        .clamp(wave, u64::from(REDUCE_MAX_BLOCK));
    config(info.num_out.clamp(1, MAX_REDUCE_GRID), threads as u32)
}

/// One kernel argument, in the order of the kernel's parameters.
pub(crate) enum Arg<'a> {
    /// A read-only device pointer (`const T*`).
    In(DeviceView<'a, u8>),
    /// A written device pointer (`T*`).
    Out(DeviceViewMut<'a, u8>),
    /// `const ElemInfo`.
    Elem(ElemInfo),
    /// `const ReduceInfo`.
    Reduce(ReduceInfo),
    /// `const IndexInfo`.
    Index(IndexInfo),
    /// `unsigned long long`.
    U64(u64),
    /// `double`.
    F64(f64),
}

/// Launches `kernel` on the device's stream.
///
/// # Safety
/// `args` must match the kernel's parameter list in number, order and type,
/// and the sizes in them must keep every access of the kernel inside the
/// views passed (the ops modules derive both from the same layouts).
pub(crate) unsafe fn launch(
    device: &HipDevice,
    kernel: Kernel,
    cfg: LaunchConfig,
    args: &[Arg<'_>],
) -> Result<()> {
    let function = device.function(kernel)?;
    let stream = device.stream();
    let mut builder = stream.launch_builder(&function);
    for arg in args {
        match arg {
            Arg::In(v) => builder.arg(v),
            Arg::Out(v) => builder.arg(v),
            Arg::Elem(v) => builder.arg(v),
            Arg::Reduce(v) => builder.arg(v),
            Arg::Index(v) => builder.arg(v),
            Arg::U64(v) => builder.arg(v),
            Arg::F64(v) => builder.arg(v),
        };
    }
    // SAFETY: the caller guarantees that the arguments match the kernel and
    // keep its accesses inside the buffers.
    unsafe { builder.launch(cfg) }.map_err(hip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_stride_covers_small_work_and_caps_large_work() {
        let c = grid_stride(1000, 100);
        assert_eq!((c.grid_dim, c.block_dim), ((4, 1, 1), (ELEM_BLOCK, 1, 1)));
        assert_eq!(grid_stride(0, 100).grid_dim.0, 1);
        assert_eq!(grid_stride(1 << 40, 100).grid_dim.0, 1600);
        assert_eq!(grid_stride(1 << 40, 0).grid_dim.0, 16);
    }

    #[test]
    fn contiguous_work_counts_packs() {
        let info = ElemInfo::new("t", &[1001], &[&[1]]).unwrap();
        assert_eq!(elementwise_work(&info, 4), 251);
        assert_eq!(elementwise_work(&info, 1), 63);
        assert_eq!(elementwise_work(&info, 8), 501);
        let strided = ElemInfo::new("t", &[4, 3], &[&[1, 4]]).unwrap();
        assert_eq!(elementwise_work(&strided, 4), 12);
    }

    fn plan(
        dims: &[usize],
        strides: &[usize],
        reduce: &[usize],
        wave: u32,
    ) -> (ReduceInfo, LaunchConfig) {
        let mut info = ReduceInfo::new("t", dims, strides, reduce).unwrap();
        let cfg = reduction(&mut info, wave, 100);
        (info, cfg)
    }

    #[test]
    fn long_rows_get_a_block_each() {
        let (info, cfg) = plan(&[8192, 32000], &[32000, 1], &[1], 64);
        assert_eq!(info.per_thread, 0);
        assert_eq!(cfg.grid_dim.0, 8192);
        assert_eq!(cfg.block_dim.0, 1024);
        let (_, cfg) = plan(&[10, 100], &[100, 1], &[1], 64);
        assert_eq!(cfg.block_dim.0, 64);
        let (_, cfg) = plan(&[10, 100], &[100, 1], &[1], 32);
        assert_eq!(cfg.block_dim.0, 32);
        let (_, cfg) = plan(&[10, 1000], &[1000, 1], &[1], 32);
        assert_eq!(cfg.block_dim.0, 128);
    }

    #[test]
    fn short_rows_and_wide_column_reductions_get_a_thread_each() {
        let (info, cfg) = plan(&[100_000, 8], &[8, 1], &[1], 64);
        assert_eq!(info.per_thread, 1);
        assert_eq!(cfg.block_dim.0, ELEM_BLOCK);
        // Sum over dim 0 of (512, 4096): strided elements, many outputs.
        let (info, _) = plan(&[512, 4096], &[4096, 1], &[0], 64);
        assert_eq!(info.per_thread, 1);
        // Few outputs: a block each even though the elements are strided.
        let (info, cfg) = plan(&[100_000, 4], &[4, 1], &[0], 64);
        assert_eq!(info.per_thread, 0);
        assert_eq!((cfg.grid_dim.0, cfg.block_dim.0), (4, 1024));
    }

    #[test]
    fn block_sizes_are_whole_waves() {
        for wave in [32, 64] {
            for red in [17, 100, 513, 5000, 1 << 20] {
                let (info, cfg) = plan(&[3, red], &[red, 1], &[1], wave);
                if info.per_thread == 0 {
                    assert_eq!(cfg.block_dim.0 % wave, 0);
                    assert!(cfg.block_dim.0 <= REDUCE_MAX_BLOCK);
                }
            }
        }
    }
}
