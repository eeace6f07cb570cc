//! Launches of the part-2 kernels (fused ops, pooling, upsampling, im2col):
//! the function from the device's kernel registry, arguments of any
//! kernel-argument type (device pointers, 32- and 64-bit scalars, the
//! [`Nchw`](crate::nchw::Nchw) and [`ConvGeom`](crate::nchw::ConvGeom)
//! structs), and the launch shape of the block-per-row kernels.

use hip_safe::{KernelArg, LaunchConfig};

use crate::device::HipDevice;
use crate::error::{Result, hip, invalid};
use crate::info::{REDUCE_MAX_BLOCK, VEC_BYTES};
use crate::table::Kernel;

/// Packs of 16 bytes each thread of a row kernel should handle.
const PACKS_PER_THREAD: usize = 2;

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
/// bytes: whole waves, about [`PACKS_PER_THREAD`] 16-byte packs per thread,
/// at most `CH_REDUCE_MAX_BLOCK` threads.
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
    let per_pack = (VEC_BYTES / elem_bytes.max(1)).max(1);
    let wanted = cols.div_ceil(per_pack * PACKS_PER_THREAD);
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
        // Vocabulary softmax: 32000 f32 = 8000 packs -> the largest block.
        let c = row_config("t", 8192, 32000, 4, 64).unwrap();
        assert_eq!((c.grid_dim.0, c.block_dim.0), (8192, 1024));
        // rms_norm 4096 bf16 = 512 packs -> 256 threads of 2 packs.
        assert_eq!(
            row_config("t", 16384, 4096, 2, 32).unwrap().block_dim.0,
            256
        );
        // Short rows get one wave.
        assert_eq!(row_config("t", 10, 100, 4, 64).unwrap().block_dim.0, 64);
        assert_eq!(row_config("t", 10, 1, 8, 32).unwrap().block_dim.0, 32);
        // Rows that do not divide into packs still fit the register cache
        // (32 values per thread, 16 for f64) up to 1024 threads.
        for (cols, bytes) in [(32001, 4), (16001, 8), (1000, 2)] {
            let t = row_config("t", 1, cols, bytes, 32).unwrap().block_dim.0 as usize;
            assert!(
                cols <= t * 128 / bytes.max(4),
                "{cols} x {bytes} bytes in {t} threads"
            );
        }
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
