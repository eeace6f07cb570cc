//! `kernel-bundle`: compiles every kernel unit of candle-hip
//! (`candle_hip::kernel::Unit`: a source, or one dtype and/or part of one)
//! for a list of targets with the hipRTC that loads (the real one inside the
//! ROCm sandbox: `build/sandbox.sh exec target/debug/rocm-tools
//! kernel-bundle ...`; the shim's NVRTC on the NVIDIA test platform) into
//! one bundle file that candle-hip looks in before compiling
//! (`candle_hip::kernel::bundle`), and prints the compile time of every
//! source per target (the sum over its units, and the slowest unit: what a
//! first use waits for) and the bundle's size per target. For compile
//! times, point `HIP_SAFE_CACHE_DIR` at an empty folder: a cached code
//! object is not compiled again.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use candle_hip::kernel::Unit;
use candle_hip_kernels::Source;
use hip_safe::{CodeBundle, CodeBundleWriter, Program, SourceHash};

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

/// `kernel-bundle --out FILE [--archs a,b,...] [--sources a.hip,b.hip]
/// [--jobs N] [--threads] [--per-unit]` (`--sources`: only these sources'
/// units; `--per-unit`: also every unit's compile time, slowest first).
///
/// The `N` compiles run in `N` worker processes (this executable's
/// `kernel-bundle-worker`). `--threads` runs them in `N` threads of this
/// process instead, as a program's first-use compiles and
/// `load_all_kernels` do: AMD's hipRTC runs one compile at a time per copy
/// of it, and hip-safe loads further copies for compiles that overlap.
pub fn run(args: &[String]) -> Result<()> {
    let out = PathBuf::from(flag(args, "--out").ok_or("kernel-bundle: --out FILE is required")?);
    let archs: Vec<String> = match flag(args, "--archs") {
        Some(list) => list.split(',').map(str::to_string).collect(),
        None => DEFAULT_ARCHS.iter().map(|a| a.to_string()).collect(),
    };
    let jobs = match flag(args, "--jobs") {
        Some(n) => n.parse().map_err(|_| format!("--jobs {n}: not a number"))?,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    }
    .max(1);
    let sources = flag(args, "--sources");
    let threads = args.iter().any(|a| a == "--threads");
    // Checked here, so a bad name fails before any worker starts.
    let work = work(&archs, sources.as_deref())?;
    let start = Instant::now();
    let (done, failed) = if jobs == 1 {
        compile_claimed(&work, &Claims::Counter(AtomicUsize::new(0)))
    } else if threads {
        compile_in_threads(&work, jobs)
    } else {
        compile_in_workers(&archs, sources.as_deref(), jobs, &out)?
    };
    let writer = bundle_of(&done, &format!("candle-hip {}", env!("CARGO_PKG_VERSION")))?;
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
    let selected: Vec<Source> = candle_hip_kernels::ALL
        .into_iter()
        .filter(|&s| work.iter().any(|(u, _)| u.source() == s))
        .collect();
    report(
        &archs,
        &selected,
        &done,
        start.elapsed().as_secs_f64(),
        jobs,
        threads,
    );
    println!("bundle: {} ({} entries)", out.display(), writer.len());
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{} compile(s) failed:\n{}", failed.len(), failed.join("\n")).into())
    }
}

/// A bundle of the compiled units, made by `producer` with the loaded
/// compiler.
fn bundle_of(done: &[Compiled], producer: &str) -> Result<CodeBundleWriter> {
    let mut writer = CodeBundleWriter::new(Program::compiler_identity(), producer)?;
    for c in done {
        writer.add(
            &c.unit.name(),
            c.hash,
            &c.arch,
            wave_size(&c.arch),
            c.code.clone(),
        )?;
    }
    Ok(writer)
}

/// The value after `name` in `args`.
fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// Every (unit, target) to compile, in a fixed order (workers claim items
/// by position): all units, or those of the comma-separated `sources`
/// (file names such as `reduce.hip`).
fn work<'a>(archs: &'a [String], sources: Option<&str>) -> Result<Vec<(Unit, &'a str)>> {
    let mut units = Unit::all();
    if let Some(list) = sources {
        let names: Vec<&str> = list.split(',').collect();
        if let Some(unknown) = names
            .iter()
            .find(|n| !candle_hip_kernels::ALL.iter().any(|s| s.file_name() == **n))
        {
            return Err(format!("--sources: no kernel source named `{unknown}`").into());
        }
        units.retain(|u| names.contains(&u.source().file_name()));
    }
    Ok(archs
        .iter()
        .flat_map(|arch| units.iter().map(move |&u| (u, arch.as_str())))
        .collect())
}

/// How compilers share the work: each takes the next item nobody has
/// claimed, so that one that drew long units does not finish last with
/// items the others could have taken.
enum Claims {
    /// Threads of one process: the next item's position.
    Counter(AtomicUsize),
    /// Worker processes: item `i` belongs to whoever first creates the
    /// file `i` in this folder.
    Folder(PathBuf),
}

impl Claims {
    /// Claims the next free item at or after `from` of `len`, if any.
    fn next(&self, from: usize, len: usize) -> std::io::Result<Option<usize>> {
        match self {
            Claims::Counter(next) => {
                Ok(Some(next.fetch_add(1, Ordering::Relaxed)).filter(|&i| i < len))
            }
            Claims::Folder(dir) => {
                for i in from..len {
                    let claim = dir.join(i.to_string());
                    match OpenOptions::new().write(true).create_new(true).open(&claim) {
                        Ok(_) => return Ok(Some(i)),
                        Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                        Err(e) => return Err(e),
                    }
                }
                Ok(None)
            }
        }
    }
}

/// Compiles the items of `work` this compiler claims, one at a time.
fn compile_claimed(work: &[(Unit, &str)], claims: &Claims) -> (Vec<Compiled>, Vec<String>) {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let mut from = 0;
    loop {
        let i = match claims.next(from, work.len()) {
            Ok(Some(i)) => i,
            Ok(None) => break,
            Err(e) => {
                failed.push(format!("claiming work item {from} or later: {e}"));
                break;
            }
        };
        from = i + 1;
        let (unit, arch) = work[i];
        let t0 = Instant::now();
        let program = unit.program(wave_size(arch));
        match program.compile_for_arch(arch) {
            Ok(code) => done.push(Compiled {
                unit,
                arch: arch.to_string(),
                seconds: t0.elapsed().as_secs_f64(),
                hash: program.source_hash(),
                code,
            }),
            Err(e) => failed.push(format!("{unit} for {arch}: {e}")),
        }
    }
    (done, failed)
}

/// Compiles `work` in `jobs` threads of this process, each claiming the
/// next item.
fn compile_in_threads(work: &[(Unit, &str)], jobs: usize) -> (Vec<Compiled>, Vec<String>) {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let claims = Claims::Counter(AtomicUsize::new(0));
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| scope.spawn(|| compile_claimed(work, &claims)))
            .collect();
        for (k, handle) in handles.into_iter().enumerate() {
            match handle.join() {
                Ok((d, f)) => {
                    done.extend(d);
                    failed.extend(f);
                }
                Err(_) => failed.push(format!("compile thread {k} panicked")),
            }
        }
    });
    (done, failed)
}

/// Runs `jobs` worker processes, each compiling the items it claims (in a
/// folder next to `out`) into a bundle of its own next to `out`, and
/// gathers their code objects and times.
fn compile_in_workers(
    archs: &[String],
    sources: Option<&str>,
    jobs: usize,
    out: &Path,
) -> Result<(Vec<Compiled>, Vec<String>)> {
    let exe = std::env::current_exe()?;
    let part = |k: usize| out.with_extension(format!("part{k}"));
    let claims = out.with_extension("claims");
    let _ = std::fs::remove_dir_all(&claims);
    std::fs::create_dir_all(&claims)?;
    let children: Vec<Child> = (0..jobs)
        .map(|k| {
            let mut worker = Command::new(&exe);
            worker
                .args(["kernel-bundle-worker", "--archs", &archs.join(",")])
                .arg("--claims")
                .arg(&claims)
                .arg("--out")
                .arg(part(k))
                .stdout(Stdio::piped());
            if let Some(list) = sources {
                worker.args(["--sources", list]);
            }
            worker.spawn()
        })
        .collect::<std::io::Result<_>>()?;
    let units = Unit::all();
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let outputs: Vec<_> = children.into_iter().map(Child::wait_with_output).collect();
    let _ = std::fs::remove_dir_all(&claims);
    for (k, output) in outputs.into_iter().enumerate() {
        let output = output?;
        let bundle = CodeBundle::open(part(k));
        let _ = std::fs::remove_file(part(k));
        if !output.status.success() {
            failed.push(format!("worker {k} exited with {}", output.status));
            continue;
        }
        let bundle = bundle?;
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            match line.split('\t').collect::<Vec<_>>()[..] {
                ["ok", name, arch, seconds] => {
                    let entry = bundle
                        .entries()
                        .find(|e| e.name() == name && e.arch() == arch);
                    let unit = units.iter().find(|u| u.name() == name);
                    match (entry, unit, seconds.parse()) {
                        (Some(e), Some(&unit), Ok(seconds)) => done.push(Compiled {
                            unit,
                            arch: arch.to_string(),
                            hash: e.source_hash(),
                            seconds,
                            code: e.code().to_vec(),
                        }),
                        _ => failed.push(format!("worker {k}: unreadable result `{line}`")),
                    }
                }
                ["failed", message] => failed.push(message.to_string()),
                _ => failed.push(format!("worker {k}: unreadable line `{line}`")),
            }
        }
    }
    Ok((done, failed))
}

/// `kernel-bundle-worker --archs a,b [--sources ...] --claims DIR --out FILE`:
/// compiles the items of the work it claims in DIR (see [`Claims`]) into
/// the bundle FILE and prints one line per item:
/// `ok\t<unit>\t<arch>\t<seconds>` or `failed\t<message>`.
pub fn worker(args: &[String]) -> Result<()> {
    let archs: Vec<String> = flag(args, "--archs")
        .ok_or("--archs is required")?
        .split(',')
        .map(str::to_string)
        .collect();
    let claims = Claims::Folder(PathBuf::from(
        flag(args, "--claims").ok_or("--claims DIR is required")?,
    ));
    let out = PathBuf::from(flag(args, "--out").ok_or("--out FILE is required")?);
    let (done, failed) =
        compile_claimed(&work(&archs, flag(args, "--sources").as_deref())?, &claims);
    let writer = bundle_of(&done, "kernel-bundle worker")?;
    for c in &done {
        println!("ok\t{}\t{}\t{}", c.unit, c.arch, c.seconds);
    }
    for message in failed {
        println!("failed\t{}", message.replace(['\n', '\t'], " "));
    }
    writer.write(&out)?;
    Ok(())
}

/// Prints seconds per source of `sources` and target (the sum over the
/// source's units and, for a split source, its slowest unit), totals and
/// code bytes per target.
fn report(
    archs: &[String],
    sources: &[Source],
    done: &[Compiled],
    wall: f64,
    jobs: usize,
    threads: bool,
) {
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
    for &source in sources {
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
    let how = if threads && jobs > 1 {
        "threads of one process"
    } else {
        "process(es)"
    };
    println!("wall time {wall:.1} s with {jobs} compile {how}");
}
