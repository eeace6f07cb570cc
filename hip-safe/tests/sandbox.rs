//! Checks against the real ROCm 6.4 HIP runtime and hipRTC with no GPU.
//!
//! The `sandbox_*` tests run inside the ROCm sandbox (a Debian unstable
//! chroot, see `build/`), where `.ci/run` executes every test binary with
//! `--ignored sandbox_`; the `real_runtime_*` test also runs against the
//! host's ROCm 5 runtime. Elsewhere they are ignored.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use hip_safe::{Error, Program, RtcError};

const TEST_KERNEL: &str = r#"
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
"#;

/// A code object from hipRTC: an ELF file or a clang offload bundle.
fn looks_like_code_object(code: &[u8]) -> bool {
    code.starts_with(b"\x7fELF") || code.starts_with(b"__CLANG_OFFLOAD_BUNDLE__")
}

/// The sandbox's compiler, shared by this file's tests: the harness runs
/// tests side by side, and a timed test must not share the cores with
/// another test's compiles.
static COMPILER: RwLock<()> = RwLock::new(());

/// A share of the compiler for an untimed test (others may compile too).
fn compiler_shared() -> RwLockReadGuard<'static, ()> {
    COMPILER
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The compiler alone, for a test whose assertion is a timing.
fn compiler_exclusive() -> RwLockWriteGuard<'static, ()> {
    COMPILER
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn temp_cache_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hip-safe-sandbox-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
#[ignore = "needs a real HIP runtime without a GPU"]
fn real_runtime_no_device_is_reported_not_fatal() {
    assert!(!hip_safe::is_available());
    let report = hip_safe::probe();
    println!("{report}");
    assert!(
        report.library.is_some() && report.runtime_version.is_some(),
        "{report}"
    );
    assert!(report.to_string().contains("no HIP device"), "{report}");
    assert_eq!(hip_safe::Device::count(), Ok(0));
    let err = hip_safe::Device::new(0).unwrap_err();
    assert!(
        err.to_string().contains("there are 0 HIP device(s)"),
        "{err}"
    );
    assert!(Program::supported_archs().contains(&"gfx90a"));
}

/// Child half of `sandbox_is_available_is_false_and_fast`: measures the
/// first `is_available()` call of a fresh process (library load included).
#[test]
#[ignore = "run by sandbox_is_available_is_false_and_fast in a child process"]
fn cold_is_available_child() {
    let start = Instant::now();
    let available = hip_safe::is_available();
    let elapsed = start.elapsed();
    println!("cold is_available() = {available} in {elapsed:?}");
    assert!(!available, "the sandbox has no GPU");
    assert!(elapsed.as_millis() < 100, "is_available took {elapsed:?}");
}

#[test]
#[ignore = "needs the ROCm sandbox"]
fn sandbox_is_available_is_false_and_fast() {
    // Other tests of this process may have loaded the library already, so
    // the cold call is timed in a fresh process.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cold_is_available_child",
            "--ignored",
            "--nocapture",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout);
    println!(
        "{}",
        out.lines()
            .find(|l| l.contains("cold is_available"))
            .unwrap_or("?")
    );
    assert!(
        child.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let report = hip_safe::probe();
    println!("{report}");
    assert!(
        report.library.is_some(),
        "the real runtime must load: {report}"
    );
    // The sandbox's ROCm: 7.2 in the one `ROCM_SANDBOX_ROCM=7` selects (or
    // when CI expects major 7), else 6.4.
    let seven = |var| std::env::var(var).is_ok_and(|v| v == "7");
    let expected = if seven("ROCM_SANDBOX_ROCM") || seven("HIP_SYS_EXPECT_MAJOR") {
        (7, 2)
    } else {
        (6, 4)
    };
    assert_eq!(
        report.runtime_version.map(|v| (v.major, v.minor)),
        Some(expected)
    );
    assert_eq!(report.to_string().lines().count(), 1);
    assert_eq!(hip_safe::Device::count(), Ok(0));
}

#[test]
#[ignore = "needs the ROCm sandbox"]
fn sandbox_program_compiles_for_every_test_arch() {
    let _compiler = compiler_shared();
    for arch in ["gfx90a", "gfx942", "gfx1100", "gfx1201"] {
        let start = Instant::now();
        let code = Program::new(TEST_KERNEL, "saxpy.hip")
            .option("-O3")
            .without_cache()
            .compile_for_arch(arch)
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        println!(
            "{arch}: {} byte code object in {:?}",
            code.len(),
            start.elapsed()
        );
        assert!(looks_like_code_object(&code), "{arch}: not a code object");
    }
}

#[test]
#[ignore = "needs the ROCm sandbox"]
fn sandbox_program_rejects_unknown_arch_without_aborting() {
    let _compiler = compiler_shared();
    let err = Program::new(TEST_KERNEL, "saxpy.hip")
        .without_cache()
        .compile_for_arch("gfx9999")
        .unwrap_err();
    println!("{err}");
    assert!(matches!(err, Error::Rtc(RtcError::UnsupportedArch { .. })));
    // The process is still alive and hipRTC still works.
    assert!(
        Program::new(TEST_KERNEL, "saxpy.hip")
            .without_cache()
            .compile_for_arch("gfx90a")
            .is_ok()
    );
}

#[test]
#[ignore = "needs the ROCm sandbox"]
fn sandbox_compile_errors_carry_the_log() {
    let _compiler = compiler_shared();
    let broken = "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }";
    let err = Program::new(broken, "broken.hip")
        .without_cache()
        .compile_for_arch("gfx90a")
        .unwrap_err();
    println!("{err}");
    match err {
        Error::Rtc(RtcError::Compilation { log, code, .. }) => {
            assert_eq!(code, 6, "HIPRTC_ERROR_COMPILATION");
            assert!(log.contains("undefined_name"), "{log}");
        }
        other => panic!("expected a compilation error, got {other}"),
    }
}

#[test]
#[ignore = "needs the ROCm sandbox"]
fn sandbox_cache_cold_vs_warm() {
    let _compiler = compiler_exclusive();
    let dir = temp_cache_dir("cache");
    let program = Program::new(TEST_KERNEL, "saxpy.hip").cache_dir(&dir);
    let start = Instant::now();
    let cold = program.compile_for_arch("gfx942").unwrap();
    let cold_time = start.elapsed();
    let start = Instant::now();
    let warm = program.compile_for_arch("gfx942").unwrap();
    let warm_time = start.elapsed();
    println!("gfx942 compile: cold {cold_time:?}, warm (cached) {warm_time:?}");
    assert_eq!(cold, warm);
    assert!(warm_time < cold_time);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the ROCm sandbox"]
fn sandbox_every_listed_arch_really_compiles() {
    let _compiler = compiler_shared();
    let archs = Program::supported_archs();
    assert!(archs.contains(&"gfx1201"), "{archs:?}");
    for arch in archs {
        let code = Program::new(TEST_KERNEL, "saxpy.hip")
            .without_cache()
            .compile_for_arch(arch)
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(looks_like_code_object(&code), "{arch}");
    }
}

#[test]
#[ignore = "needs the ROCm sandbox"]
fn sandbox_concurrent_compiles_run_side_by_side() {
    let _compiler = compiler_exclusive();
    // hipRTC compiles one program at a time per copy of it; a compile that
    // starts while another runs takes a copy of its own. Each compile gets
    // kernels of its own names, so that no compiler cache answers for it.
    let compile = |prefix: &str| {
        let many: String = (0..400)
            .map(|k| TEST_KERNEL.replace("saxpy", &format!("{prefix}{k:03}")))
            .collect();
        Program::new(&many, "many.hip")
            .without_cache()
            .compile_for_arch("gfx942")
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let pair = |first: &str, second: &str| {
        std::thread::scope(|s| {
            let a = s.spawn(|| compile(first));
            let b = s.spawn(|| compile(second));
            (a.join().expect("no panic"), b.join().expect("no panic"))
        })
    };
    let start = Instant::now();
    let alone = compile("one");
    let one = start.elapsed().as_secs_f64();
    // An untimed pair first: loading the second copy is not what is timed.
    pair("ten", "six");
    let start = Instant::now();
    let (a, b) = pair("two", "sev");
    let two = start.elapsed().as_secs_f64();
    println!("one compile {one:.2} s, two at once {two:.2} s");
    for code in [&a, &b] {
        assert!(looks_like_code_object(code));
        assert_eq!(
            code.len(),
            alone.len(),
            "the same kernels under other names"
        );
    }
    if std::thread::available_parallelism().map_or(1, usize::from) >= 2 {
        assert!(two < 1.7 * one, "{two:.2} s for two, {one:.2} s for one");
    }
}
