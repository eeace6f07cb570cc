//! Tests against a real ROCm runtime on a machine without a GPU, run by
//! `.ci/run`: Debian 12's ROCm 5 runtime on the host and ROCm 6.4 inside the
//! ROCm sandbox (`build/sandbox.sh`). Ignored in a plain `cargo test`.
//!
//! Tests named `real_runtime_*` run on the host and in the sandbox.
//! `HIP_SYS_EXPECT_MAJOR`, when set, is the ROCm major version the loaded
//! runtime must report. This file holds one test so that its process loads
//! the runtime itself and the timing is real. The budget is for our loader
//! and the runtime's start-up, not for reading the libraries from disk: a
//! child process loads the runtime first so that the page cache holds them.

use std::time::{Duration, Instant};

use hip_sys::hipError_t;

/// The budget for loading the runtime and asking for the device count.
const BUDGET: Duration = Duration::from_millis(100);

/// Set in the child process that only loads the runtime to warm the page cache.
const WARM_UP_ONLY: &str = "HIP_SYS_REAL_RUNTIME_WARM_UP";

/// The real runtime, or a failure that shows every path tried.
fn runtime() -> &'static hip_sys::HipApi {
    hip_sys::hip().unwrap_or_else(|e| panic!("no real HIP runtime: {e}"))
}

#[test]
#[ignore = "needs a real ROCm runtime"]
fn real_runtime_loads_reads_version_and_reports_no_device() {
    if std::env::var_os(WARM_UP_ONLY).is_some() {
        runtime();
        return;
    }
    warm_page_cache();
    let start = Instant::now();
    let api = runtime();
    let loaded = start.elapsed();
    let version = hip_sys::runtime_version().expect("hipRuntimeGetVersion works");
    let mut count = -1;
    let before_count = Instant::now();
    // SAFETY: `count` is a valid out-pointer.
    let status = unsafe { api.hipGetDeviceCount(&mut count) }.expect("hipGetDeviceCount is bound");
    let count_call = before_count.elapsed();
    let total = start.elapsed();

    println!(
        "runtime {} from {}: load {:.1} ms, hipGetDeviceCount {:.2} ms -> status {} count {count}, total {:.1} ms",
        version,
        api.library().origin(),
        loaded.as_secs_f64() * 1e3,
        count_call.as_secs_f64() * 1e3,
        status.0,
        total.as_secs_f64() * 1e3,
    );
    let missing = api.missing_symbols();
    println!("symbols missing from this runtime: {missing:?}");

    if let Some(major) = std::env::var("HIP_SYS_EXPECT_MAJOR")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        assert_eq!(version.major, major, "unexpected runtime version {version}");
    }
    assert_eq!(status, hipError_t::hipErrorNoDevice);
    assert_eq!(count, 0);
    assert!(total < BUDGET, "load + device count took {total:?}");
    if version.has_r0600_properties() {
        assert!(missing.is_empty(), "ROCm {version} lacks {missing:?}");
    } else {
        assert!(missing.contains(&"hipGetDevicePropertiesR0600"));
        assert!(!missing.contains(&"hipGetDeviceProperties"));
    }
}

/// Loads the runtime once in a child process (this test, run again), so the
/// timed load below reads the runtime and its dependencies from the page cache;
/// a cold first read from a slow disk takes seconds and is not the loader's cost.
fn warm_page_cache() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let status = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "real_runtime_loads_reads_version_and_reports_no_device",
        ])
        .env(WARM_UP_ONLY, "1")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("the warm-up child runs");
    assert!(status.success(), "the warm-up child failed: {status}");
}
