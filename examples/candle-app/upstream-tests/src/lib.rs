//! Test harness that runs Candle's own test files on a custom device
//! (`candle_core::Device::Custom`). `rocm-tools candle-patch` copies the test files and makes
//! their device tests call [`device`]; this is the one place that chooses the device.

pub mod cpu_delegate;

use std::sync::OnceLock;

use candle_core::Device;

/// The environment variable that chooses the device: `hip` (HIP device 0, required: the tests
/// fail when it cannot be opened) or `cpu-delegate` (Candle's CPU backend behind the same
/// bridge, see [`cpu_delegate`]). Unset: HIP when `hip_safe::is_available()`, else the CPU
/// delegate.
pub const DEVICE_VAR: &str = "CANDLE_APP_DEVICE";

/// The device every retargeted test runs on, created once and shared by all tests. Panics
/// (failing the test that asked first, and every later one) when the chosen device cannot be
/// opened: a test must never pass on another device than the one asked for.
pub fn device() -> Device {
    static DEVICE: OnceLock<Result<Device, String>> = OnceLock::new();
    match DEVICE.get_or_init(open) {
        Ok(device) => device.clone(),
        Err(reason) => panic!("{reason}"),
    }
}

/// Opens the device [`DEVICE_VAR`] asks for.
fn open() -> Result<Device, String> {
    let choice = std::env::var(DEVICE_VAR).ok();
    let hip = match choice.as_deref() {
        Some("hip") => true,
        Some("cpu-delegate") => false,
        None => hip_safe::is_available(),
        Some(other) => {
            return Err(format!(
                "{DEVICE_VAR}={other}: expected `hip` or `cpu-delegate`"
            ));
        }
    };
    if hip {
        candle_hip::extension::hip_device(0)
            .map_err(|e| format!("{DEVICE_VAR}: cannot open HIP device 0: {e}"))
    } else {
        Ok(cpu_delegate::device())
    }
}
