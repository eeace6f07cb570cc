//! `kernel-bundle`: compiles every kernel unit of candle-hip (a source, or
//! one dtype of a source split by dtype) for a list of targets with the hipRTC that loads (the real one inside the ROCm sandbox:
//! `build/sandbox.sh exec target/debug/rocm-tools kernel-bundle ...`; the
//! shim's NVRTC on the NVIDIA test platform) into one bundle file that
//! candle-hip looks in before compiling (`candle_hip::kernel::bundle`), and
//! prints the compile time of every source per target (the sum over its
//! units, and the slowest unit: what a first use waits for) and the
//! bundle's size per target. For compile times, point `HIP_SAFE_CACHE_DIR` at an empty
//! folder: a cached code object is not compiled again.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use candle_hip::kernel::Unit;
use candle_hip_kernels::Source;
use hip_safe::{CodeBundleWriter, Program, SourceHash};

use crate::Result;

/// The targets of a bundle unless `--archs` names others: CDNA and GCN
/// (wave 64), RDNA 2 to 4 (wave 32).
pub const DEFAULT_ARCHS: &[&str] = &[
    "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101", "gfx1102",
    "gfx1151", "gfx1200", "gfx1201",
];

/// The wave size candle-hip compiles for on `arch`: 64 on GCN/CDNA
/// (`gfx9xx`), 32 on RDNA and NVIDIA.
fn wave_size(arch: &str) -> u32 {
    if arch.starts_with("gfx9") { 64 } else { 32 }
}

/// One compiled unit.
struct Compiled {
    unit: Unit,
    arch: String,
    hash: SourceHash,
    seconds: f64,
    code: Vec<u8>,
}

/// `kernel-bundle --out FILE [--archs a,b,...] [--jobs N] [--per-unit]`
/// (`--per-unit`: also every unit's compile time, slowest first).
pub fn run(args: &[String]) -> Result<()> {
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let out = PathBuf::from(value("--out").ok_or("kernel-bundle: --out FILE is required")?);
    let archs: Vec<String> = match value("--archs") {
        Some(list) => list.split(',').map(str::to_string).collect(),
        None => DEFAULT_ARCHS.iter().map(|a| a.to_string()).collect(),
    };
    let jobs = match value("--jobs") {
        Some(n) => n.parse().map_err(|_| format!("--jobs {n}: not a number"))?,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    let units = Unit::all();
    let work: Vec<(Unit, &str)> = archs
        .iter()
        .flat_map(|arch| units.iter().map(move |&u| (u, arch.as_str())))
        .collect();
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let failed = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                while let Some(&(unit, arch)) = work.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let t0 = Instant::now();
                    let program = unit.program(wave_size(arch));
                    match program.compile_for_arch(arch) {
                        Ok(code) => done
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(Compiled {
                                unit,
                                arch: arch.to_string(),
                                seconds: t0.elapsed().as_secs_f64(),
                                hash: program.source_hash(),
                                code,
                            }),
                        Err(e) => failed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!("{unit} for {arch}: {e}")),
                    }
                }
            });
        }
    });
    let done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    let failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut writer = CodeBundleWriter::new(
        Program::compiler_identity(),
        format!("candle-hip {}", env!("CARGO_PKG_VERSION")),
    )?;
    for c in &done {
        writer.add(
            &c.unit.name(),
            c.hash,
            &c.arch,
            wave_size(&c.arch),
            c.code.clone(),
        )?;
    }
    writer.write(&out)?;
    if args.iter().any(|a| a == "--per-unit") {
        let mut by_time: Vec<&Compiled> = done.iter().collect();
        by_time.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        for c in by_time {
            println!(
                "{:>7.2} s {:>6} KiB  {} {}",
                c.seconds,
                c.code.len() / 1024,
                c.unit,
                c.arch
            );
        }
    }
    report(&archs, &done, start.elapsed().as_secs_f64(), jobs);
    println!("bundle: {} ({} entries)", out.display(), writer.len());
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{} compile(s) failed:\n{}", failed.len(), failed.join("\n")).into())
    }
}

/// Prints seconds per source and target (the sum over the source's units
/// and, for a split source, its slowest unit), totals and code bytes per
/// target.
fn report(archs: &[String], done: &[Compiled], wall: f64, jobs: usize) {
    let cell = |source: Source, arch: &str| {
        let times: Vec<f64> = done
            .iter()
            .filter(|c| c.unit.source() == source && c.arch == arch)
            .map(|c| c.seconds)
            .collect();
        match times.len() {
            0 => "-".to_string(),
            1 => format!("{:.1}", times[0]),
            n => format!(
                "{:.1} ({n} units, max {:.1})",
                times.iter().sum::<f64>(),
                times.iter().copied().fold(0.0, f64::max)
            ),
        }
    };
    println!("| source | {} |", archs.join(" | "));
    println!("|---|{}", "---:|".repeat(archs.len()));
    for source in candle_hip_kernels::ALL {
        let row: Vec<String> = archs.iter().map(|a| cell(source, a)).collect();
        println!("| {} | {} |", source.file_name(), row.join(" | "));
    }
    let per_arch = |f: &dyn Fn(&Compiled) -> f64| -> Vec<String> {
        archs
            .iter()
            .map(|a| done.iter().filter(|c| &c.arch == a).map(f).sum::<f64>())
            .map(|v| format!("{v:.1}"))
            .collect()
    };
    println!(
        "| compile s (sum) | {} |",
        per_arch(&|c| c.seconds).join(" | ")
    );
    let slowest: Vec<String> = archs
        .iter()
        .map(|a| {
            let max = done.iter().filter(|c| &c.arch == a).map(|c| c.seconds);
            format!("{:.1}", max.fold(0.0, f64::max))
        })
        .collect();
    println!("| slowest unit s | {} |", slowest.join(" | "));
    println!(
        "| code MiB | {} |",
        per_arch(&|c| c.code.len() as f64 / (1 << 20) as f64).join(" | ")
    );
    println!("wall time {wall:.1} s with {jobs} parallel compile(s)");
}
