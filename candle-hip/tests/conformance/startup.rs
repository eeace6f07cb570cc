//! Kernel loading: `load_all_kernels` compiles every module in parallel,
//! and a second device of the same architecture reuses the compiled code
//! (it loads, it does not compile).

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
