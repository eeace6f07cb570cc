//! hipRTC checks inside the ROCm sandbox (`build/sandbox.sh`, ROCm 6.4 with
//! comgr and device libraries, no GPU), run by `.ci/run`: tests named
//! `sandbox_*` run only there. Ignored in a plain `cargo test`.

use std::ffi::{CStr, CString};
use std::time::Instant;

use hip_sys::{HiprtcApi, hiprtcProgram, hiprtcResult};

const HIPRTC_SUCCESS: hiprtcResult = hiprtcResult::HIPRTC_SUCCESS;
const HIPRTC_ERROR_COMPILATION: hiprtcResult = hiprtcResult::HIPRTC_ERROR_COMPILATION;

/// A trivial kernel, self-contained: real hipRTC offers no `hip/*.h` headers.
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
    compile_with(rtc, source, arch)
}

/// [`compile`] on the hipRTC `rtc`.
fn compile_with(rtc: &HiprtcApi, source: &str, arch: &str) -> (hiprtcResult, Vec<u8>, String) {
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

#[test]
#[ignore = "needs the ROCm sandbox (real hipRTC, comgr and device libraries)"]
fn sandbox_hiprtc_copy_is_a_second_compiler() {
    let first = hip_sys::hiprtc().unwrap_or_else(|e| panic!("no hipRTC: {e}"));
    println!("first hipRTC: {}", first.library().origin());
    let copy = hip_sys::hiprtc_copy().expect("AMD's hipRTC, opened by path with comgr beside it");
    let (mut a, mut b, mut c, mut d) = (0, 0, 0, 0);
    // SAFETY: valid out-pointers.
    unsafe { first.hiprtcVersion(&mut a, &mut b) }.expect("bound");
    // SAFETY: valid out-pointers.
    unsafe { copy.hiprtcVersion(&mut c, &mut d) }.expect("bound");
    assert_eq!((a, b), (c, d), "the same file");
    let (result, code, log) = compile_with(&copy, SAXPY, "gfx942");
    assert_eq!(result, HIPRTC_SUCCESS, "{log}");
    assert_eq!(code, compile(SAXPY, "gfx942").1, "the same code object");
    // Compiles on the two overlap: together they take less than twice one.
    // Each compiles kernels of its own names, so no compiler cache answers.
    let many = |prefix: &str| -> String {
        (0..400)
            .map(|k| SAXPY.replace("saxpy", &format!("{prefix}{k:03}")))
            .collect()
    };
    let start = Instant::now();
    assert_eq!(compile(&many("one"), "gfx942").0, HIPRTC_SUCCESS);
    let alone = start.elapsed().as_secs_f64();
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(compile(&many("two"), "gfx942").0, HIPRTC_SUCCESS));
        s.spawn(|| {
            assert_eq!(
                compile_with(&copy, &many("six"), "gfx942").0,
                HIPRTC_SUCCESS
            )
        });
    });
    let both = start.elapsed().as_secs_f64();
    println!("one compile {alone:.2} s, one on each copy at once {both:.2} s");
    if std::thread::available_parallelism().map_or(1, usize::from) >= 2 {
        assert!(
            both < 1.7 * alone,
            "{both:.2} s for two, {alone:.2} s for one"
        );
    }
}
