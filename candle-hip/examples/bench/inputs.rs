//! Random inputs, generated on the host (in parallel) and uploaded, so that
//! no case depends on a device kernel other than the one it measures.

use candle_core::backend::BackendDevice;
use candle_core::{DType, WithDType};
use candle_hip::{HipDevice, HipStorage};
use half::{bf16, f16};

use crate::cases::BenchResult;

/// Uniform values in `[low, high)` of shape `dims`, for a float `dtype`.
pub fn uniform(
    dev: &HipDevice,
    dims: &[usize],
    dtype: DType,
    low: f64,
    high: f64,
) -> BenchResult<HipStorage> {
    let n = dims.iter().product();
    let seed = n as u64 ^ low.to_bits() ^ high.to_bits().rotate_left(17);
    let map = move |x: u64| low + (high - low) * unit(x);
    match dtype {
        DType::F16 => upload::<f16>(dev, n, seed, map),
        DType::BF16 => upload::<bf16>(dev, n, seed, map),
        DType::F32 => upload::<f32>(dev, n, seed, map),
        DType::F64 => upload::<f64>(dev, n, seed, map),
        other => Err(format!("no random float input of dtype {other:?}").into()),
    }
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
    let bound = bound.max(1) as u64;
    upload::<u32>(dev, count, bound, move |x| (x % bound) as f64)
}

/// `count` u8 values uniform in `0..=255` (cast inputs).
pub fn bytes(dev: &HipDevice, count: usize) -> BenchResult<HipStorage> {
    upload::<u8>(dev, count, 255, |x| (x >> 56) as f64)
}

/// `count` u8 predicates, each 0 or 1 with equal odds (where_cond).
pub fn mask(dev: &HipDevice, count: usize) -> BenchResult<HipStorage> {
    upload::<u8>(dev, count, 2, |x| (x >> 63) as f64)
}

/// `count` random bytes on the host (the blocks of a quantized weight: their
/// values do not change the cost of a product).
pub fn host_bytes(count: usize) -> Vec<u8> {
    let mut rng = XorShift::new(count as u64 ^ 0x9E37_79B9_7F4A_7C15);
    (0..count).map(|_| (rng.next() >> 56) as u8).collect()
}

/// `n` values `map(random u64)` converted to `T`, uploaded to `dev`.
fn upload<T: WithDType>(
    dev: &HipDevice,
    n: usize,
    seed: u64,
    map: impl Fn(u64) -> f64 + Sync,
) -> BenchResult<HipStorage> {
    let mut values = vec![T::from_f64(0.0); n];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let chunk = n.div_ceil(threads).max(1 << 16);
    std::thread::scope(|scope| {
        for (i, part) in values.chunks_mut(chunk).enumerate() {
            let map = &map;
            scope.spawn(move || {
                let mut rng = XorShift::new(seed ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
                for v in part {
                    *v = T::from_f64(map(rng.next()));
                }
            });
        }
    });
    Ok(dev.storage_from_slice(&values)?)
}

/// A u64's top 53 bits as a float in `[0, 1)`.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_interval_and_spread() {
        let mut rng = XorShift::new(7);
        let draws: Vec<f64> = (0..10_000).map(|_| unit(rng.next())).collect();
        assert!(draws.iter().all(|&u| (0.0..1.0).contains(&u)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        let halves = draws.iter().filter(|&&u| u < 0.5).count();
        assert!((4500..5500).contains(&halves), "{halves}");
    }
}
