//! Tests against a real ROCm runtime on a machine without a GPU, run by
//! `.ci/run`: Debian 12's ROCm 5 runtime on the host and ROCm 6.4 inside the
//! ROCm sandbox (`build/sandbox.sh`). Ignored in a plain `cargo test`.
//!
//! Naming: `real_runtime_*` tests run on the host and in the sandbox,
//! `sandbox_*` tests only in the sandbox. `HIP_SYS_EXPECT_MAJOR`, when set,
//! is the ROCm major version the loaded runtime must report.

use std::ffi::{CStr, CString};
use std::time::{Duration, Instant};

use hip_sys::{hipError_t, hiprtcProgram, hiprtcResult};

const HIPRTC_SUCCESS: hiprtcResult = hiprtcResult::HIPRTC_SUCCESS;
const HIPRTC_ERROR_COMPILATION: hiprtcResult = hiprtcResult::HIPRTC_ERROR_COMPILATION;

/// The budget for loading the runtime and asking for the device count.
const BUDGET: Duration = Duration::from_millis(100);

/// The real runtime, or a failure that shows every path tried.
fn runtime() -> &'static hip_sys::HipApi {
    hip_sys::hip().unwrap_or_else(|e| panic!("no real HIP runtime: {e}"))
}

#[test]
#[ignore = "needs a real ROCm runtime"]
fn real_runtime_loads_reads_version_and_reports_no_device() {
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

/// A trivial kernel and the options that compile it for one architecture.
const SAXPY: &str = r#"
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

/// Compiles `source` for `arch` with the real hipRTC; returns the result,
/// the code object and the log.
fn compile(source: &str, arch: &str) -> (hiprtcResult, Vec<u8>, String) {
    let rtc = hip_sys::hiprtc().unwrap_or_else(|e| panic!("no hipRTC: {e}"));
    let src = CString::new(source).expect("no NUL in source");
    let name = CString::new("test.hip").expect("no NUL");
    let option = CString::new(format!("--offload-arch={arch}")).expect("no NUL");
    let mut options = [option.as_ptr()];
    let mut program: hiprtcProgram = std::ptr::null_mut();
    // SAFETY: valid out-pointer and NUL-terminated strings; no headers.
    let created = unsafe {
        rtc.hiprtcCreateProgram(
            &mut program,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }
    .expect("bound");
    assert_eq!(created, HIPRTC_SUCCESS);
    // SAFETY: `program` was created above; one valid option string.
    let result =
        unsafe { rtc.hiprtcCompileProgram(program, 1, options.as_mut_ptr()) }.expect("bound");
    let mut log_size = 0;
    // SAFETY: valid program and out-pointer.
    unsafe { rtc.hiprtcGetProgramLogSize(program, &mut log_size) }.expect("bound");
    // hipRTC 6.4's size does not count a terminating NUL: add one.
    let mut log = vec![0u8; log_size + 1];
    // SAFETY: `log` holds more than `log_size` bytes.
    unsafe { rtc.hiprtcGetProgramLog(program, log.as_mut_ptr().cast()) }.expect("bound");
    let log = CStr::from_bytes_until_nul(&log)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut code = Vec::new();
    if result == HIPRTC_SUCCESS {
        let mut size = 0;
        // SAFETY: valid program and out-pointer.
        unsafe { rtc.hiprtcGetCodeSize(program, &mut size) }.expect("bound");
        code.resize(size, 0);
        // SAFETY: `code` holds `size` bytes.
        unsafe { rtc.hiprtcGetCode(program, code.as_mut_ptr().cast()) }.expect("bound");
    }
    // SAFETY: `program` is destroyed once.
    unsafe { rtc.hiprtcDestroyProgram(&mut program) }.expect("bound");
    (result, code, log)
}

#[test]
#[ignore = "needs the ROCm sandbox (real hipRTC, comgr and device libraries)"]
fn sandbox_hiprtc_compiles_for_wave64_and_wave32_archs() {
    for arch in ["gfx90a", "gfx942", "gfx1100", "gfx1201"] {
        let start = Instant::now();
        let (result, code, log) = compile(SAXPY, arch);
        println!(
            "hipRTC {arch}: result {} code {} bytes in {:.0} ms",
            result.0,
            code.len(),
            start.elapsed().as_secs_f64() * 1e3
        );
        assert_eq!(result, HIPRTC_SUCCESS, "{arch}: {log}");
        assert!(code.len() > 64, "{arch}: empty code object");
    }
}

#[test]
#[ignore = "needs the ROCm sandbox (real hipRTC, comgr and device libraries)"]
fn sandbox_hiprtc_reports_compile_errors_in_the_log() {
    let (result, code, log) = compile(
        "extern \"C\" __global__ void broken() { undeclared(); }",
        "gfx90a",
    );
    assert_eq!(result, HIPRTC_ERROR_COMPILATION);
    assert!(code.is_empty());
    assert!(log.contains("undeclared"), "log: {log}");
}
