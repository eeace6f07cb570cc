//! Random numbers on the device: the generator state of a device and the
//! launch of `random.hip`.

use candle_core::{DType, Shape};

use crate::device::HipDevice;
use crate::error::Result;
use crate::kernel::catalogue as cat;
use crate::kernel::grid::unrolled;
use crate::kernel::header::{RAND_PER_BLOCK, RAND_PER_BLOCK_F64};
use crate::size;
use crate::storage::HipStorage;

/// The seed of a new device (any fixed value keeps runs reproducible).
pub(crate) const DEFAULT_SEED: u64 = 299_792_458;

/// Values one Philox block yields for `dtype` (`RandPerBlock` in
/// `random.hip`).
pub(crate) fn values_per_block(dtype: DType) -> u64 {
    if dtype == DType::F64 {
        RAND_PER_BLOCK_F64
    } else {
        RAND_PER_BLOCK
    }
}

/// Seed and stream position of a device's generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RngState {
    seed: u64,
    /// Philox blocks handed out since the seed was set.
    offset: u64,
}

impl RngState {
    /// A generator at the start of the default seed's stream.
    pub(crate) fn new() -> RngState {
        RngState {
            seed: DEFAULT_SEED,
            offset: 0,
        }
    }

    /// Restarts the stream of `seed`.
    pub(crate) fn set_seed(&mut self, seed: u64) {
        *self = RngState { seed, offset: 0 };
    }

    /// The current seed.
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Reserves the blocks for `n` values of `dtype`: returns the seed and
    /// the first block's counter, and moves the stream past them.
    pub(crate) fn reserve(&mut self, n: usize, dtype: DType) -> (u64, u64) {
        let blocks = (n as u64).div_ceil(values_per_block(dtype));
        let start = self.offset;
        self.offset = self.offset.wrapping_add(blocks);
        (self.seed, start)
    }
}

/// The distribution to sample.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Distribution {
    /// Uniform on `[low, high)`.
    Uniform { low: f64, high: f64 },
    /// Normal with the given mean and standard deviation.
    Normal { mean: f64, std: f64 },
}

/// A new storage of `shape` filled with samples of `dist`.
pub(crate) fn sample(
    device: &HipDevice,
    shape: &Shape,
    dtype: DType,
    dist: Distribution,
) -> Result<HipStorage> {
    let (family, op, a, b) = match dist {
        Distribution::Uniform { low, high } => (&cat::RAND_UNIFORM, "rand_uniform", low, high),
        Distribution::Normal { mean, std } => (&cat::RAND_NORMAL, "rand_normal", mean, std),
    };
    let kernel = family.kernel(op, dtype)?;
    let n = size::numel(op, shape.dims())?;
    // SAFETY: the kernel below writes all n elements.
    let mut out = unsafe { device.alloc_storage(dtype, n) }?;
    if n == 0 {
        return Ok(out);
    }
    let (seed, offset) = device.reserve_random(n, dtype);
    let cfg = unrolled((n as u64).div_ceil(values_per_block(dtype)));
    let n = n as u64;
    let dst = out.view_all_mut();
    // SAFETY: rand_*(u64 n, u64 seed, u64 offset, double, double, T* out)
    // writes out[0..n], and `out` holds n elements of the kernel's dtype.
    unsafe {
        device
            .kernels()
            .launch(kernel, cfg, &[&n, &seed, &offset, &a, &b, &dst])
    }?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserving_advances_by_whole_blocks() {
        let mut rng = RngState::new();
        assert_eq!(rng.seed(), DEFAULT_SEED);
        assert_eq!(rng.reserve(10, DType::F32), (DEFAULT_SEED, 0));
        assert_eq!(rng.reserve(1, DType::F16), (DEFAULT_SEED, 3));
        assert_eq!(rng.reserve(5, DType::F64), (DEFAULT_SEED, 4));
        assert_eq!(rng.reserve(0, DType::F64), (DEFAULT_SEED, 7));
        rng.set_seed(42);
        assert_eq!(rng.reserve(4, DType::BF16), (42, 0));
        assert_eq!(rng.reserve(4, DType::BF16), (42, 1));
    }
}
