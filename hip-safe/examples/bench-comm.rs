//! Benchmarks transfers between two HIP devices and prints two tables:
//!
//! 1. copying a buffer from device 0 to device 1: a peer copy without peer
//!    access (the runtime stages it), with peer access enabled, and the
//!    same bytes through host memory (device to host, then host to device,
//!    what a framework without peer copies does); GB/s of buffer bytes;
//! 2. RCCL all-reduce (sum, in place) over both devices, one thread per
//!    rank: algorithm bandwidth (buffer bytes / time) and bus bandwidth
//!    (algbw × 2(n−1)/n, NCCL's convention), f32 and bf16.
//!
//! `hip-safe/examples/bench_comm_torch.py` prints the all-reduce table for
//! PyTorch's `torch.distributed` (NCCL) with the same sizes, to run in the
//! same session on the same machine.
//!
//! ```text
//! bench-comm [--iters N]
//! ```

use std::time::Instant;

use half::bf16;
use hip_safe::{
    Comm, CommType, Device, EventFlags, ReduceOp, Result, Stream, UniqueId, ValidAsZeroBits,
};

/// Buffer sizes in bytes.
const SIZES: [usize; 6] = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30];

fn main() {
    let iters = std::env::args()
        .skip_while(|a| a != "--iters")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    if let Err(e) = run(iters) {
        eprintln!("bench-comm: {e}");
        std::process::exit(1);
    }
}

fn run(iters: usize) -> Result<()> {
    let count = Device::count()?;
    if count < 2 {
        eprintln!("bench-comm: needs two HIP devices, found {count}");
        std::process::exit(2);
    }
    let devices = [Device::new(0)?, Device::new(1)?];
    println!(
        "devices: {} / {}; RCCL (NCCL API) version {}",
        devices[0].name(),
        devices[1].name(),
        Comm::version()?
    );
    copies(&devices, iters)?;
    all_reduce::<f32>(&devices, iters)?;
    all_reduce::<bf16>(&devices, iters)
}

/// GB/s of `bytes` moved `iters` times in `seconds`.
fn gbps(bytes: usize, iters: usize, seconds: f64) -> f64 {
    (bytes * iters) as f64 / seconds / 1e9
}

/// Seconds for `iters` calls of `queue` on `stream`, timed with events after
/// one warm-up call.
fn timed(stream: &Stream, iters: usize, mut queue: impl FnMut() -> Result<()>) -> Result<f64> {
    queue()?;
    let start = stream.record_event(EventFlags::DEFAULT)?;
    for _ in 0..iters {
        queue()?;
    }
    let end = stream.record_event(EventFlags::DEFAULT)?;
    end.synchronize()?;
    Ok(f64::from(end.elapsed_ms_since(&start)?) / 1e3)
}

fn copies(devices: &[Device; 2], iters: usize) -> Result<()> {
    let (s0, s1) = (devices[0].new_stream()?, devices[1].new_stream()?);
    println!("\ncopy device 0 -> device 1 (GB/s of buffer bytes)");
    println!("| size | peer, no peer access | peer, peer access | through host |");
    println!("|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for &bytes in &SIZES {
        let src = s0.alloc_zeros::<u8>(bytes)?;
        let mut dst = s1.alloc_zeros::<u8>(bytes)?;
        let staged = timed(&s1, iters, || s1.memcpy_dtod(&src, &mut dst))?;
        let mut host = vec![0u8; bytes];
        let t0 = Instant::now();
        for _ in 0..iters.min(5) {
            s0.memcpy_dtoh(&src, &mut host)?;
            s1.memcpy_htod(&host, &mut dst)?;
        }
        let through_host = t0.elapsed().as_secs_f64();
        rows.push((bytes, staged, through_host));
    }
    let direct = devices[1].try_enable_peer_access(&devices[0])?;
    for (bytes, staged, through_host) in rows {
        let src = s0.alloc_zeros::<u8>(bytes)?;
        let mut dst = s1.alloc_zeros::<u8>(bytes)?;
        let peer = timed(&s1, iters, || s1.memcpy_dtod(&src, &mut dst))?;
        let peer_text = if direct {
            format!("{:.1}", gbps(bytes, iters, peer))
        } else {
            "no peer access".to_string()
        };
        println!(
            "| {} MiB | {:.1} | {peer_text} | {:.1} |",
            bytes >> 20,
            gbps(bytes, iters, staged),
            gbps(bytes, iters.min(5), through_host)
        );
    }
    Ok(())
}

fn all_reduce<T: CommType + ValidAsZeroBits>(devices: &[Device; 2], iters: usize) -> Result<()> {
    let id = UniqueId::new()?;
    let world = devices.len();
    println!(
        "\nRCCL all-reduce, sum in place, {} ranks, {}",
        world,
        T::NAME
    );
    println!("| size | time (us) | algbw (GB/s) | busbw (GB/s) |");
    println!("|---:|---:|---:|---:|");
    let times = std::thread::scope(|scope| -> Result<Vec<f64>> {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, device)| {
                scope.spawn(move || -> Result<Vec<f64>> {
                    let stream = device.new_stream()?;
                    let comm = Comm::from_rank(&stream, rank, world, &id)?;
                    let mut times = Vec::new();
                    for &bytes in &SIZES {
                        let mut buf = stream.alloc_zeros::<T>(bytes / std::mem::size_of::<T>())?;
                        times.push(timed(&stream, iters, || {
                            comm.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                        })?);
                    }
                    Ok(times)
                })
            })
            .collect();
        let mut per_rank = Vec::new();
        for h in handles {
            per_rank.push(h.join().expect("rank thread")?);
        }
        Ok(per_rank.swap_remove(0))
    })?;
    let bus = 2.0 * (world - 1) as f64 / world as f64;
    for (&bytes, seconds) in SIZES.iter().zip(times) {
        let alg = gbps(bytes, iters, seconds);
        println!(
            "| {} MiB | {:.1} | {alg:.1} | {:.1} |",
            bytes >> 20,
            seconds / iters as f64 * 1e6,
            alg * bus
        );
    }
    Ok(())
}
