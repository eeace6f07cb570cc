//! Timing: HIP events for device time, the host clock for per-op overhead.
//!
//! `benches/torch_bench.py` uses the same constants and procedure, so both
//! sides are measured alike.

use std::time::{Duration, Instant};

use candle_hip::HipDevice;
use hip_safe::{EventFlags, Stream};

use crate::cases::{BenchResult, Op};

/// Untimed runs before measuring (the first compiles and loads kernels).
const WARMUP_RUNS: usize = 2;
/// Device time one sample aims for: short ops run several times per sample
/// so that launch gaps are amortised.
const TARGET_SAMPLE_US: f64 = 2000.0;
/// Most runs per sample.
const MAX_REPS: usize = 100;
/// Fewest and most samples per case.
const MIN_SAMPLES: usize = 5;
const MAX_SAMPLES: usize = 25;
/// Stop taking samples after this much wall time (once MIN_SAMPLES are in).
const SAMPLE_BUDGET: Duration = Duration::from_millis(1500);
/// Host-overhead cases: warm-up runs, samples and back-to-back runs per sample.
const HOST_WARMUP_RUNS: usize = 50;
const HOST_SAMPLES: usize = 7;
const HOST_REPS: usize = 1000;

/// Median device time of one run of `op`, in microseconds.
///
/// After the warm-up, one timed run estimates how many runs fill a sample;
/// each sample records an event, queues that many runs, records another
/// event and divides the elapsed time by the runs.
pub fn gpu_time_us(device: &HipDevice, op: &mut Op) -> BenchResult<f64> {
    let stream = device.stream();
    for _ in 0..WARMUP_RUNS {
        op()?;
    }
    stream.synchronize()?;
    let once = sample(stream, op, 1)?;
    let reps = (TARGET_SAMPLE_US / once.max(1e-3))
        .ceil()
        .clamp(1.0, MAX_REPS as f64) as usize;
    let started = Instant::now();
    let mut times = Vec::with_capacity(MAX_SAMPLES);
    while times.len() < MIN_SAMPLES
        || (times.len() < MAX_SAMPLES && started.elapsed() < SAMPLE_BUDGET)
    {
        times.push(sample(stream, op, reps)?);
    }
    Ok(median(&mut times))
}

/// Microseconds per run over `reps` back-to-back runs between two events.
fn sample(stream: &Stream, op: &mut Op, reps: usize) -> BenchResult<f64> {
    let start = stream.record_event(EventFlags::DEFAULT)?;
    for _ in 0..reps {
        op()?;
    }
    let stop = stream.record_event(EventFlags::DEFAULT)?;
    stop.synchronize()?;
    Ok(f64::from(stop.elapsed_ms_since(&start)?) * 1000.0 / reps as f64)
}

/// Median host wall time per run, in microseconds: `HOST_REPS` runs queued
/// back to back and waited for once (`sync_each` false: the host overhead
/// per op), or each waited for (`sync_each` true: the latency of one op).
pub fn host_time_us(device: &HipDevice, op: &mut Op, sync_each: bool) -> BenchResult<f64> {
    let stream = device.stream();
    for _ in 0..HOST_WARMUP_RUNS {
        op()?;
    }
    stream.synchronize()?;
    let mut times = Vec::with_capacity(HOST_SAMPLES);
    for _ in 0..HOST_SAMPLES {
        let started = Instant::now();
        for _ in 0..HOST_REPS {
            op()?;
            if sync_each {
                stream.synchronize()?;
            }
        }
        stream.synchronize()?;
        times.push(started.elapsed().as_secs_f64() * 1e6 / HOST_REPS as f64);
    }
    Ok(median(&mut times))
}

/// The median (mean of the middle two for an even count); `times` is not empty.
fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    (times[(n - 1) / 2] + times[n / 2]) / 2.0
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
