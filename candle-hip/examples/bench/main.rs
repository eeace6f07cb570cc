//! Benchmarks candle-hip's operations on a HIP device.
//!
//! Every case drives the backend at the storage level
//! (`candle_core::backend::BackendStorage` and candle-hip's own functions),
//! times it with HIP events (warm-up, then the median of several samples),
//! and reports achieved GB/s (bytes read + written) or TFLOP/s and, for
//! memory-bound cases, the percentage of the device-to-device copy
//! bandwidth measured first. Tiny tensors measure the per-op host overhead;
//! the startup rows measure compiling and loading every kernel module with
//! an empty and with a filled code-object cache.
//!
//! ```text
//! bench [--out DIR] [--filter TEXT] [--list]
//! ```
//! Results go to `DIR/bench_ours.csv` and `DIR/bench_ours.json` (device
//! facts). `DIR` defaults to `$HIP_ON_CUDA_OUT`, else `bench-out`.
//! `--filter` runs only the cases whose key (`op,shape,dtype`) contains
//! `TEXT`; `--list` prints the keys and the work each case counts, opening
//! no device. A case that fails prints `ERROR` with the backend's message
//! and the run goes on. See `benches/README.md`.
//! `benches/torch_bench.py` measures the same cases with PyTorch and
//! `benches/report.py` joins both into one table and a chart.

mod attention;
mod cases;
mod compile_cost;
mod compute;
mod data;
mod elementwise;
mod fused;
mod inputs;
mod output;
mod quantized;
mod timing;

use std::path::PathBuf;
use std::process::ExitCode;

use candle_core::backend::BackendDevice;
use candle_hip::HipDevice;

use cases::{Case, Measure};
use output::{Outcome, Row, Sink};

/// Command-line options.
struct Options {
    out: PathBuf,
    filter: Option<String>,
    list: bool,
}

impl Options {
    fn parse() -> Result<Options, String> {
        let mut out = std::env::var_os("HIP_ON_CUDA_OUT").map(PathBuf::from);
        let mut filter = None;
        let mut list = false;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--out" => out = Some(args.next().ok_or("--out needs a folder")?.into()),
                "--filter" => filter = Some(args.next().ok_or("--filter needs a text")?),
                "--list" => list = true,
                compile_cost::CHILD_FLAG => {}
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(Options {
            out: out.unwrap_or_else(|| PathBuf::from("bench-out")),
            filter,
            list,
        })
    }
}

fn main() -> ExitCode {
    if compile_cost::is_child() {
        return compile_cost::child_main();
    }
    let options = match Options::parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: {e}");
            eprintln!("usage: bench [--out DIR] [--filter TEXT] [--list]");
            return ExitCode::from(2);
        }
    };
    let all = cases::all();
    let selected: Vec<&Case> = all
        .iter()
        .filter(|c| {
            options
                .filter
                .as_deref()
                .is_none_or(|f| c.key().contains(f))
        })
        .collect();
    let reference = cases::reference();
    if options.list {
        for case in std::iter::once(&reference).chain(selected) {
            println!("{}\t{}", case.key(), case.measure.describe());
        }
        return ExitCode::SUCCESS;
    }
    match run(&options, &reference, &selected) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the device, measures the copy bandwidth (`reference`), runs the
/// selected cases and the start-up measurement, writing each row as soon as
/// it is known.
fn run(options: &Options, reference: &Case, selected: &[&Case]) -> Result<(), String> {
    let device = HipDevice::new(0).map_err(|e| format!("cannot open HIP device 0: {e}"))?;
    let hip = device.hip_device();
    println!(
        "device: {} ({}, {} compute units, wave {})",
        hip.name(),
        hip.arch(),
        hip.compute_units(),
        hip.wave_size()
    );
    let mut sink =
        Sink::create(&options.out).map_err(|e| format!("{}: {e}", options.out.display()))?;
    let copy = run_case(&device, reference);
    let copy_gbps = match &copy {
        Outcome::Time(us) => reference.measure.rate(*us),
        Outcome::Error(_) => None,
    };
    sink.write_meta(hip.name(), hip.arch(), copy_gbps)
        .map_err(|e| format!("writing metadata: {e}"))?;
    sink.write(&Row::new(reference, copy, copy_gbps))
        .map_err(|e| format!("writing results: {e}"))?;
    for case in selected {
        let outcome = run_case(&device, case);
        sink.write(&Row::new(case, outcome, copy_gbps))
            .map_err(|e| format!("writing results: {e}"))?;
    }
    if options
        .filter
        .as_deref()
        .is_none_or(|f| "startup".contains(f))
    {
        for row in compile_cost::rows() {
            sink.write(&row)
                .map_err(|e| format!("writing results: {e}"))?;
        }
    }
    println!("results: {}", sink.csv_path().display());
    Ok(())
}

/// Prepares and times one case; errors and panics become an error outcome.
fn run_case(device: &HipDevice, case: &Case) -> Outcome {
    let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut op = (case.prepare)(device)?;
        match case.measure {
            Measure::Bytes(_) | Measure::Flops(_) => timing::gpu_time_us(device, &mut op),
            Measure::HostAsync => timing::host_time_us(device, &mut op, false),
            Measure::HostSync => timing::host_time_us(device, &mut op, true),
        }
    }));
    let outcome = match attempt {
        Ok(Ok(us)) => Outcome::Time(us),
        Ok(Err(e)) => Outcome::Error(output::one_line(&e.to_string())),
        Err(panic) => Outcome::Error(format!("panic: {}", output::panic_text(&*panic))),
    };
    // Release the case's pooled memory before the next one; a failure here
    // only means the pool keeps it.
    let _ = device.synchronize();
    let _ = device.hip_device().trim_memory_pool();
    outcome
}
