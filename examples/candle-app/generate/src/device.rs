//! Choosing the device: HIP device N when asked for or available, else the CPU with the
//! reason (or one device per tensor-parallel rank); and reading its peak memory.

use candle_core::Device;

use crate::{AppResult, app_error};

/// The device `spec` names (`cpu`, `hip`, `hip:N`), or with no spec HIP device 0 when a HIP
/// runtime and device are present and the CPU otherwise. The second value is the reason the
/// CPU was chosen by default, for the user.
pub fn select(spec: Option<&str>) -> AppResult<(Device, Option<String>)> {
    match spec {
        Some("cpu") => Ok((Device::Cpu, None)),
        Some(hip) if hip == "hip" || hip.starts_with("hip:") => {
            let ordinal = hip_ordinal(hip)?;
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

/// The HIP ordinal `--device hip` or `--device hip:N` names (0 for `hip`).
fn hip_ordinal(spec: &str) -> AppResult<usize> {
    match spec.strip_prefix("hip:") {
        Some(n) => n
            .parse::<usize>()
            .map_err(|_| app_error(format!("--device {spec}: `{n}` is not a number"))),
        None => Ok(0),
    }
}

/// The devices of `ranks` tensor-parallel ranks, from what `spec` names as for [`select`]:
/// `cpu` is the CPU for every rank; `hip:N` opens HIP devices N to N+ranks-1 (`hip`: from
/// 0); no spec takes HIP devices from 0 when HIP is present, else the CPU with the reason.
/// One rank is exactly [`select`]'s device.
pub fn select_ranks(spec: Option<&str>, ranks: usize) -> AppResult<(Vec<Device>, Option<String>)> {
    if ranks == 0 {
        return Err(app_error(
            "tensor parallelism needs at least one rank (--tp 0)",
        ));
    }
    let (first, reason) = select(spec)?;
    if ranks == 1 || first.is_cpu() {
        return Ok((vec![first; ranks], reason));
    }
    let start = spec.map_or(Ok(0), hip_ordinal)?;
    let present = hip_safe::probe().devices.len();
    if start + ranks > present {
        return Err(app_error(format!(
            "--tp {ranks} needs HIP devices hip:{start} to hip:{}; the runtime reports {present}",
            start + ranks - 1
        )));
    }
    let mut devices = vec![first];
    for ordinal in start + 1..start + ranks {
        let device = candle_hip::extension::hip_device(ordinal)
            .map_err(|e| app_error(format!("HIP device {ordinal} (for --tp {ranks}): {e}")))?;
        devices.push(device);
    }
    Ok((devices, None))
}

/// A short description of `device` (the HIP device's name and architecture).
pub fn describe(device: &Device) -> String {
    candle_app_demos::describe(device)
}

/// [`describe`] for the devices of tensor-parallel ranks: the one device, `Cpu x4` for
/// ranks on one kind of device that describe alike, else each in rank order.
pub fn describe_ranks(devices: &[Device]) -> String {
    let each: Vec<String> = devices.iter().map(describe).collect();
    match each.as_slice() {
        [one] => one.clone(),
        [first, rest @ ..] if rest.iter().all(|d| d == first) => {
            format!("{first} x{}", each.len())
        }
        _ => each.join(", "),
    }
}

/// [`peak_memory`] of the ranks' devices: the sum over HIP devices, the process's peak
/// for CPU ranks (one process holds them all).
pub fn peak_memory_ranks(devices: &[Device]) -> Option<(u64, &'static str)> {
    match devices {
        [] => None,
        [first, ..] if first.is_cpu() || devices.len() == 1 => peak_memory(first),
        several => {
            let mut total = 0;
            for device in several {
                total += peak_memory(device)?.0;
            }
            Some((total, "device memory pools, all ranks"))
        }
    }
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
