//! Test harness that runs Candle's own test files on a custom device
//! (`candle_core::Device::Custom`). `rocm-tools candle-patch` copies the test files and makes
//! their device tests call [`device`]; this is the one place that chooses the device.

pub mod cpu_delegate;

use std::sync::OnceLock;

use candle_core::Device;

/// The device every retargeted test runs on: today the CPU-delegating custom backend
/// ([`cpu_delegate::CpuDelegate`]), which proves the extension point without a GPU. Created
/// once and shared by all tests.
pub fn device() -> Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(cpu_delegate::device).clone()
}
