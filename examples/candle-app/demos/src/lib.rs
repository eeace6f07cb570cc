//! Shared by the demo programs: how a Candle program picks HIP when it is there and falls back
//! to the CPU otherwise.

use candle_core::Device;

/// The device a Candle program should use: HIP device 0 when a HIP runtime and device are
/// present, else the CPU together with the one-line reason (for the log).
pub fn pick_device() -> (Device, Option<String>) {
    if !hip_safe::is_available() {
        let reason = hip_safe::probe()
            .unavailable
            .unwrap_or_else(|| "no HIP device".to_owned());
        return (Device::Cpu, Some(reason));
    }
    match candle_hip::extension::hip_device(0) {
        Ok(device) => (device, None),
        Err(e) => (
            Device::Cpu,
            Some(format!("HIP device 0 cannot be opened: {e}")),
        ),
    }
}

/// A short description of `device` for reports: the HIP device's name and architecture, or
/// the device location.
pub fn describe(device: &Device) -> String {
    match candle_hip::extension::as_hip_device(device) {
        Some(hip) => format!("{hip:?}"),
        None => format!("{:?}", device.location()),
    }
}
