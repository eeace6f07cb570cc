//! AMD compile check with the real hipRTC of ROCm 6.4 and no GPU: every
//! kernel unit (a source, or one dtype and/or part of one) compiles for a
//! wave64 (gfx942) and a wave32 (gfx1100) target, the sources with code of
//! their own per target (matrix and dot-product instructions) also for
//! gfx90a and gfx1201; every kernel the backend may launch is in its code
//! object, and no kernel spills vector registers to scratch memory. Units
//! compile in one child process per core.
//!
//! Runs inside the ROCm sandbox, where `.ci/run` executes every test binary
//! with `--ignored sandbox_` (see build/README.md); ignored elsewhere.
//! `SANDBOX_SOURCES=quantized.hip,gemv.hip` checks only those sources;
//! `SANDBOX_ALL_TARGETS=1` checks every unit on every target.

use std::time::{Duration, Instant};

use candle_hip::kernel::Unit;

/// The targets, with the wave size their devices report.
const TARGETS: [(&str, u32); 4] = [
    ("gfx90a", 64),
    ("gfx942", 64),
    ("gfx1100", 32),
    ("gfx1201", 32),
];

/// The targets that check every unit: one per wave size. The other
/// targets check only [`TARGET_SPECIFIC_SOURCES`]: elsewhere the code a
/// target gets differs from its wave size's representative only in
/// instruction selection, not in the source.
const WAVE_REPRESENTATIVES: [&str; 2] = ["gfx942", "gfx1100"];

/// Sources that choose code by target beyond the wave size (`__gfx*`
/// tests: MFMA, WMMA, dot-product instructions).
const TARGET_SPECIFIC_SOURCES: [&str; 2] = ["attention.hip", "quantized.hip"];

/// The indices into [`TARGETS`] of the targets that check `unit`.
fn targets_of(unit: Unit, all_targets: bool) -> Vec<usize> {
    let specific = TARGET_SPECIFIC_SOURCES.contains(&unit.source().file_name());
    (0..TARGETS.len())
        .filter(|&t| all_targets || specific || WAVE_REPRESENTATIVES.contains(&TARGETS[t].0))
        .collect()
}

/// The target selection names real targets and sources: every unit is
/// checked at both wave sizes, the target-specific ones on every target.
#[test]
fn every_unit_is_checked_at_both_wave_sizes() {
    for unit in Unit::all() {
        let waves: Vec<u32> = targets_of(unit, false)
            .iter()
            .map(|&t| TARGETS[t].1)
            .collect();
        assert!(
            waves.contains(&64) && waves.contains(&32),
            "{unit}: {waves:?}"
        );
    }
    for file in TARGET_SPECIFIC_SOURCES {
        let unit = Unit::all()
            .into_iter()
            .find(|u| u.source().file_name() == file)
            .unwrap_or_else(|| panic!("no unit of {file}"));
        assert_eq!(targets_of(unit, false).len(), TARGETS.len(), "{file}");
    }
}

/// Whether `name` is a symbol of the code object (a NUL-terminated string
/// in its string table).
fn has_symbol(code: &[u8], name: &str) -> bool {
    let needle: Vec<u8> = name.bytes().chain([0]).collect();
    code.windows(needle.len()).any(|w| w == needle.as_slice())
}

/// Sum of the values of every `key` in the code object's msgpack metadata
/// (e.g. `.vgpr_spill_count`); values are read as msgpack unsigned integers.
fn metadata_sum(code: &[u8], key: &str) -> u64 {
    let key = key.as_bytes();
    let mut total = 0;
    let mut i = 0;
    while let Some(pos) = code[i..].windows(key.len()).position(|w| w == key) {
        let at = i + pos + key.len();
        let value = match code.get(at..) {
            Some([b, ..]) if *b < 0x80 => u64::from(*b),
            Some([0xcc, b, ..]) => u64::from(*b),
            Some([0xcd, hi, lo, ..]) => u64::from(u16::from_be_bytes([*hi, *lo])),
            Some([0xce, a, b, c, d, ..]) => u64::from(u32::from_be_bytes([*a, *b, *c, *d])),
            _ => 0,
        };
        total += value;
        i = at;
    }
    total
}

/// What compiling one unit for one target gave: its table cell, the
/// failures found and the compile time.
struct Checked {
    cell: String,
    failures: Vec<String>,
    took: Duration,
}

/// Compiles `unit` for `arch` without the disk cache and checks the code
/// object: every kernel of the unit present, no spills, no scratch.
fn check_unit(unit: Unit, arch: &str, wave: u32) -> Checked {
    let names = unit.kernel_names();
    let start = Instant::now();
    let result = unit.program(wave).without_cache().compile_for_arch(arch);
    let took = start.elapsed();
    let mut failures = Vec::new();
    let cell = match result {
        Ok(code) => {
            let missing: Vec<&String> = names.iter().filter(|n| !has_symbol(&code, n)).collect();
            let spills = metadata_sum(&code, ".vgpr_spill_count");
            let scratch = metadata_sum(&code, ".private_segment_fixed_size");
            if !missing.is_empty() {
                failures.push(format!("{unit} {arch}: missing kernels {missing:?}"));
            }
            if spills != 0 || scratch != 0 {
                failures.push(format!(
                    "{unit} {arch}: {spills} spilled vector registers, {scratch} bytes of scratch"
                ));
            }
            format!(
                "{:>9.2}s {:>5}KiB vs{:<2}",
                took.as_secs_f64(),
                code.len() / 1024,
                spills
            )
        }
        Err(e) => {
            failures.push(format!("{unit} {arch}: {e}"));
            format!("{:>22}", "FAILED")
        }
    };
    Checked {
        cell,
        failures,
        took,
    }
}

/// Set in the child processes of [`sandbox_kernels_compile_for_amd`]:
/// `i/n`, the child compiles jobs `i, i + n, ...`.
const SHARD_VAR: &str = "CANDLE_HIP_SANDBOX_SHARD";
/// A child's report of one job on its stdout: tag, job index, seconds,
/// table cell, tab-separated.
const JOB_TAG: &str = "sandbox-job\t";

/// Every (unit, target) pair is a job; the jobs are shared among one child
/// process per core, since hipRTC 6.4 compiles one program at a time per
/// process. A child prints a report line per job and its failures (on
/// stderr), and fails when it found any; the parent prints the table in
/// unit order and fails on a failed child and on any job not reported
/// exactly once.
#[test]
#[ignore = "needs the ROCm sandbox"]
fn sandbox_kernels_compile_for_amd() {
    let only = std::env::var("SANDBOX_SOURCES").ok();
    let selected = |file: &str| {
        only.as_ref()
            .is_none_or(|list| list.split(',').any(|f| f == file))
    };
    let units: Vec<Unit> = Unit::all()
        .into_iter()
        .filter(|u| selected(u.source().file_name()))
        .collect();
    assert!(
        !units.is_empty(),
        "SANDBOX_SOURCES={only:?} selects no unit"
    );
    let all_targets = std::env::var_os("SANDBOX_ALL_TARGETS").is_some();
    // (unit index, target index), unit-major.
    let jobs: Vec<(usize, usize)> = units
        .iter()
        .enumerate()
        .flat_map(|(u, &unit)| {
            targets_of(unit, all_targets)
                .into_iter()
                .map(move |t| (u, t))
        })
        .collect();
    if let Ok(shard) = std::env::var(SHARD_VAR) {
        let (i, n) = shard
            .split_once('/')
            .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
            .expect("a shard i/n");
        let mut failures = Vec::new();
        for (job, &(u, t)) in jobs.iter().enumerate().skip(i).step_by(n) {
            let (arch, wave) = TARGETS[t];
            let checked = check_unit(units[u], arch, wave);
            println!(
                "{JOB_TAG}{job}\t{}\t{}",
                checked.took.as_secs_f64(),
                checked.cell
            );
            failures.extend(checked.failures);
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        return;
    }

    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let start = Instant::now();
    let outputs: Vec<std::process::Output> = std::thread::scope(|scope| {
        let children: Vec<_> = (0..workers)
            .map(|i| {
                let child = std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--exact",
                        "sandbox_kernels_compile_for_amd",
                        "--ignored",
                        "--nocapture",
                        "--quiet",
                    ])
                    .env(SHARD_VAR, format!("{i}/{workers}"))
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("a compile child starts");
                scope.spawn(move || child.wait_with_output().expect("a compile child ends"))
            })
            .collect();
        children
            .into_iter()
            .map(|c| c.join().expect("a child reader"))
            .collect()
    });
    let mut cells: Vec<Vec<String>> = vec![Vec::new(); jobs.len()];
    let mut failures = Vec::new();
    let mut compile_time = 0.0;
    for (i, output) in outputs.iter().enumerate() {
        if !output.status.success() {
            failures.push(format!(
                "compile child {i}/{workers}: {} (its failures are printed above)",
                output.status
            ));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        for report in stdout
            .lines()
            .filter_map(|l| Some(&l[l.find(JOB_TAG)? + JOB_TAG.len()..]))
        {
            let mut fields = report.splitn(3, '\t');
            let parsed = (|| {
                let job = fields.next()?.parse::<usize>().ok()?;
                let took = fields.next()?.parse::<f64>().ok()?;
                Some((job, took, fields.next()?)).filter(|_| job < jobs.len())
            })();
            match parsed {
                Some((job, took, cell)) => {
                    compile_time += took;
                    cells[job].push(cell.to_string());
                }
                None => failures.push(format!("child {i}: a bad report {report:?}")),
            }
        }
    }

    // The unit column as wide as the longest name (`gemv.hip[f64+i16+i32+f8e4m3,1]`).
    let width = units
        .iter()
        .map(|u| u.name().len())
        .max()
        .unwrap_or(0)
        .max(4);
    println!(
        "{:<width$}{:>8}  {}",
        "unit",
        "kernels",
        TARGETS.map(|(a, _)| format!("{a:>22}")).join("")
    );
    for (u, unit) in units.iter().enumerate() {
        let row: String = (0..TARGETS.len())
            .map(|t| match jobs.iter().position(|&job| job == (u, t)) {
                None => format!("{:>22}", "-"),
                Some(job) => match &cells[job][..] {
                    [cell] => cell.clone(),
                    reports => format!("{:>22}", format!("{} REPORTS", reports.len())),
                },
            })
            .collect();
        println!(
            "{:<width$}{:>8}  {row}",
            unit.name(),
            unit.kernel_names().len()
        );
    }
    let unreported = cells.iter().filter(|c| c.len() != 1).count();
    if unreported != 0 {
        failures.push(format!("{unreported} jobs were not reported exactly once"));
    }
    let kernels: usize = units.iter().map(|u| u.kernel_names().len()).sum();
    println!(
        "{kernels} kernels in {} (unit, target) compiles in {:.1}s by {workers} processes \
         ({compile_time:.1}s of compile time; vs = spilled vector registers; - = not \
         checked on that target, see WAVE_REPRESENTATIVES)",
        jobs.len(),
        start.elapsed().as_secs_f64(),
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn metadata_values_are_read_as_msgpack_integers() {
    let code = b"xx.vgpr_spill_count\x00yy.vgpr_spill_count\x05.vgpr_spill_count\xcd\x01\x00";
    assert_eq!(metadata_sum(code, ".vgpr_spill_count"), 5 + 256);
    assert!(has_symbol(b"\0uexp_f32\0", "uexp_f32"));
    assert!(!has_symbol(b"\0uexp_f32x\0", "uexp_f32"));
}

/// ROCm's code-object manager (comgr, the library hipRTC compiles through),
/// loaded from the sandbox as an inspector independent of our own code
/// object checks: a code object's target ISA and its symbol names.
mod comgr {
    use std::ffi::{c_char, c_void};

    use libloading::{Library, Symbol};

    /// `amd_comgr_data_t` / `amd_comgr_symbol_t`: opaque handles.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Handle(u64);

    const SUCCESS: u32 = 0;
    const DATA_KIND_EXECUTABLE: u32 = 0x8;
    const SYMBOL_INFO_NAME_LENGTH: u32 = 0x0;
    const SYMBOL_INFO_NAME: u32 = 0x1;

    type SymbolCallback = unsafe extern "C" fn(Handle, *mut c_void) -> u32;
    /// `amd_comgr_symbol_get_info`.
    type SymbolInfo = unsafe extern "C" fn(Handle, u32, *mut c_void) -> u32;

    /// What comgr reads from one code object.
    pub struct Inspected {
        /// The target, e.g. `amdgcn-amd-amdhsa--gfx942`.
        pub isa: String,
        /// Every symbol name.
        pub symbols: Vec<String>,
    }

    /// Collects one symbol's name into the `Vec<String>` behind `names`.
    unsafe extern "C" fn collect(symbol: Handle, names: *mut c_void) -> u32 {
        // SAFETY: `inspect` passes comgr's `amd_comgr_symbol_get_info` as
        // the first element and a `Vec<String>` as the second of the pair
        // behind `names`, both alive (the library loaded) for the whole
        // iteration.
        let (info, names) = unsafe { &mut *(names as *mut (SymbolInfo, Vec<String>)) };
        let info = *info;
        let mut len = 0usize;
        // SAFETY: NAME_LENGTH writes a size_t.
        if unsafe { info(symbol, SYMBOL_INFO_NAME_LENGTH, (&raw mut len).cast()) } != SUCCESS {
            return 1;
        }
        let mut name = vec![0u8; len + 1];
        // SAFETY: NAME writes `len` characters and a NUL into `name`.
        if unsafe { info(symbol, SYMBOL_INFO_NAME, name.as_mut_ptr().cast()) } != SUCCESS {
            return 1;
        }
        name.truncate(len);
        names.push(String::from_utf8_lossy(&name).into_owned());
        SUCCESS
    }

    /// Inspects `code` with the sandbox's comgr.
    pub fn inspect(code: &[u8]) -> Result<Inspected, String> {
        let lib = ["libamd_comgr.so.3", "libamd_comgr.so.2", "libamd_comgr.so"]
            .into_iter()
            // SAFETY: loading comgr runs no initialisation with
            // preconditions.
            .find_map(|name| unsafe { Library::new(name) }.ok())
            .ok_or("comgr is not installed")?;
        let call = |what: &str, status: u32| match status {
            SUCCESS => Ok(()),
            s => Err(format!("{what} failed with comgr status {s}")),
        };
        // SAFETY (each `get`): the function types match comgr's header
        // (amd_comgr.h of ROCm 7.0); handles are passed by value.
        unsafe {
            let create: Symbol<unsafe extern "C" fn(u32, *mut Handle) -> u32> = lib
                .get(b"amd_comgr_create_data\0")
                .map_err(|e| e.to_string())?;
            let set: Symbol<unsafe extern "C" fn(Handle, usize, *const c_char) -> u32> = lib
                .get(b"amd_comgr_set_data\0")
                .map_err(|e| e.to_string())?;
            let isa_name: Symbol<unsafe extern "C" fn(Handle, *mut usize, *mut c_char) -> u32> =
                lib.get(b"amd_comgr_get_data_isa_name\0")
                    .map_err(|e| e.to_string())?;
            let iterate: Symbol<unsafe extern "C" fn(Handle, SymbolCallback, *mut c_void) -> u32> =
                lib.get(b"amd_comgr_iterate_symbols\0")
                    .map_err(|e| e.to_string())?;
            let release: Symbol<unsafe extern "C" fn(Handle) -> u32> = lib
                .get(b"amd_comgr_release_data\0")
                .map_err(|e| e.to_string())?;
            let mut data = Handle(0);
            call("create_data", create(DATA_KIND_EXECUTABLE, &mut data))?;
            let result = (|| {
                call("set_data", set(data, code.len(), code.as_ptr().cast()))?;
                let mut len = 0usize;
                call(
                    "get_data_isa_name",
                    isa_name(data, &mut len, std::ptr::null_mut()),
                )?;
                let mut isa = vec![0u8; len];
                call(
                    "get_data_isa_name",
                    isa_name(data, &mut len, isa.as_mut_ptr().cast()),
                )?;
                let isa = String::from_utf8_lossy(isa.split(|&b| b == 0).next().unwrap_or(&[]))
                    .into_owned();
                let info: Symbol<SymbolInfo> = lib
                    .get(b"amd_comgr_symbol_get_info\0")
                    .map_err(|e| e.to_string())?;
                let mut state: (SymbolInfo, Vec<String>) = (*info, Vec::new());
                call(
                    "iterate_symbols",
                    iterate(data, collect, (&raw mut state).cast()),
                )?;
                Ok(Inspected {
                    isa,
                    symbols: state.1,
                })
            })();
            release(data);
            result
        }
    }
}

/// Set in the child process of [`sandbox_bundle_entries_are_code_objects_for_their_targets`].
const BUNDLE_CHILD_VAR: &str = "CANDLE_HIP_SANDBOX_BUNDLE_CHILD";

/// A bundle made by the real hipRTC holds, per entry, a code object that
/// ROCm's comgr reads as one for the entry's target with every kernel of the
/// unit; and the loader (`candle_hip::kernel::code_object`, what a device
/// loads) takes a matching entry instead of compiling, and compiles for a
/// target whose entry does not match (a different source hash) or is not
/// there.
#[test]
#[ignore = "needs the ROCm sandbox"]
fn sandbox_bundle_entries_are_code_objects_for_their_targets() {
    let unit = Unit::of_source(candle_hip::kernels::SIGMOID)[0];
    if std::env::var_os(BUNDLE_CHILD_VAR).is_some() {
        let cache = std::env::var_os(hip_safe::CACHE_DIR_VAR).expect("the parent sets a cache");
        let entries = || std::fs::read_dir(&cache).map_or(0, |d| d.count());
        let bundle = std::env::var_os(candle_hip::kernel::bundle::BUNDLE_VAR).unwrap();
        let bundle = hip_safe::CodeBundle::open(std::path::Path::new(&bundle)).unwrap();
        for (arch, wave, from_bundle) in [
            ("gfx942", 64, true),
            ("gfx1100", 32, false),
            ("gfx90a", 64, false),
        ] {
            let before = entries();
            let code = candle_hip::kernel::code_object(unit, arch, wave).expect("code object");
            let compiled = entries() - before;
            let bundled = bundle
                .entries()
                .find(|e| e.arch() == arch)
                .map(|e| e.code());
            println!("{unit} {arch}: compiled {compiled}, {} bytes", code.len());
            if from_bundle {
                assert_eq!(compiled, 0, "{arch}: the matching entry was not used");
                assert_eq!(Some(code.as_slice()), bundled);
            } else {
                assert_eq!(
                    compiled, 1,
                    "{arch}: a mismatch must fall through to hipRTC"
                );
            }
        }
        return;
    }
    let dir =
        std::env::temp_dir().join(format!("candle-hip-sandbox-bundle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let mut writer =
        hip_safe::CodeBundleWriter::new(hip_safe::Program::compiler_identity(), "sandbox test")
            .expect("writer");
    for (arch, wave, hash_matches) in [("gfx942", 64, true), ("gfx1100", 32, false)] {
        let program = unit.program(wave);
        let code = program
            .without_cache()
            .compile_for_arch(arch)
            .expect("compiles");
        let inspected = comgr::inspect(&code).unwrap_or_else(|e| panic!("comgr: {e}"));
        println!(
            "{unit} {arch}: comgr reads {} with {} symbols",
            inspected.isa,
            inspected.symbols.len()
        );
        assert!(
            inspected.isa.ends_with(&format!("--{arch}")),
            "{}",
            inspected.isa
        );
        for name in unit.kernel_names() {
            assert!(
                inspected.symbols.contains(&name),
                "{arch}: comgr finds no symbol {name}"
            );
        }
        let hash = if hash_matches {
            unit.program(wave).source_hash()
        } else {
            hip_safe::SourceHash::new([7; 32])
        };
        writer
            .add(&unit.name(), hash, arch, wave, code)
            .expect("a valid entry");
    }
    let bundle = dir.join("sandbox.bundle");
    writer.write(&bundle).expect("bundle written");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sandbox_bundle_entries_are_code_objects_for_their_targets",
            "--ignored",
            "--nocapture",
            "--quiet",
        ])
        .env(BUNDLE_CHILD_VAR, "1")
        .env(candle_hip::kernel::bundle::BUNDLE_VAR, &bundle)
        .env(hip_safe::CACHE_DIR_VAR, dir.join("cache"))
        .status()
        .expect("child test runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "the loader check failed");
}
