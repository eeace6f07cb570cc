//! Kernel loading: `load_all_kernels` compiles every module in parallel,
//! a second device of the same architecture reuses the compiled code (it
//! loads, it does not compile), and a kernel bundle's matching entry is
//! loaded instead of compiling while a mismatched one falls through.

use std::time::Instant;

use candle_core::backend::BackendDevice;
use candle_hip::HipDevice;

#[test]
#[ignore = "needs a HIP device"]
fn every_module_loads_and_a_second_device_reuses_the_code() {
    let first = HipDevice::new(0).expect("device 0");
    let start = Instant::now();
    first
        .load_all_kernels()
        .expect("every module compiles and loads");
    let all = start.elapsed();
    // A new device of the same ordinal has a registry of its own: its
    // modules come from the code objects the first one compiled.
    let second = HipDevice::new(0).expect("device 0 again");
    let start = Instant::now();
    second.load_all_kernels().expect("every module loads again");
    let again = start.elapsed();
    println!(
        "load_all_kernels: {:.0} ms on the first device, {:.0} ms on a second one",
        all.as_secs_f64() * 1e3,
        again.as_secs_f64() * 1e3
    );
    let x = second
        .zeros_impl(&(4, 4).into(), candle_core::DType::F32)
        .expect("an op on the second device");
    drop(x);
}

/// Set in the child process of
/// [`a_kernel_bundle_replaces_compiling_and_a_mismatch_falls_through`]: `hit`
/// when its bundle has the sigmoid module, `miss` when it does not match.
const CHILD_VAR: &str = "CANDLE_HIP_BUNDLE_TEST_CHILD";

/// Runs sigmoid on the device (compiling or loading `sigmoid.hip`) and
/// returns how many code objects the disk cache gained meanwhile.
fn sigmoid_and_count_compiles(cache: &std::path::Path) -> usize {
    use candle_core::backend::BackendStorage;
    let entries = || std::fs::read_dir(cache).map_or(0, |d| d.count());
    let device = HipDevice::new(0).expect("device 0");
    let x = device.storage_from_slice(&[-1f32, 0., 1.]).expect("input");
    let before = entries();
    let y = candle_hip::fused::sigmoid(&x, &candle_core::Layout::contiguous(3)).expect("sigmoid");
    let candle_core::CpuStorage::F32(y) = y.to_cpu_storage().expect("read back") else {
        panic!("sigmoid of f32 is f32")
    };
    let want = [-1f32, 0., 1.].map(|v| 1. / (1. + (-v).exp()));
    assert!(
        y.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
        "{y:?}"
    );
    entries() - before
}

#[test]
#[ignore = "needs a HIP device"]
fn a_kernel_bundle_replaces_compiling_and_a_mismatch_falls_through() {
    if let Ok(expect) = std::env::var(CHILD_VAR) {
        let cache = std::env::var_os(hip_safe::CACHE_DIR_VAR).expect("the parent sets a cache");
        let start = Instant::now();
        let compiled = sigmoid_and_count_compiles(std::path::Path::new(&cache));
        println!(
            "first sigmoid, bundle {expect}, empty cache: {:.1} ms including device open",
            start.elapsed().as_secs_f64() * 1e3
        );
        match expect.as_str() {
            "hit" => assert_eq!(compiled, 0, "the bundle's code object was not used"),
            _ => assert_eq!(
                compiled, 1,
                "a mismatched entry must fall through to compiling"
            ),
        }
        return;
    }
    let device = HipDevice::new(0).expect("device 0");
    let (arch, wave) = (device.hip_device().arch(), device.hip_device().wave_size());
    let unit = candle_hip::kernel::Unit::of_source(candle_hip_kernels::SIGMOID)[0];
    let program = unit.program(wave);
    let code = program
        .compile_for_arch(arch)
        .expect("sigmoid.hip compiles");
    let dir = std::env::temp_dir().join(format!("candle-hip-bundle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    for (case, hash) in [
        ("hit", program.source_hash()),
        ("miss", hip_safe::SourceHash::new([7; 32])),
    ] {
        let mut writer = hip_safe::CodeBundleWriter::new("test", "conformance").unwrap();
        writer
            .add(&unit.name(), hash, arch, wave, code.clone())
            .expect("a valid entry");
        let bundle = dir.join(format!("{case}.bundle"));
        writer.write(&bundle).expect("bundle written");
        let cache = dir.join(format!("{case}-cache"));
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "startup::a_kernel_bundle_replaces_compiling_and_a_mismatch_falls_through",
                "--include-ignored",
                "--nocapture",
                "--quiet",
            ])
            .env(CHILD_VAR, case)
            .env(candle_hip::kernel::bundle::BUNDLE_VAR, &bundle)
            .env(hip_safe::CACHE_DIR_VAR, &cache)
            .status()
            .expect("child test runs");
        assert!(status.success(), "the {case} child failed");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
