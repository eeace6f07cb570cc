//! Choosing the device: HIP device N when asked for or available, else the CPU with the
//! reason; and reading its peak memory.

use candle_core::Device;

use crate::{AppResult, app_error};

/// The device `spec` names (`cpu`, `hip`, `hip:N`), or with no spec HIP device 0 when a HIP
/// runtime and device are present and the CPU otherwise. The second value is the reason the
/// CPU was chosen by default, for the user.
pub fn select(spec: Option<&str>) -> AppResult<(Device, Option<String>)> {
    match spec {
        Some("cpu") => Ok((Device::Cpu, None)),
        Some(hip) if hip == "hip" || hip.starts_with("hip:") => {
            let ordinal = match hip.strip_prefix("hip:") {
                Some(n) => n
                    .parse::<usize>()
                    .map_err(|_| app_error(format!("--device {hip}: `{n}` is not a number")))?,
                None => 0,
            };
            if !hip_safe::is_available() {
                let why = hip_safe::probe()
                    .unavailable
                    .unwrap_or_else(|| "no HIP device".into());
                return Err(app_error(format!(
                    "--device {hip}: HIP is unavailable: {why}"
                )));
            }
            let device = candle_hip::extension::hip_device(ordinal)
                .map_err(|e| app_error(format!("--device {hip}: {e}")))?;
            Ok((device, None))
        }
        Some(other) => Err(app_error(format!(
            "--device {other}: expected cpu, hip or hip:N"
        ))),
        None => Ok(candle_app_demos::pick_device()),
    }
}

/// A short description of `device` (the HIP device's name and architecture).
pub fn describe(device: &Device) -> String {
    candle_app_demos::describe(device)
}

/// Peak memory in bytes and what it measures: on HIP the device memory the memory pool
/// holds (candle-hip keeps freed memory cached, so this is the high-water mark of live
/// buffers plus the pool's rounding); on the CPU the process's peak resident set (VmHWM).
pub fn peak_memory(device: &Device) -> Option<(u64, &'static str)> {
    match candle_hip::extension::as_hip_device(device) {
        Some(hip) => {
            let _ = hip.hip_device().synchronize();
            hip.hip_device()
                .memory_pool_reserved()
                .ok()
                .map(|b| (b, "device memory pool"))
        }
        None => {
            let status = std::fs::read_to_string("/proc/self/status").ok()?;
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some((kib * 1024, "process peak resident memory"))
        }
    }
}

/// Waits for the device's queued work (a no-op on the CPU).
pub fn synchronize(device: &Device) -> AppResult<()> {
    Ok(device.synchronize()?)
}
