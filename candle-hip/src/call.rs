//! Launches of the part-2 kernels (fused ops, pooling, upsampling, im2col):
//! the function from the device's kernel registry, arguments of any
//! kernel-argument type (device pointers, 32- and 64-bit scalars, the
//! [`Nchw`](crate::nchw::Nchw) and [`ConvGeom`](crate::nchw::ConvGeom)
//! structs), and the launch shape of the block-per-row kernels.

use hip_safe::{KernelArg, LaunchConfig};

use crate::device::HipDevice;
use crate::error::{Result, hip, invalid};
use crate::info::REDUCE_MAX_BLOCK;
use crate::table::Kernel;

/// `CH_ROW_CACHE_BYTES`: accumulator bytes a row kernel's thread keeps in
/// registers (f32 accumulators for f16/bf16/f32, f64 for f64).
pub(crate) const ROW_CACHE_BYTES: usize = 64;

/// Launches `kernel` on the device's stream with `args` in order.
///
/// # Safety
/// `args` must match the kernel's parameter list in number, order and type,
/// and the sizes among them must keep every access of the kernel inside the
/// views passed.
pub(crate) unsafe fn launch(
    device: &HipDevice,
    kernel: Kernel,
    cfg: LaunchConfig,
    args: &[&dyn KernelArg],
) -> Result<()> {
    let function = device.function(kernel)?;
    let stream = device.stream();
    let mut builder = stream.launch_builder(&function);
    for &arg in args {
        builder.arg(arg);
    }
    // SAFETY: forwarded to the caller.
    unsafe { builder.launch(cfg) }.map_err(hip)
}

/// One block per row for `rows` rows of `cols` elements of `elem_bytes`
/// bytes: whole waves, enough threads for each to hold its share of the row
/// in registers ([`ROW_CACHE_BYTES`]), at most `CH_REDUCE_MAX_BLOCK` threads
/// (longer rows are read twice, except 16-bit softmax rows of up to twice
/// that, which softmax caches).
pub(crate) fn row_config(
    op: &'static str,
    rows: usize,
    cols: usize,
    elem_bytes: usize,
    wave: u32,
) -> Result<LaunchConfig> {
    let blocks = u32::try_from(rows)
        .ok()
        .filter(|&r| r <= i32::MAX as u32)
        .ok_or_else(|| {
            invalid(
                op,
                format!("{rows} rows exceed the grid limit of 2^31 - 1 blocks"),
            )
        })?;
    let acc_bytes = elem_bytes.max(4);
    let wanted = cols.div_ceil(ROW_CACHE_BYTES / acc_bytes);
    let wave = wave.clamp(1, REDUCE_MAX_BLOCK) as usize;
    let threads = wanted
        .next_multiple_of(wave)
        .clamp(wave, REDUCE_MAX_BLOCK as usize);
    Ok(LaunchConfig {
        grid_dim: (blocks.max(1), 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// `v` as a kernel's 32-bit unsigned parameter, or an error naming `what`.
pub(crate) fn to_u32(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        invalid(
            op,
            format!("{what} = {v} exceeds the kernels' 32-bit limit"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_blocks_are_whole_waves_sized_to_the_row() {
        let threads =
            |cols, bytes, wave| row_config("t", 3, cols, bytes, wave).unwrap().block_dim.0;
        // rms_norm over 4096 bf16 or f32: 16 values per thread.
        assert_eq!(threads(4096, 2, 32), 256);
        assert_eq!(threads(4096, 4, 64), 256);
        assert_eq!(threads(4096, 8, 64), 512);
        // Short rows get one wave.
        assert_eq!(threads(100, 4, 64), 64);
        assert_eq!(threads(1, 8, 32), 32);
        // Rows up to 1024 threads' cache are cached: 16384 f32, 8192 f64.
        for (cols, bytes) in [(16384, 4), (8192, 8), (1000, 2), (16383, 2)] {
            let t = threads(cols, bytes, 32) as usize;
            assert!(
                cols <= t * ROW_CACHE_BYTES / bytes.max(4),
                "{cols} x {bytes} bytes in {t} threads"
            );
        }
        // Vocabulary softmax: the largest block; f32 rows are read twice,
        // 16-bit ones fit softmax's doubled cache (SoftmaxCache in
        // kernels/softmax.hip: 32 values per thread).
        let c = row_config("t", 8192, 32000, 4, 64).unwrap();
        assert_eq!((c.grid_dim.0, c.block_dim.0), (8192, 1024));
        let c = row_config("t", 8192, 32000, 2, 32).unwrap();
        assert!(32000 <= c.block_dim.0 as usize * 2 * ROW_CACHE_BYTES / 4);
    }

    #[test]
    fn the_cache_size_matches_the_kernel_header() {
        let define = crate::kernels::COMMON_HEADER
            .lines()
            .find_map(|l| l.strip_prefix("#define CH_ROW_CACHE_BYTES "))
            .map(str::trim);
        assert_eq!(define, Some(ROW_CACHE_BYTES.to_string().as_str()));
    }

    #[test]
    fn huge_grids_and_sizes_are_refused() {
        let err = row_config("softmax", 1 << 31, 5, 4, 32)
            .unwrap_err()
            .to_string();
        assert!(err.contains("softmax") && err.contains("grid"), "{err}");
        assert!(to_u32("t", "cols", 1 << 32).is_err());
        assert_eq!(to_u32("t", "cols", 7).unwrap(), 7);
    }
}
