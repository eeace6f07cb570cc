//! `kernel-bundle`: compiles every kernel module of candle-hip for a list of
//! targets with the hipRTC that loads (the real one inside the ROCm sandbox:
//! `build/sandbox.sh exec target/debug/rocm-tools kernel-bundle ...`; the
//! shim's NVRTC on the NVIDIA test platform) into one bundle file that
//! candle-hip looks in before compiling (`candle_hip::kernel::bundle`), and
//! prints the compile time of every module per target and the bundle's size
//! per target. For compile times, point `HIP_SAFE_CACHE_DIR` at an empty
//! folder: a cached code object is not compiled again.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use candle_hip::kernel::program;
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

/// One compiled module.
struct Compiled {
    source: Source,
    arch: String,
    hash: SourceHash,
    seconds: f64,
    code: Vec<u8>,
}

/// `kernel-bundle --out FILE [--archs a,b,...] [--jobs N]`.
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
    let work: Vec<(Source, &str)> = archs
        .iter()
        .flat_map(|arch| candle_hip_kernels::ALL.map(|s| (s, arch.as_str())))
        .collect();
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let failed = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                while let Some(&(source, arch)) = work.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let t0 = Instant::now();
                    let program = program(source, wave_size(arch));
                    match program.compile_for_arch(arch) {
                        Ok(code) => done
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(Compiled {
                                source,
                                arch: arch.to_string(),
                                seconds: t0.elapsed().as_secs_f64(),
                                hash: program.source_hash(),
                                code,
                            }),
                        Err(e) => failed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!("{} for {arch}: {e}", source.file_name())),
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
            c.source.file_name(),
            c.hash,
            &c.arch,
            wave_size(&c.arch),
            c.code.clone(),
        )?;
    }
    writer.write(&out)?;
    report(&archs, &done, start.elapsed().as_secs_f64(), jobs);
    println!("bundle: {} ({} entries)", out.display(), writer.len());
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{} compile(s) failed:\n{}", failed.len(), failed.join("\n")).into())
    }
}

/// Prints seconds per module and target, totals and code bytes per target.
fn report(archs: &[String], done: &[Compiled], wall: f64, jobs: usize) {
    let cell = |source: Source, arch: &str| {
        done.iter()
            .find(|c| c.source == source && c.arch == arch)
            .map_or("-".to_string(), |c| format!("{:.1}", c.seconds))
    };
    println!("| module | {} |", archs.join(" | "));
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
    println!(
        "| code MiB | {} |",
        per_arch(&|c| c.code.len() as f64 / (1 << 20) as f64).join(" | ")
    );
    println!("wall time {wall:.1} s with {jobs} parallel compile(s)");
}
