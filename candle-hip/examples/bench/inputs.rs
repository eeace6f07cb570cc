//! Random inputs on the device: floats from the backend's own generator,
//! integer ids and predicates from a small host generator.

use candle_core::DType;
use candle_core::backend::BackendDevice;
use candle_hip::{HipDevice, HipStorage};

use crate::cases::BenchResult;

/// Uniform floats in `[low, high)` of shape `dims`.
pub fn uniform(
    dev: &HipDevice,
    dims: &[usize],
    dtype: DType,
    low: f64,
    high: f64,
) -> BenchResult<HipStorage> {
    Ok(dev.rand_uniform(&dims.into(), dtype, low, high)?)
}

/// Uniform floats in `[-2, 2)`, the default input of a case.
pub fn signed(dev: &HipDevice, dims: &[usize], dtype: DType) -> BenchResult<HipStorage> {
    uniform(dev, dims, dtype, -2.0, 2.0)
}

/// Uniform floats in `[0.1, 2)`, for ops that need positive inputs.
pub fn positive(dev: &HipDevice, dims: &[usize], dtype: DType) -> BenchResult<HipStorage> {
    uniform(dev, dims, dtype, 0.1, 2.0)
}

/// `count` u32 ids uniform in `0..bound`.
pub fn ids(dev: &HipDevice, count: usize, bound: usize) -> BenchResult<HipStorage> {
    let mut rng = XorShift::new(count as u64 ^ bound as u64);
    let bound = bound.max(1) as u64;
    let ids: Vec<u32> = (0..count).map(|_| (rng.next() % bound) as u32).collect();
    Ok(dev.storage_from_slice(&ids)?)
}

/// `count` u8 values uniform in `0..=255` (cast inputs).
pub fn bytes(dev: &HipDevice, count: usize) -> BenchResult<HipStorage> {
    let mut rng = XorShift::new(count as u64);
    let values: Vec<u8> = (0..count).map(|_| (rng.next() >> 56) as u8).collect();
    Ok(dev.storage_from_slice(&values)?)
}

/// `count` u8 predicates, each 0 or 1 with equal odds (where_cond).
pub fn mask(dev: &HipDevice, count: usize) -> BenchResult<HipStorage> {
    let mut rng = XorShift::new(!(count as u64));
    let values: Vec<u8> = (0..count).map(|_| (rng.next() >> 63) as u8).collect();
    Ok(dev.storage_from_slice(&values)?)
}

/// xorshift64*: fast, reproducible, good enough for benchmark inputs.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}
